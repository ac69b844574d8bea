"""Lesson 03 exercise, Triton track: the sum s = sum(x) in two stages, in Triton.

s = x[0] + x[1] + ... + x[n - 1], f32 and i32 (an i32 sum wraps mod 2^32, as the
reference's does), in two launches as the lesson's `triton` does and as exercise.cu does
with CUDA blocks. Stage 1: program p reduces its chunk x[p * CHUNK, (p + 1) * CHUNK),
BLOCK elements per step into a BLOCK-wide accumulator, and stores one partial; stage 2:
one program reduces the partials the same way and stores s. The one tl.sum at the end of
each stage is the block reduction you wrote in exercise.cu: Triton writes its warp
shuffles and its shared-memory step. The C++ side (exercise_triton_launch.cu) gives stage
1 a workspace of one partial per chunk and launches both stages, stage 2 over
m = cdiv(n, CHUNK) partials. Fill in the ten TODOs: where the program's chunk starts, the
offsets of a step, the mask, the load and add, the chunk's partial; in stage 2 the
offsets and mask, the load and add, the total; and the two launch grids below the kernels.

After an edit, grade it (no rebuild step: the check compiles this file first, shows one
line with the line number if it does not compile, and rebuilds klab when it changed):

    klab check 03 --triton

which checks it on unseen seeds and the edge shapes of `klab check 03` (0 and 1 elements,
primes, lengths that are not a multiple of the block or the chunk, 2^24 + 3, 2^31 + 17),
f32 and i32, then times it against the lesson's `triton` version. Until every TODO is done
the check fails: the harness poisons s before each launch.

The AOT list compiles stage 1 twice: with n hinted divisible by 16 (the mask is then known
constant over 16-byte runs and each load moves 16 bytes) and without (any n).
`tools/triton_ptx.py lessons/03-reductions/exercise_triton.py` shows what each became.

Hints
  1. Stage 1 runs one program per chunk of CHUNK = 65,536 elements: program
     pid = tl.program_id(0) starts at pid * CHUNK. The check's n = 2^31 + 17 has its last
     chunk at 32,768 x 65,536 = 2^31, past what 32 bits hold, so widen the id before the
     multiply: tl.program_id(0).to(tl.int64).
  2. Step `start` of the loop covers base + start + tl.arange(0, BLOCK); the last chunk runs
     past n (n need not be a multiple of BLOCK or CHUNK), so the mask is offs < n.
  3. acc += tl.load(x_ptr + offs, mask=mask, other=0): a lane outside [0, n) adds 0. Each
     lane of acc adds its own elements, one per step, with no lane waiting for another.
  4. After the loop, tl.sum(acc, axis=0) adds the BLOCK lanes into the chunk's partial;
     store it at part_ptr + pid, the program's own slot, so that stage 2 finds the
     partials in chunk order.
  5. Stage 2 is one program and the same loop over the m partials, m in the place of n:
     offsets start + tl.arange(0, BLOCK), mask offs < m, other=0, then tl.sum and a store
     at out_ptr. For n = 0 there are no partials (m = 0): the loop runs no step and the
     store writes the sum of the zeros of acc, 0, the sum of nothing.
  6. The grids are C expressions over each kernel's non-constexpr arguments (C `/`, not
     `//`): stage 1 one program per 65,536 elements of n, rounded up; stage 2 one program.
"""
import triton
import triton.language as tl


@triton.jit
def sum_stage1(x_ptr, part_ptr, n, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    # TODO 1: this program's index, and where its chunk starts in x, in 64 bits (hint 1).
    pid = 0
    base = 0
    # end of TODO 1
    acc = tl.zeros((BLOCK,), dtype=part_ptr.dtype.element_ty)   # fp32, or int32 that wraps
    for start in range(0, CHUNK, BLOCK):
        # TODO 2: this step's BLOCK offsets in x (hint 2).
        offs = tl.zeros((BLOCK,), tl.int64)
        # end of TODO 2
        # TODO 3: which of them lie inside [0, n) (hint 2).
        mask = offs < 0
        # end of TODO 3
        # TODO 4: load x at the offsets under the mask, 0 outside, and add it into acc (hint 3).
        # end of TODO 4
    # TODO 5: the chunk's partial: acc summed, stored in this program's slot of part (hint 4).
    # end of TODO 5


@triton.jit
def sum_stage2(part_ptr, out_ptr, m, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=out_ptr.dtype.element_ty)
    for start in range(0, m, BLOCK):                               # m = 0: no step
        # TODO 6: this step's BLOCK offsets into the partials, and which lie below m (hint 5).
        offs = tl.zeros((BLOCK,), tl.int64)
        mask = offs < 0
        # end of TODO 6
        # TODO 7: load the partials under the mask, 0 outside, and add them into acc (hint 5).
        # end of TODO 7
    # TODO 8: the total: acc summed, stored at out_ptr (hint 5).
    # end of TODO 8


# The launch grids, C expressions over each kernel's non-constexpr arguments: (n) for stage
# 1, (m) for stage 2. A grid of no programs launches nothing.
# TODO 9: stage 1: one program per 65,536 elements of n, rounded up (hint 6).
GRID_STAGE1 = "1, 1, 1"
# end of TODO 9
# TODO 10: stage 2: one program, which sums every partial (hint 6).
GRID_STAGE2 = "0, 1, 1"
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
