"""Lesson 04 exercise, Triton track: the row softmax in Triton.

y[r, j] = exp(x[r, j] - m_r) / sum_k exp(x[r, k] - m_r), m_r the max of row r, over each
row of x (rows x cols, row-major), f32 and bf16 (computed in fp32). One program per row
holds the whole row in one BLOCK-wide tile: the classic Triton softmax, v2_fused of the CUDA
track in Triton's words. The row's max and sum are tl.max and tl.sum over the tile: Triton
writes the warp shuffles and the shared-memory step of the block reductions you wrote in
exercise.cu. The C++ side (exercise_triton_launch.cu) launches the entry of the AOT list
below with the smallest BLOCK that holds the row, so a tile may run past the end of the row.
Fill in the ten TODOs: where the program's row starts, its column offsets, the mask, the
load, the row max, the exponentials, the row sum, the normalisation, the store, and the
launch grid below the kernel.

After an edit, grade it (no rebuild step: the check compiles this file first, shows one
line with the line number if it does not compile, and rebuilds klab when it changed):

    klab check 04 --triton

which checks it on unseen seeds and the edge shapes of `klab check 04` (one column, primes,
rows that are not a multiple of any tile, rows of x near +1e4 and -1e4, 70,001 rows, past
2^31 elements), then times it against the lesson's `triton` version. It grades the plain
softmax: the causal variant and rows longer than 131,072 columns (the largest tile) are
`triton`'s alone, and the check lists them as unsupported.

Hints
  1. One program per row: its row is tl.program_id(0), and the row starts at row * cols in
     x and in y. rows * cols passes 2^31 in the check (16,385 x 131,072) and cols is a
     32-bit argument, so widen the id before the multiply: tl.program_id(0).to(tl.int64).
  2. The tile's columns are tl.arange(0, BLOCK); those at cols or past it are padding, and
     the mask is offs < cols.
  3. tl.load(x_ptr + start + offs, mask=mask, other=-float("inf")): a padded lane holds -inf,
     which never wins the max and adds exp(-inf) = 0 to the sum (without `other` it holds
     0.0, which can win the max and adds exp(-m) to the sum). Then .to(tl.float32): bf16
     rows are computed in fp32.
  4. m = tl.max(x, axis=0), then tl.exp(x - m). Subtracting m cancels in the quotient and
     keeps every exponent <= 0: the check's rows near +1e4 make exp(x) Inf (Inf / Inf =
     NaN), its rows near -1e4 make it 0 (0 / 0 = NaN).
  5. d = tl.sum(e, axis=0), y = e / d. The store writes y.to(y_ptr.dtype.element_ty) (f32 or
     bf16, whichever y is) at y_ptr + start + offs, under the same mask.
  6. GRID is C: one program per row is "rows, 1, 1" (the grid's x axis has no 65535 limit,
     and the check has 70,001 rows).
"""
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    # TODO 1: where this program's row starts in x and y: its row times cols, in 64 bits (hint 1).
    start = 0
    # end of TODO 1
    # TODO 2: the tile's column offsets, (BLOCK,) (hint 2).
    offs = tl.zeros((BLOCK,), tl.int32)
    # end of TODO 2
    # TODO 3: which of them lie inside the row, (BLOCK,) (hint 2).
    mask = offs < 0
    # end of TODO 3
    # TODO 4: load the row under the mask, -inf in the padded lanes, as fp32 (hint 3).
    x = tl.zeros((BLOCK,), tl.float32)
    # end of TODO 4
    # TODO 5: the row max, a scalar (hint 4).
    m = 0.0
    # end of TODO 5
    # TODO 6: the exponentials, each of x minus the row max, (BLOCK,) (hint 4).
    e = tl.zeros((BLOCK,), tl.float32)
    # end of TODO 6
    # TODO 7: the row sum of the exponentials, a scalar (hint 5).
    d = 1.0
    # end of TODO 7
    # TODO 8: normalise: each exponential over the row sum, (BLOCK,) (hint 5).
    y = e
    # end of TODO 8
    # TODO 9: store y into the row of y, in y's type, under the mask (hint 5).
    # end of TODO 9


# The launch grid, a C expression over the kernel's non-constexpr arguments (rows, cols).
# TODO 10: one program per row (hint 6).
GRID = "1, 1, 1"
# end of TODO 10

# What the build compiles: f32 and bf16, one entry per tile width (BLOCK, with the warps that
# share it), the launcher taking the smallest BLOCK >= cols. Each entry comes twice, the first
# with cols hinted divisible by 16 (i32:16), which the linked launcher takes when cols % 16 ==
# 0: every row then starts 64-byte aligned and the mask is constant over 16-byte runs, so the
# loads and stores move 16 bytes at a time. The 131,072 tile holds 128 values a thread, more
# than the registers of a 1024-thread program: it spills to local memory, which is slow, but
# it runs the check's rows past 32,768 columns, the one past 2^31 elements among them.
TILES = ((1024, 4), (4096, 8), (8192, 16), (16384, 16), (32768, 32), (131072, 32))
AOT = [
    dict(name=f"tr_ex_softmax_{tag}_b{block}", kernel="softmax_kernel",
         signature=f"*{ty}:16, *{ty}:16, i32, {cols}, {block}", grid=GRID, num_warps=warps, num_stages=1)
    for ty, tag in (("fp32", "f32"), ("bf16", "bf16"))
    for block, warps in TILES
    for cols in ("i32:16", "i32")
]
