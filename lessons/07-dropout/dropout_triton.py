"""Lesson 07, Triton track: dropout on the same Philox stream as the CUDA versions.

Each program handles QUADS quads (4 consecutive elements each): one Philox4x32-10 call per
quad gives its four words, which Triton's tl.philox computes exactly as
klab/device/philox.cuh does (counter = (quad low, quad high, offset low, offset high), key =
the seed), so the mask matches the reference bit for bit. The words are joined into a
(QUADS, 4) block beside the (QUADS, 4) block of x, whose rows are 4 contiguous elements:
one vector access a quad.

Compiled ahead of time by tools/triton_aot.py into dropout_triton.c/.h (the AOT list at the
bottom); dropout.cu (run_triton) registers the launcher as the `triton` impl of dropout.
"""
import triton
import triton.language as tl


@triton.jit
def dropout_kernel(x_ptr, y_ptr, n, seed, offset_lo, offset_hi, threshold, scale, QUADS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)                  # 64-bit before the multiply
    q = pid * QUADS + tl.arange(0, QUADS)                # (QUADS,) quad indices
    c0 = (q & 0xFFFFFFFF).to(tl.uint32)
    c1 = (q >> 32).to(tl.uint32)
    c2 = tl.full((QUADS,), offset_lo, tl.int32)
    c3 = tl.full((QUADS,), offset_hi, tl.int32)
    w0, w1, w2, w3 = tl.philox(seed, c0, c1, c2, c3)     # the words of elements 4q .. 4q+3
    # tl.join stacks along a new last axis, so the outer join must pair (w0, w2) with
    # (w1, w3): [q, i, j] = w(2i + j), and the (QUADS, 4) rows read w0 w1 w2 w3. (Joining
    # (w0, w1) with (w2, w3) gives w0 w2 w1 w3: elements 1 and 2 of every quad swapped, which
    # the first H100 run of `klab test 07` caught.)
    words = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), (QUADS, 4))
    offs = q[:, None] * 4 + tl.arange(0, 4)[None, :]     # (QUADS, 4)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    # threshold = floor(p * 2^32) as a 64-bit integer: p = 1 (2^32) keeps nothing, exactly.
    keep = words.to(tl.int64) >= threshold
    y = tl.where(keep, x * scale, 0.0)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


# What the build compiles: 256 quads (1024 elements) a program, 4 warps. Each dtype twice,
# with n hinted divisible by 16 and without; the linked launcher takes the hinted one when
# n allows it (the hint lets Triton prove a quad's mask uniform and move it as one vector).
AOT = [dict(name=name, kernel="dropout_kernel", signature=sig.format(h=hint), grid="(n + 1023) / 1024, 1, 1",
            num_warps=4, num_stages=1)
       for name, sig in (("tr_dropout_f32", "*fp32:16, *fp32:16, i64{h}, i64, i32, i32, i64, fp32, 256"),
                         ("tr_dropout_bf16", "*bf16:16, *bf16:16, i64{h}, i64, i32, i32, i64, fp32, 256"))
       for hint in (":16", "")]
