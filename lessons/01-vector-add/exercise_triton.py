"""Lesson 01 exercise, Triton track: write the vector add z = x + y as a Triton kernel.

One program handles BLOCK consecutive elements. Fill in the seven TODOs: the program's
index, its offsets, the mask for the tail, the two loads, the store, and the launch grid in
the AOT list at the bottom (the build compiles this file ahead of time, as it does every
Triton kernel of the course: tools/triton_aot.py).

After an edit, grade it (no rebuild step: the check compiles this file first, shows one
line with the line number if it does not compile, and rebuilds klab when it changed):

    klab check 01 --triton

which checks your kernel on unseen seeds and the edge cases of `klab check 01` (0 and 1
elements, primes, past 2^31 elements), then times it against the lesson's `triton` version.
Until every TODO is done the check fails: the harness fills z with NaN before each launch.

Hints
  1. tl.program_id(0) is a 32-bit integer: widen it (.to(tl.int64)) before multiplying by
     BLOCK, or the offsets wrap past 2^31 elements.
  2. A program's offsets are its first element plus tl.arange(0, BLOCK).
  3. The last program runs past n: every load and store takes mask=offs < n.
  4. The grid is a C expression over the kernel's non-constexpr arguments: one program per
     BLOCK elements, rounded up.
"""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    # TODO 1: this program's index, in 64 bits (hint 1).
    pid = 0
    # end of TODO 1
    # TODO 2: the BLOCK offsets this program covers (hint 2).
    offs = tl.arange(0, BLOCK)
    # end of TODO 2
    # TODO 3: which of them lie inside [0, n) (hint 3).
    mask = offs < 0
    # end of TODO 3
    # TODO 4: load x at the offsets, under the mask.
    x = tl.zeros((BLOCK,), tl.float32)
    # end of TODO 4
    # TODO 5: load y the same way.
    y = tl.zeros((BLOCK,), tl.float32)
    # end of TODO 5
    # TODO 6: store x + y at z's offsets, under the mask.
    # end of TODO 6


# What the build compiles: the f32 kernel with BLOCK = 4096, eight warps per program.
AOT = [
    dict(name="tr_ex_vector_add_f32", kernel="add_kernel",
         signature="*fp32:16, *fp32:16, *fp32:16, i64, 4096",
         # TODO 7: one program per 4096 elements of n, rounded up (hint 4).
         grid="1, 1, 1",
         # end of TODO 7
         num_warps=8, num_stages=1),
]
