"""Lesson 06, Triton track: a linear layer with its bias and activation fused,
y = act(x · Wᵀ + b), bf16 in and out, fp32 accumulation.

x is (M, K) and W is (N, K), both row-major, so both operands are K-contiguous: lesson 05's
"nt" layout, the layout of every linear layer. b is (N), y is (M, N) row-major. The
activation is a constexpr, ACT: 0 none (bias only), 1 ReLU, 2 GELU (tanh form), 3 SiLU,
so each activation is a kernel of its own with no branch on it at run time.

The main loop is lesson 05's matmul_persistent on its nt path, flattened: one program per
SM walks its (BM, BN) tiles of x · Wᵀ and each tile's steps of BK as ONE loop, accumulating
tl.dot in fp32 (wgmma on Hopper, the loads pipelined over num_stages buffers), its addresses
a scalar base per tile and 32-bit offsets that no step changes. One loop instead of a tile
loop around a K loop is what lets Triton's pipeliner issue the next tile's first copies
before this tile's epilogue, as the CUDA version's producer warp does: nested, every tile
began with an empty pipeline (the README has what the change measured). The fusion is all in the epilogue: the bias is
added to the fp32 accumulator tile, the activation is applied to it in fp32, and the tile is
rounded to bf16 once, in the one store. The pre-activation x · Wᵀ + b never goes to memory:
unfused, the GEMM writes it and a second kernel reads it back (4·M·N bytes in bf16, and a
second rounding), a second launch for work that costs a few instructions an element.

Any shape works, with lesson 05's masks: a row of x (of W) past M (N) reads row M - 1 (N - 1)
instead, so the loads need no mask along M or N; every step masks K (the flattened loop has
no separate tail step), which with K hinted divisible by 16 keeps each load 16-byte cp.async
copies (tools/triton_ptx.py). K = 0 runs one step of masked zeros and stores act(b).
The bias is loaded once per tile, after the loop (not held in registers across it), masked
at N: one (BN,) row, one 2-byte element per thread (BN = the program's thread count in every
configuration of CONFIGS), a coalesced 2·BN bytes against the (BM + BN)·K·2 of the loop, and
the one load of the kernel that is not 16 bytes wide (the `scalar_loads` key of the hinted
entries says so for tests/triton_vectorised.py).

The tiles are taken in grouped order (GROUP_M rows of tiles at a time, column by column), as
in lesson 05. (Until 2026-11-26 each program computed one tile, with lesson 05's
matmul_kernel as its loop; lesson 06's README has what the change measured.)

Ahead-of-time builds (the AOT list at the bottom): for each activation, the tile
configurations of CONFIGS, linked into one launcher per activation (tr_linear_bias,
tr_linear_relu, tr_linear_gelu, tr_linear_silu; algo_id in CONFIGS order). Each
configuration is compiled twice, with M, N, K and the leading dimensions hinted divisible by
16 and without (any shape), as in lesson 05: only the hinted one loads 16 bytes at once
(cp.async) and pipelines its loop. linear_triton_impl.cu times every configuration on the
first call for a shape and caches the fastest.
"""
import triton
import triton.language as tl

from klab_tl import grouped_tile, tanh_approx


@triton.jit
def linear_bias_act_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, ldx, ldw, ldy,
                           ACT: tl.constexpr,
                           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # Persistent, as lesson 05's matmul_persistent: one program per SM (the grid is
    # min(tiles, SMs)), walking the tiles t, t + grid, ... in grouped order; flattened: one
    # loop over (tile, k-step) pairs, a new tile's addresses set up on its first step (ks == 0)
    # and its epilogue run on its last.
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    tiles = grid_m * grid_n
    per_group = GROUP_M * grid_n
    im = tl.arange(0, BM)                               # (BM,)
    jn = tl.arange(0, BN)                               # (BN,)
    rk = tl.arange(0, BK)                               # (BK,)
    k_steps = tl.maximum(tl.cdiv(K, BK), 1)             # K = 0: one masked step of zeros
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    my_tiles = (tiles - pid + progs - 1) // progs       # tiles pid, pid + progs, ...
    # The loop-carried state of the current tile, set on its first step.
    t = pid - progs
    ks = -1                                             # this step's index in its tile
    m0 = 0
    n0 = 0
    x_tile = x_ptr
    w_tile = w_ptr
    x_off = im[:, None] * ldx + rk[None, :]
    w_off = jn[None, :] * ldw + rk[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, my_tiles * k_steps):
        ks = tl.where(ks == k_steps - 1, 0, ks + 1)
        if ks == 0:                                     # a new tile: its origin and offsets
            t += progs
            tile_m, tile_n = grouped_tile(t, grid_m, per_group, GROUP_M)
            m0 = tile_m * BM
            n0 = tile_n * BN
            # A scalar 64-bit base per operand and tile, and 32-bit offsets inside the tile
            # that no k-step changes (the launcher offers this kernel where they fit: every
            # dimension under 2^23). A row of x (of W) past M (N) loads row M - 1 (N - 1)
            # instead of a masked zero: its products land only in rows (columns) of y that are
            # never stored. Both operands are K-contiguous, so the clamp is on rows only and
            # never breaks a 16-byte vector along K.
            x_tile = x_ptr + m0.to(tl.int64) * ldx
            w_tile = w_ptr + n0.to(tl.int64) * ldw
            x_off = tl.minimum(im, M - 1 - m0)[:, None] * ldx + rk[None, :]     # (BM, BK)
            w_off = tl.minimum(jn, N - 1 - n0)[None, :] * ldw + rk[:, None]     # (BK, BN)
        k0 = ks * BK
        x = tl.load(x_tile + k0 + x_off, mask=(k0 + rk)[None, :] < K, other=0.0)
        w = tl.load(w_tile + k0 + w_off, mask=(k0 + rk)[:, None] < K, other=0.0)
        acc = tl.dot(x, w, acc)
        if ks == k_steps - 1:                           # the tile's last step: its epilogue
            # The epilogue, on the fp32 tile still in registers: bias, activation, one rounding.
            # The bias is one (BN,) row for the whole tile, masked at N (a column past N is never
            # stored; the mask keeps the load inside b).
            rn = n0 + jn
            bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
            v = acc + bias[None, :]
            # GELU is 0.5 v (1 + tanh(u)) with u = sqrt(2/pi) (v + 0.044715 v^3), SiLU
            # v · sigmoid(v) = 0.5 v (1 + tanh(v / 2)): one tanh.approx each (klab_tl.tanh_approx,
            # one MUFU.TANH), as the CUDA epilogue (fusion.cuh's activate). tanh's error, about 2^-11 relative, moves
            # the result by at most about 2^-12 |v|, far inside the tolerance. Until 2026-11-26 both
            # were v / (1 + 2^(-s log2 e)), an ex2.approx and a division (two MUFU and the division's
            # fix-ups): on the H100 that GELU epilogue cost 12.8 µs over ReLU at 8192 x 3072 x 768,
            # the CUDA one 4.4. libdevice's tanh, tried before that, branched per element and
            # spilled (tools/triton_ptx.py --sass).
            if ACT == 1:
                v = tl.maximum(v, 0.0)
            elif ACT == 2:
                hv = 0.5 * v
                v = hv + hv * tanh_approx(v * (0.7978845608028654 + 0.035677408136300125 * v * v))
            elif ACT == 3:
                hv = 0.5 * v
                v = hv + hv * tanh_approx(hv)

            rm = m0 + im
            y_ptrs = y_ptr + rm.to(tl.int64)[:, None] * ldy + rn[None, :]
            tl.store(y_ptrs, v.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))
            acc = tl.zeros((BM, BN), dtype=tl.float32)  # the next tile starts from zero


# (BM, BN, BK, GROUP_M, num_warps, num_stages): the space the first call searches, from lesson
# 05's nt sweep: its two fastest 128x256 tiles for large outputs, and two smaller tiles that
# give shapes with few 128x256 tiles more programs to fill the SMs with. Each is compiled
# 2 hints x 2 archs x 4 activations times, so the list stays short. The third holds a fourth
# stage of 48 KB (192 KB of shared memory a block), on Hopper's 227 KB only: a configuration
# whose stages do not fit the device's shared memory (stages x (BM + BN) x BK x 2 bytes) is no
# candidate there (linear_triton_impl.cu), so an Ampere GPU (164 KB) runs the other three.
# On sm_90 the flattened loop keeps its stages while the epilogue converts the tile for the
# store, so each kernel takes that buffer on top (tools/triton_ptx.py: 176 KB and 224 KB for
# the two 128x256 configurations); both still fit the 227 KB.
CONFIGS = [
    (128, 256, 64, 8, 8, 3),
    (128, 128, 64, 8, 4, 4),
    (128, 256, 64, 8, 8, 4),
    (64, 128, 64, 8, 4, 4),
]
# The launcher of each activation and its ACT constexpr.
ACTS = {"bias": 0, "relu": 1, "gelu": 2, "silu": 3}


def _aot():
    out = []
    for act, code in ACTS.items():
        for bm, bn, bk, gm, warps, stages in CONFIGS:
            # klab_triton_sm_grid(tiles) = min(tiles, SMs) (klab/src/triton.cpp): one program an SM
            grid = f"klab_triton_sm_grid(((M + {bm - 1}) / {bm}) * ((N + {bn - 1}) / {bn})), 1, 1"
            for hint in (":16", ""):
                out.append(dict(
                    name=f"tr_linear_{act}", kernel="linear_bias_act_kernel",
                    signature=(f"*bf16:16, *bf16:16, *bf16:16, *bf16:16, i32{hint}, i32{hint}, i32{hint}, "
                               f"i32{hint}, i32{hint}, i32{hint}, {code}, {bm}, {bn}, {bk}, {gm}"),
                    grid=grid, num_warps=warps, num_stages=stages))
                if hint:
                    out[-1]["scalar_loads"] = (1, "the bias row: BN elements over BN threads, one each, once per tile")
    return out


# What the build compiles. Grids are C expressions over the non-constexpr arguments.
AOT = _aot()
