"""Lesson 05 exercise, Triton track: the bf16 matmul C = A · B with tl.dot.

C (M x N) = A (M x K) · B (K x N), all row-major (the layout `nn`), bf16 in and out with
fp32 accumulation. Each program owns one BM x BN tile of C: it walks K in steps of BK,
loads a BM x BK tile of A and a BK x BN tile of B under masks (zero past M, N and K, so
every shape works), adds tl.dot(a, b) to an fp32 accumulator, and stores the tile as
bf16. Triton does the rest of what the CUDA versions v10-v13 do by hand: it stages the
tiles through shared memory, pipelines the loads over num_stages buffers and lowers
tl.dot to the tensor cores (mma.sync on Ampere, wgmma on Hopper). Fill in the eleven
TODOs: the program's tile in grouped order, its rows and columns, the pointers of the
first A and B tiles, the number of K steps, the two masked loads, the accumulation, the
pointer steps, the store, and the launch grid below the kernel.

After an edit, grade it (no rebuild step: the check compiles this file first, shows one
line with the line number if it does not compile, and rebuilds klab when it changed):

    klab check 05 --triton

which checks it on unseen seeds and the edge shapes of `klab check 05` (1 x 1 x 1, K = 0,
a row or a column vector, primes, a long prime K, sizes that are not multiples of the
tile), bf16 and the layout nn, then times it against the lesson's `triton` version.
Until every TODO is done the check fails: the harness poisons C before each launch.

The AOT list compiles the kernel twice: with M, N, K and the leading dimensions hinted
divisible by 16 (aligned shapes: 16-byte cp.async loads, pipelined) and without (any
shape). `tools/triton_ptx.py lessons/05-matmul/exercise_triton.py` shows what each became.

Hints
  1. The grid is one axis of cdiv(M, BM) * cdiv(N, BN) programs, pid = tl.program_id(0).
     Grouped order walks GROUP_M rows of tiles column by column, so that the tiles running
     at the same time share rows of A and columns of B in the L2: with
     grid_m = tl.cdiv(M, BM), grid_n = tl.cdiv(N, BN) and per_group = GROUP_M * grid_n, a
     group starts at row tile first_m = (pid // per_group) * GROUP_M and is
     rows = tl.minimum(grid_m - first_m, GROUP_M) tiles high (the last group may be
     shorter); inside it, (pid % per_group) % rows is the row and (pid % per_group) // rows
     the column.
  2. The tile's rows are its first row plus tl.arange(0, BM); columns likewise with BN.
  3. A[m, k] is at a_ptr + m * lda + k, B[k, n] at b_ptr + k * ldb + n: a BM x BK tile
     takes rm[:, None] and rk[None, :], a BK x BN tile rk[:, None] and rn[None, :]. Widen
     the index before multiplying by a leading dimension (.to(tl.int64)): m * lda passes
     2^31 once A has more than 2^31 elements.
  4. tl.cdiv(K, BK): when BK does not divide K, the last step has only K % BK of K left.
  5. In step kt the tile's k are kt * BK + rk, so rk < K - kt * BK says which lie inside K;
     A's rows must also satisfy rm < M and B's columns rn < N. other=0.0 makes every lane
     outside zero, so it adds nothing to the dot product.
  6. tl.dot(a, b, acc) returns acc + a @ b, accumulated in fp32. The next K step's tiles
     lie BK elements on in A (K is contiguous there) and BK rows, BK * ldb elements, on
     in B (widen ldb: BK * ldb reaches 2^31 once N reaches 2^25).
  7. C[m, n] is at c_ptr + m * ldc + n; store acc.to(tl.bfloat16) under
     (rm[:, None] < M) & (rn[None, :] < N).
  8. The grid is a C expression over the kernel's non-constexpr arguments: one program per
     BM x BN tile, ((M + BM - 1) / BM) tiles down times ((N + BN - 1) / BN) across.
"""
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # TODO 1: this program's tile of C, (pid_m, pid_n), in grouped order (hint 1).
    pid_m = 0
    pid_n = 0
    # end of TODO 1
    # TODO 2: the tile's rows of C, (BM,) (hint 2).
    rm = tl.arange(0, BM)
    # end of TODO 2
    # TODO 3: the tile's columns of C, (BN,) (hint 2).
    rn = tl.arange(0, BN)
    # end of TODO 3
    rk = tl.arange(0, BK)   # k within one K step, (BK,)
    # TODO 4: pointers to the first K step's tiles: A (BM, BK) and B (BK, BN), in 64 bits (hint 3).
    a_ptrs = a_ptr + tl.zeros((BM, BK), tl.int64)
    b_ptrs = b_ptr + tl.zeros((BK, BN), tl.int64)
    # end of TODO 4
    # TODO 5: the number of K steps of BK, the last one partial (hint 4).
    k_steps = 0
    # end of TODO 5
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in range(0, k_steps):
        # TODO 6: load the tile of A: zero past M and past the K left, K - kt * BK (hint 5).
        a = tl.zeros((BM, BK), tl.bfloat16)
        # end of TODO 6
        # TODO 7: load the tile of B: zero past the K left and past N (hint 5).
        b = tl.zeros((BK, BN), tl.bfloat16)
        # end of TODO 7
        # TODO 8: add a · b to acc, in fp32, on the tensor cores (hint 6).
        # end of TODO 8
        # TODO 9: move both pointers one K step on (hint 6).
        # end of TODO 9
    # TODO 10: store the tile of C as bf16, under the mask of M and N (hint 7).
    # end of TODO 10


# The launch grid, a C expression over the kernel's non-constexpr arguments (M, N, K, ...):
# the tiles of C, all on axis 0 (the kernel numbers them in grouped order itself).
# TODO 11: one program per 128 x 128 tile of C, M and N each rounded up (hint 8).
GRID = "1, 1, 1"
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
