"""Lesson 08 exercise, Triton track: the layernorm forward, one program a row.

y = (x - mean) * rstd * gamma + beta over each row of x (rows, cols), with mean and rstd
(fp32, one a row) saved for the backward; f32 and bf16, computed in fp32. rstd is
1 / sqrt(var + eps) with the biased variance, var = sum((x - mean)^2) / cols, as PyTorch's
layer_norm. Each program takes one row as a BLOCK-wide block (BLOCK a power of two at or
above cols, the lanes past cols masked), so the row is read from memory once and both
passes over it (the mean, then the variance of the centred values) run on registers, as
`v2_block_registers` does. The C++ side (exercise_triton_launch.cu) passes rows, cols and
eps and picks BLOCK: 4096 for rows up to 4096 elements, 32768 up to 32,768. Fill in the
eight TODOs: the program's row and the block's columns, the load, the mean, the centred
values, rstd, the output, the saved statistics, and the launch grid below the kernel.

After an edit, grade it (the check compiles this file first, shows one line with the line
number if it does not compile, and rebuilds klab when it changed):

    klab check 08 --triton

which compares y, mean and rstd with the fp64 reference on unseen seeds, on the edge shapes
of `klab check 08` (one row, one column, odd and prime widths, 32,768 columns, and 65,537
rows of 32,768, whose flat index passes 2^31), f32 and bf16, then times your kernel against
the lesson's `triton` version. Until every TODO is done the check fails: the harness fills
the outputs with NaN before each launch.

Hints
  1. row = tl.program_id(0), widened first: .to(tl.int64). row * cols must not wrap:
     the check's 65,537 rows of 32,768 put row 65,536's first element at 2^31. The
     block's columns are tl.arange(0, BLOCK); those at or past cols are masked off.
  2. Load the row at x_ptr + row * cols + the columns, under the mask, with other=0.0,
     and compute in fp32: .to(tl.float32). The masked lanes then hold 0.
  3. The mean is tl.sum(x, axis=0) / cols: the masked lanes' zeros add nothing, and the
     divisor is the row's width, not BLOCK.
  4. The centred values x - mean are not 0 in the masked lanes (0 - mean is -mean), and
     their squares would add (BLOCK - cols) * mean^2 to the variance: tl.where(mask,
     x - mean, 0.0) keeps them out. The check's rows have means up to 2 in size, so a
     variance that forgot it is far off.
  5. var = tl.sum(d * d, axis=0) / cols, divided by cols (the biased variance, as
     PyTorch's), not cols - 1; rstd = 1.0 / tl.sqrt(var + eps).
  6. gamma and beta are per column: load them at gamma_ptr + the columns (masked, as fp32).
     y = d * rstd * gamma + beta, stored at the row's addresses in y's type
     (y.to(y_ptr.dtype.element_ty)) under the mask.
  7. mean and rstd are one fp32 each a row: tl.store(mean_ptr + row, mean) and the same
     for rstd (a scalar store writes once for the whole program).
  8. GRID is a C expression over the kernel's non-constexpr arguments (rows, cols, eps):
     one program a row.
"""
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, gamma_ptr, beta_ptr, y_ptr, mean_ptr, rstd_ptr, rows, cols, eps, BLOCK: tl.constexpr):
    # TODO 1: this program's row, in 64 bits, the block's columns and which are inside the row (hint 1).
    row = 0
    offs = tl.arange(0, BLOCK)
    mask = offs < 0
    # end of TODO 1
    # TODO 2: load the row, masked lanes 0, as fp32 (hint 2).
    x = tl.zeros((BLOCK,), tl.float32)
    # end of TODO 2
    # TODO 3: the row's mean (hint 3).
    mean = 0.0
    # end of TODO 3
    # TODO 4: the centred values, 0 in the masked lanes (hint 4).
    d = tl.zeros((BLOCK,), tl.float32)
    # end of TODO 4
    # TODO 5: rstd from the biased variance and eps (hint 5).
    rstd = 1.0
    # end of TODO 5
    # TODO 6: y = d * rstd * gamma + beta, stored in y's type under the mask (hint 6).
    # end of TODO 6
    # TODO 7: the row's mean and rstd, saved for the backward (hint 7).
    # end of TODO 7


# The launch grid, a C expression over the kernel's non-constexpr arguments (rows, cols, eps).
# TODO 8: one program a row (hint 8).
GRID = "1, 1, 1"
# end of TODO 8

# What the build compiles, f32 and bf16: BLOCK 4096 with eight warps (rows up to 4096
# elements: 16 a thread) and 32768 with 32 warps (up to 32,768: 32 a thread).
AOT = [dict(name=f"tr_ex_layernorm_{dt}_{block}", kernel="layernorm_kernel",
            signature=f"*{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *fp32:16, *fp32:16, i32, i32, fp32, {block}",
            grid=GRID, num_warps=warps, num_stages=1)
       for dt, ty in (("f32", "fp32"), ("bf16", "bf16"))
       for block, warps in ((4096, 8), (32768, 32))]
