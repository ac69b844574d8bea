"""Lesson 09, Triton track: the flash attention forward (FlashAttention-2's loop), bf16 and fp16.

O = softmax(Q·Kᵀ / sqrt(d)) · V and L = ln sum_j exp(s_j), per batch entry and head, with the
op's layout (attention.cuh): Q (B, Hq, Sq, D), K and V (B, Hkv, Sk, D), O like Q, L (B, Hq, Sq)
fp32, all contiguous. Query head h reads K/V head h // (Hq // Hkv) (grouped-query attention:
an index, nothing copied). Causal (a run-time flag): query i sees key j iff j <= i + Sk - Sq,
the diagonal aligned bottom-right; a row that sees no key gets O = 0 and L = -inf.

Each program takes BM query rows of one (batch, head) and walks K and V in tiles of BN keys,
as v2_mma_sync does (attention_mma.cu), keeping the row's state in registers: the running
max m, the running sum l and the unnormalized output acc (BM, D) in fp32. Per tile:

    S   = Q · K_tᵀ                 tl.dot: wgmma on Hopper (Q and K_t from shared memory),
                                   mma.sync on Ampere; fp32 accumulators
    m'  = max(m, rowmax(S) · c)    c = log2(e) / sqrt(d): the scores go into base 2 with the
    P   = 2^(S · c - m')           scale folded into the one multiply-add that also takes the
                                   max off (an FFMA), and exp is one ex2.approx (MUFU.EX2)
    a   = 2^(m - m')               the correction of everything summed under the old max
    l   = l · a + rowsum(P)
    acc = acc · a + P · V_t        P rounded to the input dtype in registers, then tl.dot
                                   with V_t from shared memory (wgmma takes A from registers)

and at the end O = acc / l, L = (m + log2 l) · ln 2. The loads of K and V are pipelined by
Triton over num_stages shared-memory buffers (cp.async: the next tiles are in flight while
this one is computed), which the CUDA version does by hand with its two-stage ring.

Masks only where they can be false. The tiles of the walk are of two kinds:
  - the whole tiles that every row of the block sees: keys before Sk and, causal, on or
    before the diagonal of the block's FIRST row. They compute no mask;
  - the rest, up to the last key the block's LAST row sees: the ragged last tile (keys past
    Sk: K's rows load as 0 and would score 0, not -inf) and, causal, the tiles that the
    diagonal crosses. Their scores are masked to -inf, under a scalar branch of the loop.
A row that has seen no key yet (m = -inf: the first Sq - Sk rows when Sq > Sk) takes 0 in
place of m, so that -inf - (-inf) never makes a NaN. The two kinds share ONE loop (its
comment says why two loops were worse).
Causal tiles past the block's last row's diagonal are never loaded (the whole-tile skip),
and causal blocks run in reverse row order within a head: the last rows see the most keys,
so the longest programs start first and the short ones fill the tail of the grid.

Indexing: one 1D grid over (row block, batch x head), row blocks fastest, so that B · Hq may
pass 65,535 (a grid's y and z limit) and the programs running side by side share their K/V
head in L2 (v2's order). Each tile's address is a 64-bit scalar base (its head's offset plus
its first key times D: K and V may pass 2^31 elements, the 16,777,259-key test shape) plus
32-bit offsets inside the tile that no step changes.

Ahead-of-time builds (the AOT list at the bottom): for each dtype and head dim a launcher
(tr_attention_fwd_bf16_d128 etc.) linking the tile configurations of CONFIGS[D] (algo_id in
list order). attention_triton_impl.cu times each on the first call for a shape and keeps
the fastest, like lesson 05's `triton`, and `klab test` verifies every one. Nothing needs a
divisibility hint: the masks compare row indices only (constant along D, a constexpr), so
every load of a 16-byte run is one vector whatever Sq and Sk are
(tools/triton_ptx.py lessons/09-attention/attention_triton.py shows the cp.async and wgmma
counts of each entry).
"""
import triton
import triton.language as tl


@triton.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, BH, Hq, Hkv, Sq, Sk, causal, scale_log2,
                         D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # The program's row block and (batch, head): row blocks fastest; causal, the last rows
    # first within a head.
    pid = tl.program_id(0)
    row_blocks = tl.cdiv(Sq, BM)
    bh = pid // row_blocks
    rb = pid % row_blocks
    if causal != 0:
        rb = row_blocks - 1 - rb
    b = bh // Hq
    h = bh % Hq
    hk = h // (Hq // Hkv)                                  # grouped-query: the K/V head
    q0 = rb * BM

    im = tl.arange(0, BM)                                  # (BM,)
    jn = tl.arange(0, BN)                                  # (BN,)
    dd = tl.arange(0, D)                                   # (D,)
    rows = q0 + im                                         # (BM,) query positions
    row_in = rows < Sq

    # 64-bit scalar bases, 32-bit offsets inside a tile.
    q_tile = q_ptr + (bh.to(tl.int64) * Sq + q0) * D
    q = tl.load(q_tile + im[:, None] * D + dd[None, :], mask=row_in[:, None], other=0.0)   # (BM, D)
    kv_head = (b.to(tl.int64) * Hkv + hk) * Sk * D
    k_head = k_ptr + kv_head
    v_head = v_ptr + kv_head
    kv_off = jn[:, None] * D + dd[None, :]                 # (BN, D)

    # The keys the block sees. Query i sees a prefix of visible(i) = clamp(i + diag + 1, 0, Sk)
    # keys (every key without the mask), growing with i: the block's first row bounds the
    # whole unmasked tiles, its last row the end of the walk.
    diag = Sk - Sq                                         # query i sees key j <= i + diag
    if causal != 0:
        first_keys = tl.minimum(tl.maximum(q0 + diag + 1, 0), Sk)
        last_keys = tl.minimum(tl.maximum(tl.minimum(q0 + BM, Sq) + diag, 0), Sk)
    else:
        first_keys = Sk
        last_keys = Sk
    full_end = (first_keys // BN) * BN                    # whole tiles every row sees

    m_i = tl.full((BM,), float("-inf"), tl.float32)      # running max, base 2, scaled
    l_i = tl.zeros((BM,), tl.float32)                     # running sum of p
    acc = tl.zeros((BM, D), tl.float32)                   # running sum of p · v
    # ONE loop over every tile the block sees, the mask under a scalar branch taken by the
    # tiles from full_end on. Two loops (the whole tiles, then the masked ones: the obvious
    # shape) made ptxas serialize every wgmma of the kernel (C7515): the accumulator reaches
    # the second loop through the first one's zero-trip path, register moves that ptxas
    # counts as writes to the registers of a wgmma still in flight. The loads are masked at
    # Sk in every tile: a cp.async with a source size of 0 past Sk costs no more than one
    # without (the pipeliner predicates its copies that way anyway).
    for start_n in range(0, last_keys, BN):
        kv_t = start_n.to(tl.int64) * D                   # the tile's first key, 64-bit
        key = start_n + jn                                # (BN,)
        k = tl.load(k_head + kv_t + kv_off, mask=(key < Sk)[:, None], other=0.0)     # (BN, D)
        s = tl.dot(q, tl.trans(k))                        # (BM, BN) raw scores, fp32
        if start_n >= full_end:
            # Past Sk (K's zero rows would score 0, not -inf) or past some row's diagonal.
            seen = (key[None, :] < Sk) & ((causal == 0) | (key[None, :] <= rows[:, None] + diag))
            s = tl.where(seen, s, float("-inf"))
        # The max of the raw scores, scaled once per row (c > 0 keeps the order); the scale
        # and the max then go on together, one FFMA a score.
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
        # A row that has seen no key yet keeps m = -inf: 0 stands in for it, so that its p
        # and its correction come out 2^-inf = 0, never 2^(-inf - (-inf)) = NaN.
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s * scale_log2 - m_use[:, None])  # (BM, BN)
        alpha = tl.math.exp2(m_i - m_use)                 # (BM,) the correction of the old state
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_head + kv_t + kv_off, mask=(key < Sk)[:, None], other=0.0)     # (BN, D)
        # P in the input dtype (what the tensor cores take; the op's tolerance allows its
        # rounding), the A operand straight from registers.
        acc = tl.dot(p.to(v.dtype), v, acc)               # (BM, D)
        m_i = m_new

    # O = acc / l and L = (m + log2 l) ln 2 (m is in base 2). A row that saw no key has
    # l = 0 and acc = 0: O = 0 and L = -inf, the op's convention.
    seen = l_i > 0.0
    inv = 1.0 / tl.where(seen, l_i, 1.0)
    o = acc * inv[:, None]
    o_tile = o_ptr + (bh.to(tl.int64) * Sq + q0) * D
    tl.store(o_tile + im[:, None] * D + dd[None, :], o.to(o_ptr.dtype.element_ty), mask=row_in[:, None])
    lse = tl.where(seen, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, float("-inf"))
    tl.store(lse_ptr + bh.to(tl.int64) * Sq + rows, lse, mask=row_in)


# (BM, BN, num_warps, num_stages) a head dim: the space the first call for a shape searches
# (attention_triton_impl.cu names them BMxBN/warps/stages, in this order). Shared memory is
# Q's tile and num_stages buffers of a K and a V tile, (BM + 2 stages BN) D 2 bytes, 56 KB to
# 160 KB: all fit Hopper's 227 KB and the A100's 163 KB; the impl leaves out those a smaller
# device cannot hold. The list spans the two ways to keep an SM busy here:
#   - BM = 128 on eight warps: two warpgroups of 64 rows (one wgmma's M each) share every K/V
#     tile, half the K/V traffic per FLOP of BM = 64. At D = 128 that is 182-243 registers a
#     thread and one block an SM, whose two warpgroups run the softmax and the products in
#     step (nothing here lets a wgmma overlap a softmax: tl.range's warp_specialize left this
#     loop unchanged on sm_90, and a loop that issued the next tile's Q·Kᵀ before this tile's
#     softmax had its wgmma waited on at once). BN = 128 halves the loop's trips, a fourth
#     stage keeps more tiles in flight.
#   - two or more blocks an SM, whose softmax and products interleave: 64x64 on four warps at
#     D = 128 (112 KB, 182 registers), and at D = 64 128x64 on eight warps (64 KB, 110
#     registers) and on four (232 registers), at the price of more K/V reads from L2 per FLOP
#     where BM = 64.
# tools/triton_ptx.py --sass shows each entry's shared memory, registers, wgmma and HGMMA.
CONFIGS = {
    64: [
        (128, 64, 8, 3),
        (128, 128, 8, 3),
        (128, 64, 4, 3),
        (64, 64, 4, 3),
    ],
    128: [
        (128, 64, 8, 3),
        (128, 128, 8, 2),
        (64, 64, 4, 3),
        (128, 64, 8, 4),
    ],
}
DTYPES = {"bf16": "bf16", "f16": "fp16"}            # launcher suffix: Triton type


def _aot():
    out = []
    for dt, ty in DTYPES.items():
        for d, configs in CONFIGS.items():
            for bm, bn, warps, stages in configs:
                out.append(dict(
                    name=f"tr_attention_fwd_{dt}_d{d}", kernel="attention_fwd_kernel",
                    signature=(f"*{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *fp32:16, i32, i32, i32, i32, i32, i32, fp32, "
                               f"{d}, {bm}, {bn}"),
                    grid=f"((Sq + {bm - 1}) / {bm}) * BH, 1, 1", num_warps=warps, num_stages=stages))
    return out


# What the build compiles. The grid is one program per BM query rows of each (batch, head), all
# on axis 0; BH = B · Hq is an argument for it alone.
AOT = _aot()
