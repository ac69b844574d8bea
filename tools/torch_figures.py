#!/usr/bin/env python3
"""PyTorch's eager and torch.compile figures for the ops of lessons 06-08, its attention
backends for lesson 09, and its AdamW and cross-entropy for lesson 11, at the lessons' bench
shapes, timed the way `klab bench` times a kernel.

    python3 tools/torch_figures.py [--ops add_mul,layernorm,...] [--out FILE.json]
                                   [--time-cap SECONDS] [--no-compile] [--smoke]

The lesson READMEs set their kernels beside these numbers ("ahead of PyTorch eager and
compiled"); the script is how the numbers are made, so that anyone can make them again on
their own GPU. It needs PyTorch with CUDA (`klab` does not: the figures are a JSON file
checked in beside a lesson's bench JSON, lessons/NN-*/bench/pytorch/<gpu>-<date>.json: a folder
of its own, as `klab report` reads every lessons/NN-*/bench/*.json as klab's).

Timing, as in klab's harness (docs/design.md, "Timing"): fresh inputs per shape, uniform in
[-1, 1); three warm-up calls (the first compiles, for torch.compile); then launches until
`--time-cap` seconds have passed (at least 10, at most 2000), each preceded by an L2 flush
(a 256 MiB buffer written, more than any GPU's L2) and timed alone with CUDA events, the
GPU held back by a short sleep while Python enqueues the call (the time is the kernels',
not the dispatch's); the median is reported, with the minimum and maximum. GB/s counts the op's minimal bytes, as the
klab op does: every input read once and every output written once (for the backward: x,
dy and the weight read, dx written, the weight gradients counted once each). One exception
to the fresh inputs: adamw, an optimizer, changes its parameters and moments in place, so
they are made once and each timed call is the next step (each step moves them a little, as
in training).

What each op runs:
  add_mul             (a + b) * c
  linear_bias_act     F.linear(x, W, b) then the activation: F.gelu(approximate="tanh"),
                      F.relu, F.silu, or none (variant bias); eager runs cuBLAS(Lt) and an
                      activation kernel, torch.compile may fuse the epilogue
  dropout             F.dropout(x, p=0.1, training=True)
  dropout_residual_layernorm
                      r = x + F.dropout(h, p=0.1, training=True), then F.layer_norm(r) with
                      weight and bias: r and the normalized r both returned (lesson 08)
  dropout_residual_layernorm_backward
                      the gradients of that block (x, h, weight, bias) for a given dy of the
                      normalized r and dres of r: autograd through the dropout, the add and
                      the layernorm, as a training step runs it
  layernorm           F.layer_norm over the last dimension, with weight and bias, eps 1e-5
  layernorm_backward  the gradients of layernorm's output (x, weight, bias) for a given dy
  rmsnorm             F.rms_norm over the last dimension, with weight, eps 1e-5
  rmsnorm_backward    the gradients of rmsnorm's output (x, weight)
  attention_fwd       F.scaled_dot_product_attention(q, k, v, is_causal=..., enable_gqa=True)
                      restricted to one backend at a time: torch_flash (FlashAttention-2, the
                      SDPBackend.FLASH_ATTENTION kernels) and torch_cudnn (cuDNN's SDPA,
                      SDPBackend.CUDNN_ATTENTION); bf16, lesson 09's four bench problems
                      (B, Hq, Hkv, S, S, d), causal and not. PyTorch's is_causal aligns the
                      diagonal top-left, lesson 09 bottom-right: the same mask for these square
                      problems. No torch.compile rows (the backends are the kernels). A backend
                      that refuses a problem is skipped with its reason.
  attention_bwd       the gradients of that attention (q, k, v) for a given dO (autograd.grad,
                      the forward run once, with the same backend, before the timing and its
                      graph kept: the backend's own backward kernels run); the same problems and
                      backends; TFLOP/s as lesson 09 counts the backward, 2.5 times the forward's
  adamw               one optimizer.step() of torch.optim.AdamW (lr 1e-3, betas (0.9, 0.999),
                      eps 1e-8, weight_decay 0.1) over lesson 11's bench problem: 2^26 fp32
                      parameters in 13 tensors sized as training.cuh's adamw_sizes sizes them
                      (shape [params, tensors, steps] = [2^26, 13, 1], variant plain). Two impls:
                      torch_fused (fused=True: one fused kernel family over all tensors) and
                      torch_foreach (foreach=True, fused=False: the _foreach_* kernels). The
                      gradients (uniform in [-1, 1)) are set once, and one step before the
                      timing creates exp_avg and exp_avg_sq; every timed call is then the next
                      step, so the parameters and moments move from call to call (as training's
                      do; the work does not depend on the values). GB/s counts 28 bytes a
                      parameter (p, g, m, v read; p, m, v written), as the klab op does. No
                      torch.compile rows.
  cross_entropy_fwd   F.cross_entropy(logits, targets, ignore_index=-100, reduction="mean") on
                      bf16 logits {rows, vocab} (uniform in [-8, 8), lesson 11's variant random)
                      and int64 targets, uniform over the vocabulary with one row in eight
                      ignored (-100); the loss alone, with no autograd graph. GB/s as the klab
                      op counts it: the logits read once, targets (int32 there, 4 bytes a row)
                      read, each row's log-sum-exp (4 bytes) and the loss written
  cross_entropy_bwd   the gradient of that loss with respect to the logits (autograd.grad, the
                      forward run once before the timing and its graph kept): eager runs
                      nll_loss's and log_softmax's backward kernels, torch.compile the backward
                      graph it compiled with the forward (variant out: dlogits a new tensor).
                      GB/s as the klab op counts it: the logits read and dlogits written once,
                      8 bytes a row (targets and the saved log-sum-exp)

The output JSON: {"device", "torch", "cuda", "date", "rows": [{"op", "shape", "dtype",
"variant", "impl" ("torch_eager" or "torch_compile"; attention_fwd's and attention_bwd's backends torch_flash
and torch_cudnn; adamw's torch_fused and torch_foreach), "median_ms", "min_ms", "max_ms", "reps",
"gbps" (memory-bound ops) or "tflops" (linear_bias_act, attention_fwd: lesson 09's count,
4 B Hq d times the visible (query, key) pairs; attention_bwd 10 B Hq d times them)}]}. `--smoke` runs tiny shapes on
whatever device is there (the CPU too) to check the script itself.
"""
import argparse
import datetime
import json
import math
import statistics
import sys
import time

ROWS_COLS = [(8192, 768), (8192, 4096), (4096, 16384)]
LINEAR = [(8192, 3072, 768), (8192, 768, 3072), (4096, 4096, 4096)]
ATTENTION = [(4, 16, 16, 4096, 4096, 128), (8, 16, 16, 4096, 4096, 64), (1, 16, 16, 16384, 16384, 128),
             (4, 32, 8, 4096, 4096, 128)]
CROSS_ENTROPY = [(8192, 50257), (4096, 128256)]   # lesson 11's (rows, vocab): GPT-2's and Llama 3's
ADAMW = [(1 << 26, 13, 1)]                        # lesson 11's (params, tensors, steps)
OPS = ["add_mul", "linear_bias_act", "dropout", "dropout_residual_layernorm", "dropout_residual_layernorm_backward",
       "layernorm", "layernorm_backward", "rmsnorm", "rmsnorm_backward", "attention_fwd", "attention_bwd", "adamw",
       "cross_entropy_fwd", "cross_entropy_bwd"]
IGNORE_INDEX = -100


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated, from: " + ", ".join(OPS))
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--time-cap", type=float, default=1.0, help="seconds of timed launches per row (default 1)")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, any device: checks the script")
    a = ap.parse_args()
    a.ops = [o for o in a.ops.split(",") if o]
    bad = [o for o in a.ops if o not in OPS]
    if bad:
        ap.error(f"unknown op {bad[0]!r} (one of {', '.join(OPS)})")
    if a.time_cap <= 0:
        ap.error("--time-cap must be > 0")
    return a


def adamw_sizes(params, tensors):
    """The sizes of adamw's tensors, as lessons/11-training-kernels/training.cuh's adamw_sizes
    computes them (the same doubles, in the same order): each a share of `params` by a weight
    cycled from the list, rounded down; the last takes the rest."""
    weight = (4.0, 0.001, 3.0, 1.0, 0.0003, 12.0, 0.002, 2.0)
    total = 0.0
    for k in range(tensors):
        total += weight[k % len(weight)]
    n = [math.floor(float(params) * weight[k % len(weight)] / total) for k in range(tensors - 1)]
    if tensors > 0:
        n.append(params - sum(n))
    return n


class Timer:
    """Median of launches after an L2 flush, each timed alone (CUDA events, or the host
    clock on a CPU)."""

    def __init__(self, torch, device, cap):
        self.torch, self.device, self.cap = torch, device, cap
        self.cuda = device.type == "cuda"
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device=device) if self.cuda else None

    def __call__(self, fn):
        torch = self.torch
        for _ in range(3):
            fn()
        if self.cuda:
            torch.cuda.synchronize()
        times, start = [], time.perf_counter()
        while len(times) < 2000 and (len(times) < 10 or time.perf_counter() - start < self.cap):
            if self.cuda:
                self.flush.zero_()
                # The GPU waits about 0.5 ms (a million cycles) before the start event while
                # Python enqueues the call's kernels: the time is then the kernels' own, as
                # klab's is, not PyTorch's dispatch (which took longer than the kernels of
                # the small shapes: a compiled layernorm measured a flat ~200 us without it).
                torch.cuda._sleep(1_000_000)
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record()
                fn()
                e.record()
                e.synchronize()
                times.append(b.elapsed_time(e))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), min(times), max(times), len(times)


def cases(op, smoke):
    """(shape, dtype name, variant) of each row of an op."""
    if op == "linear_bias_act":
        shapes = [(64, 48, 32)] if smoke else LINEAR
        return [(s, "bf16", v) for s in shapes for v in ("gelu", "relu", "silu", "bias")]
    if op in ("attention_fwd", "attention_bwd"):
        shapes = [(1, 4, 2, 65, 65, 64)] if smoke else ATTENTION
        return [(s, "bf16", v) for s in shapes for v in ("", "causal")]
    if op == "adamw":
        # 2^17 is the smallest power of two whose smallest tensor (a weight of 0.0003 in 30)
        # is not empty.
        return [(s, "f32", "plain") for s in ([(1 << 17, 13, 1)] if smoke else ADAMW)]
    if op.startswith("cross_entropy"):
        shapes = [(64, 1003)] if smoke else CROSS_ENTROPY
        return [(s, "bf16", "random" if op == "cross_entropy_fwd" else "out") for s in shapes]
    shapes = [(64, 96)] if smoke else ROWS_COLS
    # The variant as the klab op names it: dropout's probability.
    variant = "p0.1" if op.startswith("dropout") else ""
    return [(s, t, variant) for s in shapes for t in ("f32", "bf16")]


def build(torch, op, shape, dtype, variant, device):
    """The function to time, and the bytes (or flops) one call needs."""
    F = torch.nn.functional
    g = torch.Generator(device=device).manual_seed(1)

    def rand(*s, grad=False):
        t = torch.rand(*s, generator=g, device=device, dtype=torch.float32).mul_(2).sub_(1).to(dtype)
        return t.requires_grad_(grad)

    size = torch.tensor([], dtype=dtype).element_size()
    if op == "add_mul":
        a, b, c = rand(*shape), rand(*shape), rand(*shape)
        return (lambda: (a + b) * c), 4 * a.numel() * size, "gbps"
    if op == "dropout":
        x = rand(*shape)
        return (lambda: F.dropout(x, p=0.1, training=True)), 2 * x.numel() * size, "gbps"
    if op in ("attention_fwd", "attention_bwd"):
        B, Hq, Hkv, Sq, Sk, d = shape
        assert Sq == Sk, "PyTorch's causal mask is top-left: only square problems match lesson 09's"
        bwd = op == "attention_bwd"
        q, k, v = rand(B, Hq, Sq, d, grad=bwd), rand(B, Hkv, Sk, d, grad=bwd), rand(B, Hkv, Sk, d, grad=bwd)
        causal = variant == "causal"
        pairs = Sq * (Sq + 1) // 2 if causal else Sq * Sk
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)
        if bwd:
            return ("backward", fwd, (q, k, v), rand(B, Hq, Sq, d)), 10.0 * B * Hq * d * pairs, "tflops"
        return fwd, 4.0 * B * Hq * d * pairs, "tflops"
    if op == "adamw":
        params, tensors, steps = shape
        assert steps == 1, "one optimizer.step() a timed call"

        def optimizer(fused):
            """One optimizer's step, its state made by one step first."""
            g.manual_seed(2)   # the same values for either impl
            ps = []
            for n in adamw_sizes(params, tensors):
                p = rand(n, grad=True)
                p.grad = rand(n)
                ps.append(p)
            opt = torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1,
                                    **({"fused": True} if fused else {"foreach": True, "fused": False}))
            opt.step()
            return opt.step
        # per parameter: p, g, m, v read and p, m, v written
        return optimizer, 28 * params * steps, "gbps"
    if op.startswith("cross_entropy"):
        rows, vocab = shape
        bwd = op == "cross_entropy_bwd"
        logits = (rand(rows, vocab) * 8).requires_grad_(bwd)   # lesson 11's [-8, 8), exact in bf16
        targets = torch.randint(0, vocab, (rows,), generator=g, device=device)
        ignored = torch.rand(rows, generator=g, device=device) < 0.125
        targets = targets.masked_fill(ignored, IGNORE_INDEX)
        fwd = lambda: F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="mean")  # noqa: E731
        if not bwd:
            # logits and the (int32 in klab) targets read, the loss and each row's lse written
            return fwd, rows * vocab * size + 8 * rows + 4, "gbps"
        # logits read and dlogits written, 8 bytes a row (targets and lse); dy None: the loss
        # is a scalar, its gradient 1
        return ("backward", fwd, (logits,), None), 2 * rows * vocab * size + 8 * rows, "gbps"
    if op == "linear_bias_act":
        M, N, K = shape
        x, w, bias = rand(M, K), rand(N, K), rand(N)
        act = {"gelu": lambda v: F.gelu(v, approximate="tanh"), "relu": F.relu, "silu": F.silu,
               "bias": lambda v: v}[variant]
        return (lambda: act(F.linear(x, w, bias))), 2.0 * M * N * K, "tflops"
    rows, cols = shape
    if op == "dropout_residual_layernorm":
        x, h, w, b = rand(rows, cols), rand(rows, cols), rand(cols), rand(cols)

        def block():
            r = x + F.dropout(h, p=0.1, training=True)
            return r, F.layer_norm(r, (cols,), w, b, 1e-5)
        # x, h read; r, y written; the weights read once
        return block, (4 * rows * cols + 2 * cols) * size, "gbps"
    if op == "dropout_residual_layernorm_backward":
        x, h = rand(rows, cols, grad=True), rand(rows, cols, grad=True)
        w, b = rand(cols, grad=True), rand(cols, grad=True)

        def block_fwd():
            r = x + F.dropout(h, p=0.1, training=True)
            return r, F.layer_norm(r, (cols,), w, b, 1e-5)
        dres, dy = rand(rows, cols), rand(rows, cols)
        # as the klab op counts: r, dy and dres read, dx and dh written, the weights and
        # their gradients once each
        return ("backward", block_fwd, (x, h, w, b), (dres, dy)), (5 * rows * cols + 4 * cols) * size, "gbps"
    backward = op.endswith("_backward")
    # The weights need gradients only for a backward: a forward with them would time an
    # autograd graph's bookkeeping as well.
    w, b = rand(cols, grad=backward), rand(cols, grad=backward)
    x = rand(rows, cols, grad=backward)
    if op.startswith("layernorm"):
        fwd = lambda: F.layer_norm(x, (cols,), w, b, 1e-5)  # noqa: E731
        params = (x, w, b)
    else:
        fwd = lambda: F.rms_norm(x, (cols,), w, 1e-5)  # noqa: E731
        params = (x, w)
    if not backward:
        # x read, y written, the weights read once
        return fwd, (2 * rows * cols + len(params[1:]) * cols) * size, "gbps"
    dy = rand(rows, cols)
    return ("backward", fwd, params, dy), (3 * rows * cols + 2 * len(params[1:]) * cols) * size, "gbps"


def attention_backends(torch, fn, device):
    """SDPA restricted to one backend each (on a CPU, for --smoke, the default one)."""
    if device.type != "cuda":
        return [("torch_math", fn)]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def only(backend):
        def run():
            with sdpa_kernel([backend]):
                return fn()
        return run
    return [("torch_flash", only(SDPBackend.FLASH_ATTENTION)), ("torch_cudnn", only(SDPBackend.CUDNN_ATTENTION))]


def adamw_impls(optimizer):
    """adamw's two PyTorch implementations, each made (parameters, gradients, state) just
    before it is timed, so that the two need not hold theirs at once."""
    return [("torch_fused", ("optimizer", lambda: optimizer(True))),
            ("torch_foreach", ("optimizer", lambda: optimizer(False)))]


def timed(torch, timer, fn):
    if isinstance(fn, tuple) and fn[0] == "optimizer":
        return timer(fn[1]())
    if isinstance(fn, tuple):   # a backward: the forward once, the gradients timed (dy a tuple
        # where the forward returns several outputs)
        _, fwd, params, dy = fn
        y = fwd()
        return timer(lambda: torch.autograd.grad(y, params, dy, retain_graph=True))
    return timer(fn)


def main():
    a = parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("torch_figures: PyTorch is not installed (pip install torch)")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not a.smoke:
        sys.exit("torch_figures: no CUDA device (run with --smoke to check the script on the CPU)")
    timer = Timer(torch, device, a.time_cap)
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    out = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "rows": []}
    for op in a.ops:
        for shape, tname, variant in cases(op, a.smoke):
            fn, amount, unit = build(torch, op, shape, dtypes[tname], variant, device)
            impls = [("torch_eager", fn)]
            if op == "attention_fwd":
                impls = attention_backends(torch, fn, device)
            elif op == "attention_bwd":   # the backend chosen for the forward runs its own backward
                impls = [(name, (fn[0], f, fn[2], fn[3])) for name, f in attention_backends(torch, fn[1], device)]
            elif op == "adamw":
                impls = adamw_impls(fn)
            elif not a.no_compile:
                if isinstance(fn, tuple):
                    impls.append(("torch_compile", (fn[0], torch.compile(fn[1]), fn[2], fn[3])))
                else:
                    impls.append(("torch_compile", torch.compile(fn)))
            for impl, f in impls:
                try:
                    med, lo, hi, reps = timed(torch, timer, f)
                except RuntimeError as e:   # a backend that refuses the problem
                    print(f"{op:35s} {impl}: skipped: {str(e).splitlines()[0]}", flush=True)
                    continue
                row = {"op": op, "shape": list(shape), "dtype": tname, "variant": variant, "impl": impl,
                       "median_ms": med, "min_ms": lo, "max_ms": hi, "reps": reps,
                       unit: amount / (med * 1e-3) / (1e9 if unit == "gbps" else 1e12)}
                out["rows"].append(row)
                label = "x".join(map(str, shape)) + (" " + variant if variant else "")
                print(f"{op:35s} {label:20s} {tname:4s} {impl:13s} {med * 1e3:9.1f} us  {row[unit]:8.1f} "
                      f"{'GB/s' if unit == 'gbps' else 'TFLOP/s'}", flush=True)
            torch._dynamo.reset()
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
