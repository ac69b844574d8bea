"""Lesson 02 exercise, Triton track, completed: the tiled transpose.

The solution of lessons/02-memory-access/exercise_triton.py, built into klab-solutions,
never into klab. Each TODO region below is what the learner writes; tools/todo_proof.py
blanks each in turn to prove that the check fails without it.
"""
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # TODO 1: this program's tile: its row tile and column tile of x (hint 1).
    pid_r = tl.program_id(0).to(tl.int64)
    pid_c = tl.program_id(1).to(tl.int64)
    # end of TODO 1
    # TODO 2: the tile's rows of x, (BLOCK_R,) (hint 2).
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    # end of TODO 2
    # TODO 3: the tile's columns of x, (BLOCK_C,) (hint 2).
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    # end of TODO 3
    # TODO 4: which elements of the tile lie inside x, (BLOCK_R, BLOCK_C) (hint 3).
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    # end of TODO 4
    # TODO 5: load the tile of x under the mask (hint 4).
    tile = tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=mask)
    # end of TODO 5
    # TODO 6: store it transposed into y, under the transposed mask (hint 4).
    # mistake untransposed_mask (check): tl.store(y_ptr + c[:, None] * rows + r[None, :], tl.trans(tile), mask=mask)
    tl.store(y_ptr + c[:, None] * rows + r[None, :], tl.trans(tile), mask=tl.trans(mask))
    # end of TODO 6


# The launch grid, a C expression over the kernel's non-constexpr arguments (rows, cols):
# axis 0 over row tiles, axis 1 over column tiles (at most 65535: the launcher checks).
# TODO 7: one program per 64 x 64 tile of x, rounded up on both axes.
GRID = "(rows + 63) / 64, (cols + 63) / 64, 1"
# end of TODO 7

# What the build compiles: f32 and bf16, 64 x 64 tiles, eight warps per program; each twice,
# with rows and cols hinted divisible by 16 (`i64:16`: the masks are then known constant
# over 16 bytes and the loads and stores move 16 bytes at a time) and without (any shape),
# as transpose_triton.py does; the launcher takes the hinted one when both are.
AOT = [dict(name=f"tr_ex_transpose_{name}", kernel="transpose_kernel",
            signature=f"*{ty}:16, *{ty}:16, i64{hint}, i64{hint}, 64, 64", grid=GRID, num_warps=8, num_stages=1)
       for name, ty in (("f32", "fp32"), ("bf16", "bf16")) for hint in (":16", "")]
