"""Lesson 04, Triton track: row softmax (fp32 and bf16, plain and causal).

Two kernels, one program per row:

  softmax_row_kernel   the whole row in one BLOCK-wide tile (cols <= BLOCK): one read, one
                       write, the max and the sum are `tl.max` / `tl.sum` over the tile.
                       This is v2_fused/v3_online (softmax_multipass.cu, softmax_online.cu)
                       in Triton's words.
  softmax_loop_kernel  rows longer than any tile: a first sweep keeps a running (max, sum)
                       per lane (the online softmax, rescaling the sum whenever the max
                       grows), a second sweep re-reads the row and writes. Two reads.

Causal masking is a run-time argument: column j of row r is kept while j <= r + diag
(diag = cols - rows for the causal variant, diag = cols, which masks nothing, otherwise).
A row with no column kept writes zeros. Out-of-range lanes load -inf; masked columns are
either not loaded (XMASK = 1, fp32) or loaded and then set to -inf (XMASK = 0, bf16: a load
mask by the run-time limit stops vectorization, and bf16's 2-byte scalar loads were the
bf16 bottleneck).

The row offset is computed in 64 bits (program id widened first): rows * cols may pass 2^31.
Compiled ahead of time by tools/triton_aot.py (the AOT list at the bottom). Every config is
built twice, once with `cols` hinted divisible by 16: the linked dispatcher picks that one
when cols % 16 == 0, and Triton then knows each row starts 64-byte aligned and vectorizes.
"""
import triton
import triton.language as tl


@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, rows, cols, diag, BLOCK: tl.constexpr, XMASK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)                  # 64-bit before the multiply
    offs = tl.arange(0, BLOCK)                           # (BLOCK,)
    limit = tl.minimum(row + diag + 1, cols)             # columns [0, limit) are kept
    # XMASK = 0: the load is masked by `cols`, not by `limit`. Triton vectorizes a masked
    # load only when the mask is constant over a vector, which it can prove for `offs < cols`
    # (cols hinted divisible by 16) but not for the run-time `limit`; masked-off (causal)
    # columns are then loaded and replaced by -inf, as v3..v6 do. XMASK = 1: the load itself
    # is masked by `limit` (scalar loads, masked columns not read).
    if XMASK:
        x = tl.load(x_ptr + row * cols + offs, mask=offs < limit, other=-float("inf")).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=-float("inf")).to(tl.float32)
        x = tl.where(offs < limit, x, -float("inf"))
    m = tl.max(x, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)             # fully masked row: exp(-inf - 0) = 0
    e = tl.exp(x - m)
    d = tl.sum(e, axis=0)
    inv = tl.where(d > 0, 1.0 / d, 0.0)
    tl.store(y_ptr + row * cols + offs, (e * inv).to(y_ptr.dtype.element_ty), mask=offs < cols)


@triton.jit
def softmax_loop_kernel(x_ptr, y_ptr, rows, cols, diag, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    limit = tl.minimum(row + diag + 1, cols)
    base = row * cols
    # Sweep 1: per-lane running max and sum. When a lane's max grows from m to m', its sum
    # so far is rescaled by exp(m - m') so that it stays a sum of exp(x - current max).
    m_vec = tl.full((BLOCK,), -float("inf"), tl.float32)
    d_vec = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < cols, other=-float("inf")).to(tl.float32)
        x = tl.where(offs < limit, x, -float("inf"))    # vectorizable mask, as above
        m_new = tl.maximum(m_vec, x)
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        d_vec = d_vec * tl.exp(m_vec - safe) + tl.exp(x - safe)
        m_vec = m_new
    # Combine the lanes: the same rescaling, once, against the row max.
    m = tl.max(m_vec, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)
    d = tl.sum(d_vec * tl.exp(m_vec - m), axis=0)
    inv = tl.where(d > 0, 1.0 / d, 0.0)
    # Sweep 2: re-read and write.
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < cols, other=-float("inf")).to(tl.float32)
        x = tl.where(offs < limit, x, -float("inf"))
        y = tl.exp(x - m) * inv
        tl.store(y_ptr + base + offs, y.to(y_ptr.dtype.element_ty), mask=offs < cols)


# The configurations the first call for a shape times (softmax_triton.cu caches the fastest,
# klab::autotune; `--candidate` runs one). Row kernels: a tile that holds the row, by BLOCK,
# with its warp counts; the linked launcher tr_softmax_<dtype>_b<BLOCK> takes the warp count
# as algo_id, in this order. Loop kernels: (BLOCK, warps), one launcher tr_softmax_<dtype>_loop,
# algo_id in this order. The whole row of a row kernel lives in registers as fp32 (32768
# columns: 128 KB, half an SM's register file), so a 32768 tile runs one program per SM at any
# warp count; the loop kernel reads the row twice but holds one BLOCK at a time. Which wins
# is measured, not assumed: the README's sweep has every configuration at the bench shapes.
ROW_TILES = {1024: (4,), 4096: (8,), 8192: (16,), 16384: (16,), 32768: (32, 16)}
LOOP_CONFIGS = ((4096, 8), (8192, 16), (16384, 16), (2048, 4))


def _configs():
    out = []
    # XMASK per dtype, from the H100 measurements in the README's triton section: bf16 loads
    # vectors (masked by cols: a load masked by the run-time limit is not vectorized, and its
    # 2-byte scalar loads kept bf16 far from copy speed); fp32 keeps the per-element load mask
    # (at 4096 x 32768 its scalar loads ran faster than the vector loads; not profiled why).
    for ty, tag, xmask in (("fp32", "f32", 1), ("bf16", "bf16", 0)):
        kernels = [(f"b{block}", "softmax_row_kernel", block, warps)
                   for block, warp_counts in ROW_TILES.items() for warps in warp_counts]
        kernels += [("loop", "softmax_loop_kernel", block, warps) for block, warps in LOOP_CONFIGS]
        for suffix, kernel, block, warps in kernels:
            for cols_hint in ("i32:16", "i32"):        # aligned rows first, then any cols
                out.append(dict(
                    name=f"tr_softmax_{tag}_{suffix}", kernel=kernel,
                    signature=f"*{ty}:16, *{ty}:16, i32, {cols_hint}, i32, {block}"
                              + (f", {xmask}" if kernel == "softmax_row_kernel" else ""),
                    grid="rows, 1, 1", num_warps=warps, num_stages=1))
                if kernel == "softmax_row_kernel" and xmask:   # tests/triton_vectorised.py
                    out[-1]["scalar_loads"] = "XMASK = 1: the load masked by the causal limit, by choice"
    return out


# What the build compiles. Grids are C expressions over the non-constexpr arguments.
AOT = _configs()
