"""Lesson 05 exercise, Triton track, completed: the bf16 matmul C = A · B with tl.dot.

The solution of lessons/05-matmul/exercise_triton.py, built into klab-solutions, never
into klab. Each TODO region below is what the learner writes; tools/todo_proof.py blanks
each in turn to prove that the check fails without it.
"""
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # TODO 1: this program's tile of C, (pid_m, pid_n), in grouped order (hint 1).
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    per_group = GROUP_M * grid_n
    first_m = (pid // per_group) * GROUP_M
    rows = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    # end of TODO 1
    # TODO 2: the tile's rows of C, (BM,) (hint 2).
    rm = pid_m * BM + tl.arange(0, BM)
    # end of TODO 2
    # TODO 3: the tile's columns of C, (BN,) (hint 2).
    rn = pid_n * BN + tl.arange(0, BN)
    # end of TODO 3
    rk = tl.arange(0, BK)   # k within one K step, (BK,)
    # TODO 4: pointers to the first K step's tiles: A (BM, BK) and B (BK, BN), in 64 bits (hint 3).
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * lda + rk[None, :]
    b_ptrs = b_ptr + rk[:, None].to(tl.int64) * ldb + rn[None, :]
    # end of TODO 4
    # TODO 5: the number of K steps of BK, the last one partial (hint 4).
    # mistake k_steps_round_down (check): k_steps = K // BK
    k_steps = tl.cdiv(K, BK)
    # end of TODO 5
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in range(0, k_steps):
        # TODO 6: load the tile of A: zero past M and past the K left, K - kt * BK (hint 5).
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - kt * BK), other=0.0)
        # end of TODO 6
        # TODO 7: load the tile of B: zero past the K left and past N (hint 5).
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - kt * BK) & (rn[None, :] < N), other=0.0)
        # end of TODO 7
        # TODO 8: add a · b to acc, in fp32, on the tensor cores (hint 6).
        acc = tl.dot(a, b, acc)
        # end of TODO 8
        # TODO 9: move both pointers one K step on (hint 6).
        a_ptrs += BK
        b_ptrs += BK * ldb.to(tl.int64)
        # end of TODO 9
    # TODO 10: store the tile of C as bf16, under the mask of M and N (hint 7).
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * ldc + rn[None, :]
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))
    # end of TODO 10


# The launch grid, a C expression over the kernel's non-constexpr arguments (M, N, K, ...):
# the tiles of C, all on axis 0 (the kernel numbers them in grouped order itself).
# TODO 11: one program per 128 x 128 tile of C, M and N each rounded up (hint 8).
GRID = "((M + 127) / 128) * ((N + 127) / 128), 1, 1"
# end of TODO 11

# What the build compiles: bf16, layout nn, one tile configuration (BM = BN = 128, BK = 64,
# GROUP_M = 8, eight warps, three stages), twice under one name: with M, N, K and the
# leading dimensions hinted divisible by 16, and without. The linked launcher takes the
# hinted one when the shape allows it: then Triton knows each mask is constant over 8
# bf16 elements and loads 16 bytes at once (cp.async, pipelined over the three stages);
# the other takes any shape.
AOT = [
    dict(name="tr_ex_matmul_nn", kernel="matmul_kernel",
         signature="*bf16:16, *bf16:16, *bf16:16, i32:16, i32:16, i32:16, i32:16, i32:16, i32:16, 128, 128, 64, 8",
         grid=GRID, num_warps=8, num_stages=3),
    dict(name="tr_ex_matmul_nn", kernel="matmul_kernel",
         signature="*bf16:16, *bf16:16, *bf16:16, i32, i32, i32, i32, i32, i32, 128, 128, 64, 8",
         grid=GRID, num_warps=8, num_stages=3),
]
