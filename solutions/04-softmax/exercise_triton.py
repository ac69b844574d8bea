"""Lesson 04 exercise, Triton track, completed: the row softmax.

The solution of lessons/04-softmax/exercise_triton.py, built into klab-solutions, never
into klab. Each TODO region below is what the learner writes; tools/todo_proof.py blanks
each in turn to prove that the check fails without it.
"""
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    # TODO 1: where this program's row starts in x and y: its row times cols, in 64 bits (hint 1).
    # mistake int32_row (check): row = tl.program_id(0)
    row = tl.program_id(0).to(tl.int64)
    start = row * cols
    # end of TODO 1
    # TODO 2: the tile's column offsets, (BLOCK,) (hint 2).
    offs = tl.arange(0, BLOCK)
    # end of TODO 2
    # TODO 3: which of them lie inside the row, (BLOCK,) (hint 2).
    mask = offs < cols
    # end of TODO 3
    # TODO 4: load the row under the mask, -inf in the padded lanes, as fp32 (hint 3).
    # mistake no_other (check): x = tl.load(x_ptr + start + offs, mask=mask).to(tl.float32)
    x = tl.load(x_ptr + start + offs, mask=mask, other=-float("inf")).to(tl.float32)
    # end of TODO 4
    # TODO 5: the row max, a scalar (hint 4).
    m = tl.max(x, axis=0)
    # end of TODO 5
    # TODO 6: the exponentials, each of x minus the row max, (BLOCK,) (hint 4).
    e = tl.exp(x - m)
    # end of TODO 6
    # TODO 7: the row sum of the exponentials, a scalar (hint 5).
    d = tl.sum(e, axis=0)
    # end of TODO 7
    # TODO 8: normalise: each exponential over the row sum, (BLOCK,) (hint 5).
    y = e / d
    # end of TODO 8
    # TODO 9: store y into the row of y, in y's type, under the mask (hint 5).
    tl.store(y_ptr + start + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    # end of TODO 9


# The launch grid, a C expression over the kernel's non-constexpr arguments (rows, cols).
# TODO 10: one program per row (hint 6).
GRID = "rows, 1, 1"
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
