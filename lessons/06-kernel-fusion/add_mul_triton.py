"""Lesson 06, Triton track: z = (a + b) · c as one kernel.

Triton fuses what one program's body says: the three loads, the add, the multiply and the
store of a BLOCK of elements happen in one kernel, and (a + b) never leaves registers, as in
the CUDA v2_fused. Each program takes BLOCK consecutive elements; with n hinted divisible
by 16 the masks are uniform over 16-byte groups and every access is a 16-byte vector.

Compiled ahead of time by tools/triton_aot.py into add_mul_triton.c/.h (the AOT list at the
bottom); add_mul.cu (run_triton) registers the launcher as the `triton` impl of add_mul.
"""
import triton
import triton.language as tl


@triton.jit
def add_mul_kernel(a_ptr, b_ptr, c_ptr, z_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)                  # 64-bit before the multiply
    offs = pid * BLOCK + tl.arange(0, BLOCK)             # (BLOCK,)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    c = tl.load(c_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, ((a + b) * c).to(z_ptr.dtype.element_ty), mask=mask)


# What the build compiles: 4096 elements a program, 8 warps (lesson 01's vector add). Each
# dtype twice, with n hinted divisible by 16 and without; the linked launcher takes the
# hinted one when n allows it.
AOT = [dict(name=name, kernel="add_mul_kernel", signature=sig.format(h=hint), grid="(n + 4095) / 4096, 1, 1",
            num_warps=8, num_stages=1)
       for name, sig in (("tr_add_mul_f32", "*fp32:16, *fp32:16, *fp32:16, *fp32:16, i64{h}, 4096"),
                         ("tr_add_mul_bf16", "*bf16:16, *bf16:16, *bf16:16, *bf16:16, i64{h}, 4096"))
       for hint in (":16", "")]
