"""Lesson 09, Triton track: the flash attention backward (FlashAttention-2's), bf16 and fp16.

dQ, dK and dV of O = softmax(Q·Kᵀ / sqrt(d)) · V, from Q, K, V, O, dO and L, with the op's layout
(attention_bwd_ops.cu, attention.cuh): Q, O, dO, dQ (B, Hq, Sq, D), K, V, dK, dV (B, Hkv, Sk, D),
L (B, Hq, Sq) fp32, the forward's natural-log log-sum-exp; all contiguous. Query head h reads
K/V head h // (Hq // Hkv), and dK, dV of a K/V head are summed over the query heads of its
group. Causal (a run-time flag): query i sees key j iff j <= i + Sk - Sq (bottom-right); a
query that sees no key has L = -inf and no gradient. The same algorithm as
v2_mma_deterministic (attention_bwd_mma.cu), in
three kernels, each sum in a fixed order (no atomics):

  1. attention_bwd_preprocess_kernel, BM query rows a program: D = rowsum(dO ⊙ O) in fp32,
     and L in base 2, L2 = L log2(e) (+inf where L = -inf: every P of the row comes out
     2^-inf = 0), into the workspace (two fp32 arrays of B Hq Sq).
  2. attention_bwd_dkdv_kernel, one program per BN keys of one (batch, K/V head), K and V
     held for the whole walk: over every query head of the group and every query tile that
     sees a key of the block (causal: from the tile of the first query that sees the block's
     first key), with the keys in the rows,

         Sᵀ  = K · Q_tᵀ                       tl.dot (wgmma on Hopper, mma.sync on Ampere),
         Pᵀ  = 2^(Sᵀ · c - L2)                fp32 accumulators; c = log2(e) / sqrt(d)
         dV += Pᵀ · dO_t                      Pᵀ rounded to the input dtype, from registers
         dPᵀ = V · dO_tᵀ
         dSᵀ = Pᵀ ⊙ (dPᵀ - D)
         dK += dSᵀ · Q_t                      dSᵀ rounded to the input dtype, from registers

     then stores dK / sqrt(d) and dV. Q_t and dO_t are loaded once a tile and serve two
     products each (one transposed: the shared-memory descriptor says which way).
  3. attention_bwd_dq_kernel, one program per BM query rows of one (batch, head), the
     forward's shape: over the key tiles the rows see, S = Q·K_tᵀ, P = 2^(S · c - L2),
     dP = dO·V_tᵀ, dS = P ⊙ (dP - D), dQ += dS · K_t; stores dQ / sqrt(d).
S and dP are computed twice (in 2 and in 3): seven products where an atomic dQ needs five,
the price of a deterministic dQ without a second fp32 buffer.

Masks only where they can be false, as in the forward: a tile computes its mask under a
scalar branch when it holds keys past Sk (K's zero rows would score 0, and P = 2^-L2 is not
0) or, causal, (query, key) pairs past the diagonal. Query rows past Sq need none: their L2
loads as +inf, so their P and dS are 0 (and their Q and dO rows load as 0). Causal key
blocks start at the first query tile that sees them; the dQ kernel's row blocks run in
reverse order within a head (the last rows see the most keys: the longest programs start
first), the dK/dV kernel's key blocks in order (the first keys are seen by the most rows).

Indexing, as the forward: one 1D grid over (block, batch x head), blocks fastest, so that
B · Hq may pass 65,535 (a grid's y and z limit) and programs running side by side share a
K/V head (dQ) or the Q and dO of a group (dK/dV) in L2. Each tile's address is a 64-bit
scalar base plus 32-bit offsets inside the tile: K, V, dK and dV may pass 2^31 elements (the
16,777,259-key test shape).

Ahead-of-time builds (the AOT list at the bottom): for each dtype and head dim, one
preprocess launcher (tr_attention_bwd_pre_bf16_d128 etc.), one dK/dV launcher linking the
distinct dK/dV configurations of CONFIGS[D] (tr_attention_bwd_dkdv_bf16_d128, algo_id in
order of first appearance) and one dQ launcher likewise (tr_attention_bwd_dq_bf16_d128).
attention_bwd_triton_impl.cu times each candidate of CONFIGS[D] (a dK/dV and a dQ
configuration: the whole backward) on the first call for a shape and keeps the fastest, as
the forward's `triton` does, and `klab test` verifies every one. Nothing needs a
divisibility hint: the masks of the 16-bit tiles compare row indices only (constant along D,
a constexpr), so every load of a 16-byte run is one vector whatever Sq and Sk are; the fp32
vectors (L, D, L2) are BM floats a tile, loaded one element a thread
(tools/triton_ptx.py lessons/09-attention/attention_bwd_triton.py shows each entry's
cp.async and wgmma counts, its shared memory and registers).
"""
import triton
import triton.language as tl


@triton.jit
def attention_bwd_preprocess_kernel(o_ptr, do_ptr, lse_ptr, delta_ptr, lse2_ptr, rows,
                                    D: tl.constexpr, BM: tl.constexpr):
    # BM consecutive query rows of the flattened (B Hq Sq) rows: rows may pass 2^31 / D,
    # so the base is 64-bit.
    r0 = tl.program_id(0).to(tl.int64) * BM
    im = tl.arange(0, BM)                                  # (BM,)
    dd = tl.arange(0, D)                                   # (D,)
    row_in = r0 + im < rows
    off = im[:, None] * D + dd[None, :]                    # (BM, D)
    o = tl.load(o_ptr + r0 * D + off, mask=row_in[:, None], other=0.0).to(tl.float32)
    do = tl.load(do_ptr + r0 * D + off, mask=row_in[:, None], other=0.0).to(tl.float32)
    delta = tl.sum(o * do, 1)                              # (BM,) D = dO · O, fp32
    lse = tl.load(lse_ptr + r0 + im, mask=row_in, other=0.0)
    # L in base 2; a row that sees no key (L = -inf) gets +inf, so that 2^(s c - L2) = 0.
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    tl.store(delta_ptr + r0 + im, delta, mask=row_in)
    tl.store(lse2_ptr + r0 + im, lse2, mask=row_in)


@triton.jit
def attention_bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, dk_ptr, dv_ptr, lse2_ptr, delta_ptr,
                              BHkv, Hq, Hkv, Sq, Sk, causal, scale, scale_log2,
                              D: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr):
    # The program's key block and (batch, K/V head): key blocks fastest.
    pid = tl.program_id(0)
    key_blocks = tl.cdiv(Sk, BN)
    bhk = pid // key_blocks
    k0 = (pid % key_blocks) * BN
    b = bhk // Hkv
    hk = bhk % Hkv
    group = Hq // Hkv                                      # query heads a K/V head

    jn = tl.arange(0, BN)                                  # (BN,)
    im = tl.arange(0, BM)                                  # (BM,)
    dd = tl.arange(0, D)                                   # (D,)
    keys = k0 + jn                                         # (BN,) key positions
    key_in = keys < Sk

    # K and V of the block, held for the whole walk. 64-bit base, 32-bit offsets.
    kv_tile = (bhk.to(tl.int64) * Sk + k0) * D
    kv_off = jn[:, None] * D + dd[None, :]                 # (BN, D)
    k = tl.load(k_ptr + kv_tile + kv_off, mask=key_in[:, None], other=0.0)
    v = tl.load(v_ptr + kv_tile + kv_off, mask=key_in[:, None], other=0.0)
    q_off = im[:, None] * D + dd[None, :]                  # (BM, D)

    # The query tiles that see a key of the block: causal, query i sees key j iff
    # i >= j - diag, so the block's first key k0 is seen from row k0 - diag on (the last
    # query sees every key: at least one tile). A tile whose first row m0 sees the block's
    # last key (m0 + diag >= k0 + BN - 1) sees all of them: the mask is needed before
    # mask_end only; in every tile where the block holds keys past Sk.
    diag = Sk - Sq
    if causal != 0:
        m_start = (tl.maximum(k0 - diag, 0) // BM) * BM
    else:
        m_start = 0
    per_head = tl.cdiv(Sq - m_start, BM)                   # >= 1 unless Sq = 0
    if k0 + BN > Sk:
        mask_end = Sq
    elif causal != 0:
        mask_end = k0 + BN - 1 - diag
    else:
        mask_end = 0
    div = tl.maximum(per_head, 1)

    dk = tl.zeros((BN, D), tl.float32)                     # sum of dSᵀ · Q, unscaled
    dv = tl.zeros((BN, D), tl.float32)                     # sum of Pᵀ · dO
    # ONE loop over the (head of the group, query tile) pairs, the heads outermost, the mask
    # under a scalar branch: the forward's shape (two loops made ptxas serialize its wgmma).
    for t in range(0, per_head * group):
        bh = (b * Hq + hk * group + t // div).to(tl.int64)   # the query head, 64-bit
        m0 = m_start + (t % div) * BM
        rows = m0 + im                                     # (BM,) query positions
        row_in = rows < Sq
        q_tile = (bh * Sq + m0) * D
        q = tl.load(q_ptr + q_tile + q_off, mask=row_in[:, None], other=0.0)     # (BM, D)
        do = tl.load(do_ptr + q_tile + q_off, mask=row_in[:, None], other=0.0)   # (BM, D)
        # Rows past Sq: L2 = +inf, so their P (and dS) are 0.
        l2 = tl.load(lse2_ptr + bh * Sq + rows, mask=row_in, other=float("inf"))  # (BM,)
        dl = tl.load(delta_ptr + bh * Sq + rows, mask=row_in, other=0.0)          # (BM,)
        s_t = tl.dot(k, tl.trans(q))                       # (BN, BM) Sᵀ, raw scores, fp32
        p_t = tl.math.exp2(s_t * scale_log2 - l2[None, :])  # one FFMA and one ex2 a score
        if m0 < mask_end:
            # Keys past Sk, or (query, key) pairs past the diagonal: P = 0 (and so dS = 0).
            seen = key_in[:, None] & ((causal == 0) | (keys[:, None] <= rows[None, :] + diag))
            p_t = tl.where(seen, p_t, 0.0)
        # Pᵀ in the input dtype (the op's tolerance allows its rounding), A from registers.
        dv = tl.dot(p_t.to(do.dtype), do, dv)              # (BN, D)
        dp_t = tl.dot(v, tl.trans(do))                     # (BN, BM) dPᵀ
        ds_t = p_t * (dp_t - dl[None, :])                  # (BN, BM) dSᵀ
        dk = tl.dot(ds_t.to(q.dtype), q, dk)               # (BN, D)

    # dK / sqrt(d) and dV, rounded once; keys past Sk are not stored. A key that no query
    # sees (Sq = 0) gets zeros.
    st_off = kv_tile + kv_off
    tl.store(dk_ptr + st_off, (dk * scale).to(dk_ptr.dtype.element_ty), mask=key_in[:, None])
    tl.store(dv_ptr + st_off, dv.to(dv_ptr.dtype.element_ty), mask=key_in[:, None])


@triton.jit
def attention_bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, dq_ptr, lse2_ptr, delta_ptr,
                            BH, Hq, Hkv, Sq, Sk, causal, scale, scale_log2,
                            D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # The program's row block and (batch, head): row blocks fastest; causal, the last rows
    # first within a head (the forward's order).
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
    q_tile = (bh.to(tl.int64) * Sq + q0) * D
    q_off = im[:, None] * D + dd[None, :]                  # (BM, D)
    q = tl.load(q_ptr + q_tile + q_off, mask=row_in[:, None], other=0.0)      # (BM, D)
    do = tl.load(do_ptr + q_tile + q_off, mask=row_in[:, None], other=0.0)    # (BM, D)
    l2 = tl.load(lse2_ptr + bh.to(tl.int64) * Sq + rows, mask=row_in, other=float("inf"))
    dl = tl.load(delta_ptr + bh.to(tl.int64) * Sq + rows, mask=row_in, other=0.0)
    kv_head = (b.to(tl.int64) * Hkv + hk) * Sk * D
    k_head = k_ptr + kv_head
    v_head = v_ptr + kv_head
    kv_off = jn[:, None] * D + dd[None, :]                 # (BN, D)

    # The keys the block sees, as in the forward: query i sees a prefix of
    # clamp(i + diag + 1, 0, Sk) keys (every key without the mask), growing with i. The
    # block's first row bounds the whole unmasked tiles, its last row the end of the walk.
    diag = Sk - Sq
    if causal != 0:
        first_keys = tl.minimum(tl.maximum(q0 + diag + 1, 0), Sk)
        last_keys = tl.minimum(tl.maximum(tl.minimum(q0 + BM, Sq) + diag, 0), Sk)
    else:
        first_keys = Sk
        last_keys = Sk
    full_end = (first_keys // BN) * BN                    # whole tiles every row sees

    dq = tl.zeros((BM, D), tl.float32)                    # sum of dS · K, unscaled
    # ONE loop, the mask under a scalar branch (the forward's comment says why).
    for start_n in range(0, last_keys, BN):
        kv_t = start_n.to(tl.int64) * D                   # the tile's first key, 64-bit
        key = start_n + jn                                # (BN,)
        k = tl.load(k_head + kv_t + kv_off, mask=(key < Sk)[:, None], other=0.0)     # (BN, D)
        v = tl.load(v_head + kv_t + kv_off, mask=(key < Sk)[:, None], other=0.0)     # (BN, D)
        s = tl.dot(q, tl.trans(k))                        # (BM, BN) raw scores, fp32
        p = tl.math.exp2(s * scale_log2 - l2[:, None])    # (BM, BN)
        if start_n >= full_end:
            # Past Sk (K's zero rows would score 0) or past some row's diagonal: P = 0.
            seen = (key[None, :] < Sk) & ((causal == 0) | (key[None, :] <= rows[:, None] + diag))
            p = tl.where(seen, p, 0.0)
        dp = tl.dot(do, tl.trans(v))                      # (BM, BN)
        ds = p * (dp - dl[:, None])                       # (BM, BN)
        # dS in the input dtype, A from registers; K_t from shared memory, as loaded.
        dq = tl.dot(ds.to(k.dtype), k, dq)                # (BM, D)

    # dQ / sqrt(d), rounded once; rows past Sq are not stored. A row that sees no key: 0.
    tl.store(dq_ptr + q_tile + q_off, (dq * scale).to(dq_ptr.dtype.element_ty), mask=row_in[:, None])


# The candidates of a head dim: a dK/dV configuration (BN keys, BM queries, num_warps,
# num_stages) and a dQ configuration (BM queries, BN keys, num_warps, num_stages), the whole
# backward timed as one (attention_bwd_triton_impl.cu names them
# dkvBNxBM/warps/stages+dqBMxBN/warps/stages, in this order). Shared memory (what Triton
# allocates on sm_90; sm_80's is never larger):
#   dK/dV  K and V once, num_stages buffers of a Q and a dO tile, and num_stages - 1 of the
#          tile's L2 and D: 2 BN D 2 + stages 2 BM D 2 + (stages - 1) 2 BM 4 bytes
#   dQ     Q and dO once, num_stages buffers of a K and a V tile: 2 BM D 2 + stages 2 BN D 2
# 41 KB to 132 KB: all fit Hopper's 227 KB and the A100's 163 KB (the impl leaves out those a
# smaller device cannot hold). What limits the dK/dV kernel is registers: dK and dV are two
# (BN, D) fp32 accumulators, 2 BN D / threads registers a thread (128 at D = 128 for BN = 128
# on eight warps or BN = 64 on four), Sᵀ and dPᵀ two (BN, BM) more. Triton's sm_90 code takes
# 185-187 registers a thread at BM = 32, D = 64, and 235-255 everywhere else below; at
# D = 128, BM = 64 spills (8 bytes of stack at BN = 128 on eight warps, listed: FlashAttention-
# 2's tile; 96 at BN = 64 on four, not listed), which is why the others take BM = 32 or 16
# there (v2_mma_deterministic's BM = 32 too). The list spans, a head dim:
#   - BN = 128 keys on eight warps: two warpgroups of 64 keys (one wgmma's M each) share every
#     Q and dO tile, half the Q/dO traffic per FLOP of BN = 64; one block an SM;
#   - BN = 64 on four warps: two blocks an SM, whose softmax and products interleave (every
#     product of the loop waits for its wgmma: each feeds the next);
#   - Ampere: Triton's mma.sync path loads each warp's whole B operand (a Q or dO tile) in
#     registers, and with BM = 64 at D = 64, or BN = 128 at D = 128, ptxas falls back to 32
#     registers and kilobytes of stack a thread (Hopper's wgmma reads B from shared memory).
#     The BM = 32 pairs at D = 64 and the BN = 64 pairs at D = 128 spill at most 8 bytes
#     there: an A100 has candidates of its own.
# The dQ kernel is the forward's shape, lighter (one (BM, D) accumulator; 86-189 registers on
# sm_90, none spilled): BM = 128 or 64 rows, BN = 64 or 32 keys. Not listed: eight warps with
# BN = 64 keys, for which ptxas serializes the dK/dV kernel's wgmma (C7515), and at D = 64
# BN = 128 on four warps or with BM = 128, which spill on sm_90. tools/triton_ptx.py --sass
# shows each entry's shared memory, registers, wgmma and HGMMA.
CONFIGS = {
    64: [
        ((128, 64, 8, 3), (128, 64, 8, 3)),
        ((64, 64, 4, 3), (64, 64, 4, 3)),
        ((128, 32, 8, 3), (128, 32, 4, 3)),
        ((64, 32, 4, 3), (64, 32, 4, 3)),
    ],
    128: [
        ((128, 32, 8, 2), (128, 64, 8, 2)),
        ((64, 32, 4, 3), (64, 64, 4, 3)),
        ((128, 64, 8, 2), (128, 32, 8, 3)),
        ((64, 16, 4, 3), (64, 32, 4, 3)),
    ],
}
PRE_BM = 64                                         # query rows a preprocess program
DTYPES = {"bf16": "bf16", "f16": "fp16"}            # launcher suffix: Triton type


def distinct(configs, part):
    """The distinct configurations of one kernel (part 0: dK/dV, 1: dQ) in order of first
    appearance: the order of its launcher's algo_ids."""
    out = []
    for c in configs:
        if c[part] not in out:
            out.append(c[part])
    return out


def _aot():
    out = []
    for dt, ty in DTYPES.items():
        for d, configs in CONFIGS.items():
            out.append(dict(
                name=f"tr_attention_bwd_pre_{dt}_d{d}", kernel="attention_bwd_preprocess_kernel",
                signature=f"*{ty}:16, *{ty}:16, *fp32:16, *fp32:16, *fp32:16, i64, {d}, {PRE_BM}",
                grid=f"(rows + {PRE_BM - 1}) / {PRE_BM}, 1, 1", num_warps=4, num_stages=1))
            for bn, bm, warps, stages in distinct(configs, 0):
                out.append(dict(
                    name=f"tr_attention_bwd_dkdv_{dt}_d{d}", kernel="attention_bwd_dkdv_kernel",
                    signature=(f"*{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *fp32:16, *fp32:16, "
                               f"i32, i32, i32, i32, i32, i32, fp32, fp32, {d}, {bn}, {bm}"),
                    grid=f"((Sk + {bn - 1}) / {bn}) * BHkv, 1, 1", num_warps=warps, num_stages=stages))
            for bm, bn, warps, stages in distinct(configs, 1):
                out.append(dict(
                    name=f"tr_attention_bwd_dq_{dt}_d{d}", kernel="attention_bwd_dq_kernel",
                    signature=(f"*{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *fp32:16, *fp32:16, "
                               f"i32, i32, i32, i32, i32, i32, fp32, fp32, {d}, {bm}, {bn}"),
                    grid=f"((Sq + {bm - 1}) / {bm}) * BH, 1, 1", num_warps=warps, num_stages=stages))
    return out


# What the build compiles. Each grid is one program per block of BN keys (dK/dV) or BM query
# rows (dQ, preprocess) of each (batch, head), all on axis 0; BHkv = B · Hkv and BH = B · Hq
# are arguments for the grids alone.
AOT = _aot()
