"""Lesson 06, Triton track: y = c0 + c1·x + c2·x² + c3·x³ as one kernel, in Horner form.

Each program takes BLOCK consecutive elements of x, evaluates ((c3·x + c2)·x + c1)·x + c0
in fp32 with three tl.fma (one rounding each, as the CUDA v2_fused_horner's fmaf), and
stores y once: x², x³ and the partial terms never leave registers. With n hinted divisible
by 16 the masks are uniform over 16-byte groups and every access is a 16-byte vector. The
coefficients are fp32 scalar arguments.

Compiled ahead of time by tools/triton_aot.py into poly_act_triton.c/.h (the AOT list at
the bottom); poly_act.cu (run_triton) registers the launcher as the `triton` impl of poly_act.
"""
import triton
import triton.language as tl


@triton.jit
def poly_act_kernel(x_ptr, y_ptr, n, c0, c1, c2, c3, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)                  # 64-bit before the multiply
    offs = pid * BLOCK + tl.arange(0, BLOCK)             # (BLOCK,)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    p = tl.fma(tl.fma(tl.fma(tl.full((BLOCK,), c3, tl.float32), x, c2), x, c1), x, c0)
    tl.store(y_ptr + offs, p.to(y_ptr.dtype.element_ty), mask=mask)


# What the build compiles: 4096 elements a program, 8 warps (add_mul's). Each dtype twice,
# with n hinted divisible by 16 and without; the linked launcher takes the hinted one when
# n allows it.
AOT = [dict(name=name, kernel="poly_act_kernel", signature=sig.format(h=hint), grid="(n + 4095) / 4096, 1, 1",
            num_warps=8, num_stages=1)
       for name, sig in (("tr_poly_act_f32", "*fp32:16, *fp32:16, i64{h}, fp32, fp32, fp32, fp32, 4096"),
                         ("tr_poly_act_bf16", "*bf16:16, *bf16:16, i64{h}, fp32, fp32, fp32, fp32, 4096"))
       for hint in (":16", "")]
