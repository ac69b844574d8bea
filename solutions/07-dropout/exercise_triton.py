"""Lesson 07 exercise, Triton track, completed: dropout on the lesson's Philox stream.

The solution of lessons/07-dropout/exercise_triton.py, built into klab-solutions, never
into klab. Each TODO region below is what the learner writes; tools/todo_proof.py blanks
each in turn to prove that the check fails without it.
"""
import triton
import triton.language as tl


@triton.jit
def dropout_kernel(x_ptr, y_ptr, n, seed, offset_lo, offset_hi, threshold, scale, QUADS: tl.constexpr):
    # TODO 1: this program's QUADS quad indices, (QUADS,), from its index in 64 bits (hint 1).
    # mistake int32_pid (check): pid = tl.program_id(0)
    pid = tl.program_id(0).to(tl.int64)
    q = pid * QUADS + tl.arange(0, QUADS)
    # end of TODO 1
    # TODO 2: the counter's first two words: the quad index's low and high 32 bits (hint 2).
    c0 = q.to(tl.uint32)
    c1 = (q >> 32).to(tl.uint32)
    # end of TODO 2
    # TODO 3: the counter's last two words: the offset's halves, in every quad (hint 2).
    c2 = tl.full((QUADS,), offset_lo, tl.int32)
    c3 = tl.full((QUADS,), offset_hi, tl.int32)
    # end of TODO 3
    # TODO 4: the quads' four random words, one Philox call keyed by the seed (hint 3).
    w0, w1, w2, w3 = tl.philox(seed, c0, c1, c2, c3)
    # end of TODO 4
    # TODO 5: the words as a (QUADS, 4) block whose row q reads w0 w1 w2 w3 (hint 4).
    # mistake join_order (check): words = tl.reshape(tl.join(tl.join(w0, w1), tl.join(w2, w3)), (QUADS, 4))
    words = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), (QUADS, 4))
    # end of TODO 5
    # TODO 6: the elements' offsets, (QUADS, 4), and which of them lie inside [0, n) (hint 5).
    offs = q[:, None] * 4 + tl.arange(0, 4)[None, :]
    mask = offs < n
    # end of TODO 6
    # TODO 7: load x at the offsets, under the mask, as fp32 (hint 5).
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    # end of TODO 7
    # TODO 8: which elements the stream keeps: word against the 64-bit threshold (hint 6).
    keep = words.to(tl.int64) >= threshold
    # end of TODO 8
    # TODO 9: a kept element scaled by scale, a dropped one exactly 0 (hint 6).
    y = tl.where(keep, x * scale, 0.0)
    # end of TODO 9
    # TODO 10: store y at y's offsets, in y's type, under the mask (hint 6).
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    # end of TODO 10


# The launch grid, a C expression over the kernel's non-constexpr arguments (n, seed, ...).
# TODO 11: one program per 1024 elements of n, rounded up (hint 7).
GRID = "(n + 1023) / 1024, 1, 1"
# end of TODO 11

# What the build compiles: 256 quads (1024 elements) a program, four warps, f32 and bf16.
# Each dtype comes twice under one name, the first with n hinted divisible by 16 (i64:16),
# which the linked launcher takes when n % 16 == 0: Triton then knows each quad's mask is
# uniform and moves the quad as one vector (16 bytes in f32, 8 in bf16).
AOT = [
    dict(name=f"tr_ex_dropout_{tag}", kernel="dropout_kernel",
         signature=f"*{ty}:16, *{ty}:16, {n}, i64, i32, i32, i64, fp32, 256",
         grid=GRID, num_warps=4, num_stages=1)
    for ty, tag in (("fp32", "f32"), ("bf16", "bf16"))
    for n in ("i64:16", "i64")
]
