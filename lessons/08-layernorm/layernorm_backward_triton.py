"""Lesson 08, Triton track: the layernorm backward, dx and the partial column sums in one
pass, then the column sums.

layernorm_bwd_kernel: each program takes a run of rows_per_prog consecutive rows, one row
at a time as one BLOCK-wide block (masked past cols): dx = rstd (g - c1 - xhat c2) from the
row's two sums (g = dy gamma, c1 = mean(g), c2 = mean(g xhat)), written at once, while
dgamma's and dbeta's terms (dy xhat, dy) add up in two BLOCK-wide fp32 accumulators that
stay in registers across the run; at the end the program writes them as its partial row.
x and dy are read once, as by the CUDA v2_fused_partials.

layernorm_bwd_sums_kernel: dgamma[c] and dbeta[c] as the sums of the programs' partial rows,
a (128, 32) tile of partials at a time, 32 columns a program, always in the same order: the
same bits every run (no atomics).

Compiled ahead of time by tools/triton_aot.py into layernorm_backward_triton.c/.h (the AOT
list at the bottom); layernorm_backward_triton.cu registers the launcher as the `triton`
impl of layernorm_backward.
"""
import triton
import triton.language as tl


@triton.jit
def layernorm_bwd_kernel(x_ptr, gamma_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, part_dg_ptr, part_db_ptr,
                         rows, cols, rows_per_prog, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)                  # 64-bit before the multiplies
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    gamma = tl.load(gamma_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dg = tl.zeros((BLOCK,), tl.float32)
    db = tl.zeros((BLOCK,), tl.float32)
    first = pid * rows_per_prog
    for row in range(first, tl.minimum(first + rows_per_prog, rows)):
        x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)    # the masked lanes add nothing
        g = dy * gamma
        c1 = tl.sum(g, axis=0) / cols
        c2 = tl.sum(g * xhat, axis=0) / cols
        dx = rstd * (g - c1 - xhat * c2)
        tl.store(dx_ptr + row * cols + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dg += dy * xhat
        db += dy
    tl.store(part_dg_ptr + pid * cols + offs, dg, mask=mask)
    tl.store(part_db_ptr + pid * cols + offs, db, mask=mask)


@triton.jit
def layernorm_bwd_sums_kernel(part_dg_ptr, part_db_ptr, dgamma_ptr, dbeta_ptr, parts, cols,
                              BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    c = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = c < cols
    acc_g = tl.zeros((BLOCK_P, BLOCK_N), tl.float32)
    acc_b = tl.zeros((BLOCK_P, BLOCK_N), tl.float32)
    for p0 in range(0, parts, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        m = (p[:, None] < parts) & cmask[None, :]
        at = p[:, None].to(tl.int64) * cols + c[None, :]
        acc_g += tl.load(part_dg_ptr + at, mask=m, other=0.0)
        acc_b += tl.load(part_db_ptr + at, mask=m, other=0.0)
    tl.store(dgamma_ptr + c, tl.sum(acc_g, axis=0), mask=cmask)   # no parts (no rows): 0
    tl.store(dbeta_ptr + c, tl.sum(acc_b, axis=0), mask=cmask)


# The row pass: one BLOCK-wide row at a time, 8 to 16 elements a thread (1024 with 4 warps,
# 4096 with 8, 16384 with 32), so that x, dy, gamma and the two accumulators fit in
# registers. Each entry comes twice under one name, the first with cols hinted divisible by
# 16 (i32:16), which the linked launcher takes when cols % 16 == 0: the rows then start
# aligned and their masks are constant over 16-byte runs, and the accesses vectorise.
AOT = [dict(name=f"tr_layernorm_bwd_{dt}_{block}", kernel="layernorm_bwd_kernel",
            signature=f"*{ty}:16, *{ty}:16, *{ty}:16, *fp32:16, *fp32:16, *{ty}:16, *fp32:16, *fp32:16, "
                      f"i32, {cols}, i32, {block}",
            grid="(rows + rows_per_prog - 1) / rows_per_prog, 1, 1", num_warps=warps, num_stages=1,
            scalar_loads=(2, "a row's mean and rstd: one fp32 each"))
       for dt, ty in (("f32", "fp32"), ("bf16", "bf16"))
       for block, warps in ((1024, 4), (4096, 8), (16384, 32))
       for cols in ("i32:16", "i32")]
# The column sums: 32 columns a program, the partials 128 rows at a time, 8 warps. The
# programs are few (cols / 32: 24 at C = 768) and each reads every partial row of its
# columns, so each must keep many loads in flight: a (128, 32) tile is 16 floats a thread.
AOT += [dict(name="tr_layernorm_bwd_sums", kernel="layernorm_bwd_sums_kernel",
             signature=f"*fp32:16, *fp32:16, *fp32:16, *fp32:16, i32, {cols}, 128, 32",
             grid="(cols + 31) / 32, 1, 1", num_warps=8, num_stages=1)
        for cols in ("i32:16", "i32")]
