"""Lesson 06 exercise, Triton track, completed: the fused linear layer y = gelu(x · Wᵀ + b).

The solution of lessons/06-kernel-fusion/exercise_triton.py, built into klab-solutions,
never into klab. Each TODO region below is what the learner writes; tools/todo_proof.py
blanks each in turn to prove that the check fails without it.
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
        w = tl.load(w_ptr + rn64[None, :] * K + rk[:, None], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        # end of TODO 1
        acc = tl.dot(x, w, acc)

    # The epilogue, on the fp32 tile still in registers: what the fusion adds.
    # TODO 2: the bias of the tile's columns, (BN,), as fp32, loaded inside b only (hint 2).
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    # end of TODO 2
    # TODO 3: the pre-activation v: the bias added to every row of acc (hint 3).
    # mistake bias_per_row (check): v = acc + bias[:, None]
    v = acc + bias[None, :]
    # end of TODO 3
    # TODO 4: v = gelu(v), the tanh form, in fp32 (hint 4).
    # v · sigmoid(2u) = v / (1 + 2^(-2u log2 e)), u = 0.7978845608 (v + 0.044715 v^3).
    v = v / (1.0 + tl.exp2(-2.302208198144325 * (v + 0.044715 * v * v * v)))
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
