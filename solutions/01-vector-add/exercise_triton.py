"""Lesson 01 exercise, Triton track, completed: the vector add z = x + y.

The solution of lessons/01-vector-add/exercise_triton.py, built into klab-solutions, never
into klab. Each TODO region below is what the learner writes; tools/todo_proof.py blanks
each in turn to prove that the check fails without it.
"""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    # TODO 1: this program's index, in 64 bits (hint 1).
    # mistake int32_index (check): pid = tl.program_id(0)
    pid = tl.program_id(0).to(tl.int64)
    # end of TODO 1
    # TODO 2: the BLOCK offsets this program covers (hint 2).
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    # end of TODO 2
    # TODO 3: which of them lie inside [0, n) (hint 3).
    mask = offs < n
    # end of TODO 3
    # TODO 4: load x at the offsets, under the mask.
    x = tl.load(x_ptr + offs, mask=mask)
    # end of TODO 4
    # TODO 5: load y the same way.
    y = tl.load(y_ptr + offs, mask=mask)
    # end of TODO 5
    # TODO 6: store x + y at z's offsets, under the mask.
    tl.store(z_ptr + offs, x + y, mask=mask)
    # end of TODO 6


# What the build compiles: the f32 kernel with BLOCK = 4096, eight warps per program.
AOT = [
    dict(name="tr_ex_vector_add_f32", kernel="add_kernel",
         signature="*fp32:16, *fp32:16, *fp32:16, i64, 4096",
         # TODO 7: one program per 4096 elements of n, rounded up (hint 4).
         grid="(n + 4095) / 4096, 1, 1",
         # end of TODO 7
         num_warps=8, num_stages=1),
]
