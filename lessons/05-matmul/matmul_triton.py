"""Lesson 05, Triton track: bf16 matmul with fp32 accumulation, C = A · B.

Each program computes one (BM, BN) tile of C: it walks K in steps of BK, loads a (BM, BK)
tile of A and a (BK, BN) tile of B, and accumulates tl.dot(a, b) in fp32 — on Hopper,
Triton lowers tl.dot to wgmma and pipelines the loads over num_stages buffers, which the
CUDA versions do by hand. Any shape works, with masks only where one can be false: a row
of A (column of B) past M (N) reads row M - 1 (column N - 1) instead where K is the
operand's contiguous dimension, and keeps a mask that does not change from step to step
where it is not; the whole steps of K load with no K mask, and one last step takes the
rest of K under its mask.

Programs are numbered in grouped order (GROUP_M rows of tiles at a time, column by column)
so that tiles running at the same time share their A rows and B columns in L2 — the same
order as the CUDA v11_mma_pipelined.

Layouts: A_KMAJ / B_KMAJ say whether A and B are stored with K contiguous ("nn": A yes,
B no; "tn": neither; "nt": both), as constexprs, so the unit stride is known at compile
time and the loads vectorise.

Ahead-of-time builds (the AOT list at the bottom): for each layout, the tile
configurations of CONFIGS, linked into one launcher per layout (tr_matmul_nn etc., algo_id
in CONFIGS order).
Each configuration is compiled twice: with M, N, K and the leading dimensions hinted
divisible by 16, and without (any shape); the linked launcher picks the hinted one when
the arguments allow it. The sizes matter as much as the strides: the masks compare
indices with M, N and K, and only when Triton knows a mask is constant over 8 bf16
elements does it load 16 bytes at once (cp.async) and pipeline the loop over num_stages
buffers. With the strides alone hinted it loaded one 2-byte element per instruction and
kept one stage (tools/triton_ptx.py shows both: 96 ld.global.b16 and 48 KB of shared
memory for 128x256x64 against 36 cp.async of 16 bytes and 144 KB). matmul_triton_impl.cu times every configuration on
the first call for a shape and caches the fastest, like the CUDA v8_autotuned.
"""
import triton
import triton.language as tl

from klab_tl import grouped_tile


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc,
                  A_KMAJ: tl.constexpr, B_KMAJ: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    per_group = GROUP_M * grid_n
    pid_m, pid_n = grouped_tile(pid, grid_m, per_group, GROUP_M)

    rm = pid_m * BM + tl.arange(0, BM)                  # (BM,)
    rn = pid_n * BN + tl.arange(0, BN)                  # (BN,)
    rk = tl.arange(0, BK)                               # (BK,)
    # A row (column of B) past M (N) loads row M - 1 (column N - 1) instead of a masked zero:
    # its products land only in rows (columns) of C that are never stored, and the load
    # needs no mask. Only the dimension that is not contiguous in memory is clamped: a
    # clamped index inside a 16-byte vector would break the vector.
    m_in = rm[:, None] < M                              # (BM, 1)  loop-invariant masks of the
    n_in = rn[None, :] < N                              # (1, BN)  contiguous dimensions
    if A_KMAJ:
        rm_a = tl.minimum(rm, M - 1).to(tl.int64)       # row offsets may pass 2^31
        a_ptrs = a_ptr + rm_a[:, None] * lda + rk[None, :]          # (BM, BK)
        a_step = BK
    else:
        a_ptrs = a_ptr + rk[None, :].to(tl.int64) * lda + rm.to(tl.int64)[:, None]
        a_step = BK * lda
    if B_KMAJ:
        rn_b = tl.minimum(rn, N - 1).to(tl.int64)
        b_ptrs = b_ptr + rn_b[None, :] * ldb + rk[:, None]          # (BK, BN)
        b_step = BK
    else:
        b_ptrs = b_ptr + rk[:, None].to(tl.int64) * ldb + rn.to(tl.int64)[None, :]
        b_step = BK * ldb

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    # The whole steps of K with no mask on K (none at all in nt), then at most one partial
    # step under K's mask: the masks of the loop's loads no longer change from step to step.
    k_full = tl.multiple_of(K - K % BK, BK)             # (a true hint: the tail loads vectorise)
    for k0 in range(0, k_full, BK):
        if A_KMAJ:
            a = tl.load(a_ptrs)
        else:
            a = tl.load(a_ptrs, mask=m_in, other=0.0)
        if B_KMAJ:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=n_in, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += a_step
        b_ptrs += b_step
    if k_full < K:
        # The pointers again from the start, not carried out of the loop: what the compiler
        # knows of a loop-carried pointer (contiguity, alignment) does not survive the loop,
        # and the tail's loads would be scalar.
        rkt = k_full + rk                               # (BK,)
        k_in_a = rkt[None, :] < K                       # (1, BK)
        k_in_b = rkt[:, None] < K                       # (BK, 1)
        if A_KMAJ:
            a = tl.load(a_ptr + rm_a[:, None] * lda + rkt[None, :], mask=k_in_a, other=0.0)
        else:
            a = tl.load(a_ptr + rkt[None, :].to(tl.int64) * lda + rm.to(tl.int64)[:, None], mask=m_in & k_in_a,
                        other=0.0)
        if B_KMAJ:
            b = tl.load(b_ptr + rn_b[None, :] * ldb + rkt[:, None], mask=k_in_b, other=0.0)
        else:
            b = tl.load(b_ptr + rkt[:, None].to(tl.int64) * ldb + rn.to(tl.int64)[None, :], mask=k_in_b & n_in,
                        other=0.0)
        acc = tl.dot(a, b, acc)

    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    c_ptrs = c_ptr + rm64[:, None] * ldc + rn64[None, :]
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_persistent(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc,
                      A_KMAJ: tl.constexpr, B_KMAJ: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # One program per SM (the grid is min(tiles, SMs)), each walking the tiles t, t + grid, ...
    # in the same grouped order: no program waits for a block slot, and one program's next
    # tile starts loading while the SM's other warps finish the last one's stores.
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    tiles = grid_m * grid_n
    per_group = GROUP_M * grid_n
    im = tl.arange(0, BM)                               # (BM,)
    jn = tl.arange(0, BN)                               # (BN,)
    rk = tl.arange(0, BK)                               # (BK,)
    k_full = tl.multiple_of(K - K % BK, BK)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0)):
        tile_m, tile_n = grouped_tile(t, grid_m, per_group, GROUP_M)
        m0 = tile_m * BM
        n0 = tile_n * BN
        m_in = (m0 + im)[:, None] < M                   # (BM, 1)
        n_in = (n0 + jn)[None, :] < N                   # (1, BN)
        # A scalar 64-bit base per operand and tile, and 32-bit offsets inside the tile that
        # no k-step changes: a step moves the base alone, where matmul_kernel adds its step to
        # every pointer of the tile (a 64-bit add per element and step). The launcher offers
        # these configurations only where the offsets fit 32 bits (matmul_triton_impl.cu).
        if A_KMAJ:
            a_tile = a_ptr + m0.to(tl.int64) * lda
            a_off = tl.minimum(im, M - 1 - m0)[:, None] * lda + rk[None, :]      # (BM, BK)
            a_k = 1
        else:
            a_tile = a_ptr + m0
            a_off = rk[None, :] * lda + im[:, None]
            a_k = lda
        if B_KMAJ:
            b_tile = b_ptr + n0.to(tl.int64) * ldb
            b_off = tl.minimum(jn, N - 1 - n0)[None, :] * ldb + rk[:, None]      # (BK, BN)
            b_k = 1
        else:
            b_tile = b_ptr + n0
            b_off = rk[:, None] * ldb + jn[None, :]
            b_k = ldb
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, k_full, BK):
            a_at = a_tile + k0.to(tl.int64) * a_k
            b_at = b_tile + k0.to(tl.int64) * b_k
            if A_KMAJ:
                a = tl.load(a_at + a_off)
            else:
                a = tl.load(a_at + a_off, mask=m_in, other=0.0)
            if B_KMAJ:
                b = tl.load(b_at + b_off)
            else:
                b = tl.load(b_at + b_off, mask=n_in, other=0.0)
            acc = tl.dot(a, b, acc)
        if k_full < K:                                  # the last, partial step of K
            k_in_a = (k_full + rk)[None, :] < K         # (1, BK)
            k_in_b = (k_full + rk)[:, None] < K         # (BK, 1)
            a_at = a_tile + k_full.to(tl.int64) * a_k
            b_at = b_tile + k_full.to(tl.int64) * b_k
            if A_KMAJ:
                a = tl.load(a_at + a_off, mask=k_in_a, other=0.0)
            else:
                a = tl.load(a_at + a_off, mask=m_in & k_in_a, other=0.0)
            if B_KMAJ:
                b = tl.load(b_at + b_off, mask=k_in_b, other=0.0)
            else:
                b = tl.load(b_at + b_off, mask=k_in_b & n_in, other=0.0)
            acc = tl.dot(a, b, acc)
        rm64 = (m0 + im).to(tl.int64)
        c_ptrs = c_ptr + rm64[:, None] * ldc + (n0 + jn)[None, :]
        tl.store(c_ptrs, acc.to(tl.bfloat16), mask=m_in & n_in)


# (BM, BN, BK, GROUP_M, num_warps, num_stages): the space the first call searches, and the
# README's sweep (`klab bench 05 --op matmul --impl triton --candidate all`). The seventh entry
# is the first with GROUP_M = 1 (tiles in row-major order, no grouping): the grouped
# order's effect on its own. The last two hold a fourth stage of 48 KB (192 KB of shared memory
# a block): more loads in flight, on Hopper's 227 KB only. A configuration whose stages do not
# fit the device's shared memory (stages x (BM + BN) x BK x 2 bytes) is no candidate there
# (matmul_triton_impl.cu), so the Ampere build (164 KB) runs the first seven.
CONFIGS = [
    (128, 256, 64, 8, 8, 3),
    (128, 128, 64, 8, 4, 4),
    (128, 128, 32, 8, 4, 4),
    (64, 128, 64, 8, 4, 4),
    (256, 128, 64, 8, 8, 3),
    (128, 256, 32, 8, 8, 4),
    (128, 256, 64, 1, 8, 3),
    (128, 256, 64, 8, 8, 4),
    (256, 128, 64, 8, 8, 4),
]
# The persistent kernel's configurations (the same fields), after CONFIGS in the impl's
# candidate list, named with a /persistent suffix: 128x256 tiles, whose 3 or 4 stages leave
# room for one program an SM, and 256x128.
PERSISTENT_CONFIGS = [
    (128, 256, 64, 8, 8, 3),
    (128, 256, 64, 8, 8, 4),
    (256, 128, 64, 8, 8, 3),
]
LAYOUTS = {"nn": (1, 0), "tn": (0, 0), "nt": (1, 1)}


def _aot():
    out = []
    for layout, (ak, bk) in LAYOUTS.items():
        for kernel, configs, prefix in (("matmul_kernel", CONFIGS, "tr_matmul"),
                                        ("matmul_persistent", PERSISTENT_CONFIGS, "tr_matmul_persistent")):
            for bm, bn, bk_, gm, warps, stages in configs:
                tiles = f"((M + {bm - 1}) / {bm}) * ((N + {bn - 1}) / {bn})"
                # klab_triton_sm_grid(tiles) = min(tiles, SMs) (klab/src/triton.cpp)
                grid = f"klab_triton_sm_grid({tiles}), 1, 1" if kernel == "matmul_persistent" else f"{tiles}, 1, 1"
                for hint in (":16", ""):
                    out.append(dict(
                        name=f"{prefix}_{layout}", kernel=kernel,
                        signature=(f"*bf16:16, *bf16:16, *bf16:16, i32{hint}, i32{hint}, i32{hint}, "
                                   f"i32{hint}, i32{hint}, i32{hint}, {ak}, {bk}, {bm}, {bn}, {bk_}, {gm}"),
                        grid=grid, num_warps=warps, num_stages=stages))
    return out


# What the build compiles. Grids are C expressions over the non-constexpr arguments.
AOT = _aot()
