"""Lesson 09 exercise, Triton track: the flash attention forward with tl.dot.

O = softmax(Q·Kᵀ / sqrt(d)) · V and L = ln sum_j exp(s_j) for every query row, bf16 or fp16
in, fp32 accumulation: Q (B, Hq, Sq, D), K and V (B, Hkv, Sk, D), O like Q, L (B, Hq, Sq)
fp32, all contiguous. Query head h reads K/V head h // (Hq // Hkv) (grouped-query
attention). Causal (causal = 1): query i sees key j iff j <= i + diag, diag = Sk - Sq (the
diagonal aligned bottom-right); a row that sees no key gets O = 0 and L = -inf.

Each program takes a block of BM = 128 query rows of one (batch, head) and walks K and V in
tiles of BN = 64 keys, carrying each row's online softmax state: the running max m (of the
scores in base 2: s · scale_log2, scale_log2 = log2(e) / sqrt(d), so that exp is one exp2),
the running sum l of p = 2^(s · scale_log2 - m), and the unnormalized output acc = sum p · v
(BM, D) in fp32. A new tile first corrects what the rows hold by alpha = 2^(m_old - m_new),
then adds its own terms. At the end O = acc / l and L = (m + log2 l) · ln 2. Triton stages
the tiles through shared memory, pipelines the loads and lowers both tl.dot to the tensor
cores (mma.sync on Ampere, wgmma on Hopper). Fill in the thirteen TODOs: the program's rows
and head, the GQA head, the offsets, the row mask and Q's load, the keys each row sees, K's
and V's loads, the scores, the running max with its correction, the output's update, the
sum's update, the final O and L, and the launch grid below the kernel.

After an edit, grade it (the check compiles this file first, shows one line with the line
number if it does not compile, and rebuilds klab when it changed):

    klab check 09 --triton

which compares O and L with the fp64 reference on unseen seeds and the edge shapes of `klab
check 09` (one query, one key, primes no tile divides, Sq < Sk and Sq > Sk causal, 67,081
(batch, head) pairs, grouped-query heads, 16,777,259 keys whose K and V pass 2^31
elements), bf16 and fp16, causal and not, then times it against the lesson's `triton`
version. Every fourth query row has scores of several hundred: without the running max, its
exp overflows. Until every TODO is done the check fails: the harness fills O and L with NaN
before each launch.

Hints
  1. The grid is one axis: program pid takes row block pid % row_blocks of the pair
     bh = pid // row_blocks, and bh is b · Hq + h. The K/V head is h // (Hq // Hkv): Hq // Hkv
     query heads share one K/V head.
  2. Q[b, h, i, :] starts at element ((b · Hq + h) · Sq + i) · D, and K[b, hk, j, :] at
     ((b · Hkv + hk) · Sk + j) · D. The row count fits 32 bits, the element offset not: K and
     V of the check's longest shape have more than 2^31 elements. Widen before multiplying by D
     (.to(tl.int64)); the loop adds each tile's start, also widened, to kv_base.
  3. Rows at or past Sq (the last block) and keys at or past Sk (the last tile) are not
     there: load them under a mask with other=0.0 (q: row_in[:, None]; k and v: in_k[:, None])
     and never store those rows.
  4. seen is (BM, BN): in_k[None, :] for every row, and causal also
     key[None, :] <= rows[:, None] + diag. (causal == 0) | (...) covers both variants.
  5. tl.dot(q, tl.trans(k)) is (BM, D) x (D, BN), accumulated in fp32. A zero-filled key
     past Sk scores 0, not -inf: tl.where(seen, s, float("-inf")).
  6. m_new = max(m_i, rowmax(s) · scale_log2) (tl.max(s, 1)); alpha = exp2(m_i - m_new);
     p = exp2(s · scale_log2 - m_new[:, None]). A row that has seen no key yet has
     m_new = -inf, and -inf - (-inf) is NaN: subtract 0 instead there
     (tl.where(m_new == float("-inf"), 0.0, m_new)), so that p and alpha come out 0.
  7. acc = acc · alpha[:, None], then tl.dot(p.to(v.dtype), v, acc): the tensor cores take
     16-bit operands. l_i = l_i · alpha + tl.sum(p, 1).
  8. l = 0 marks a row that saw no key (its acc is 0): divide by 1 there, and write L = -inf
     (tl.where). O goes to o_ptr + q_off as O's type (o.to(o_ptr.dtype.element_ty)), L to
     lse_ptr + (b · Hq + h) · Sq + rows, both under row_in. GRID is a C expression over the
     kernel's non-constexpr arguments: ((Sq + 127) / 128) row blocks for each of BH pairs.
"""
import triton
import triton.language as tl


@triton.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, BH, Hq, Hkv, Sq, Sk, causal, scale_log2,
                         D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    row_blocks = tl.cdiv(Sq, BM)                        # blocks of BM query rows in one (batch, head)
    # TODO 1: this program's block of query rows rb, its batch entry b and its query head h (hint 1).
    rb = 0
    b = 0
    h = 0
    # end of TODO 1
    # TODO 2: the K/V head hk that query head h reads: grouped-query attention (hint 1).
    hk = 0
    # end of TODO 2
    q0 = rb * BM                                        # the block's first query row
    rows = q0 + tl.arange(0, BM)                        # (BM,) the block's query positions
    kn = tl.arange(0, BN)                               # (BN,) key positions inside a tile
    dd = tl.arange(0, D)                                # (D,)  columns of a row
    # TODO 3: q_off, the (BM, D) offsets of the block's rows in Q (and O), and kv_base, where the K/V head starts, in 64 bits (hint 2).
    q_off = tl.zeros((BM, D), tl.int64)
    kv_base = 0
    # end of TODO 3
    # TODO 4: row_in, which of the block's rows are queries: the last block may reach past Sq (hint 3).
    row_in = rows < 0
    # end of TODO 4
    # TODO 5: load the block's rows of Q, (BM, D), 0 in the rows past Sq (hint 3).
    q = tl.zeros((BM, D), q_ptr.dtype.element_ty)
    # end of TODO 5

    # The keys the block sees: every one, or causal, up to its last row's diagonal (query i
    # sees key j iff j <= i + diag). Tiles past them are never loaded.
    diag = Sk - Sq
    n_keys = Sk
    if causal != 0:
        n_keys = tl.minimum(tl.maximum(tl.minimum(q0 + BM, Sq) + diag, 0), Sk)
    kv_off = kn[:, None] * D + dd[None, :]             # (BN, D) offsets inside a K or V tile
    m_i = tl.full((BM,), float("-inf"), tl.float32)    # running max of the scores, base 2
    l_i = tl.zeros((BM,), tl.float32)                   # running sum of p
    acc = tl.zeros((BM, D), tl.float32)                 # running sum of p · v
    for start_n in range(0, n_keys, BN):
        kv_t = kv_base + start_n.to(tl.int64) * D      # the tile's first key
        key = start_n + kn                              # (BN,) the tile's key positions
        # TODO 6: in_k, the tile's keys before Sk, and seen (BM, BN): the keys each row sees, causal or not (hint 4).
        in_k = key < 0
        seen = (rows[:, None] < 0) & in_k[None, :]
        # end of TODO 6
        # TODO 7: load the tile's rows of K and of V, (BN, D) each, 0 past Sk (hint 3).
        k = tl.zeros((BN, D), k_ptr.dtype.element_ty)
        v = tl.zeros((BN, D), v_ptr.dtype.element_ty)
        # end of TODO 7
        # TODO 8: the tile's scores s = q · kᵀ, (BM, BN) fp32 on the tensor cores, -inf where a row does not see a key (hint 5).
        s = tl.zeros((BM, BN), tl.float32)
        # end of TODO 8
        # TODO 9: the new running max m_new (base 2), the correction alpha of the old state, and p, all without a NaN (hint 6).
        m_new = m_i
        alpha = tl.full((BM,), 1.0, tl.float32)
        p = tl.zeros((BM, BN), tl.float32)
        # end of TODO 9
        # TODO 10: correct acc by alpha, then add p · v: p in v's dtype, tl.dot on the tensor cores (hint 7).
        # end of TODO 10
        # TODO 11: the running sum l: its old terms corrected by alpha, plus the tile's sum of p (hint 7).
        # end of TODO 11
        m_i = m_new

    # TODO 12: O = acc / l in O's dtype and L = (m + log2 l) · ln 2, stored for the rows before Sq; O = 0 and L = -inf where l = 0 (hint 8).
    # end of TODO 12


# The launch grid, a C expression over the kernel's non-constexpr arguments (BH = B · Hq, Hq,
# Hkv, Sq, Sk, causal, scale_log2): every block of the 128 query rows of every (batch, head),
# all on axis 0 (B · Hq may pass 65,535, the limit of the y and z axes).
# TODO 13: one program per 128 query rows (Sq rounded up) of each of the BH (batch, head) pairs (hint 8).
GRID = "1, 1, 1"
# end of TODO 13

# What the build compiles: bf16 and fp16, head dims 64 and 128, one tile configuration (BM =
# 128 query rows, BN = 64 keys a tile, eight warps: two warpgroups, three stages of K and V in
# flight). Shared memory: Q's tile and three of each K/V tile, 64 KB at D = 64 and 128 KB at
# D = 128.
AOT = [dict(name=f"tr_ex_attention_{dt}_d{d}", kernel="attention_fwd_kernel",
            signature=(f"*{ty}:16, *{ty}:16, *{ty}:16, *{ty}:16, *fp32:16, i32, i32, i32, i32, i32, i32, fp32, "
                       f"{d}, 128, 64"),
            grid=GRID, num_warps=8, num_stages=3)
       for dt, ty in (("bf16", "bf16"), ("f16", "fp16"))
       for d in (64, 128)]
