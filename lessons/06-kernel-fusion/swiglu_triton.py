"""Lesson 06, Triton track: SwiGLU from one pass over x, y = silu(x · W_gᵀ) ⊙ (x · W_uᵀ),
bf16 in and out, fp32 accumulation.

x is (M, K) and w is (2N, K), both row-major: the gate and up weights interleaved in blocks
of 8 rows as swiglu_ops.cu lays them out (w rows 16b .. 16b + 7 are W_g's rows 8b .. 8b + 7,
the next 8 W_u's; a last block of r = N % 8 columns has r gate rows then r up rows). y is
(M, N) row-major.

The loop is the persistent nt loop of linear_triton.py (lesson 05's matmul_persistent): one
program per SM walks the (BM, BN) tiles of y in grouped order, each walking K in steps of BK.
Where the CUDA version reads the interleaved rows as one 2·BN-wide operand and finds a
column's gate and up values one n8 block apart in the same thread's registers, here each
output column n names its two rows of w directly (gate_row and up_row below, the formulas
of swiglu_ops.cu), and the loop keeps two (BM, BN) fp32 accumulators: tl.dot(x, W_gᵀ) and
tl.dot(x, W_uᵀ), the same MMAs as one 2·BN-wide product. The epilogue takes silu of the gate
tile and multiplies by the up tile, in fp32, and rounds once, in the one store: neither g nor
u goes to memory. silu(g) = 0.5 g (1 + tanh(g / 2)), one tanh.approx (klab_tl.tanh_approx), as
linear_triton.py's SiLU.

Any shape works: a column past N reads column N - 1's rows (its results are never stored), a
row of x past M reads row M - 1, the whole steps of K load with no mask and one last step
takes the rest under K's mask. K = 0 stores silu(0) · 0 = 0.

Ahead-of-time builds (the AOT list at the bottom): the tile configurations of CONFIGS linked
into one launcher, tr_swiglu (algo_id in CONFIGS order), each compiled with M, N, K and the
leading dimensions hinted divisible by 16 and without; swiglu_triton_impl.cu times every
configuration on the first call for a shape and caches the fastest.
"""
import triton
import triton.language as tl

from klab_tl import tanh_approx


@triton.jit
def swiglu_kernel(x_ptr, w_ptr, y_ptr, M, N, K, ldx, ldw, ldy,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    tiles = grid_m * grid_n
    per_group = GROUP_M * grid_n
    im = tl.arange(0, BM)                               # (BM,)
    jn = tl.arange(0, BN)                               # (BN,)
    rk = tl.arange(0, BK)                               # (BK,)
    k_full = tl.multiple_of(K - K % BK, BK)             # (a true hint: the tail loads vectorise)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0)):
        first_m = (t // per_group) * GROUP_M
        rows = tl.minimum(grid_m - first_m, GROUP_M)
        m0 = (first_m + (t % per_group) % rows) * BM
        n0 = ((t % per_group) // rows) * BN
        # Output column n's rows of w: gate 16 (n / 8) + n % 8, up that plus the width of
        # its block of 8 (8, or N % 8 for a narrower last block). Counted from the tile's
        # first gate row, 16 (n0 / 8): 32-bit offsets inside the tile (2 BN rows at most).
        n = tl.minimum(n0 + jn, N - 1)                  # (BN,)
        gate = 16 * (n // 8) + n % 8
        up = gate + tl.minimum(8, N - 8 * (n // 8))
        w_tile = w_ptr + (16 * (n0 // 8)).to(tl.int64) * ldw
        g_off = (gate - 16 * (n0 // 8))[None, :] * ldw + rk[:, None]         # (BK, BN): W_gᵀ's tile
        u_off = (up - 16 * (n0 // 8))[None, :] * ldw + rk[:, None]           # (BK, BN): W_uᵀ's tile
        x_tile = x_ptr + m0.to(tl.int64) * ldx
        x_off = tl.minimum(im, M - 1 - m0)[:, None] * ldx + rk[None, :]     # (BM, BK)
        acc_g = tl.zeros((BM, BN), dtype=tl.float32)
        acc_u = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, k_full, BK):
            x = tl.load(x_tile + k0 + x_off)
            acc_g = tl.dot(x, tl.load(w_tile + k0 + g_off), acc_g)
            acc_u = tl.dot(x, tl.load(w_tile + k0 + u_off), acc_u)
        if k_full < K:
            x = tl.load(x_tile + k_full + x_off, mask=(k_full + rk)[None, :] < K, other=0.0)
            k_in = (k_full + rk)[:, None] < K
            acc_g = tl.dot(x, tl.load(w_tile + k_full + g_off, mask=k_in, other=0.0), acc_g)
            acc_u = tl.dot(x, tl.load(w_tile + k_full + u_off, mask=k_in, other=0.0), acc_u)
        # The epilogue on the two fp32 tiles: silu(g) · u, one rounding.
        hg = 0.5 * acc_g
        y = (hg + hg * tanh_approx(hg)) * acc_u
        rm = m0 + im
        rn = n0 + jn
        y_ptrs = y_ptr + rm.to(tl.int64)[:, None] * ldy + rn[None, :]
        tl.store(y_ptrs, y.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


# (BM, BN, BK, GROUP_M, num_warps, num_stages). A stage holds x's (BM, BK) tile and two
# (BK, BN) tiles of w: (BM + 2 BN) x BK x 2 bytes, 48 KB for 128x128x64; the 4-stage one
# (192 KB) is a candidate on Hopper only (swiglu_triton_impl.cu filters by the device's shared
# memory). The two (BM, BN) accumulators of 128x128 take 128 registers a thread over 8 warps.
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
