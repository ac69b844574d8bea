"""Lesson 06, Triton track: z = a · b for complex numbers stored interleaved (re, im), as one
kernel.

Each program takes BLOCK consecutive elements of a and b (BLOCK / 2 complex numbers) as flat
loads, so that with the element count hinted divisible by 16 every access is a 16-byte
vector, as in the CUDA v2_fused. tl.reshape to (BLOCK / 2, 2) and tl.split give the real and
imaginary parts (each thread holds whole pairs, so no data moves); the product is computed
in fp32 with one rounded product and one tl.fma per part, tl.join interleaves re and im
back, and z is stored once, flat.

Compiled ahead of time by tools/triton_aot.py into complex_mul_triton.c/.h (the AOT list at
the bottom); complex_mul.cu (run_triton) registers the launcher as the `triton` impl of
complex_mul. The launcher's n is the count of elements, twice the count of complex numbers.
"""
import triton
import triton.language as tl


@triton.jit
def complex_mul_kernel(a_ptr, b_ptr, z_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)                  # 64-bit before the multiply
    offs = pid * BLOCK + tl.arange(0, BLOCK)             # (BLOCK,) elements: re, im, re, im, ...
    mask = offs < n                                      # n is even: a pair is in or out whole
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    ar, ai = tl.split(tl.reshape(a, (BLOCK // 2, 2)))    # (BLOCK / 2,) each
    br, bi = tl.split(tl.reshape(b, (BLOCK // 2, 2)))
    re = tl.fma(ar, br, -(ai * bi))
    im = tl.fma(ar, bi, ai * br)
    z = tl.reshape(tl.join(re, im), (BLOCK,))            # interleaved again
    tl.store(z_ptr + offs, z.to(z_ptr.dtype.element_ty), mask=mask)


# What the build compiles: 4096 elements (2048 complex numbers) a program, 8 warps. Each
# dtype twice, with n hinted divisible by 16 and without; the linked launcher takes the
# hinted one when n allows it.
AOT = [dict(name=name, kernel="complex_mul_kernel", signature=sig.format(h=hint), grid="(n + 4095) / 4096, 1, 1",
            num_warps=8, num_stages=1)
       for name, sig in (("tr_complex_mul_f32", "*fp32:16, *fp32:16, *fp32:16, i64{h}, 4096"),
                         ("tr_complex_mul_bf16", "*bf16:16, *bf16:16, *bf16:16, i64{h}, 4096"))
       for hint in (":16", "")]
