"""Lesson 06, Triton track: SwiGLU from one pass over x, y = silu(x · W_gᵀ) ⊙ (x · W_uᵀ),
bf16 in and out, fp32 accumulation.

x is (M, K) and w is (2N, K), both row-major: the gate and up weights interleaved in blocks
of 8 rows as swiglu_ops.cu lays them out (w rows 16b .. 16b + 7 are W_g's rows 8b .. 8b + 7,
the next 8 W_u's; a last block of r = N % 8 columns has r gate rows then r up rows). y is
(M, N) row-major.

The loop is the persistent nt loop of linear_triton.py (lesson 05's matmul_persistent),
flattened as there: one program per SM walks its (BM, BN) tiles of y in grouped order and
each tile's steps of BK as one loop, so the next tile's first copies are in flight during
this tile's epilogue. Where the CUDA version reads the interleaved rows as one 2·BN-wide
operand and finds a column's gate and up values one n8 block apart in the same thread's
registers, here the operand is one (BK, 2·BN) tile too, in the order [gate rows | up rows]:
accumulator column c < BN names output column n0 + c's gate row of w, column BN + c its up
row (the formulas of swiglu_ops.cu). One (BM, 2·BN) fp32 accumulator and one tl.dot a step:
with two (BM, BN) accumulators and two tl.dot, as until late on 2026-11-26, the flattened
loop's wgmma were serialized by ptxas (warning C7515). The epilogue splits the accumulator
into its gate and up halves (the same thread holds column c and c + BN, so the split moves
no data), takes silu of the gate half and multiplies by the up half, in fp32, and rounds
once, in the one store: neither g nor u goes to memory. silu(g) = 0.5 g (1 + tanh(g / 2)),
one tanh.approx (klab_tl.tanh_approx), as linear_triton.py's SiLU.

Any shape works: a column past N reads column N - 1's rows (its results are never stored), a
row of x past M reads row M - 1, and every step masks K (with K hinted divisible by 16 the
loads stay 16-byte cp.async copies). K = 0 runs one step of masked zeros and stores
silu(0) · 0 = 0.

Ahead-of-time builds (the AOT list at the bottom): the tile configurations of CONFIGS linked
into one launcher, tr_swiglu (algo_id in CONFIGS order), each compiled with M, N, K and the
leading dimensions hinted divisible by 16 and without; swiglu_triton_impl.cu times every
configuration on the first call for a shape and caches the fastest.
"""
import triton
import triton.language as tl

from klab_tl import grouped_tile, tanh_approx


@triton.jit
def swiglu_kernel(x_ptr, w_ptr, y_ptr, M, N, K, ldx, ldw, ldy,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # Persistent and flattened, as linear_triton.py: one loop over (tile, K step) pairs.
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    tiles = grid_m * grid_n
    per_group = GROUP_M * grid_n
    im = tl.arange(0, BM)                               # (BM,)
    cc = tl.arange(0, 2 * BN)                           # (2BN,): gate columns, then up columns
    rk = tl.arange(0, BK)                               # (BK,)
    k_steps = tl.maximum(tl.cdiv(K, BK), 1)             # K = 0: one masked step of zeros
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    # The loop-carried state of the current tile, set on its first step.
    t = pid - progs
    ks = -1                                             # this step's index in its tile
    m0 = 0
    n0 = 0
    x_tile = x_ptr
    w_tile = w_ptr
    x_off = im[:, None] * ldx + rk[None, :]
    w_off = cc[None, :] * ldw + rk[:, None]
    acc = tl.zeros((BM, 2 * BN), dtype=tl.float32)
    for _ in range(0, (tiles - pid + progs - 1) // progs * k_steps):
        ks = tl.where(ks == k_steps - 1, 0, ks + 1)
        if ks == 0:                                     # a new tile: its origin and offsets
            t += progs
            tile_m, tile_n = grouped_tile(t, grid_m, per_group, GROUP_M)
            m0 = tile_m * BM
            n0 = tile_n * BN
            # Accumulator column c < BN is output column n0 + c's gate, c >= BN its up
            # (n0 + c - BN): w row 16 (n / 8) + n % 8, the up row that plus the width of its
            # block of 8 (8, or N % 8 for a narrower last block). Counted from the tile's first
            # gate row, 2 n0: 32-bit offsets inside the tile (2 BN rows at most).
            n = tl.minimum(n0 + cc % BN, N - 1)         # (2BN,)
            gate = 16 * (n // 8) + n % 8
            row = tl.where(cc < BN, gate, gate + tl.minimum(8, N - 8 * (n // 8)))
            w_tile = w_ptr + (2 * n0).to(tl.int64) * ldw
            w_off = (row - 2 * n0)[None, :] * ldw + rk[:, None]              # (BK, 2BN): [W_g | W_u]ᵀ
            x_tile = x_ptr + m0.to(tl.int64) * ldx
            x_off = tl.minimum(im, M - 1 - m0)[:, None] * ldx + rk[None, :]  # (BM, BK)
        k0 = ks * BK
        x = tl.load(x_tile + k0 + x_off, mask=(k0 + rk)[None, :] < K, other=0.0)
        w = tl.load(w_tile + k0 + w_off, mask=(k0 + rk)[:, None] < K, other=0.0)
        acc = tl.dot(x, w, acc)
        if ks == k_steps - 1:                           # the tile's last step: its epilogue
            # The gate and up halves of the one accumulator (column c and c + BN are held by
            # the same thread in the MMA layout, so the split moves no data), silu(g) · u in
            # fp32, one rounding.
            g, u = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN)), (0, 2, 1)))
            hg = 0.5 * g
            y = (hg + hg * tanh_approx(hg)) * u
            rm = m0 + im
            rn = n0 + tl.arange(0, BN)
            y_ptrs = y_ptr + rm.to(tl.int64)[:, None] * ldy + rn[None, :]
            tl.store(y_ptrs, y.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))
            acc = tl.zeros((BM, 2 * BN), dtype=tl.float32)   # the next tile starts from zero


# (BM, BN, BK, GROUP_M, num_warps, num_stages). A stage holds x's (BM, BK) tile and the
# (BK, 2 BN) tile of w: (BM + 2 BN) x BK x 2 bytes, 48 KB for 128x128x64; the 4-stage one
# (192 KB) is a candidate on Hopper only (swiglu_triton_impl.cu filters by the device's shared
# memory; on sm_90 the epilogue's conversion buffer comes on top, 224 KB in all, which still
# fits the 227 KB). The (BM, 2 BN) accumulator of 128x128 takes 128 registers a thread over
# 8 warps.
CONFIGS = [
    (128, 128, 64, 8, 8, 3),
    (128, 128, 64, 8, 8, 4),
    (64, 128, 64, 8, 4, 4),
]


def _aot():
    out = []
    for bm, bn, bk, gm, warps, stages in CONFIGS:
        # klab_triton_sm_grid(tiles) = min(tiles, SMs) (klab/src/triton.cpp): one program an SM
        grid = f"klab_triton_sm_grid(((M + {bm - 1}) / {bm}) * ((N + {bn - 1}) / {bn})), 1, 1"
        for hint in (":16", ""):
            out.append(dict(
                name="tr_swiglu", kernel="swiglu_kernel",
                signature=(f"*bf16:16, *bf16:16, *bf16:16, i32{hint}, i32{hint}, i32{hint}, "
                           f"i32{hint}, i32{hint}, i32{hint}, {bm}, {bn}, {bk}, {gm}"),
                grid=grid, num_warps=warps, num_stages=stages))
    return out


# What the build compiles. Grids are C expressions over the non-constexpr arguments.
AOT = _aot()
