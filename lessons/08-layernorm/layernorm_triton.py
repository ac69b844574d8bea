"""Lesson 08, Triton track: the layernorm forward, one program a row.

The program loads its row as one BLOCK-wide block (masked past cols, the masked lanes 0),
takes the mean and then the variance of the centred values in fp32 (two passes over the
block, which lives in registers: one read of memory, as v2_block_registers), and writes
y = (x - mean) * rstd * gamma + beta, mean and rstd. BLOCK is a power of two at or above
cols: the build compiles 1024, 4096, 16384 and 32768 (4, 8, 16 and 32 warps), and the
launcher takes the smallest that holds the row, so rows up to 32,768 elements.

Compiled ahead of time by tools/triton_aot.py into layernorm_triton.c/.h (the AOT list at
the bottom); layernorm.cu (run_triton) registers the launcher as the `triton` impl of
layernorm.
"""
import triton
import triton.language as tl


@triton.jit
def layernorm_fwd_kernel(x_ptr, gamma_ptr, beta_ptr, y_ptr, mean_ptr, rstd_ptr, rows, cols, eps,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)                  # 64-bit before the multiply
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(mask, x - mean, 0.0)                    # the masked lanes add nothing
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / cols + eps)
    g = tl.load(gamma_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(beta_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + offs, (d * rstd * g + b).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


# One program a row; rows in the grid's x dimension (the launcher checks they fit). Each
# entry comes twice under one name, the first with cols hinted divisible by 16 (i32:16),
# which the linked launcher takes when cols % 16 == 0: every row then starts 16-element
# aligned and its masks are constant over 16-byte runs, so the loads and stores vectorise.
# Without the hint Triton cannot prove either, and every access was one element (the first
# run measured the bf16 kernel at 41-57% of copy).
AOT = [dict(name=f"tr_layernorm_{dt}_{block}", kernel="layernorm_fwd_kernel",
            signature=f"*{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *fp32:16, *fp32:16, i32, {cols}, fp32, {block}",
            grid="rows, 1, 1", num_warps=warps, num_stages=1)
       for dt, ty in (("f32", "fp32"), ("bf16", "bf16"))
       for block, warps in ((1024, 4), (4096, 8), (16384, 16), (32768, 32))
       for cols in ("i32:16", "i32")]
