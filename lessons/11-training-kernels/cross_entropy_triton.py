"""Lesson 11, Triton track: the fused cross-entropy, forward and backward, f32 and bf16.

Logits {rows, vocab}, row-major; targets int32, IGNORE (-100) ignores a row (training.cuh).

Forward, ce_fwd_kernel, one program per row, the row read once: a loop over the vocabulary in
BLOCK-wide steps keeps a running max m and sum s PER LANE (the online softmax, no reduction
across lanes inside the loop). Either x or m is the lane's new max, so one exp an element
covers both cases: with d = x - m formed first in fp32, e = exp(-|d|) is the smaller over the
larger, and s becomes s * e + 1 (x is the new max) or s + e. m starts at -FLT_MAX, not -inf,
so that a masked lane (x = -inf) gives e = 0 and never -inf - -inf. After the loop the lanes
are joined at the row max M: S = sum(s_lane * exp(m_lane - M)), and the program writes
lse = M + log S and the row's loss term (M - x_t) + log S, 0 in an ignored row: M - x_t first
keeps the term's error relative to itself (lse - x_t would carry lse's rounding, large beside
a term near 0; cross_entropy_ops.cu derives the tolerances). A second kernel,
ce_loss_kernel, one program, sums the terms in fp64 in a fixed order (per-lane sums over row
blocks, then one tl.sum tree), counts the rows not ignored and writes their mean, 0 if there
are none: deterministic, no atomics.

Backward, ce_bwd_kernel, one program per CHUNK of a row: d = scale * (exp(x - lse) - [j = t])
with x - lse formed first, written to dlogits or over the logits (variant inplace: the same
pointer twice; each element is read and then written by the same thread). An ignored row
reads nothing (its loads are masked off: x = -inf, exp = 0) and writes zeros.

Vector accesses on rows of any length. A row of 50,257 bf16 logits starts anywhere in a
16-byte word, so a loop over `r * vocab + j` under `j < vocab` moves one element an
instruction. Each row is instead split at the 16-byte boundaries of the flat tensor (ALIGN
elements: 8 in bf16, 4 in f32): the body [b0, b1), from the first boundary at or after the
row's start to the last at or before its end, runs the BLOCK loop under the mask `offs < b1`,
which Triton can prove constant over each ALIGN-run (b0 and b1 are multiples of ALIGN by
construction, the logits pointer is hinted 16-byte aligned), so every access is 16 bytes;
the head [start, b0) and the tail [b1, end), fewer than ALIGN elements each, are one
ALIGN-wide masked access apiece. No size hint is needed: the AOT list has one entry a
configuration. Offsets are 64-bit (the program's row widened first): 42,800 rows of 50,257
pass 2^31 elements.

Compiled ahead of time by tools/triton_aot.py into cross_entropy_triton.c/.h (the AOT list at
the bottom); cross_entropy_triton_impl.cu registers them as the `triton` impl of
cross_entropy_fwd and of cross_entropy_bwd.
"""
import triton
import triton.language as tl

IGNORE = tl.constexpr(-100)                      # training.cuh's kIgnoreIndex
FLT_MAX = tl.constexpr(3.4028234663852886e38)
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _ex2(x):
    """2^x on one MUFU.EX2 (PTX ex2.approx.ftz.f32). tl.exp and tl.exp2 are the same
    ex2.approx without .ftz, which ptxas wraps in a compare and two predicated multiplies for
    subnormal inputs and results (lesson 04's softmax_triton.py has the same helper). In the
    bf16 forward, 2 bytes an element, the loop's instructions are what may keep it from the
    bandwidth: with tl.exp its SASS was about 15.6 instructions an element, with this and
    the |d| folded into one multiply 11.6 (tools/triton_ptx.py --sass, sm_90). Flushed here,
    a result under 2^-126 becomes 0: a term of a sum of at least 1, or a gradient entry that
    small, far under every tolerance."""
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                     is_pure=True, pack=1)


@triton.jit
def _exp(d):
    """e^d for a difference d the caller formed first in fp32 (x - m, x - lse)."""
    return _ex2(d * LOG2E)


@triton.jit
def _row_body(r, vocab, ALIGN: tl.constexpr):
    """Row r's flat span [lo, hi) and its body [b0, b1) between 16-byte boundaries. A row
    inside one ALIGN-run has b1 < b0: no body, the head alone covers it."""
    lo = r * vocab
    hi = lo + vocab
    b0 = ((lo + ALIGN - 1) // ALIGN) * ALIGN
    b1 = (hi // ALIGN) * ALIGN
    return lo, hi, b0, b1


@triton.jit
def _load_edge(x_ptr, first, limit, ALIGN: tl.constexpr):
    """Up to ALIGN elements from first, those before limit, as fp32 (-inf elsewhere)."""
    offs = first + tl.arange(0, ALIGN)
    return tl.load(x_ptr + offs, mask=offs < limit, other=-float("inf")).to(tl.float32)


@triton.jit
def ce_fwd_kernel(x_ptr, t_ptr, lse_ptr, term_ptr, rows, vocab,
                  BLOCK: tl.constexpr, ALIGN: tl.constexpr, PREFETCH: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)                  # grid: one program per row
    lo, hi, b0, b1 = _row_body(r, vocab, ALIGN)
    t = tl.load(t_ptr + r)
    valid = t != IGNORE
    x_t = tl.load(x_ptr + lo + t, mask=valid, other=0.0).to(tl.float32)
    m_lane = tl.full((BLOCK,), -FLT_MAX, tl.float32)
    s_lane = tl.zeros((BLOCK,), tl.float32)
    if PREFETCH:                                       # each step loads the next block first
        offs = b0 + tl.arange(0, BLOCK)
        x_next = tl.load(x_ptr + offs, mask=offs < b1, other=-float("inf"))
    for start in range(b0, b1, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        if PREFETCH:
            x = x_next.to(tl.float32)
            x_next = tl.load(x_ptr + offs + BLOCK, mask=offs + BLOCK < b1, other=-float("inf"))
        else:
            x = tl.load(x_ptr + offs, mask=offs < b1, other=-float("inf")).to(tl.float32)
        d = x - m_lane
        e = _ex2(tl.abs(d) * -LOG2E)                  # one FMUL: |d| and the sign are operand modifiers
        s_lane = tl.where(d > 0.0, s_lane * e + 1.0, s_lane + e)
        m_lane = tl.maximum(m_lane, x)
    head = _load_edge(x_ptr, lo, tl.minimum(b0, hi), ALIGN)
    tail = _load_edge(x_ptr, tl.maximum(b0, b1), hi, ALIGN)
    m = tl.maximum(tl.max(m_lane, axis=0), tl.maximum(tl.max(head, axis=0), tl.max(tail, axis=0)))
    s = (tl.sum(s_lane * _exp(m_lane - m), axis=0) + tl.sum(_exp(head - m), axis=0) +
         tl.sum(_exp(tail - m), axis=0))
    log_s = tl.log(s)
    tl.store(lse_ptr + r, m + log_s)
    tl.store(term_ptr + r, tl.where(valid, (m - x_t) + log_s, 0.0))


@triton.jit
def ce_loss_kernel(term_ptr, t_ptr, loss_ptr, rows, BLOCK: tl.constexpr):
    # grid: one program. fp64 per lane, then one tree: the same sum every run.
    acc = tl.zeros((BLOCK,), tl.float64)
    count = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, rows, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < rows
        acc += tl.load(term_ptr + offs, mask=inside, other=0.0).to(tl.float64)
        count += (tl.load(t_ptr + offs, mask=inside, other=IGNORE) != IGNORE).to(tl.int32)
    total = tl.sum(acc, axis=0)
    n = tl.sum(count, axis=0)
    loss = tl.where(n > 0, total / tl.maximum(n, 1).to(tl.float64), 0.0)
    tl.store(loss_ptr, loss.to(tl.float32))


@triton.jit
def _grad(x, j, tj, lse, scale):
    """scale * (exp(x - lse) - [j = tj]) for a block of logits x at in-block indices j."""
    p = _exp(x - lse)
    return scale * tl.where(j == tj, p - 1.0, p)


@triton.jit
def _grad_edge(x_ptr, d_ptr, first, limit, valid, tpos, lse, scale, ALIGN: tl.constexpr):
    """The gradient of the up to ALIGN elements from first that lie before limit."""
    offs = first + tl.arange(0, ALIGN)
    edge = offs < limit
    x = tl.load(x_ptr + offs, mask=edge & valid, other=-float("inf")).to(tl.float32)
    tj = tl.minimum(tl.maximum(tpos - first, -1), ALIGN).to(tl.int32)
    d = _grad(x, tl.arange(0, ALIGN), tj, lse, scale)
    tl.store(d_ptr + offs, d.to(d_ptr.dtype.element_ty), mask=edge)


@triton.jit
def ce_bwd_kernel(x_ptr, t_ptr, lse_ptr, d_ptr, rows, vocab, chunks, scale,
                  BLOCK: tl.constexpr, CHUNK: tl.constexpr, ALIGN: tl.constexpr):
    pid = tl.program_id(0)                             # grid: rows * chunks programs
    r = (pid // chunks).to(tl.int64)
    c = pid % chunks
    lo, hi, b0, b1 = _row_body(r, vocab, ALIGN)
    t = tl.load(t_ptr + r)
    lse = tl.load(lse_ptr + r)
    valid = t != IGNORE
    tpos = tl.where(valid, lo + t, -1)                 # the target's flat index (-1: none)
    cs = b0 + c.to(tl.int64) * CHUNK                   # this program's part of the body
    ce = tl.minimum(cs + CHUNK, b1)
    for start in range(cs, ce, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < b1                             # CHUNK is a multiple of BLOCK: only b1 cuts a step
        x = tl.load(x_ptr + offs, mask=inside & valid, other=-float("inf")).to(tl.float32)
        # The target as an in-block index in 32 bits (one compare an element, not two).
        tj = tl.minimum(tl.maximum(tpos - start, -1), BLOCK).to(tl.int32)
        d = _grad(x, tl.arange(0, BLOCK), tj, lse, scale)
        tl.store(d_ptr + offs, d.to(d_ptr.dtype.element_ty), mask=inside)
    if c == 0:                                         # the head and the tail, by the first chunk
        _grad_edge(x_ptr, d_ptr, lo, tl.minimum(b0, hi), valid, tpos, lse, scale, ALIGN)
        _grad_edge(x_ptr, d_ptr, tl.maximum(b0, b1), hi, valid, tpos, lse, scale, ALIGN)


# The configurations. Forward (BLOCK, warps, PREFETCH), one launcher a dtype linking them in
# this order (algo_id; kFwdNames in cross_entropy_triton_impl.cu names them the same way, in
# the same order); the impl times them on the first call for a shape and keeps the fastest.
# The lane state is two fp32 registers for each of the BLOCK / (32 warps) elements a thread
# holds, so that ratio sets the registers, hence how many programs share an SM and how many
# bytes each has in flight; PREFETCH doubles the bytes in flight for the registers of one
# more block. Backward (BLOCK, warps, CHUNK): no state; CHUNK elements of a row a program;
# the first is the default (kBwdNames: the in-place variant cannot be timed by running it
# again, so the backward is not autotuned; `--candidate` runs the others).
FWD_CONFIGS = ((2048, 8, 1), (4096, 8, 0), (2048, 8, 0), (4096, 8, 1), (2048, 4, 0))
BWD_CONFIGS = ((2048, 4, 16384), (4096, 8, 16384), (2048, 8, 8192))
DTYPES = {"f32": ("fp32", 4), "bf16": ("bf16", 8)}   # launcher suffix: (Triton type, ALIGN)
LOSS_BLOCK = 1024


def _aot():
    out = []
    for tag, (ty, align) in DTYPES.items():
        for block, warps, prefetch in FWD_CONFIGS:
            out.append(dict(name=f"tr_ce_fwd_{tag}", kernel="ce_fwd_kernel",
                            signature=f"*{ty}:16, *i32:16, *fp32:16, *fp32:16, i32, i64, {block}, {align}, {prefetch}",
                            grid="rows, 1, 1", num_warps=warps, num_stages=1))
        for block, warps, chunk in BWD_CONFIGS:
            out.append(dict(name=f"tr_ce_bwd_{tag}", kernel="ce_bwd_kernel",
                            signature=(f"*{ty}:16, *i32:16, *fp32:16, *{ty}:16, i32, i64, i32, fp32, "
                                       f"{block}, {chunk}, {align}"),
                            grid="rows * chunks, 1, 1", num_warps=warps, num_stages=1))
    out.append(dict(name="tr_ce_loss", kernel="ce_loss_kernel",
                    signature=f"*fp32:16, *i32:16, *fp32, i32, {LOSS_BLOCK}", grid="1, 1, 1",
                    num_warps=4, num_stages=1))
    return out


# What the build compiles. The grids: a row a program (forward), a CHUNK of a row a program
# (backward); `rows` is an argument of the grid alone.
AOT = _aot()
