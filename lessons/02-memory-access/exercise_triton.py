"""Lesson 02 exercise, Triton track: the tiled transpose y = x^T in Triton.

y (cols x rows) = x (rows x cols)^T, row-major, f32 and bf16. Each program owns one
BLOCK_R x BLOCK_C tile of x: it loads the tile with rows of x contiguous (coalesced),
transposes it in registers with tl.trans, and stores it as a BLOCK_C x BLOCK_R tile of y,
whose rows are contiguous too. Triton stages the tile through shared memory for you: the
CUDA exercise's s_tile and barriers, chosen by the compiler. Fill in the seven TODOs: the
program's tile, its row and column indices, the mask for the edge tiles, the load, the
transposed store, and the launch grid below the kernel.

After an edit, grade it (no rebuild step: the check compiles this file first, shows one
line with the line number if it does not compile, and rebuilds klab when it changed):

    klab check 02 --triton

which checks it on unseen seeds and the edge shapes of `klab check 02` (1 x n, n x 1,
primes, sizes that are not multiples of the tile, past 2^31 elements), then times it
against the lesson's `triton` version.

Hints
  1. Grid axis 0 counts row tiles of x and axis 1 column tiles (axis 0 has no 65535 limit,
     and x may have 8 million rows): tl.program_id(0) and tl.program_id(1).
  2. The tile's rows of x are its first row plus tl.arange(0, BLOCK_R); columns likewise.
  3. Edge tiles run past rows and cols: a 2D mask, (r[:, None] < rows) & (c[None, :] < cols).
  4. x[r, c] is at x_ptr + r * cols + c; y[c, r] at y_ptr + c * rows + r. The store writes
     tl.trans(tile), under the mask transposed the same way.
"""
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # TODO 1: this program's tile: its row tile and column tile of x (hint 1).
    pid_r = 0
    pid_c = 0
    # end of TODO 1
    # TODO 2: the tile's rows of x, (BLOCK_R,) (hint 2).
    r = tl.arange(0, BLOCK_R)
    # end of TODO 2
    # TODO 3: the tile's columns of x, (BLOCK_C,) (hint 2).
    c = tl.arange(0, BLOCK_C)
    # end of TODO 3
    # TODO 4: which elements of the tile lie inside x, (BLOCK_R, BLOCK_C) (hint 3).
    mask = (r[:, None] < 0) & (c[None, :] < 0)
    # end of TODO 4
    # TODO 5: load the tile of x under the mask (hint 4).
    tile = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    # end of TODO 5
    # TODO 6: store it transposed into y, under the transposed mask (hint 4).
    # end of TODO 6


# The launch grid, a C expression over the kernel's non-constexpr arguments (rows, cols):
# axis 0 over row tiles, axis 1 over column tiles (at most 65535: the launcher checks).
# TODO 7: one program per 64 x 64 tile of x, rounded up on both axes.
GRID = "1, 1, 1"
# end of TODO 7

# What the build compiles: f32 and bf16, 64 x 64 tiles, eight warps per program; each twice,
# with rows and cols hinted divisible by 16 (`i64:16`: the masks are then known constant
# over 16 bytes and the loads and stores move 16 bytes at a time) and without (any shape),
# as transpose_triton.py does; the launcher takes the hinted one when both are.
AOT = [dict(name=f"tr_ex_transpose_{name}", kernel="transpose_kernel",
            signature=f"*{ty}:16, *{ty}:16, i64{hint}, i64{hint}, 64, 64", grid=GRID, num_warps=8, num_stages=1)
       for name, ty in (("f32", "fp32"), ("bf16", "bf16")) for hint in (":16", "")]
