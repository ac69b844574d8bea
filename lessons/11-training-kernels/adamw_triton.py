"""Lesson 11, Triton track: AdamW over many fp32 tensors, one launch a step for all of them.

A model's parameters are hundreds of tensors of mixed sizes; one launch per tensor pays a
launch and a ragged last wave per tensor (v1_per_tensor). Here every tensor of a step is cut
into chunks of CHUNK elements, and one grid has a program per chunk of every tensor, as
v2_multi_tensor does in CUDA. The launcher (adamw_triton_impl.cu, run_triton) writes a table
into the impl's workspace before the first step:

    table    int64, ROW = 8 words a tensor (a 64-byte row): p, g (step 0's row), m, v, p16
             (0 without the bf16 copy), n (its elements), its first chunk, one unused
    ends     int32, the chunk each tensor ends at (a prefix sum of ceil(n_k / CHUNK); an
             empty tensor takes no chunk, so entries repeat), padded with INT32_MAX to a
             multiple of SCAN
    partials fp32, PARTS entries: the clip variant's sums of squares

Program c finds its tensor k as the count of ends <= c (a vectorized compare-and-count over
SCAN entries at a time: one round of loads, where a binary search waits on one load after
another), reads its row, and updates elements [(c - its first chunk) * CHUNK, + CHUNK) of tensor k
with exactly klab::adamw_update's arithmetic (klab/device/adamw.cuh) and the step's constants
(klab::AdamWStep, passed as fp32 scalars): the IEEE square root (tl.sqrt_rn, what sqrtf is
under nvcc's default -prec-sqrt=true) and an IEEE division (tl.div_rn: Triton's `/` is
div.full.f32, within 2 ulp, where nvcc's `/` rounds correctly). Step s reads its gradient at
g + s * n * 4 bytes.

Vector loads without size hints. The tensors' addresses come from memory, so Triton knows
nothing of their alignment; ALIGNED = 1 (the launcher's choice when every address of the step
is 16-byte aligned: always at steps = 1, as cudaMalloc aligns each tensor) declares them
so with tl.multiple_of. A mask `offs < n` with n unknown would still cut every load to one
element; the loop instead masks with n4 = (n // 4) * 4, which Triton can prove a multiple of
4, so each 4-element run is wholly in or out and moves as one 16-byte vector. The last n - n4
(< 4) elements of a tensor are one more masked block in the program of its last chunk.

Clipping (CLIP = 1) needs the norm of all of the step's gradients before any update: a first
kernel, adamw_sumsq_kernel, runs PARTS programs, each summing g^2 over the chunks c = pid,
pid + PARTS, ... into a per-lane fp32 accumulator, and writes one partial. Every update
program then sums the PARTS partials with the same tl.sum (a fixed tree: every program gets
the same bits, every run the same result; no atomics) and scales its gradients by
clip_coefficient(sqrt(sum), max_norm) = min(1, max_norm / (norm + 1e-6)), training.cuh's.

Compiled ahead of time by tools/triton_aot.py into adamw_triton.c/.h (the AOT list at the
bottom); adamw_triton_impl.cu registers the launcher as the `triton` impl of adamw.
"""
import triton
import triton.language as tl

ROW = tl.constexpr(8)   # int64 words per tensor in the table (TableRow in adamw_triton_impl.cu)
CHUNKS = (8192, 4096)   # elements a program updates: the linked configurations (kChunks)
BLOCK = 1024     # elements per loop step: 8 a thread at 4 warps, two 16-byte vectors per array
SCAN = 512       # ends entries compared per step of the tensor search
PARTS = 1024     # programs (and partials) of the sum of squares (kParts)


@triton.jit
def _tensor_of(ends_ptr, tensors, chunk, SCAN: tl.constexpr):
    """The tensor that chunk belongs to: how many tensors end at or before it (ends is
    non-decreasing; an empty tensor ends where it starts, so it is counted past, never
    chosen). The launcher pads ends to a multiple of SCAN with INT32_MAX: no mask, and
    each thread's entries load as vectors."""
    count = 0
    for b in range(0, tensors, SCAN):
        e = tl.load(ends_ptr + b + tl.arange(0, SCAN))
        count += tl.sum((e <= chunk).to(tl.int32), axis=0)
    return count


@triton.jit
def _f32_ptr(word, ALIGNED: tl.constexpr):
    """A table word as an fp32 pointer; ALIGNED: known to be 16-byte aligned."""
    ptr = word.to(tl.pointer_type(tl.float32))
    if ALIGNED:
        ptr = tl.multiple_of(ptr, 16)
    return ptr


@triton.jit
def _update(p_ptr, g_ptr, m_ptr, v_ptr, p16_ptr, offs, mask, coef,
            beta1, omb1, beta2, omb2, eps, decay, step_size, inv_sqrt_bc2, CLIP: tl.constexpr, COPY: tl.constexpr):
    """klab::adamw_update on the elements at offs (under mask), in place."""
    p = tl.load(p_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask)
    m = tl.load(m_ptr + offs, mask=mask)
    v = tl.load(v_ptr + offs, mask=mask)
    if CLIP:
        g = g * coef
    p = p * decay
    m = beta1 * m + omb1 * g
    v = beta2 * v + omb2 * g * g
    p = p - tl.div_rn(step_size * m, tl.sqrt_rn(v) * inv_sqrt_bc2 + eps)
    tl.store(p_ptr + offs, p, mask=mask)
    tl.store(m_ptr + offs, m, mask=mask)
    tl.store(v_ptr + offs, v, mask=mask)
    if COPY:
        tl.store(p16_ptr + offs, p.to(tl.bfloat16), mask=mask)


@triton.jit
def adamw_update_kernel(table_ptr, ends_ptr, part_ptr, tensors, chunks, step, max_norm,
                        beta1, omb1, beta2, omb2, eps, decay, step_size, inv_sqrt_bc2,
                        CHUNK: tl.constexpr, BLOCK: tl.constexpr, SCAN: tl.constexpr, PARTS: tl.constexpr,
                        ALIGNED: tl.constexpr, CLIP: tl.constexpr, COPY: tl.constexpr):
    c = tl.program_id(0)                                  # grid: one program per chunk (chunks)
    k = _tensor_of(ends_ptr, tensors, c, SCAN)
    row = table_ptr + k.to(tl.int64) * ROW              # p, g, m, v, p16, n, first chunk
    n = tl.load(row + 5)                                  # int64
    p_ptr = _f32_ptr(tl.load(row + 0), ALIGNED)
    g_ptr = _f32_ptr(tl.load(row + 1) + step * n * 4, ALIGNED)   # this step's row: 4 bytes an element
    m_ptr = _f32_ptr(tl.load(row + 2), ALIGNED)
    v_ptr = _f32_ptr(tl.load(row + 3), ALIGNED)
    p16_ptr = tl.load(row + 4).to(tl.pointer_type(tl.bfloat16))
    if ALIGNED:
        # 8 bytes, not 16: the copy's 4-element runs (the fp32 runs' length) then share the
        # fp32 arrays' layout; hinted 16, Triton gave the copy runs of 8 and moved p, m and v
        # through shared memory into that layout.
        p16_ptr = tl.multiple_of(p16_ptr, 8)
    coef = 1.0
    if CLIP:
        # Every program sums the same partials in the same tree: one norm, bit for bit.
        sq = tl.sum(tl.load(part_ptr + tl.arange(0, PARTS)), axis=0)
        coef = tl.minimum(1.0, tl.div_rn(max_norm, tl.sqrt_rn(sq) + 1e-6))
    start = (c - tl.load(row + 6)).to(tl.int64) * CHUNK
    end = tl.minimum(start + CHUNK, n)
    n4 = (n // 4) * 4                                     # provably a multiple of 4
    for i in range(start, end, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        _update(p_ptr, g_ptr, m_ptr, v_ptr, p16_ptr, offs, offs < n4, coef,
                beta1, omb1, beta2, omb2, eps, decay, step_size, inv_sqrt_bc2, CLIP, COPY)
    if (end == n) & (n4 < n):                             # the tensor's last n - n4 elements
        offs = n4 + tl.arange(0, BLOCK)
        _update(p_ptr, g_ptr, m_ptr, v_ptr, p16_ptr, offs, offs < n, coef,
                beta1, omb1, beta2, omb2, eps, decay, step_size, inv_sqrt_bc2, CLIP, COPY)


@triton.jit
def adamw_sumsq_kernel(table_ptr, ends_ptr, part_ptr, tensors, chunks, step,
                       CHUNK: tl.constexpr, BLOCK: tl.constexpr, SCAN: tl.constexpr, PARTS: tl.constexpr,
                       ALIGNED: tl.constexpr):
    pid = tl.program_id(0)                                # grid: PARTS programs
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(pid, chunks, PARTS):
        k = _tensor_of(ends_ptr, tensors, c, SCAN)
        row = table_ptr + k.to(tl.int64) * ROW
        n = tl.load(row + 5)
        g_ptr = _f32_ptr(tl.load(row + 1) + step * n * 4, ALIGNED)
        start = (c - tl.load(row + 6)).to(tl.int64) * CHUNK
        end = tl.minimum(start + CHUNK, n)
        n4 = (n // 4) * 4
        for i in range(start, end, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            g = tl.load(g_ptr + offs, mask=offs < n4, other=0.0)
            acc += g * g
        if (end == n) & (n4 < n):
            offs = n4 + tl.arange(0, BLOCK)
            g = tl.load(g_ptr + offs, mask=offs < n, other=0.0)
            acc += g * g
    tl.store(part_ptr + pid, tl.sum(acc, axis=0))


# The launchers: tr_adamw_<variant>_<aligned|any>, the update of each variant, and
# tr_adamw_sumsq_<aligned|any>, the clip variant's first kernel; `aligned` declares every
# address 16-byte aligned (ALIGNED = 1), `any` assumes nothing (one element a load: the
# steps past the first of a tensor whose size is no multiple of 4). Each links the CHUNKS
# in their order (algo_id; adamw_triton_impl.cu's kChunks): 8192 by default, 4096 a
# candidate (`--candidate 4096`): twice the programs, each paying its tensor search and row
# loads before its first byte streams, against a shorter last wave. Grids: a program per
# chunk of every tensor (the argument chunks), PARTS programs for the sum of squares.
_TABLE = "*i64:16, *i32:16, *fp32:16, i32, i32, i32"
_VARIANTS = {"plain": (0, 0), "clip": (1, 0), "bf16_copy": (0, 1)}   # (CLIP, COPY)
AOT = []
for _aligned, _tag in ((1, "aligned"), (0, "any")):
    for _variant, (_clip, _copy) in _VARIANTS.items():
        for _chunk in CHUNKS:
            AOT.append(dict(name=f"tr_adamw_{_variant}_{_tag}", kernel="adamw_update_kernel",
                            signature=(f"{_TABLE}, fp32, fp32, fp32, fp32, fp32, fp32, fp32, fp32, fp32, "
                                       f"{_chunk}, {BLOCK}, {SCAN}, {PARTS}, {_aligned}, {_clip}, {_copy}"),
                            grid="chunks, 1, 1", num_warps=4, num_stages=1))
    for _chunk in CHUNKS:
        AOT.append(dict(name=f"tr_adamw_sumsq_{_tag}", kernel="adamw_sumsq_kernel",
                        signature=f"{_TABLE}, {_chunk}, {BLOCK}, {SCAN}, {PARTS}, {_aligned}",
                        grid=f"{PARTS}, 1, 1", num_warps=4, num_stages=1))
