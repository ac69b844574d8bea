"""Lesson 07 exercise, Triton track: dropout on the lesson's Philox stream, in Triton.

y[i] = x[i] / (1 - p) where the stream keeps element i, 0 where it drops it, over the flat
x of a (rows, cols) tensor, f32 and bf16 (computed in fp32). Element i belongs to quad
q = i / 4, and word i % 4 of one Philox4x32-10 call decides it: the counter is (q low, q
high, offset low, offset high), the key the seed (klab/include/klab/device/philox.cuh;
Triton's tl.philox is the same function). Each program handles QUADS = 256 quads as a
(QUADS, 4) block, one quad a row: one tl.philox call gives the four (QUADS,) words, which
you line up with the block of x, then keep, scale or zero each element. The C++ side
(exercise_triton_launch.cu) passes the seed, the offset's two 32-bit halves, the threshold
floor(p * 2^32) as a 64-bit integer and the scale 1 / (1 - p). Fill in the eleven TODOs:
the program's quads (in 64 bits), the counter's words from the quad and from the offset,
the Philox call, the words joined into the block, the element offsets and mask, the load,
the keep test, the scaling, the store, and the launch grid below the kernel.

After an edit, grade it (no rebuild step: the check compiles this file first, shows one
line with the line number if it does not compile, and rebuilds klab when it changed):

    klab check 07 --triton

which compares your output bit for bit with the mask of the reference (a kept element you
dropped is off by |x| / (1 - p)) on unseen seeds and offsets, at p = 0, 0.1, 0.5, 0.9 and
1, on the edge shapes of `klab check 07` (empty, one element, sizes that are no multiple
of 4, 2^31 + 6 elements), f32 and bf16, then times it against the lesson's `triton`
version. Until every TODO is done the check fails: the harness fills y with NaN before
each launch.

The AOT list compiles the kernel twice a dtype: with n hinted divisible by 16 (a quad's
mask is then known uniform, and each quad moves as one vector) and without (any n).
`tools/triton_ptx.py lessons/07-dropout/exercise_triton.py` shows what each became.

Hints
  1. One program per QUADS quads: its quads are pid * QUADS + tl.arange(0, QUADS), with
     pid = tl.program_id(0) widened first, .to(tl.int64): the check's 2^31 + 6 elements
     put element 4q past what 32 bits hold.
  2. The counter is four 32-bit words. From the quad: c0 = q.to(tl.uint32), its low 32
     bits (a conversion to a narrower integer keeps the low bits), and
     c1 = (q >> 32).to(tl.uint32), its high 32. From the offset, the same in every quad:
     tl.full((QUADS,), offset_lo, tl.int32), and likewise offset_hi. tl.philox draws
     32-bit words only when c0 is 32 bits wide (a 64-bit c0 is another generator).
  3. w0, w1, w2, w3 = tl.philox(seed, c0, c1, c2, c3): the seed is the key (tl.philox
     splits its 64 bits itself); each word is a (QUADS,) block of uint32, and word w of
     quad q decides element 4q + w.
  4. tl.join(a, b) stacks a and b along a new LAST axis. tl.join(tl.join(w0, w2),
     tl.join(w1, w3)) is (QUADS, 2, 2) with [q, i, j] = w(2i + j), so its
     tl.reshape(..., (QUADS, 4)) has rows w0 w1 w2 w3. Joining (w0, w1) with (w2, w3)
     gives rows w0 w2 w1 w3: elements 1 and 2 of every quad swapped.
  5. Element (q, w) of the block is at 4q + w: q[:, None] * 4 + tl.arange(0, 4)[None, :].
     The last quad may reach past n (n need not be a multiple of 4): the mask is offs < n,
     for the load and for the store. Load x as fp32: .to(tl.float32).
  6. Keep when the word is at least the threshold, compared as 64-bit integers:
     words.to(tl.int64) >= threshold. At p = 1 the threshold is 2^32, which no 32-bit
     word reaches; cut to 32 bits it would be 0, which every word reaches. Then
     tl.where(keep, x * scale, 0.0), stored as y's type: y.to(y_ptr.dtype.element_ty).
  7. GRID is a C expression over the kernel's non-constexpr arguments: one program per
     QUADS * 4 = 1024 elements of n, rounded up.
"""
import triton
import triton.language as tl


@triton.jit
def dropout_kernel(x_ptr, y_ptr, n, seed, offset_lo, offset_hi, threshold, scale, QUADS: tl.constexpr):
    # TODO 1: this program's QUADS quad indices, (QUADS,), from its index in 64 bits (hint 1).
    q = tl.zeros((QUADS,), tl.int64)
    # end of TODO 1
    # TODO 2: the counter's first two words: the quad index's low and high 32 bits (hint 2).
    c0 = tl.zeros((QUADS,), tl.uint32)
    c1 = tl.zeros((QUADS,), tl.uint32)
    # end of TODO 2
    # TODO 3: the counter's last two words: the offset's halves, in every quad (hint 2).
    c2 = tl.zeros((QUADS,), tl.int32)
    c3 = tl.zeros((QUADS,), tl.int32)
    # end of TODO 3
    # TODO 4: the quads' four random words, one Philox call keyed by the seed (hint 3).
    zero = tl.zeros((QUADS,), tl.uint32)
    w0, w1, w2, w3 = zero, zero, zero, zero
    # end of TODO 4
    # TODO 5: the words as a (QUADS, 4) block whose row q reads w0 w1 w2 w3 (hint 4).
    words = tl.zeros((QUADS, 4), tl.uint32)
    # end of TODO 5
    # TODO 6: the elements' offsets, (QUADS, 4), and which of them lie inside [0, n) (hint 5).
    offs = tl.zeros((QUADS, 4), tl.int64)
    mask = offs < 0
    # end of TODO 6
    # TODO 7: load x at the offsets, under the mask, as fp32 (hint 5).
    x = tl.zeros((QUADS, 4), tl.float32)
    # end of TODO 7
    # TODO 8: which elements the stream keeps: word against the 64-bit threshold (hint 6).
    keep = offs < 0
    # end of TODO 8
    # TODO 9: a kept element scaled by scale, a dropped one exactly 0 (hint 6).
    y = tl.zeros((QUADS, 4), tl.float32)
    # end of TODO 9
    # TODO 10: store y at y's offsets, in y's type, under the mask (hint 6).
    # end of TODO 10


# The launch grid, a C expression over the kernel's non-constexpr arguments (n, seed, ...).
# TODO 11: one program per 1024 elements of n, rounded up (hint 7).
GRID = "1, 1, 1"
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
