// Lesson 16 — what the data-parallel step's op (dp_step_ops.cu) takes from its impls (dp_step.cu).
#pragma once

#include "klab/op.hpp"

namespace lesson16 {

// Past this many FLOPs a step's fp64 reference would keep the CPU busy for minutes (the bench
// shapes: 5.6 · 10^12); such a step is checked against the same step on one GPU.
inline constexpr double kCpuReferenceFlops = 2e10;
bool dp_reference_on_gpu(const klab::Problem& p);

// The step of problem p run on GPU 0 alone over the whole global batch, rank r's rows as the
// r-th micro-batch, each one's gradient added to the sum in fp32 (gradient accumulation), then
// AdamW: its outputs and in-out tensors (grad, params, m, v, p16) in fp64.
klab::Reference dp_step_on_one_gpu(const klab::Problem& p, const klab::Inputs& in);

}  // namespace lesson16
