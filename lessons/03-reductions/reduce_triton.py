"""Lesson 03, Triton track: sum and argmax (max with its index, ties to the lowest index).

Both are two launches, like the CUDA v2 versions:
  stage 1: program p reduces the chunk [p * CHUNK, (p + 1) * CHUNK) of x, BLOCK elements
           per step, keeping a BLOCK-wide vector of running results; at the end one
           tl.sum / tl.max over the vector gives the chunk's partial;
  stage 2: a single program reduces the partials the same way.
The per-lane vectors are combined in a fixed order, so the results are deterministic.

argmax: lane j of the vector sees indices j, j + BLOCK, j + 2 BLOCK, ... in increasing
order and replaces its best only on a strictly greater value, so it keeps the lowest
index of its maximum; across lanes (and across chunks in stage 2) the lowest index among
the entries equal to the maximum wins. Inputs are assumed finite (no NaN).

Compiled ahead of time by tools/triton_aot.py (AOT list at the bottom);
lessons/03-reductions/sum.cu and argmax.cu register the launchers as the `triton` impls.
"""
import triton
import triton.language as tl


@triton.jit
def sum_stage1(x_ptr, part_ptr, n, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    base = pid * CHUNK
    acc = tl.zeros((BLOCK,), dtype=part_ptr.dtype.element_ty)       # fp32 or int32 (wraps)
    for start in range(0, CHUNK, BLOCK):
        offs = base + start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(part_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def sum_stage2(part_ptr, out_ptr, m, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=out_ptr.dtype.element_ty)
    for start in range(0, m, BLOCK):                                 # m may be 0: writes 0
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(part_ptr + offs, mask=offs < m, other=0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


@triton.jit
def _argmax_vec(val, idx):
    """(max, lowest index holding it) of a vector of (value, index) pairs."""
    m = tl.max(val, axis=0)
    big = tl.full(idx.shape, 2147483647, tl.int32)
    return m, tl.min(tl.where(val == m, idx, big), axis=0)


@triton.jit
def argmax_stage1(x_ptr, pval_ptr, pidx_ptr, n, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    base = pid * CHUNK
    best_v = tl.full((BLOCK,), float("-inf"), tl.float32)
    best_i = tl.full((BLOCK,), 2147483647, tl.int32)
    for start in range(0, CHUNK, BLOCK):
        offs = base + start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=float("-inf"))
        take = v > best_v                                           # strict: keep the earlier index
        best_v = tl.where(take, v, best_v)
        best_i = tl.where(take, offs.to(tl.int32), best_i)          # n < 2^31 (argmax.cu checks)
    m, i = _argmax_vec(best_v, best_i)
    tl.store(pval_ptr + pid, m)
    tl.store(pidx_ptr + pid, i)


@triton.jit
def argmax_stage2(pval_ptr, pidx_ptr, val_ptr, idx_ptr, m, BLOCK: tl.constexpr):
    best_v = tl.full((BLOCK,), float("-inf"), tl.float32)
    best_i = tl.full((BLOCK,), 2147483647, tl.int32)
    for start in range(0, m, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < m
        v = tl.load(pval_ptr + offs, mask=mask, other=float("-inf"))
        i = tl.load(pidx_ptr + offs, mask=mask, other=2147483647)
        # partials arrive in chunk order, so equal values keep the earlier chunk's index
        take = (v > best_v) | ((v == best_v) & (i < best_i))
        best_v = tl.where(take, v, best_v)
        best_i = tl.where(take, i, best_i)
    mv, mi = _argmax_vec(best_v, best_i)
    tl.store(val_ptr, mv)
    tl.store(idx_ptr, mi)


# The first stages' configurations (CHUNK, BLOCK, warps), in order: the linked launcher's
# algo_ids, which reductions.cuh's kTritonStage1 names and sum.cu / argmax.cu time per shape
# (klab::autotune). CHUNK sets the number of programs: at 2^24 elements 65536 gives 256
# programs, under two per SM, and 16384 gives 1024. Each is built twice: with n hinted
# divisible by 16 (the mask `offs < n` is then known constant over 16-byte runs, so each
# load moves 16 bytes) and without (any n); the linked launcher picks by n. The second
# stages read the partials (n / CHUNK of them: 16384 at 2^28 with the smallest chunk), one
# program looping over them: one variant.
STAGE1_CONFIGS = ((65536, 4096, 8), (32768, 4096, 8), (16384, 4096, 8), (16384, 2048, 4))
STAGE1 = (("tr_sum_stage1_f32", "sum_stage1", "*fp32:16, *fp32:16, i64{h}, {chunk}, {block}"),
          ("tr_sum_stage1_i32", "sum_stage1", "*i32:16, *i32:16, i64{h}, {chunk}, {block}"),
          ("tr_argmax_stage1_f32", "argmax_stage1", "*fp32:16, *fp32:16, *i32:16, i64{h}, {chunk}, {block}"))
AOT = [dict(name=name, kernel=kernel, signature=sig.format(h=hint, chunk=chunk, block=block),
            grid=f"(n + {chunk - 1}) / {chunk}, 1, 1", num_warps=warps, num_stages=3)
       for name, kernel, sig in STAGE1 for chunk, block, warps in STAGE1_CONFIGS for hint in (":16", "")] + [
    dict(name="tr_sum_stage2_f32", kernel="sum_stage2", signature="*fp32:16, *fp32:16, i64, 1024",
         grid="1, 1, 1", num_warps=4, num_stages=1),
    dict(name="tr_sum_stage2_i32", kernel="sum_stage2", signature="*i32:16, *i32:16, i64, 1024",
         grid="1, 1, 1", num_warps=4, num_stages=1),
    dict(name="tr_argmax_stage2_f32", kernel="argmax_stage2",
         signature="*fp32:16, *i32:16, *fp32:16, *i32:16, i64, 1024",
         grid="1, 1, 1", num_warps=4, num_stages=1),
]
