"""Lesson 02, Triton track: matrix transpose.

Each program owns one BLOCK_R x BLOCK_C tile of x: it loads the tile (rows of x are
contiguous, so the load is coalesced), transposes it in registers with tl.trans, and
stores it as a BLOCK_C x BLOCK_R tile of y (rows of y are contiguous too). Between the
load and the store the compiler moves the tile through shared memory in a layout of its
choosing (swizzled against bank conflicts): the CUDA versions' v3/v4 written by hand,
here chosen by Triton. Masks cover the edge tiles; row and column indices are 64-bit
so that rows * cols may pass 2^31.

Compiled ahead of time by tools/triton_aot.py (the AOT list at the bottom);
lessons/02-memory-access/transpose.cu registers the launchers as the `triton` impl.
"""
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid_c = tl.program_id(0).to(tl.int64)        # tile column of x (grid x: no 65535 limit)
    pid_r = tl.program_id(1).to(tl.int64)        # tile row of x
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)  # (BLOCK_R,) rows of x
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)  # (BLOCK_C,) columns of x
    mask = (r[:, None] < rows) & (c[None, :] < cols)              # (BLOCK_R, BLOCK_C)
    tile = tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=mask)
    # y[c, r] = x[r, c]: y has `rows` columns.
    tl.store(y_ptr + c[:, None] * rows + r[None, :], tl.trans(tile), mask=tl.trans(mask))


# Grid: x over column tiles, y over row tiles (at most 65535: transpose.cu checks it).
# Each kernel twice: with rows and cols hinted divisible by 16 and without (any shape); the
# linked launcher takes the hinted one when both are. The masks compare indices with rows
# and cols, and only where Triton knows a mask is constant over a 16-byte run does it load
# and store 16 bytes at once: without the hint every thread moved one element per
# instruction (tools/triton_ptx.py: 16 ld.global.b16 for the bf16 tile).
GRID = "(cols + 63) / 64, (rows + 63) / 64, 1"
AOT = [dict(name=f"tr_transpose_{name}", kernel="transpose_kernel",
            signature=f"*{ty}:16, *{ty}:16, i64{hint}, i64{hint}, 64, 64", grid=GRID, num_warps=8, num_stages=1)
       for name, ty in (("f32", "fp32"), ("bf16", "bf16")) for hint in (":16", "")]
