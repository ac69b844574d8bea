"""Kernel Lab's shared Triton helpers: the @triton.jit functions that more than one lesson's
Triton kernels call, kept once, as klab/include/klab/device/ keeps the CUDA primitives.
tools/triton_aot.py puts this folder on the import path of every file it compiles, and
every lesson's ahead-of-time build depends on this file (cmake/KlabTriton.cmake).

    from klab_tl import tanh_approx
"""
import triton
import triton.language as tl


@triton.jit
def tanh_approx(x):
    """tanh(x) as one MUFU.TANH (PTX tanh.approx.f32, relative error about 2^-11), as the CUDA
    epilogues' tanh_approx (lesson 06's fusion.cuh)."""
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)
