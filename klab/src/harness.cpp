// The harness: verification and timing of every (op, impl, problem), by the rules of
// design.md §3. Lessons never time or compare anything themselves.
#include "klab/harness.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/peaks.hpp"
#include "klab/report.hpp"
#include "klab/rng.hpp"

namespace klab {

const char* status_name(Status s) {
  switch (s) {
    case Status::pass: return "pass";
    case Status::fail: return "FAIL";
    case Status::unsupported: return "unsupported";
    case Status::error: return "ERROR";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------
// Inputs, references, judging
// ---------------------------------------------------------------------------------------

Inputs make_inputs(const Op& op, const Problem& p, std::uint64_t seed) {
  Inputs in;
  for (const auto& spec : op.inputs(p)) in.tensors.emplace_back(spec.dtype, spec.shape);
  if (op.generate) {
    op.generate(p, seed, in);
  } else {
    for (std::size_t k = 0; k < in.tensors.size(); ++k) {
      auto& t = in.tensors[k];
      if (dtype_is_float(t.dtype())) fill_uniform(t, derive_seed(seed, k), -1.0, 1.0);
      else fill_int(t, derive_seed(seed, k), 0, 255);
    }
  }
  return in;
}

double default_bytes(const Op& op, const Problem& p) {
  double b = 0;
  for (const auto& s : op.inputs(p)) b += static_cast<double>(numel_of(s.shape)) * dtype_size(s.dtype);
  for (const auto& s : op.outputs(p)) b += static_cast<double>(numel_of(s.shape)) * dtype_size(s.dtype);
  return b;
}

namespace {

// The reference of one problem and seed: full, or sampled for problems too large.
struct Ref {
  bool sampled = false;
  Reference full;
  std::vector<SampledReference> sample;
};

Ref make_reference(const Op& op, const Problem& p, const Inputs& in, std::uint64_t seed) {
  Ref r;
  if (op.sample_only && op.reference_sample && op.sample_only(p)) {
    r.sampled = true;
    r.sample = op.reference_sample(p, in, seed);
  } else {
    r.full = op.reference(p, in);
  }
  return r;
}

void judge_ref(const Op& op, const Problem& p, const Inputs& in, const Ref& ref,
               const std::vector<HostTensor>& out, VerifyRecord& rec, const Impl* impl) {
  if (!ref.sampled) return judge(op, p, in, ref.full, out, rec, impl);
  // Gather the sampled elements into small tensors and compare those.
  const auto specs = op.outputs(p);
  rec.outputs.clear();
  rec.status = Status::pass;
  rec.rel_l2 = rec.max_abs = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const auto& s = ref.sample.at(k);
    HostTensor got(out[k].dtype(), {static_cast<std::int64_t>(s.index.size())});
    for (std::size_t i = 0; i < s.index.size(); ++i) got.set(static_cast<std::int64_t>(i), out[k].get(s.index[i]));
    const Tolerance tol = tolerance_for(op, impl, p, static_cast<int>(k), out[k].dtype());
    auto c = compare(got, s.value, tol);
    if (c.first_bad >= 0) c.first_bad = s.index[static_cast<std::size_t>(c.first_bad)];
    rec.rel_l2 = std::max(rec.rel_l2, c.rel_l2);
    rec.max_abs = std::max(rec.max_abs, c.max_abs);
    if (!c.ok && rec.status == Status::pass) {
      rec.status = Status::fail;
      rec.message = fmt::format("output {} (sampled {} elements): {}", specs[k].name, s.index.size(), c.summary());
    }
    rec.outputs.push_back(c);
  }
}

}  // namespace

Tolerance tolerance_for(const Op& op, const Impl* impl, const Problem& p, int k, DType out_dtype) {
  if (impl && impl->tolerance) return impl->tolerance(p, k);
  if (op.tolerance) return op.tolerance(p, k);
  return default_tolerance(out_dtype);
}

void judge(const Op& op, const Problem& p, const Inputs& in, const Reference& ref,
           const std::vector<HostTensor>& out, VerifyRecord& rec, const Impl* impl) {
  const auto specs = op.outputs(p);
  rec.outputs.clear();
  rec.status = Status::pass;
  rec.message.clear();
  rec.rel_l2 = rec.max_abs = 0;
  KLAB_REQUIRE(ref.size() == out.size(), "reference has a different number of outputs");
  for (std::size_t k = 0; k < out.size(); ++k) {
    const Tolerance tol = tolerance_for(op, impl, p, static_cast<int>(k), out[k].dtype());
    auto c = compare(out[k], ref[k], tol);
    rec.rel_l2 = std::max(rec.rel_l2, c.rel_l2);
    rec.max_abs = std::max(rec.max_abs, c.max_abs);
    if (!c.ok && rec.status == Status::pass) {
      rec.status = Status::fail;
      rec.message = fmt::format("output {}: {}", specs[k].name, c.summary());
    }
    rec.outputs.push_back(std::move(c));
  }
  if (rec.status == Status::pass && op.properties) {
    const std::string why = op.properties(p, in, out);
    if (!why.empty()) {
      rec.status = Status::fail;
      rec.message = "property violated: " + why;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Running one impl on one problem
// ---------------------------------------------------------------------------------------

namespace {

bool on_gpu(const Impl& im) { return im.kind != ImplKind::cpu; }

std::string supported(const Impl& im, const Problem& p) {
  if (on_gpu(im) && !device_info().present) return "no GPU";
  return im.supports ? im.supports(p) : std::string();
}

// Everything one problem needs on the device, shared by the impls that run on it.
// Inputs are read-only for impls; each impl gets its own poisoned outputs.
struct DeviceCase {
  std::vector<DeviceTensor> in;
  std::vector<DeviceTensor> out;
  std::vector<HostTensor> host_out;
  DeviceBuffer workspace;
  std::vector<void*> pinned;   // host_out buffers page-locked for fast read-back
  DeviceCase() = default;
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;
  ~DeviceCase() {
    for (void* p : pinned) cudaHostUnregister(p);
  }
  // Host outputs, allocated once per problem and shared by the impls.
  void ensure_host(const std::vector<TensorSpec>& specs) {
    if (host_out.empty())
      for (const auto& s : specs) host_out.emplace_back(s.dtype, s.shape);
  }
  // Device inputs (uploaded once) and outputs (allocated once), for the GPU impls.
  void ensure_device(const Inputs& inputs, const std::vector<TensorSpec>& specs) {
    if (in.empty())
      for (const auto& t : inputs.tensors) in.push_back(to_device(t));
    if (out.empty())
      for (const auto& s : specs) out.emplace_back(s.dtype, s.shape);
    pin_host_outputs();
  }
  void read_back() {
    for (std::size_t k = 0; k < out.size(); ++k) copy_to_host(out[k], host_out[k]);
  }
  // Outputs read back once per impl: above 256 MB, page-locking them once makes each
  // read-back run at the link's speed instead of through a pageable bounce buffer.
  void pin_host_outputs() {
    if (!pinned.empty()) return;
    for (auto& t : host_out)
      if (t.bytes() >= (std::size_t{256} << 20) && cudaHostRegister(t.data(), t.bytes(), cudaHostRegisterDefault) == cudaSuccess)
        pinned.push_back(t.data());
    cudaGetLastError();  // pinning is an optimisation: a refusal is not an error
  }
};

std::vector<TensorView> views(const std::vector<DeviceTensor>& ts) {
  std::vector<TensorView> v;
  for (const auto& t : ts) v.push_back(t.view());
  return v;
}
std::vector<TensorView> views(std::vector<HostTensor>& ts) {
  std::vector<TensorView> v;
  for (auto& t : ts) v.push_back(t.view());
  return v;
}

void ensure_workspace(DeviceCase& dc, const Impl& im, const Problem& p) {
  const std::size_t need = im.workspace ? im.workspace(p) : 0;
  if (need > dc.workspace.size()) dc.workspace = DeviceBuffer(need);
}

void launch_gpu(const Impl& im, const Problem& p, const Inputs& in, DeviceCase& dc, cudaStream_t s) {
  Launch l{p, views(dc.in), views(dc.out), in.scalars, s, dc.workspace.get(), dc.workspace.size()};
  im.run(l);
  KLAB_CHECK_LAUNCH();
}

void run_cpu(const Impl& im, const Problem& p, Inputs& in, std::vector<HostTensor>& out) {
  for (auto& t : out) poison(t);
  Launch l{p, views(in.tensors), views(out), in.scalars, nullptr, nullptr, 0};
  im.run(l);
}

// A sticky CUDA error (illegal address, ...) leaves the context unusable: stop the run
// with a message that names the impl instead of failing every later case.
void check_context_alive(const std::string& who) {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    throw Error(fmt::format("{} left the GPU in an error state ({}: {}); the run cannot continue. "
                            "Rerun it alone with --impl, or under compute-sanitizer",
                            who, cudaGetErrorName(e), cudaGetErrorString(e)));
}

struct StreamGuard {
  cudaStream_t s = nullptr;
  StreamGuard() { KLAB_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~StreamGuard() { if (s) cudaStreamDestroy(s); }
};

std::size_t count_runs(const std::vector<Case>& cases) {
  std::size_t n = 0;
  for (const auto& c : cases) n += c.impls.size();
  return n;
}



}  // namespace

// ---------------------------------------------------------------------------------------
// verify
// ---------------------------------------------------------------------------------------

std::vector<VerifyRecord> verify(const std::vector<Case>& cases, const RunOptions& opt) {
  std::vector<VerifyRecord> recs;
  std::size_t total = 0;
  for (const auto& c : cases) {
    const bool large = largest_tensor(*c.op, c.problem) > c.op->large_numel;
    const std::size_t nseeds = large ? 1 : (opt.seeds.empty() ? c.op->seeds : opt.seeds.size()) + 1;
    total += c.impls.size() * nseeds;
  }
  ProgressLine progress(total, opt.progress);
  std::size_t done = 0;
  std::optional<StreamGuard> stream;
  const auto t_start = std::chrono::steady_clock::now();

  for (const auto& c : cases) {
    const Op& op = *c.op;
    const Problem& p = c.problem;
    if (opt.verbose && opt.log)
      opt.log(fmt::format("[{:7.1f} s] {} {}", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(),
                          op.name, p.label()));
    // Seeds: fixed ones (replayable by anyone) plus this run's random seed. Problems over
    // large_numel get only the run seed: their inputs alone take gigabytes.
    std::vector<std::uint64_t> seeds;
    if (largest_tensor(op, p) <= op.large_numel) {
      if (opt.seeds.empty()) for (int s = 1; s <= op.seeds; ++s) seeds.push_back(static_cast<std::uint64_t>(s));
      else seeds = opt.seeds;
    }
    seeds.push_back(opt.run_seed);

    for (const std::uint64_t seed : seeds) {
      std::optional<Inputs> in;
      std::optional<Ref> ref;
      DeviceCase dc;
      const auto out_specs = op.outputs(p);
      for (const Impl* im : c.impls) {
        VerifyRecord rec{op.lesson, op.name, im->name, im->kind, p, seed};
        progress.update(done++, fmt::format("test {} {} {}", op.name, im->name, p.label()));
        const std::string why = supported(*im, p);
        if (!why.empty()) {
          rec.status = Status::unsupported;
          rec.message = why;
          recs.push_back(std::move(rec));
          continue;
        }
        try {
          if (!in) {
            in = make_inputs(op, p, seed);
            ref = make_reference(op, p, *in, seed);
          }
          dc.ensure_host(out_specs);
          if (on_gpu(*im)) {
            if (!stream) stream.emplace();
            dc.ensure_device(*in, out_specs);
            ensure_workspace(dc, *im, p);
            for (const auto& t : dc.out) poison(t, stream->s);
            launch_gpu(*im, p, *in, dc, stream->s);
            KLAB_CHECK_CUDA(cudaStreamSynchronize(stream->s));
            dc.read_back();
          } else {
            run_cpu(*im, p, *in, dc.host_out);
          }
          judge_ref(op, p, *in, *ref, dc.host_out, rec, im);
        } catch (const NoGpuError&) {
          throw;
        } catch (const Error& e) {
          rec.status = Status::error;
          rec.message = e.what();
          if (on_gpu(*im)) check_context_alive(fmt::format("{}/{} on {}", op.name, im->name, p.label()));
        }
        if (rec.status != Status::pass && opt.log)
          opt.log(fmt::format("{} {}/{} {} seed {}: {}", status_name(rec.status), op.name, im->name, p.label(), seed, rec.message));
        recs.push_back(std::move(rec));
      }
    }
  }
  progress.finish();
  return recs;
}

// ---------------------------------------------------------------------------------------
// bench
// ---------------------------------------------------------------------------------------

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto q = [&](double f) {
    const double pos = f * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  s.min = v.front();
  s.max = v.back();
  s.median = q(0.5);
  s.p25 = q(0.25);
  s.p75 = q(0.75);
  return s;
}

bool spread_ok(const std::vector<double>& samples, double target) {
  const Stats s = stats_of(samples);
  return s.median > 0 && (s.p75 - s.p25) / s.median < target;
}

bool l2_flush_by_write() {
  const char* mode = std::getenv("KLAB_L2_FLUSH");
  const std::string m = mode ? mode : "";
  if (m.empty() || m == "read") return false;
  if (m == "write") return true;
  throw UsageError(fmt::format("KLAB_L2_FLUSH must be 'read' or 'write', not '{}'", m));
}

namespace {

class L2Flusher {
 public:
  L2Flusher()
      : buf_(std::max<std::size_t>(2 * device_info().l2_bytes, std::size_t{64} << 20)), sink_(sizeof(unsigned)) {
    write_ = l2_flush_by_write();
    KLAB_CHECK_CUDA(cudaMemset(buf_.get(), 0, buf_.size()));   // the read flush expects zeros
    KLAB_CHECK_CUDA(cudaMemset(sink_.get(), 0, sink_.size()));
    KLAB_CHECK_CUDA(cudaDeviceSynchronize());   // done before any flush on the launch stream
  }
  // Touching twice the L2's size evicts every line the previous launch left behind. A read
  // leaves clean lines; a write (KLAB_L2_FLUSH=write) leaves dirty ones that the timed
  // launch must write back (l2_flush.cu).
  void flush(cudaStream_t s) {
    if (write_) KLAB_CHECK_CUDA(cudaMemsetAsync(buf_.get(), 0, buf_.size(), s));
    else l2_flush_read(buf_.get(), buf_.size(), static_cast<unsigned*>(sink_.get()), s);
  }

 private:
  DeviceBuffer buf_, sink_;
  bool write_ = false;
};

bool should_stop(const std::vector<double>& samples, double elapsed_s, const RunOptions& opt) {
  const int n = static_cast<int>(samples.size());
  if (n >= opt.max_reps) return true;
  if (n < opt.min_reps) return elapsed_s > 10 * opt.time_cap_s;  // a very slow impl: stop anyway
  return spread_ok(samples, opt.target_spread) || elapsed_s > opt.time_cap_s;
}

void time_gpu(const Impl& im, const Problem& p, const Inputs& in, DeviceCase& dc, cudaStream_t s,
              L2Flusher& flusher, const RunOptions& opt, BenchRecord& rec) {
  cudaEvent_t start, stop;
  KLAB_CHECK_CUDA(cudaEventCreate(&start));
  KLAB_CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> samples;
  try {
    // Warm-up: module loads, handle creation, autotuning happen here, never in a sample.
    const auto w0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3 || std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() < 0.02; ++i) {
      launch_gpu(im, p, in, dc, s);
      KLAB_CHECK_CUDA(cudaStreamSynchronize(s));
      if (i >= 100) break;
    }
    if (opt.graph) {
      // Launch overhead is what graph mode removes: K launches captured once, replayed.
      constexpr int K = 20;
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      KLAB_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < K; ++i) launch_gpu(im, p, in, dc, s);
      KLAB_CHECK_CUDA(cudaStreamEndCapture(s, &graph));
      KLAB_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      KLAB_CHECK_CUDA(cudaGraphLaunch(exec, s));
      KLAB_CHECK_CUDA(cudaStreamSynchronize(s));
      const auto t0 = std::chrono::steady_clock::now();
      do {
        for (const auto& t : dc.out) KLAB_CHECK_CUDA(cudaMemsetAsync(t.data(), 0xFF, t.bytes(), s));
        KLAB_CHECK_CUDA(cudaEventRecord(start, s));
        KLAB_CHECK_CUDA(cudaGraphLaunch(exec, s));
        KLAB_CHECK_CUDA(cudaEventRecord(stop, s));
        KLAB_CHECK_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        KLAB_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        samples.push_back(ms / K);
      } while (!should_stop(samples, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), opt));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      do {
        // Poison first so the last timed launch must write every output (re-checked below),
        // then flush the L2 so no input or output line is warm.
        for (const auto& t : dc.out) KLAB_CHECK_CUDA(cudaMemsetAsync(t.data(), 0xFF, t.bytes(), s));
        flusher.flush(s);
        KLAB_CHECK_CUDA(cudaEventRecord(start, s));
        launch_gpu(im, p, in, dc, s);
        KLAB_CHECK_CUDA(cudaEventRecord(stop, s));
        KLAB_CHECK_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        KLAB_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        samples.push_back(ms);
      } while (!should_stop(samples, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), opt));
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const Stats st = stats_of(samples);
  rec.reps = static_cast<int>(samples.size());
  rec.min_ms = st.min;
  rec.median_ms = st.median;
  rec.max_ms = st.max;
}

void time_cpu(const Impl& im, const Problem& p, Inputs& in, std::vector<HostTensor>& out,
              const RunOptions& opt, BenchRecord& rec) {
  std::vector<double> samples;
  run_cpu(im, p, in, out);  // warm-up (page faults, caches)
  const auto t0 = std::chrono::steady_clock::now();
  do {
    for (auto& t : out) poison(t);
    const auto a = std::chrono::steady_clock::now();
    Launch l{p, views(in.tensors), views(out), in.scalars, nullptr, nullptr, 0};
    im.run(l);
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  } while (static_cast<int>(samples.size()) < 3 ||
           !(spread_ok(samples, opt.target_spread) ||
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > opt.time_cap_s));
  const Stats st = stats_of(samples);
  rec.reps = static_cast<int>(samples.size());
  rec.min_ms = st.min;
  rec.median_ms = st.median;
  rec.max_ms = st.max;
}

}  // namespace

std::vector<BenchRecord> bench(const std::vector<Case>& cases, const RunOptions& opt) {
  require_gpu();
  std::vector<BenchRecord> recs;
  ProgressLine progress(count_runs(cases), opt.progress);
  std::size_t done = 0;
  StreamGuard stream;
  L2Flusher flusher;

  for (const auto& c : cases) {
    const Op& op = *c.op;
    const Problem& p = c.problem;
    const std::size_t first = recs.size();
    std::optional<Inputs> in;
    std::optional<Ref> ref;
    DeviceCase dc;
    const auto out_specs = op.outputs(p);
    const double flops = op.flops ? op.flops(p) : 0;
    const double bytes = op.bytes ? op.bytes(p) : default_bytes(op, p);
    const auto [peak, peak_name] = peak_for(op.bound, p.dtype);

    for (const Impl* im : c.impls) {
      BenchRecord rec;
      rec.lesson = op.lesson;
      rec.op = op.name;
      rec.impl = im->name;
      rec.kind = im->kind;
      rec.problem = p;
      rec.graph = opt.graph && on_gpu(*im);
      rec.peak_name = peak_name;
      progress.update(done++, fmt::format("bench {} {} {}", op.name, im->name, p.label()));
      const std::string why = supported(*im, p);
      if (!why.empty()) {
        rec.status = Status::unsupported;
        rec.message = why;
        recs.push_back(std::move(rec));
        continue;
      }
      try {
        if (!in) {
          in = make_inputs(op, p, opt.run_seed);
          ref = make_reference(op, p, *in, opt.run_seed);
        }
        dc.ensure_host(out_specs);
        if (on_gpu(*im)) {
          dc.ensure_device(*in, out_specs);
          ensure_workspace(dc, *im, p);
          time_gpu(*im, p, *in, dc, stream.s, flusher, opt, rec);
          dc.read_back();
        } else {
          time_cpu(*im, p, *in, dc.host_out, opt, rec);
        }
        // The output of the last timed launch is checked again: timing may not run a
        // different path from verification.
        VerifyRecord v;
        judge_ref(op, p, *in, *ref, dc.host_out, v, im);
        if (v.status != Status::pass) {
          rec.status = Status::fail;
          rec.message = "last timed output wrong: " + v.message;
        }
      } catch (const NoGpuError&) {
        throw;
      } catch (const Error& e) {
        rec.status = Status::error;
        rec.message = e.what();
        if (on_gpu(*im)) check_context_alive(fmt::format("{}/{} on {}", op.name, im->name, p.label()));
      }
      if (rec.median_ms > 0) {
        const double s = rec.median_ms * 1e-3;
        rec.gbps = bytes / s * 1e-9;
        rec.tflops = flops / s * 1e-12;
        const double achieved = op.bound == Bound::memory ? rec.gbps : rec.tflops;
        rec.pct_peak = peak > 0 ? 100.0 * achieved / peak : 0;
      }
      if (rec.status != Status::pass && opt.log)
        opt.log(fmt::format("{} {}/{} {}: {}", status_name(rec.status), op.name, rec.impl, p.label(), rec.message));
      recs.push_back(std::move(rec));
    }
    // Speedup against the op's baseline, measured in this same run on the same problem.
    if (!op.baseline.empty()) {
      const BenchRecord* base = nullptr;
      for (std::size_t i = first; i < recs.size(); ++i)
        if (recs[i].impl == op.baseline && recs[i].status == Status::pass && recs[i].median_ms > 0) base = &recs[i];
      if (base)
        for (std::size_t i = first; i < recs.size(); ++i)
          if (recs[i].median_ms > 0) {
            recs[i].speedup = base->median_ms / recs[i].median_ms;
            recs[i].baseline = op.baseline;
          }
    }
  }
  progress.finish();
  return recs;
}

}  // namespace klab
