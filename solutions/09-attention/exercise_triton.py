"""Lesson 09 exercise, Triton track, completed: the flash attention forward with tl.dot.

The solution of lessons/09-attention/exercise_triton.py, built into klab-solutions, never
into klab. Each TODO region below is what the learner writes; tools/todo_proof.py blanks
each in turn to prove that the check fails without it, and makes the two mistakes its
markers name (the running max left out of p; the causal diagonal one key short).
"""
import triton
import triton.language as tl


@triton.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, BH, Hq, Hkv, Sq, Sk, causal, scale_log2,
                         D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    row_blocks = tl.cdiv(Sq, BM)                        # blocks of BM query rows in one (batch, head)
    # TODO 1: this program's block of query rows rb, its batch entry b and its query head h (hint 1).
    bh = pid // row_blocks
    rb = pid % row_blocks
    b = bh // Hq
    h = bh % Hq
    # end of TODO 1
    # TODO 2: the K/V head hk that query head h reads: grouped-query attention (hint 1).
    hk = h // (Hq // Hkv)
    # end of TODO 2
    q0 = rb * BM                                        # the block's first query row
    rows = q0 + tl.arange(0, BM)                        # (BM,) the block's query positions
    kn = tl.arange(0, BN)                               # (BN,) key positions inside a tile
    dd = tl.arange(0, D)                                # (D,)  columns of a row
    # TODO 3: q_off, the (BM, D) offsets of the block's rows in Q (and O), and kv_base, where the K/V head starts, in 64 bits (hint 2).
    q_off = ((b * Hq + h) * Sq + rows).to(tl.int64)[:, None] * D + dd[None, :]
    kv_base = ((b * Hkv + hk) * Sk).to(tl.int64) * D
    # end of TODO 3
    # TODO 4: row_in, which of the block's rows are queries: the last block may reach past Sq (hint 3).
    row_in = rows < Sq
    # end of TODO 4
    # TODO 5: load the block's rows of Q, (BM, D), 0 in the rows past Sq (hint 3).
    q = tl.load(q_ptr + q_off, mask=row_in[:, None], other=0.0)
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
        in_k = key < Sk
        # mistake causal_off_by_one (check): seen = in_k[None, :] & ((causal == 0) | (key[None, :] < rows[:, None] + diag))
        seen = in_k[None, :] & ((causal == 0) | (key[None, :] <= rows[:, None] + diag))
        # end of TODO 6
        # TODO 7: load the tile's rows of K and of V, (BN, D) each, 0 past Sk (hint 3).
        k = tl.load(k_ptr + kv_t + kv_off, mask=in_k[:, None], other=0.0)
        v = tl.load(v_ptr + kv_t + kv_off, mask=in_k[:, None], other=0.0)
        # end of TODO 7
        # TODO 8: the tile's scores s = q · kᵀ, (BM, BN) fp32 on the tensor cores, -inf where a row does not see a key (hint 5).
        s = tl.dot(q, tl.trans(k))
        s = tl.where(seen, s, float("-inf"))
        # end of TODO 8
        # TODO 9: the new running max m_new (base 2), the correction alpha of the old state, and p, all without a NaN (hint 6).
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_use)
        # mistake no_running_max (check): p = tl.math.exp2(s * scale_log2)
        p = tl.math.exp2(s * scale_log2 - m_use[:, None])
        # end of TODO 9
        # TODO 10: correct acc by alpha, then add p · v: p in v's dtype, tl.dot on the tensor cores (hint 7).
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        # end of TODO 10
        # TODO 11: the running sum l: its old terms corrected by alpha, plus the tile's sum of p (hint 7).
        l_i = l_i * alpha + tl.sum(p, 1)
        # end of TODO 11
        m_i = m_new

    # TODO 12: O = acc / l in O's dtype and L = (m + log2 l) · ln 2, stored for the rows before Sq; O = 0 and L = -inf where l = 0 (hint 8).
    saw_key = l_i > 0.0
    o = acc / tl.where(saw_key, l_i, 1.0)[:, None]
    tl.store(o_ptr + q_off, o.to(o_ptr.dtype.element_ty), mask=row_in[:, None])
    lse = tl.where(saw_key, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, float("-inf"))
    tl.store(lse_ptr + (b * Hq + h) * Sq + rows, lse, mask=row_in)
    # end of TODO 12


# The launch grid, a C expression over the kernel's non-constexpr arguments (BH = B · Hq, Hq,
# Hkv, Sq, Sk, causal, scale_log2): every block of the 128 query rows of every (batch, head),
# all on axis 0 (B · Hq may pass 65,535, the limit of the y and z axes).
# TODO 13: one program per 128 query rows (Sq rounded up) of each of the BH (batch, head) pairs (hint 8).
GRID = "((Sq + 127) / 128) * BH, 1, 1"
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
