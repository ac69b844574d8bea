"""Lesson 06 exercise, Triton track: the fused linear layer y = gelu(x · Wᵀ + b) in Triton.

x (M x K) and W (N x K) are row-major, so both are K-contiguous (lesson 05's layout `nt`,
the layout of every linear layer: row n of W holds the weights of output feature n); b
has N values and y is (M x N). bf16 in and out, fp32 accumulation and epilogue. Each
program owns one BM x BN tile of y: it walks K in steps of BK, loads a BM x BK tile of x
and a BK x BN tile of Wᵀ under masks (zero past M, N and K, so every shape works) and
accumulates tl.dot in fp32, as lesson 05's Triton matmul does. The fusion is the
epilogue: the bias is added to the fp32 tile still in registers, GELU is applied there,
and the tile is rounded to bf16 once, in the one store; the pre-activation x · Wᵀ + b
never goes to memory. At K = 0 the loop runs no step and the tile is gelu(b). Fill in
the four TODOs: the tile of Wᵀ read from W's rows, the bias of the tile's columns, its
addition to the accumulator, and GELU. As it stands the kernel stores 0 everywhere.

After an edit, grade it (no rebuild step: the check compiles this file first, shows one
line with the line number if it does not compile, and rebuilds klab when it changed):

    klab check 06 --triton

which checks it against an fp64 reference on unseen seeds and the edge shapes of
`klab check 06` (empty outputs, K = 0, K = 3, primes in M and N, partial tiles in M, N
and K at once), bf16 and the variant gelu, then times it against the lesson's `triton`
version. A missing bias or a missing GELU moves outputs far past the tolerance.

The AOT list compiles the kernel twice: with M, N and K hinted divisible by 16 (aligned
shapes: 16-byte loads, pipelined) and without (any shape).
`tools/triton_ptx.py lessons/06-kernel-fusion/exercise_triton.py` shows what each became.

Hints
  1. W[n, k] is at w_ptr + n * K + k, and Wᵀ[k, n] is W[n, k]: the tile's rows are this
     step's k, rk[:, None], and its columns the tile's n, rn64[None, :], so its pointers
     are w_ptr + rn64[None, :] * K + rk[:, None], the x load's pattern transposed. Mask
     it with (rk[:, None] < K) & (rn[None, :] < N) and other=0.0: a k past K then adds
     nothing to the dot product. Nothing is transposed in memory; tl.dot takes the
     (BK, BN) tile whichever of its axes is contiguous.
  2. The bias belongs to the column, the output feature n: one (BN,) row serves the
     whole tile, b[rn], as fp32: tl.load(b_ptr + rn, mask=rn < N, other=0.0) then
     .to(tl.float32). The last tile of a row reaches past column N - 1; those columns
     are never stored, but b has only N values, so the mask keeps the load inside b.
  3. acc + bias[None, :] repeats the row down the tile's BM rows: element (i, j) gets
     the bias of column rn[j]. bias[:, None] would give row i the bias of column rn[i]
     instead, and with BM = BN it even compiles.
  4. gelu(v) = 0.5 · v · (1 + tanh(u)) with u = 0.7978845608 · (v + 0.044715 · v³), in
     fp32. Since 0.5 · (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e^(-2u)), it is
     v * tl.sigmoid(2.0 * u), or with one exp2 and one division,
     v / (1.0 + tl.exp2(-2.302208198144325 * (v + 0.044715 * v * v * v))), where
     2.3022... = 2 · 0.7978845608 · log2(e). Where the power overflows, v / inf is -0,
     the limit. libdevice's tanh costs a branch an element (linear_triton.py says why).
"""
import triton
import triton.language as tl


@triton.jit
def linear_gelu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # This program's tile of y: the tiles numbered row by row, tl.cdiv(N, BN) to a row.
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BN)
    pid_m = pid // grid_n
    pid_n = pid % grid_n
    rm = pid_m * BM + tl.arange(0, BM)   # the tile's rows of y (tokens), (BM,)
    rn = pid_n * BN + tl.arange(0, BN)   # its columns (output features), (BN,)
    rm64 = rm.to(tl.int64)               # widened: m * K passes 2^31 in a large x
    rn64 = rn.to(tl.int64)

    # The main loop: acc (BM, BN) = x[rm, :] · Wᵀ[:, rn], BK of K a step, in fp32. At K = 0
    # it runs no step and acc stays 0.
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)       # this step's k, (BK,)
        # x[m, k] is at x_ptr + m * K + k: the (BM, BK) tile, zero past M and past K.
        x = tl.load(x_ptr + rm64[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        # TODO 1: the (BK, BN) tile of Wᵀ, read from W's rows rn along rk, zero past K and N (hint 1).
        w = tl.zeros((BK, BN), tl.bfloat16)
        # end of TODO 1
        acc = tl.dot(x, w, acc)

    # The epilogue, on the fp32 tile still in registers: what the fusion adds.
    # TODO 2: the bias of the tile's columns, (BN,), as fp32, loaded inside b only (hint 2).
    bias = tl.zeros((BN,), tl.float32)
    # end of TODO 2
    # TODO 3: the pre-activation v: the bias added to every row of acc (hint 3).
    v = acc
    # end of TODO 3
    # TODO 4: v = gelu(v), the tanh form, in fp32 (hint 4).
    # end of TODO 4
    # One rounding to bf16, one store, inside M and N: y[m, n] is at y_ptr + m * N + n.
    y_ptrs = y_ptr + rm64[:, None] * N + rn64[None, :]
    tl.store(y_ptrs, v.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


# The launch grid, a C expression over the kernel's non-constexpr arguments (M, N, K, ...):
# one program per 128 x 128 tile of y, all on axis 0.
GRID = "((M + 127) / 128) * ((N + 127) / 128), 1, 1"

# What the build compiles: bf16, one tile configuration (BM = BN = 128, BK = 64, eight warps,
# three stages), twice under one name: with M, N and K hinted divisible by 16, and without.
# The linked launcher takes the hinted one when the shape allows it: then Triton knows each
# mask is constant over 8 bf16 elements and loads 16 bytes at once (cp.async, pipelined over
# the three stages); the other takes any shape. The pitches are K (x and W) and N (y).
AOT = [
    dict(name="tr_ex_linear_gelu", kernel="linear_gelu_kernel",
         signature=f"*bf16:16, *bf16:16, *bf16:16, *bf16:16, {dim}, {dim}, {dim}, 128, 128, 64",
         grid=GRID, num_warps=8, num_stages=3)
    for dim in ("i32:16", "i32")
]
