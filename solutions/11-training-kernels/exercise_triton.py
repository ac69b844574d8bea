"""Lesson 11 exercise, Triton track, completed: one AdamW step of one fp32 tensor in Triton.

The solution of lessons/11-training-kernels/exercise_triton.py, built into klab-solutions,
never into klab. Each TODO region below is what the learner writes; tools/todo_proof.py blanks
each in turn to prove that the check fails without it.
"""
import triton
import triton.language as tl


@triton.jit
def adamw_kernel(p_ptr, g_ptr, m_ptr, v_ptr, n, beta1, omb1, beta2, omb2, eps, decay, step_size, inv_sqrt_bc2,
                 BLOCK: tl.constexpr):
    # TODO 1: this program's BLOCK element offsets, in 64 bits, and which lie inside [0, n) (hint 1).
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    # end of TODO 1
    # TODO 2: load p, g, m and v at the offsets, under the mask (hint 2).
    p = tl.load(p_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask)
    m = tl.load(m_ptr + offs, mask=mask)
    v = tl.load(v_ptr + offs, mask=mask)
    # end of TODO 2
    # TODO 3: the decoupled weight decay, on the old weights (hint 3).
    p = p * decay
    # end of TODO 3
    # TODO 4: the first moment, a moving average of g (hint 4).
    m = beta1 * m + omb1 * g
    # end of TODO 4
    # TODO 5: the second moment, a moving average of g squared (hint 4).
    v = beta2 * v + omb2 * g * g
    # end of TODO 5
    # TODO 6: the bias-corrected step (hint 5).
    # mistake no_bias_correction (check): p = p - tl.div_rn(step_size * m, tl.sqrt_rn(v) + eps)
    p = p - tl.div_rn(step_size * m, tl.sqrt_rn(v) * inv_sqrt_bc2 + eps)
    # end of TODO 6
    # TODO 7: store p, m and v back in place, under the mask (hint 6).
    tl.store(p_ptr + offs, p, mask=mask)
    tl.store(m_ptr + offs, m, mask=mask)
    tl.store(v_ptr + offs, v, mask=mask)
    # end of TODO 7


# The launch grid, a C expression over the kernel's non-constexpr arguments (n, ...).
# TODO 8: one program per BLOCK = 1024 elements of n, rounded up (hint 7).
GRID = "(n + 1023) / 1024, 1, 1"
# end of TODO 8

# What the build compiles: 1024 elements a program, four warps. Twice under one name: first
# with every pointer and n hinted divisible by 16, which the linked launcher takes when they
# are (the first step of a tensor whose size is a multiple of 16: each thread's 4-element
# runs are then known whole and aligned, one 16-byte vector each), then with g's alignment
# and n left open (step s reads g at s * n elements, which need not be 16-byte aligned).
AOT = [
    dict(name="tr_ex_adamw", kernel="adamw_kernel",
         signature=f"*fp32:16, {g}, *fp32:16, *fp32:16, {n}, fp32, fp32, fp32, fp32, fp32, fp32, fp32, fp32, 1024",
         grid=GRID, num_warps=4, num_stages=1)
    for g, n in (("*fp32:16", "i64:16"), ("*fp32", "i64"))
]
