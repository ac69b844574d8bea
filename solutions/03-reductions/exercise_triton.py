"""Lesson 03 exercise, Triton track, completed: the sum in two stages.

The solution of lessons/03-reductions/exercise_triton.py, built into klab-solutions, never
into klab. Each TODO region below is what the learner writes; tools/todo_proof.py blanks
each in turn to prove that the check fails without it.
"""
import triton
import triton.language as tl


@triton.jit
def sum_stage1(x_ptr, part_ptr, n, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    # TODO 1: this program's index, and where its chunk starts in x, in 64 bits (hint 1).
    # mistake int32_chunk (check): pid = tl.program_id(0)
    pid = tl.program_id(0).to(tl.int64)
    base = pid * CHUNK
    # end of TODO 1
    acc = tl.zeros((BLOCK,), dtype=part_ptr.dtype.element_ty)   # fp32, or int32 that wraps
    for start in range(0, CHUNK, BLOCK):
        # TODO 2: this step's BLOCK offsets in x (hint 2).
        offs = base + start + tl.arange(0, BLOCK)
        # end of TODO 2
        # TODO 3: which of them lie inside [0, n) (hint 2).
        mask = offs < n
        # end of TODO 3
        # TODO 4: load x at the offsets under the mask, 0 outside, and add it into acc (hint 3).
        acc += tl.load(x_ptr + offs, mask=mask, other=0)
        # end of TODO 4
    # TODO 5: the chunk's partial: acc summed, stored in this program's slot of part (hint 4).
    tl.store(part_ptr + pid, tl.sum(acc, axis=0))
    # end of TODO 5


@triton.jit
def sum_stage2(part_ptr, out_ptr, m, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=out_ptr.dtype.element_ty)
    for start in range(0, m, BLOCK):                               # m = 0: no step
        # TODO 6: this step's BLOCK offsets into the partials, and which lie below m (hint 5).
        offs = start + tl.arange(0, BLOCK)
        mask = offs < m
        # end of TODO 6
        # TODO 7: load the partials under the mask, 0 outside, and add them into acc (hint 5).
        acc += tl.load(part_ptr + offs, mask=mask, other=0)
        # end of TODO 7
    # TODO 8: the total: acc summed, stored at out_ptr (hint 5).
    tl.store(out_ptr, tl.sum(acc, axis=0))
    # end of TODO 8


# The launch grids, C expressions over each kernel's non-constexpr arguments: (n) for stage
# 1, (m) for stage 2. A grid of no programs launches nothing.
# TODO 9: stage 1: one program per 65,536 elements of n, rounded up (hint 6).
GRID_STAGE1 = "(n + 65535) / 65536, 1, 1"
# end of TODO 9
# TODO 10: stage 2: one program, which sums every partial (hint 6).
GRID_STAGE2 = "1, 1, 1"
# end of TODO 10

# What the build compiles: f32 and i32, CHUNK = 65,536 and BLOCK = 4,096 as reduce_triton.py
# (CHUNK must match kChunk in exercise_triton_launch.cu, which sizes the partials). Stage 1
# comes twice under one name, with n hinted divisible by 16 (i64:16) and without; the linked
# launcher takes the hinted one when n % 16 == 0. Stage 2 reads one partial per chunk (4,096
# at n = 2^28): one variant, BLOCK = 1,024.
AOT = [dict(name=f"tr_ex_sum_stage1_{tag}", kernel="sum_stage1",
            signature=f"*{ty}:16, *{ty}:16, i64{hint}, 65536, 4096", grid=GRID_STAGE1,
            num_warps=8, num_stages=3)
       for ty, tag in (("fp32", "f32"), ("i32", "i32")) for hint in (":16", "")] + [
    dict(name=f"tr_ex_sum_stage2_{tag}", kernel="sum_stage2", signature=f"*{ty}:16, *{ty}:16, i64, 1024",
         grid=GRID_STAGE2, num_warps=4, num_stages=1)
    for ty, tag in (("fp32", "f32"), ("i32", "i32"))]
