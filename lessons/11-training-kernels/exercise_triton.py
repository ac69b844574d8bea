"""Lesson 11 exercise, Triton track: one AdamW step of one fp32 tensor in Triton.

AdamW (decoupled weight decay) at step t, as klab/include/klab/device/adamw.cuh writes it:

    p <- p * decay                                     decay = 1 - lr * wd
    m <- beta1 * m + omb1 * g                          omb1 = 1 - beta1
    v <- beta2 * v + omb2 * g * g                      omb2 = 1 - beta2
    p <- p - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)

where step_size = lr / (1 - beta1^t) and inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t) are the bias
corrections, computed once per step on the host (klab::AdamWStep) and passed as fp32 scalars.
p, m and v are updated in place; g is read. The C++ side (exercise_triton_launch.cu) launches
this kernel once per tensor and per step, over the tensor's n elements, with g pointing at that
step's row of the gradients. The lesson's `triton` version does the same update for every
tensor of a step in ONE launch (adamw_triton.py: a table of the tensors in memory, a program
per chunk of any tensor); the exercise is the update itself. Fill in the eight TODOs: the
offsets and mask, the loads, the weight decay, the two moments, the bias-corrected step, the
stores, and the launch grid below the kernel.

After an edit, grade it (no rebuild step: the check compiles this file first, shows one line
with the line number if it does not compile, and rebuilds klab when it changed):

    klab check 11 --triton

which compares p, m and v with an fp64 reference (f32 tolerance: 1e-5 relative) on unseen
seeds, on the op's edge shapes (no parameters at all, one, empty tensors between full ones,
odd and prime sizes, several steps, 40 tensors), variant plain, then times it against the
lesson's `triton` version. Until every TODO is done the check fails.

Hints
  1. One program per BLOCK elements: offs = pid * BLOCK + tl.arange(0, BLOCK), with
     pid = tl.program_id(0) widened first, .to(tl.int64), so that the product cannot pass
     what 32 bits hold on a tensor near 2^31 elements. The last program reaches past n:
     mask = offs < n, for every load and every store.
  2. tl.load(p_ptr + offs, mask=mask), and the same for g, m and v: all fp32, nothing to
     convert. A masked-off lane loads nothing and its value is never stored.
  3. The decay multiplies the OLD p, before the step is taken: p = p * decay. (Adam with L2
     regularization would add wd * p to g instead; AdamW keeps the two apart.)
  4. Exponential moving averages with the step's constants: m = beta1 * m + omb1 * g and
     v = beta2 * v + omb2 * g * g. omb1 is 1 - beta1 computed in double on the host and
     rounded once: 1 - beta1 in fp32, from beta1 already rounded to 0.9f, is 0.100000024,
     not the float nearest 0.1.
  5. p = p - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps). Both bias corrections matter:
     without inv_sqrt_bc2 the early steps are too small by up to 1 / sqrt(1 - beta2^t).
     tl.sqrt_rn(v) and tl.div_rn(a, b) round as CUDA's sqrtf and `/` do (tl.sqrt and `/`
     are approximations, also within the check's tolerance).
  6. tl.store(p_ptr + offs, p, mask=mask), and m and v likewise: they are the optimizer's
     state, read again at the next step.
  7. GRID is a C expression over the kernel's non-constexpr arguments (n, ...): one program
     per BLOCK = 1024 elements of n, rounded up: (n + 1023) / 1024, in C's integer division.
"""
import triton
import triton.language as tl


@triton.jit
def adamw_kernel(p_ptr, g_ptr, m_ptr, v_ptr, n, beta1, omb1, beta2, omb2, eps, decay, step_size, inv_sqrt_bc2,
                 BLOCK: tl.constexpr):
    # TODO 1: this program's BLOCK element offsets, in 64 bits, and which lie inside [0, n) (hint 1).
    offs = tl.zeros((BLOCK,), tl.int64)
    mask = offs < 0
    # end of TODO 1
    # TODO 2: load p, g, m and v at the offsets, under the mask (hint 2).
    p = tl.zeros((BLOCK,), tl.float32)
    g = tl.zeros((BLOCK,), tl.float32)
    m = tl.zeros((BLOCK,), tl.float32)
    v = tl.zeros((BLOCK,), tl.float32)
    # end of TODO 2
    # TODO 3: the decoupled weight decay, on the old weights (hint 3).
    # end of TODO 3
    # TODO 4: the first moment, a moving average of g (hint 4).
    # end of TODO 4
    # TODO 5: the second moment, a moving average of g squared (hint 4).
    # end of TODO 5
    # TODO 6: the bias-corrected step (hint 5).
    # end of TODO 6
    # TODO 7: store p, m and v back in place, under the mask (hint 6).
    # end of TODO 7


# The launch grid, a C expression over the kernel's non-constexpr arguments (n, ...).
# TODO 8: one program per BLOCK = 1024 elements of n, rounded up (hint 7).
GRID = "1, 1, 1"
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
