"""Lesson 08 exercise, Triton track, completed: the layernorm forward, one program a row.

The solution of lessons/08-layernorm/exercise_triton.py, built into klab-solutions, never
into klab. Each TODO region below is what the learner writes; tools/todo_proof.py blanks
each in turn to prove that the check fails without it, and makes three mistakes the lesson
teaches: the row index left 32-bit, the masked lanes left in the variance, and the variance
divided by cols - 1.
"""
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, gamma_ptr, beta_ptr, y_ptr, mean_ptr, rstd_ptr, rows, cols, eps, BLOCK: tl.constexpr):
    # TODO 1: this program's row, in 64 bits, the block's columns and which are inside the row (hint 1).
    # mistake int32_row (check): row = tl.program_id(0)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    # end of TODO 1
    # TODO 2: load the row, masked lanes 0, as fp32 (hint 2).
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    # end of TODO 2
    # TODO 3: the row's mean (hint 3).
    mean = tl.sum(x, axis=0) / cols
    # end of TODO 3
    # TODO 4: the centred values, 0 in the masked lanes (hint 4).
    # mistake unmasked_centre (check): d = x - mean
    d = tl.where(mask, x - mean, 0.0)
    # end of TODO 4
    # TODO 5: rstd from the biased variance and eps (hint 5).
    # mistake unbiased_var (check): rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / (cols - 1) + eps)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / cols + eps)
    # end of TODO 5
    # TODO 6: y = d * rstd * gamma + beta, stored in y's type under the mask (hint 6).
    g = tl.load(gamma_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(beta_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + offs, (d * rstd * g + b).to(y_ptr.dtype.element_ty), mask=mask)
    # end of TODO 6
    # TODO 7: the row's mean and rstd, saved for the backward (hint 7).
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    # end of TODO 7


# The launch grid, a C expression over the kernel's non-constexpr arguments (rows, cols, eps).
# TODO 8: one program a row (hint 8).
GRID = "rows, 1, 1"
# end of TODO 8

# What the build compiles, f32 and bf16: BLOCK 4096 with eight warps (rows up to 4096
# elements: 16 a thread) and 32768 with 32 warps (up to 32,768: 32 a thread).
AOT = [dict(name=f"tr_ex_layernorm_{dt}_{block}", kernel="layernorm_kernel",
            signature=f"*{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *fp32:16, *fp32:16, i32, i32, fp32, {block}",
            grid=GRID, num_warps=warps, num_stages=1)
       for dt, ty in (("f32", "fp32"), ("bf16", "bf16"))
       for block, warps in ((4096, 8), (32768, 32))]
