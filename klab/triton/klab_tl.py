"""Kernel Lab's shared Triton helpers: the @triton.jit functions that more than one lesson's
Triton kernels call, kept once, as klab/include/klab/device/ keeps the CUDA primitives.
tools/triton_aot.py puts this folder on the import path of every file it compiles, and
every lesson's ahead-of-time build depends on this file (cmake/KlabTriton.cmake).

    from klab_tl import grouped_tile, tanh_approx
"""
import triton
import triton.language as tl


@triton.jit
def tanh_approx(x):
    """tanh(x) as one MUFU.TANH (PTX tanh.approx.f32, relative error about 2^-11), as the CUDA
    epilogues' tanh_approx (lesson 06's fusion.cuh)."""
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def grouped_tile(t, grid_m, per_group, GROUP_M: tl.constexpr):
    """(tile row, tile column) of output tile t of a grid_m-row grid in grouped order (lesson
    05): GROUP_M rows of tiles at a time, column by column, so that the programs running side
    by side share their rows of A and columns of B in L2. per_group = GROUP_M * grid_n, the
    tiles of one group of rows, computed once by the caller (loops call this every tile)."""
    first_m = (t // per_group) * GROUP_M
    rows = tl.minimum(grid_m - first_m, GROUP_M)
    return first_m + (t % per_group) % rows, (t % per_group) // rows
