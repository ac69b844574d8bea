"""Lesson 04, Triton track: row softmax (fp32 and bf16, plain and causal).

Two kernels, one program per row:

  softmax_row_kernel   the whole row in one BLOCK-wide tile (cols <= BLOCK): one read, one
                       write, the max and the sum are `tl.max` / `tl.sum` over the tile.
                       This is v2_fused/v3_online (softmax_multipass.cu, softmax_online.cu)
                       in Triton's words.
  softmax_loop_kernel  rows longer than any tile: a first sweep keeps a running (max, sum)
                       per lane (the online softmax, rescaling the sum whenever the max
                       grows), a second sweep re-reads the row and writes. Two reads.
                       PREFETCH = 1: each step loads the next BLOCK before computing this
                       one, two BLOCKs in flight instead of one.

Both count their per-element instructions as v6_exp2 does: exps in base 2 on one MUFU.EX2,
no compare or select on a block that is whole and unmasked (the README's triton section
has the PTX counts before and after, and what each change measured).

Causal masking is a run-time argument: column j of row r is kept while j <= r + diag
(diag = cols - rows for the causal variant, diag = cols, which masks nothing, otherwise).
A row with no column kept writes zeros. Masked columns are either not loaded (XMASK = 1,
fp32) or loaded and then set to -inf (XMASK = 0, bf16: a load mask by the run-time limit
stops vectorization, and bf16's 2-byte scalar loads were the bf16 bottleneck).

The row offset is computed in 64 bits (program id widened first): rows * cols may pass 2^31.
Compiled ahead of time by tools/triton_aot.py (the AOT list at the bottom). Every config is
built twice, once with `cols` hinted divisible by 16: the linked dispatcher picks that one
when cols % 16 == 0, and Triton then knows each row starts 64-byte aligned and vectorizes.
"""
import triton
import triton.language as tl


LOG2E = tl.constexpr(1.4426950408889634)
FLT_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def _exp2(x):
    """2^x as one MUFU.EX2 (PTX ex2.approx.ftz.f32, as the CUDA v6_exp2 uses). tl.exp and
    tl.exp2 lower to ex2.approx.f32 without .ftz, and ptxas wraps that MUFU in a compare and
    two multiplies that rescale subnormal inputs and results (the README counts them)."""
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                     is_pure=True, pack=1)


@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, rows, cols, diag, BLOCK: tl.constexpr, XMASK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)                  # 64-bit before the multiply
    offs = tl.arange(0, BLOCK)                           # (BLOCK,)
    limit = tl.minimum(row + diag + 1, cols).to(tl.int32)   # columns [0, limit) are kept
    # XMASK = 0: the load is masked by `cols`, not by `limit`. Triton vectorizes a masked
    # load only when the mask is constant over a vector, which it can prove for `offs < cols`
    # (cols hinted divisible by 16) but not for the run-time `limit`. No `other`: lanes past
    # cols are left undefined and set to -inf below, with the causal mask, and only when the
    # row has such lanes (a block-uniform test), so a whole unmasked row pays no per-element
    # compare or select. XMASK = 1: the load itself is masked by `limit` (scalar loads,
    # masked columns not read).
    if XMASK:
        x = tl.load(x_ptr + row * cols + offs, mask=offs < limit, other=-float("inf")).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * cols + offs, mask=offs < cols).to(tl.float32)
        if limit < BLOCK:
            x = tl.where(offs < limit, x, -float("inf"))
    # Base 2: exp(x - m) = 2^((x - m) * log2e), one FADD, one FMUL and one MUFU.EX2 per
    # element. (x * log2e - m * log2e as one FFMA is what v6_exp2 does, but then the row max
    # gives 2^(rounding of m * log2e), not exactly 1; v6's scale cancels that, here the largest
    # output of a one-column row came out 1 + 1 ulp, past the [0, 1] a softmax promises.)
    m = tl.max(x, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)             # fully masked row: 2^(-inf - 0) = 0
    e = _exp2((x - m) * LOG2E)
    d = tl.sum(e, axis=0)
    inv = tl.where(d > 0, 1.0 / d, 0.0)
    tl.store(y_ptr + row * cols + offs, (e * inv).to(y_ptr.dtype.element_ty), mask=offs < cols)


@triton.jit
def _mask_past(x, offs, start, limit, BLOCK: tl.constexpr):
    """x (the fp32 block at columns offs = start + 0..BLOCK-1) with -inf at and past limit.
    The compare and select run only for a block that reaches limit."""
    if start + BLOCK > limit:
        x = tl.where(offs < limit, x, -float("inf"))
    return x


@triton.jit
def _load_block(x_ptr, base, start, cols, limit, BLOCK: tl.constexpr):
    """The BLOCK elements of the row from column start, as fp32; -inf at and past limit."""
    offs = start + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + base + offs, mask=offs < cols).to(tl.float32)
    return _mask_past(x, offs, start, limit, BLOCK)


@triton.jit
def softmax_loop_kernel(x_ptr, y_ptr, rows, cols, diag, BLOCK: tl.constexpr, PREFETCH: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    limit = tl.minimum(row + diag + 1, cols).to(tl.int32)
    base = row * cols
    # Sweep 1: per-lane running max m and sum d of 2^((x - m) * log2e). Either x or m is the
    # new max, so one exp per element covers both cases: e = 2^(-|x - m| * log2e) is the
    # smaller over the larger, and d becomes d * e + 1 (x is the new max) or d + e. The
    # running max starts at -FLT_MAX, not -inf, so x - m is never -inf - -inf (NaN): a
    # masked x (-inf) gives e = 0 and leaves d unchanged.
    m_vec = tl.full((BLOCK,), -FLT_MAX, tl.float32)
    d_vec = tl.zeros((BLOCK,), tl.float32)
    if PREFETCH:                                         # each step loads the next block
        x_next = tl.load(x_ptr + base + tl.arange(0, BLOCK), mask=tl.arange(0, BLOCK) < cols)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        if PREFETCH:                                     # this block was loaded last trip;
            x = x_next.to(tl.float32)                    # the next one starts loading now
            x_next = tl.load(x_ptr + base + offs + BLOCK, mask=offs + BLOCK < cols)
            x = _mask_past(x, offs, start, limit, BLOCK)
        else:
            x = _load_block(x_ptr, base, start, cols, limit, BLOCK)
        e = _exp2(-tl.abs(x - m_vec) * LOG2E)
        d_vec = tl.where(x > m_vec, d_vec * e + 1.0, d_vec + e)
        m_vec = tl.maximum(m_vec, x)
    # Combine the lanes: each lane's sum rescaled to the row max.
    m = tl.max(m_vec, axis=0)
    d = tl.sum(d_vec * _exp2((m_vec - m) * LOG2E), axis=0)
    inv = tl.where(d > 0, 1.0 / d, 0.0)
    m = tl.where(d > 0, m, 0.0)                         # nothing kept: every x is -inf, y = 0
    # Sweep 2: re-read and write.
    if PREFETCH:
        x_next = tl.load(x_ptr + base + tl.arange(0, BLOCK), mask=tl.arange(0, BLOCK) < cols)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        if PREFETCH:
            x = x_next.to(tl.float32)
            x_next = tl.load(x_ptr + base + offs + BLOCK, mask=offs + BLOCK < cols)
            x = _mask_past(x, offs, start, limit, BLOCK)
        else:
            x = _load_block(x_ptr, base, start, cols, limit, BLOCK)
        # (x - m) * log2e, not x * log2e - m * log2e: d above was summed from exact differences
        # to m, and the rounding of m * log2e (large for large |m|) would not cancel.
        y = _exp2((x - m) * LOG2E) * inv
        tl.store(y_ptr + base + offs, y.to(y_ptr.dtype.element_ty), mask=offs < cols)


# The configurations the first call for a shape times (softmax_triton.cu caches the fastest,
# klab::autotune; `--candidate` runs one). Row kernels: a tile that holds the row, by BLOCK,
# with its warp counts; the linked launcher tr_softmax_<dtype>_b<BLOCK> takes the warp count
# as algo_id, in this order. Loop kernels: (BLOCK, warps, PREFETCH), one launcher
# tr_softmax_<dtype>_loop, algo_id in this order. The whole row of a row kernel lives in
# registers as fp32 (32768 columns: 128 KB, half an SM's register file), so a 32768 tile runs
# one program per SM at any warp count; the loop kernel reads the row twice but holds one
# BLOCK (two with PREFETCH) at a time. Which wins is measured, not assumed: the README's sweep
# has every configuration at the bench shapes.
ROW_TILES = {1024: (4,), 4096: (8,), 8192: (16,), 16384: (16,), 32768: (32, 16)}
LOOP_CONFIGS = ((4096, 8, 0), (8192, 16, 0), (16384, 16, 0), (2048, 4, 0),
                (4096, 8, 1), (8192, 16, 1), (2048, 4, 1))


def _configs():
    out = []
    # XMASK per dtype, from the H100 measurements in the README's triton section: bf16 loads
    # vectors (masked by cols: a load masked by the run-time limit is not vectorized, and its
    # 2-byte scalar loads kept bf16 far from copy speed); fp32 keeps the per-element load mask
    # (at 4096 x 32768 its scalar loads ran faster than the vector loads; not profiled why).
    for ty, tag, xmask in (("fp32", "f32", 1), ("bf16", "bf16", 0)):
        kernels = [(f"b{block}", "softmax_row_kernel", f"{block}, {xmask}", warps)
                   for block, warp_counts in ROW_TILES.items() for warps in warp_counts]
        kernels += [("loop", "softmax_loop_kernel", f"{block}, {prefetch}", warps)
                    for block, warps, prefetch in LOOP_CONFIGS]
        for suffix, kernel, consts, warps in kernels:
            for cols_hint in ("i32:16", "i32"):        # aligned rows first, then any cols
                out.append(dict(
                    name=f"tr_softmax_{tag}_{suffix}", kernel=kernel,
                    signature=f"*{ty}:16, *{ty}:16, i32, {cols_hint}, i32, {consts}",
                    grid="rows, 1, 1", num_warps=warps, num_stages=1))
                if kernel == "softmax_row_kernel" and xmask:   # tests/triton_vectorised.py
                    out[-1]["scalar_loads"] = "XMASK = 1: the load masked by the causal limit, by choice"
    return out


# What the build compiles. Grids are C expressions over the non-constexpr arguments.
AOT = _configs()
