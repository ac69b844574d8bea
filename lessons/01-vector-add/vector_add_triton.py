"""Lesson 01, Triton track: vector add and GELU (tanh form).

Each program handles BLOCK consecutive elements: it loads a BLOCK-wide slice of x and y
under a mask (the last program's slice runs past n), adds, and stores. The program index
is widened to 64 bits before it is multiplied by BLOCK, so n may pass 2^31.

Compiled ahead of time by tools/triton_aot.py into vector_add_triton.c/.h (the AOT list
at the bottom); vector_add.cu (run_triton) and elementwise.cu (run_gelu_triton) register
the launchers as the `triton` impls of vector_add and gelu.
"""
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)          # 64-bit before the multiply
    offs = pid * BLOCK + tl.arange(0, BLOCK)     # (BLOCK,)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, x + y, mask=mask)


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    # gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with CUDA's tanhf from
    # libdevice. (Written as x / (1 + exp(-2u)) it ran well below the copy bandwidth:
    # Triton's `/` is an IEEE division, far costlier than tanhf's polynomial.)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + libdevice.tanh(u))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


# What the build compiles. Grids are C expressions over the non-constexpr arguments.
# Each kernel twice: with n hinted divisible by 16 and without (any n); the linked launcher
# takes the hinted one when n allows it. Only where Triton knows the mask `offs < n` is
# constant over a 16-byte run does it load and store 16 bytes per instruction: without the
# hint each thread moved one element at a time (tools/triton_ptx.py: 16 ld.global.b16 per
# thread for the bf16 GELU against 2 ld.global.v4.b32).
AOT = [dict(name=name, kernel=kernel, signature=sig.format(h=hint), grid="(n + 4095) / 4096, 1, 1",
            num_warps=8, num_stages=1)
       for name, kernel, sig in (("tr_vector_add_f32", "add_kernel", "*fp32:16, *fp32:16, *fp32:16, i64{h}, 4096"),
                                 ("tr_gelu_f32", "gelu_kernel", "*fp32:16, *fp32:16, i64{h}, 4096"),
                                 ("tr_gelu_bf16", "gelu_kernel", "*bf16:16, *bf16:16, i64{h}, 4096"))
       for hint in (":16", "")]
