// The harness: verification and timing of every (op, impl, problem), by the rules of
// docs/design.md (Harness rules). Lessons never time or compare anything themselves.
#include "klab/harness.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

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

std::vector<TensorSpec> checked_specs(const Op& op, const Problem& p) {
  auto specs = op.outputs(p);
  for (const auto& s : op.inputs(p))
    if (s.init == Init::inout) specs.push_back(s);
  return specs;
}

namespace {

// The reference of one problem and seed: full, or sampled for problems too large.
struct Ref {
  bool sampled = false;
  Reference full;
  std::vector<SampledReference> sample;
  std::span<const double> values(std::size_t k) const {
    return sampled ? std::span<const double>(sample.at(k).value) : std::span<const double>(full.at(k));
  }
  std::size_t values_count() const { return sampled ? sample.size() : full.size(); }
  std::vector<std::span<const double>> spans() const {
    std::vector<std::span<const double>> v;
    for (std::size_t k = 0; k < values_count(); ++k) v.push_back(values(k));
    return v;
  }
};

Ref make_reference(const Op& op, const Problem& p, const Inputs& in, std::uint64_t seed) {
  Ref r;
  if (op.sample_only && op.reference_sample && op.sample_only(p)) {
    r.sampled = true;
    r.sample = op.reference_sample(p, in, seed);
  } else {
    r.full = op.reference(p, in);
  }
  const std::size_t want = checked_specs(op, p).size();
  KLAB_REQUIRE((r.sampled ? r.sample.size() : r.full.size()) == want,
               "the reference returns a different number of arrays than the op has outputs and in-out inputs");
  return r;
}

// A sampled reference checks a few thousand elements of a huge output; the rest must still
// have been written: every element of an op with a sampled reference is finite (matmul,
// softmax), so a NaN/Inf anywhere fails, and so does an element still holding the poison
// pattern of this launch (0xFF is NaN already; another pattern may be finite).
std::string unwritten_outside_sample(const HostTensor& t, unsigned char pattern) {
  HostTensor one(t.dtype(), {1});
  poison(one, pattern);
  const std::size_t esize = dtype_size(t.dtype());
  const auto* bytes = static_cast<const unsigned char*>(t.data());
  std::mutex m;
  std::int64_t bad = 0, first = -1;
  parallel_for(t.numel(), [&](std::int64_t b, std::int64_t e) {
    std::int64_t n = 0, f = -1;
    for (std::int64_t i = b; i < e; ++i)
      if (!std::isfinite(t.get(i)) || std::memcmp(bytes + static_cast<std::size_t>(i) * esize, one.data(), esize) == 0) {
        if (f < 0) f = i;
        ++n;
      }
    std::lock_guard lock(m);
    bad += n;
    if (f >= 0 && (first < 0 || f < first)) first = f;
  });
  if (bad == 0) return "";
  return fmt::format("{} of {} elements NaN/Inf or still the poison 0x{:02X} (unwritten?), first at [{}]", bad,
                     t.numel(), pattern, first);
}

// An impl judged by the op's properties alone (Impl::judged_by_properties): no compare.
void judge_by_properties(const Op& op, const Problem& p, const Inputs& in, const std::vector<HostTensor>& out,
                         VerifyRecord& rec, const Impl& impl) {
  rec.outputs.clear();
  rec.rel_l2 = rec.max_abs = 0;
  rec.status = Status::pass;
  rec.message.clear();
  const std::string why = op.properties ? op.properties(p, in, out)
                                        : impl.name + " is judged by the op's properties, and " + op.name + " has none";
  if (!why.empty()) {
    rec.status = Status::fail;
    rec.message = "property violated: " + why;
  }
}

// `pattern`: the poison of each output in this launch (for the scan outside a sample).
void judge_ref(const Op& op, const Problem& p, const Inputs& in, const Ref& ref, const std::vector<HostTensor>& out,
               const std::vector<unsigned char>& pattern, VerifyRecord& rec, const Impl* impl) {
  if (impl && impl->judged_by_properties) return judge_by_properties(op, p, in, out, rec, *impl);
  if (!ref.sampled) return judge(op, p, in, ref.full, out, rec, impl);
  // Gather the sampled elements into small tensors and compare those.
  const auto specs = checked_specs(op, p);
  const std::vector<std::span<const double>> spans = ref.spans();
  rec.outputs.clear();
  rec.status = Status::pass;
  rec.message.clear();
  rec.rel_l2 = rec.max_abs = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const auto& s = ref.sample.at(k);
    HostTensor got(out[k].dtype(), {static_cast<std::int64_t>(s.index.size())});
    for (std::size_t i = 0; i < s.index.size(); ++i) got.set(static_cast<std::int64_t>(i), out[k].get(s.index[i]));
    const Tolerance tol = tolerance_for(op, impl, p, static_cast<int>(k), out[k].dtype(), &spans);
    auto c = compare(got, s.value, tol, s.index);
    rec.rel_l2 = std::max(rec.rel_l2, c.rel_l2);
    rec.max_abs = std::max(rec.max_abs, c.max_abs);
    if (!c.ok && rec.status == Status::pass) {
      rec.status = Status::fail;
      rec.message = fmt::format("output {} (sampled {} elements): {}", specs[k].name, s.index.size(), c.summary());
    }
    rec.outputs.push_back(c);
  }
  for (std::size_t k = 0; k < out.size() && rec.status == Status::pass; ++k)
    if (const std::string why = unwritten_outside_sample(out[k], k < pattern.size() ? pattern[k] : 0xFF); !why.empty()) {
      rec.status = Status::fail;
      rec.message = fmt::format("output {}: {}", specs[k].name, why);
    }
  if (rec.status == Status::pass && op.properties) {
    const std::string why = op.properties(p, in, out);
    if (!why.empty()) {
      rec.status = Status::fail;
      rec.message = "property violated: " + why;
    }
  }
}

}  // namespace

Tolerance tolerance_for(const Op& op, const Impl* impl, const Problem& p, int k, DType out_dtype,
                        const std::vector<std::span<const double>>* ref) {
  if (impl && impl->tolerance) return impl->tolerance(p, k);
  if (op.tolerance_at_ref) {
    KLAB_REQUIRE(ref != nullptr, op.name + ": its tolerance is set from the reference, and none was given");
    return op.tolerance_at_ref(p, k, *ref);
  }
  if (op.tolerance) return op.tolerance(p, k);
  return default_tolerance(out_dtype);
}

void judge(const Op& op, const Problem& p, const Inputs& in, const Reference& ref,
           const std::vector<HostTensor>& out, VerifyRecord& rec, const Impl* impl) {
  if (impl && impl->judged_by_properties) return judge_by_properties(op, p, in, out, rec, *impl);
  const auto specs = checked_specs(op, p);
  rec.outputs.clear();
  rec.status = Status::pass;
  rec.message.clear();
  rec.rel_l2 = rec.max_abs = 0;
  KLAB_REQUIRE(ref.size() == out.size() && out.size() == specs.size(),
               "judge: the reference, the outputs and the op's outputs (+ in-out inputs) differ in number");
  const std::vector<std::span<const double>> spans(ref.begin(), ref.end());
  for (std::size_t k = 0; k < out.size(); ++k) {
    const Tolerance tol = tolerance_for(op, impl, p, static_cast<int>(k), out[k].dtype(), &spans);
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
// Poison: a pattern no legal answer equals
// ---------------------------------------------------------------------------------------
//
// An output element the impl never writes still holds the poison, so the poison must fail
// the comparison at every element. 0xFF bytes (NaN in the float types) fail wherever the
// reference is finite, but a NaN is the legal mean of nothing and -1 (0xFF in i32) the
// legal argmax index of nothing. So the pattern is chosen per output from the reference: the
// first of 0xFF, 0x7F (3.4e38 in f32 and bf16, NaN in f16, 2139062143 in i32, 127 in u8)
// and 0xA5 that no reference element accepts. When every pattern is accepted somewhere (a
// u8 output holding every byte value), the check launches twice, with the two patterns
// accepted at the fewest elements, and both launches must pass: an element left unwritten
// shows whichever pattern its reference rejects.

constexpr unsigned char kPoisons[] = {0xFF, 0x7F, 0xA5};

std::vector<std::pair<unsigned char, std::int64_t>> rank_poisons(DType t, std::span<const double> ref,
                                                                 const Tolerance& tol,
                                                                 const std::vector<std::int64_t>* index) {
  std::vector<std::pair<unsigned char, std::int64_t>> ranked;
  for (unsigned char pat : kPoisons) {
    HostTensor one(t, {1});
    poison(one, pat);
    const double o = one.get(0);
    std::atomic<std::int64_t> n{0};
    parallel_for(static_cast<std::int64_t>(ref.size()), [&](std::int64_t b, std::int64_t e) {
      std::int64_t c = 0;
      for (std::int64_t i = b; i < e; ++i) {
        const auto j = static_cast<std::size_t>(i);
        c += within(tol, index ? (*index)[j] : i, o, ref[j]);
      }
      n += c;
    });
    ranked.push_back({pat, n.load()});
    if (ranked.back().second == 0) break;   // a pattern no element accepts: done
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return ranked;
}

namespace {

// The poison of one check, per checked tensor: the pattern of the first launch, and of a
// second launch where no single pattern is rejected everywhere (0: none needed).
struct PoisonPlan {
  std::vector<unsigned char> first, second;
  bool two_pass() const {
    return std::any_of(second.begin(), second.end(), [](unsigned char c) { return c != 0; });
  }
  std::vector<unsigned char> pass(int k) const {
    if (k == 0) return first;
    std::vector<unsigned char> v = second;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!v[i]) v[i] = first[i];
    return v;
  }
};

PoisonPlan plan_poison(const Op& op, const Impl* impl, const Problem& p, const Ref& ref,
                       const std::vector<TensorSpec>& specs) {
  PoisonPlan plan;
  const std::vector<std::span<const double>> spans = ref.spans();
  for (std::size_t k = 0; k < specs.size(); ++k) {
    unsigned char first = kPoisons[0], second = 0;
    if (specs[k].init == Init::plain && k < ref.values_count()) {
      const Tolerance tol = tolerance_for(op, impl, p, static_cast<int>(k), specs[k].dtype, &spans);
      const auto ranked = rank_poisons(specs[k].dtype, ref.values(k), tol, ref.sampled ? &ref.sample[k].index : nullptr);
      first = ranked[0].first;
      if (ranked[0].second > 0) second = ranked[1].first;
    }
    plan.first.push_back(first);
    plan.second.push_back(second);
  }
  return plan;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Running one impl on one problem
// ---------------------------------------------------------------------------------------

namespace {

bool on_gpu(const Impl& im) { return im.kind != ImplKind::cpu; }

}  // namespace

std::string unsupported_reason(const Impl& im, const Problem& p) {
  if (on_gpu(im) && !device_info().present) return "no GPU";
  return im.supports ? im.supports(p) : std::string();
}

namespace {

// The runs of an impl on a problem: the impl's own choice (-1), and for an impl with
// candidates each candidate by index (verification), or only the one `--candidate` names,
// or each one (`--candidate all`, a sweep; an impl that cannot run the problem keeps its
// one run, to be reported unsupported).
struct Run {
  const Impl* impl;
  int candidate = -1;
  std::string candidate_name;
};

std::vector<Run> runs_of(const Impl* im, const Problem& p, const RunOptions& opt, bool every_candidate) {
  std::vector<std::string> names;
  if (im->candidates && unsupported_reason(*im, p).empty()) names = im->candidates(p);
  if (opt.candidate == "all" && !names.empty()) {   // a sweep: every candidate, each its own row
    std::vector<Run> runs;
    for (std::size_t k = 0; k < names.size(); ++k) runs.push_back({im, static_cast<int>(k), names[k]});
    return runs;
  }
  if (!opt.candidate.empty() && opt.candidate != "all") {
    for (std::size_t k = 0; k < names.size(); ++k)
      if (names[k] == opt.candidate) return {{im, static_cast<int>(k), names[k]}};
    return {{im, -2, opt.candidate}};   // reported unsupported: no such candidate here
  }
  std::vector<Run> runs{{im, -1, ""}};
  if (every_candidate)
    for (std::size_t k = 0; k < names.size(); ++k) runs.push_back({im, static_cast<int>(k), names[k]});
  return runs;
}

// One set of device inputs: as uploaded, the pristine copy of each in-out input (restored
// before every launch), and each read-only input's checksum at upload.
struct InputSet {
  std::vector<DeviceTensor> in, pristine;
  std::vector<std::uint64_t> sum;
  bool empty() const { return in.empty() && sum.empty(); }

  void upload(const Inputs& inputs, const std::vector<TensorSpec>& specs, cudaStream_t s) {
    in.clear(), pristine.clear(), sum.clear();
    for (std::size_t k = 0; k < inputs.tensors.size(); ++k) {
      in.push_back(to_device(inputs.tensors[k]));
      const bool inout = k < specs.size() && specs[k].init == Init::inout;
      pristine.push_back(inout ? to_device(inputs.tensors[k]) : DeviceTensor());
    }
    // cudaMemcpy from pageable memory may return before its DMA lands, and the launch
    // stream is non-blocking (it does not wait for the legacy stream): finish the uploads.
    KLAB_CHECK_CUDA(cudaDeviceSynchronize());
    for (const auto& t : in) sum.push_back(device_checksum(t.data(), t.bytes(), s));
  }
  // "" when every read-only input is as uploaded, else which one was written.
  std::string intact(const std::vector<TensorSpec>& specs, cudaStream_t s) const {
    for (std::size_t k = 0; k < in.size(); ++k) {
      if (k < specs.size() && specs[k].init == Init::inout) continue;
      if (device_checksum(in[k].data(), in[k].bytes(), s) != sum[k])
        return fmt::format("the impl wrote its input '{}' (inputs are read-only; its checksum changed)",
                           k < specs.size() ? specs[k].name : std::to_string(k));
    }
    return "";
  }
};

// Everything one problem needs on the device, shared by the impls that run on it.
struct DeviceCase {
  std::vector<TensorSpec> in_specs, out_specs;   // out_specs: outputs, then in-out inputs
  std::size_t n_out = 0;                         // op outputs (the rest of out_specs are in-out)
  InputSet inputs;                               // the problem's inputs
  InputSet fresh;                                // bench: other inputs, for the replay check
  std::vector<DeviceTensor> out;
  std::vector<HostTensor> host_out;              // outputs, then in-out inputs, as read back
  DeviceBuffer workspace;
  std::vector<void*> pinned;                     // host_out buffers page-locked for fast read-back
  std::string chosen;                            // the candidate an autotuned impl last ran (Launch::chosen)
  DeviceCase(const Op& op, const Problem& p) : in_specs(op.inputs(p)), out_specs(checked_specs(op, p)),
                                               n_out(op.outputs(p).size()) {}
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;
  ~DeviceCase() {
    for (void* ptr : pinned) cudaHostUnregister(ptr);
  }
  void ensure_host() {
    if (host_out.empty())
      for (const auto& s : out_specs) host_out.emplace_back(s.dtype, s.shape);
  }
  void ensure_device(const Inputs& in, cudaStream_t s) {
    if (inputs.empty()) inputs.upload(in, in_specs, s);
    if (out.empty())
      for (std::size_t k = 0; k < n_out; ++k) out.emplace_back(out_specs[k].dtype, out_specs[k].shape);
    pin_host_outputs();
  }
  // Before every launch, verified or timed (outside the timed region): outputs poisoned
  // with the planned pattern (zeroed outputs zero-filled), in-out inputs restored, the
  // workspace zeroed for impls that ask.
  void prepare(const InputSet& set, const Impl& im, const std::vector<unsigned char>& pattern, cudaStream_t s) {
    for (std::size_t k = 0; k < n_out; ++k)
      poison(out[k], s, out_specs[k].init == Init::zeroed ? 0 : pattern.at(k));
    for (std::size_t k = 0; k < set.in.size(); ++k)
      if (set.pristine[k].data())
        KLAB_CHECK_CUDA(cudaMemcpyAsync(set.in[k].data(), set.pristine[k].data(), set.in[k].bytes(),
                                        cudaMemcpyDeviceToDevice, s));
    if (im.zero_workspace && workspace.size()) KLAB_CHECK_CUDA(cudaMemsetAsync(workspace.get(), 0, workspace.size(), s));
  }
  void read_back(const InputSet& set) {
    for (std::size_t k = 0; k < n_out; ++k) copy_to_host(out[k], host_out[k]);
    std::size_t j = n_out;
    for (std::size_t k = 0; k < set.in.size(); ++k)
      if (in_specs[k].init == Init::inout) copy_to_host(set.in[k], host_out[j++]);
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

Launch launch_of(const Run& r, const Problem& p, const Inputs& in, const InputSet& set, DeviceCase& dc, cudaStream_t s) {
  return Launch{p, views(set.in), views(dc.out), in.scalars, s, dc.workspace.get(), dc.workspace.size(), r.candidate,
                &dc.chosen};
}

void launch_gpu(const Run& r, const Problem& p, const Inputs& in, const InputSet& set, DeviceCase& dc, cudaStream_t s) {
  r.impl->run(launch_of(r, p, in, set, dc, s));
  KLAB_CHECK_LAUNCH();
}

// Impl::stage and Impl::gather (an impl spanning several GPUs), around a launch and outside
// its timed region; nothing for every other impl.
void stage_gpu(const Run& r, const Problem& p, const Inputs& in, const InputSet& set, DeviceCase& dc, cudaStream_t s) {
  if (!r.impl->stage) return;
  r.impl->stage(launch_of(r, p, in, set, dc, s));
  KLAB_CHECK_LAUNCH();
}
void gather_gpu(const Run& r, const Problem& p, const Inputs& in, const InputSet& set, DeviceCase& dc, cudaStream_t s) {
  if (!r.impl->gather) return;
  r.impl->gather(launch_of(r, p, in, set, dc, s));
  KLAB_CHECK_LAUNCH();
}

// A CPU impl runs on copies of the in-out inputs (the originals stay pristine for the next
// run) and its outputs are poisoned like a GPU impl's.
void run_cpu(const Run& r, const Problem& p, Inputs& in, DeviceCase& dc, const std::vector<unsigned char>& pattern) {
  for (std::size_t k = 0; k < dc.n_out; ++k)
    poison(dc.host_out[k], dc.out_specs[k].init == Init::zeroed ? 0 : pattern.at(k));
  std::vector<TensorView> in_views = views(in.tensors);
  std::size_t j = dc.n_out;
  for (std::size_t k = 0; k < in.tensors.size(); ++k)
    if (dc.in_specs[k].init == Init::inout) {
      std::memcpy(dc.host_out[j].data(), in.tensors[k].data(), in.tensors[k].bytes());
      in_views[k] = dc.host_out[j++].view();
    }
  std::vector<TensorView> out_views;
  for (std::size_t k = 0; k < dc.n_out; ++k) out_views.push_back(dc.host_out[k].view());
  Launch l{p, in_views, out_views, in.scalars, nullptr, nullptr, 0, r.candidate};
  r.impl->run(l);
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

std::string run_label(const Run& r) {
  return r.candidate_name.empty() ? r.impl->name : fmt::format("{}[{}]", r.impl->name, r.candidate_name);
}

// Impl::deterministic: dc.host_out holds a checked launch's outputs on `set`; one more launch on
// the same inputs must reproduce them byte for byte. "" or where they first differ.
std::string same_bits_again(const Run& r, const Problem& p, const Inputs& in, InputSet& set, DeviceCase& dc,
                            const std::vector<unsigned char>& pattern, cudaStream_t s) {
  std::vector<std::vector<unsigned char>> first;
  for (const HostTensor& t : dc.host_out) {
    const auto* b = static_cast<const unsigned char*>(t.data());
    first.emplace_back(b, b + t.bytes());
  }
  dc.prepare(set, *r.impl, pattern, s);
  stage_gpu(r, p, in, set, dc, s);
  launch_gpu(r, p, in, set, dc, s);
  gather_gpu(r, p, in, set, dc, s);
  KLAB_CHECK_CUDA(cudaStreamSynchronize(s));
  dc.read_back(set);
  for (std::size_t k = 0; k < first.size(); ++k) {
    const HostTensor& t = dc.host_out[k];
    const auto* b = static_cast<const unsigned char*>(t.data());
    const auto at = std::mismatch(first[k].begin(), first[k].end(), b).first;
    if (at != first[k].end()) {
      const std::size_t elem = static_cast<std::size_t>(at - first[k].begin()) / dtype_size(t.dtype());
      const std::string name = k < dc.out_specs.size() ? dc.out_specs[k].name : "in-out input";
      return fmt::format("not deterministic: a second launch on the same inputs differs from the first at {}[{}] "
                         "({} vs {}), and the impl promises the same bits (Impl::deterministic)",
                         name, elem, t.get(static_cast<std::int64_t>(elem)),
                         load_as_double(first[k].data(), t.dtype(), static_cast<std::int64_t>(elem)));
    }
  }
  return "";
}

// One verified launch (or two, when the poison plan needs a second pattern) of run r on
// the problem's inputs; fills rec. GPU errors propagate to the caller.
void check_run(const Op& op, const Problem& p, const Run& r, Inputs& in, const Ref& ref, const PoisonPlan& plan,
               DeviceCase& dc, cudaStream_t s, VerifyRecord& rec) {
  const Impl& im = *r.impl;
  const int passes = plan.two_pass() ? 2 : 1;
  for (int pass = 0; pass < passes && rec.status == Status::pass; ++pass) {
    const auto pattern = plan.pass(pass);
    if (on_gpu(im)) {
      dc.ensure_device(in, s);
      ensure_workspace(dc, im, p);
      dc.prepare(dc.inputs, im, pattern, s);
      stage_gpu(r, p, in, dc.inputs, dc, s);
      launch_gpu(r, p, in, dc.inputs, dc, s);
      gather_gpu(r, p, in, dc.inputs, dc, s);
      KLAB_CHECK_CUDA(cudaStreamSynchronize(s));
      dc.read_back(dc.inputs);
      if (const std::string why = dc.inputs.intact(dc.in_specs, s); !why.empty()) {
        rec.status = Status::fail;
        rec.message = why;
        dc.inputs.upload(in, dc.in_specs, s);   // the impls after this one get the real inputs
        return;
      }
    } else {
      run_cpu(r, p, in, dc, pattern);
    }
    judge_ref(op, p, in, ref, dc.host_out, pattern, rec, &im);
    if (rec.status != Status::pass && pass == 1)
      rec.message += fmt::format(" (second launch, outputs poisoned with 0x{:02X} bytes: some element was left unwritten)",
                                 pattern.front());
  }
  if (rec.status == Status::pass && im.deterministic && on_gpu(im))
    if (std::string why = same_bits_again(r, p, in, dc.inputs, dc, plan.pass(0), s); !why.empty()) {
      rec.status = Status::fail;
      rec.message = why;
    }
}

std::string fail_line(const std::string& status, const std::string& op, const std::string& who, const Problem& p,
                      std::uint64_t seed, const std::string& message) {
  return fmt::format("{} {}/{} {} seed {}: {}", status, op, who, p.label(), seed, message);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// verify
// ---------------------------------------------------------------------------------------

std::vector<VerifyRecord> verify(const std::vector<Case>& cases, const RunOptions& opt) {
  std::vector<VerifyRecord> recs;
  auto seeds_of = [&](const Op& op, const Problem& p) {
    // Fixed seeds (replayable by anyone) plus this run's random seed. Problems over
    // large_numel get only the run seed: their inputs alone take gigabytes.
    std::vector<std::uint64_t> seeds;
    if (largest_tensor(op, p) <= op.large_numel) {
      if (opt.seeds.empty()) for (int k = 1; k <= op.seeds; ++k) seeds.push_back(static_cast<std::uint64_t>(k));
      else seeds = opt.seeds;
    }
    seeds.push_back(opt.run_seed);
    return seeds;
  };
  std::size_t total = 0;
  for (const auto& c : cases)
    for (const Impl* im : c.impls) total += runs_of(im, c.problem, opt, true).size() * seeds_of(*c.op, c.problem).size();
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
    for (const std::uint64_t seed : seeds_of(op, p)) {
      std::optional<Inputs> in;
      std::optional<Ref> ref;
      std::string ref_error;
      std::map<const Impl*, PoisonPlan> plans;
      DeviceCase dc(op, p);
      for (const Impl* im : c.impls)
        for (const Run& r : runs_of(im, p, opt, true)) {
          VerifyRecord rec;
          rec.lesson = op.lesson, rec.op = op.name, rec.impl = im->name, rec.kind = im->kind;
          rec.problem = p, rec.seed = seed, rec.candidate = r.candidate_name;
          progress.update(done++, fmt::format("test {} {} {}", op.name, run_label(r), p.label()));
          std::string why = unsupported_reason(*im, p);
          if (why.empty() && r.candidate == -2) why = fmt::format("no candidate '{}' for this problem", r.candidate_name);
          if (!why.empty()) {
            rec.status = Status::unsupported;
            rec.message = why;
            recs.push_back(std::move(rec));
            continue;
          }
          try {
            if (!ref_error.empty()) throw Error(ref_error);
            if (!in) {
              try {
                const auto t0 = std::chrono::steady_clock::now();
                in = make_inputs(op, p, seed);
                const auto t1 = std::chrono::steady_clock::now();
                ref = make_reference(op, p, *in, seed);
                rec.inputs_s = std::chrono::duration<double>(t1 - t0).count();
                rec.reference_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
              } catch (const std::exception& e) {
                in.reset();
                ref_error = fmt::format("the inputs or the CPU reference failed: {}", e.what());
                throw Error(ref_error);
              }
            }
            dc.ensure_host();
            if (on_gpu(*im) && !stream) stream.emplace();
            // The plan depends on the tolerance: one per impl that overrides it, one shared.
            const Impl* tol_owner = im->tolerance ? im : nullptr;
            if (!plans.count(tol_owner)) plans[tol_owner] = plan_poison(op, im, p, *ref, dc.out_specs);
            const auto t_check = std::chrono::steady_clock::now();
            check_run(op, p, r, *in, *ref, plans[tol_owner], dc, stream ? stream->s : nullptr, rec);
            rec.check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_check).count();
          } catch (const NoGpuError&) {
            throw;
          } catch (const std::exception& e) {
            rec.status = Status::error;
            rec.message = e.what();
            if (on_gpu(*im) && ref_error.empty())
              check_context_alive(fmt::format("{}/{} on {}", op.name, run_label(r), p.label()));
          }
          if (rec.status != Status::pass && opt.log)
            opt.log(fail_line(status_name(rec.status), op.name, run_label(r), p, seed, rec.message));
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

// A warm-up longer than this (the 20 ms minimum plus room) is followed by an idle pause.
constexpr double kSettleAfter = 0.05;

void time_gpu(const Run& r, const Problem& p, const Inputs& in, DeviceCase& dc, const std::vector<unsigned char>& pattern,
              cudaStream_t s, L2Flusher& flusher, TelemetrySampler& sampler, const RunOptions& opt, BenchRecord& rec) {
  cudaEvent_t start, stop;
  KLAB_CHECK_CUDA(cudaEventCreate(&start));
  KLAB_CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> samples;
  bool capturing = false;
  try {
    // Warm-up: module loads, handle creation, autotuning happen here, never in a sample.
    const auto w0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3 || std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() < 0.02; ++i) {
      dc.prepare(dc.inputs, *r.impl, pattern, s);
      stage_gpu(r, p, in, dc.inputs, dc, s);
      launch_gpu(r, p, in, dc.inputs, dc, s);
      gather_gpu(r, p, in, dc.inputs, dc, s);
      KLAB_CHECK_CUDA(cudaStreamSynchronize(s));
      if (i >= 100) break;
    }
    // A long warm-up is an autotuning first call timing every candidate back to back (12
    // GEMMs x 4 launches at 8192^3 is ~70 ms at full power). The board's power controller
    // answers such a burst by holding the clock down for a while after it: the timed
    // launches that followed at once ran 8-15% slower than the same kernel timed on its own,
    // and with this pause (the GPU idles as long as the warm-up ran, up to 1 s) they match
    // it (H100: v20_autotuned running v19's kernel at 8192^3, 1.392 against v19's 1.393 ms;
    // lesson 05's README, "Autotuned rows run slower").
    const double warm_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    if (warm_s > kSettleAfter) std::this_thread::sleep_for(std::chrono::duration<double>(std::min(warm_s, 1.0)));
    if (opt.graph) {
      // Launch overhead is what graph mode removes: K launches captured once, replayed.
      constexpr int K = 20;
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      KLAB_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      capturing = true;
      for (int i = 0; i < K; ++i) launch_gpu(r, p, in, dc.inputs, dc, s);
      capturing = false;
      KLAB_CHECK_CUDA(cudaStreamEndCapture(s, &graph));
      KLAB_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      KLAB_CHECK_CUDA(cudaGraphLaunch(exec, s));
      KLAB_CHECK_CUDA(cudaStreamSynchronize(s));
      sampler.start();
      const auto t0 = std::chrono::steady_clock::now();
      do {
        dc.prepare(dc.inputs, *r.impl, pattern, s);
        KLAB_CHECK_CUDA(cudaEventRecord(start, s));
        KLAB_CHECK_CUDA(cudaGraphLaunch(exec, s));
        KLAB_CHECK_CUDA(cudaEventRecord(stop, s));
        KLAB_CHECK_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        KLAB_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        samples.push_back(ms / K);
      } while (!should_stop(samples, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), opt));
      rec.telemetry = sampler.stop();
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    } else {
      sampler.start();
      const auto t0 = std::chrono::steady_clock::now();
      do {
        // Poison first so the last timed launch must write every output (re-checked
        // below), restore in-out inputs so every launch computes the same step, then
        // flush the L2 so no input or output line is warm.
        dc.prepare(dc.inputs, *r.impl, pattern, s);
        stage_gpu(r, p, in, dc.inputs, dc, s);
        flusher.flush(s);
        KLAB_CHECK_CUDA(cudaEventRecord(start, s));
        launch_gpu(r, p, in, dc.inputs, dc, s);
        KLAB_CHECK_CUDA(cudaEventRecord(stop, s));
        gather_gpu(r, p, in, dc.inputs, dc, s);
        KLAB_CHECK_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        KLAB_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        samples.push_back(ms);
      } while (!should_stop(samples, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), opt));
      rec.telemetry = sampler.stop();
    }
  } catch (...) {
    if (capturing) {
      // A launch that cannot be captured (a synchronising call inside run()) must not leave
      // the stream capturing: end and drop the capture so later cases run normally.
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(s, &g);
      if (g) cudaGraphDestroy(g);
      cudaGetLastError();
    }
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

void time_cpu(const Run& r, const Problem& p, Inputs& in, DeviceCase& dc, const std::vector<unsigned char>& pattern,
              const RunOptions& opt, BenchRecord& rec) {
  std::vector<double> samples;
  run_cpu(r, p, in, dc, pattern);  // warm-up (page faults, caches)
  const auto t0 = std::chrono::steady_clock::now();
  do {
    const auto a = std::chrono::steady_clock::now();
    run_cpu(r, p, in, dc, pattern);   // includes the poison fill: CPU timings are coarse anyway
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

// The re-check's fresh inputs and their reference are the same for every impl of a case:
// made once, at the first re-check (a 2^28-element fp64 reference costs seconds; made per
// impl, it was most of a short bench).
struct Fresh {
  std::optional<Inputs> in;
  std::optional<Ref> ref;
};

// After timing, on the GPU: the last timed output must be right (timing may not run a
// different path from verification), the inputs untouched, a second poison pattern
// rejected where the plan asks for one, and one more launch on FRESH inputs (another seed,
// other buffers) must be right too, so an impl that caches its first result and replays
// it cannot pass. Returns "" or what was wrong.
std::string recheck_gpu(const Op& op, const Problem& p, const Run& r, Inputs& in, const Ref& ref,
                        const PoisonPlan& plan, DeviceCase& dc, cudaStream_t s, std::uint64_t fresh_seed,
                        Fresh& fr) {
  VerifyRecord v;
  dc.read_back(dc.inputs);
  if (std::string why = dc.inputs.intact(dc.in_specs, s); !why.empty()) {
    dc.inputs.upload(in, dc.in_specs, s);   // the impls after this one get the real inputs
    return "after timing: " + why;
  }
  judge_ref(op, p, in, ref, dc.host_out, plan.first, v, r.impl);
  if (v.status != Status::pass) return "last timed output wrong: " + v.message;
  if (r.impl->deterministic)
    if (std::string why = same_bits_again(r, p, in, dc.inputs, dc, plan.first, s); !why.empty())
      return "after timing: " + why;
  if (plan.two_pass()) {
    check_run(op, p, r, in, ref, plan, dc, s, v);
    if (v.status != Status::pass) return "after timing: " + v.message;
  }
  if (!fr.in) {
    fr.in = make_inputs(op, p, fresh_seed);
    fr.ref = make_reference(op, p, *fr.in, fresh_seed);
  }
  const Inputs& fresh = *fr.in;
  const Ref& fresh_ref = *fr.ref;
  const PoisonPlan fresh_plan = plan_poison(op, r.impl, p, fresh_ref, dc.out_specs);
  if (dc.fresh.empty()) dc.fresh.upload(fresh, dc.in_specs, s);
  for (int pass = 0; pass < (fresh_plan.two_pass() ? 2 : 1); ++pass) {
    dc.prepare(dc.fresh, *r.impl, fresh_plan.pass(pass), s);
    stage_gpu(r, p, fresh, dc.fresh, dc, s);
    launch_gpu(r, p, fresh, dc.fresh, dc, s);
    gather_gpu(r, p, fresh, dc.fresh, dc, s);
    KLAB_CHECK_CUDA(cudaStreamSynchronize(s));
    dc.read_back(dc.fresh);
    if (std::string why = dc.fresh.intact(dc.in_specs, s); !why.empty()) {
      dc.fresh.upload(fresh, dc.in_specs, s);
      return "on fresh inputs: " + why;
    }
    judge_ref(op, p, fresh, fresh_ref, dc.host_out, fresh_plan.pass(pass), v, r.impl);
    if (v.status != Status::pass)
      return fmt::format("wrong on fresh inputs after timing (seed {}; a cached or replayed result?): {}", fresh_seed,
                         v.message);
  }
  return "";
}

}  // namespace

std::vector<BenchRecord> bench(const std::vector<Case>& cases, const RunOptions& opt) {
  require_gpu();
  std::vector<BenchRecord> recs;
  std::size_t total = 0;
  for (const auto& c : cases)
    for (const Impl* im : c.impls) total += runs_of(im, c.problem, opt, false).size();
  ProgressLine progress(total, opt.progress);
  std::size_t done = 0;
  StreamGuard stream;
  L2Flusher flusher;
  TelemetrySampler sampler(device_info().index);
  // The replay check's inputs: another seed than the run's, derived from it (replayable).
  const std::uint64_t fresh_seed = derive_seed(opt.run_seed, 0x5eed);

  for (const auto& c : cases) {
    const Op& op = *c.op;
    const Problem& p = c.problem;
    const std::size_t first = recs.size();
    std::optional<Inputs> in;
    std::optional<Ref> ref;
    Fresh fresh;
    std::string ref_error;
    DeviceCase dc(op, p);
    const double flops = op.flops ? op.flops(p) : 0;
    const double bytes = op.bytes ? op.bytes(p) : default_bytes(op, p);
    const auto [peak, peak_name] = peak_for(op.bound, p.dtype);
    const bool has_inout = dc.out_specs.size() > dc.n_out;

    for (const Impl* im : c.impls)
      for (const Run& r : runs_of(im, p, opt, false)) {
        BenchRecord rec;
        rec.lesson = op.lesson;
        rec.op = op.name;
        rec.impl = im->name;
        rec.candidate = r.candidate_name;
        rec.kind = im->kind;
        rec.problem = p;
        rec.graph = opt.graph && on_gpu(*im);
        rec.peak_name = peak_name;
        progress.update(done++, fmt::format("bench {} {} {}", op.name, run_label(r), p.label()));
        std::string why = unsupported_reason(*im, p);
        if (why.empty() && r.candidate == -2) why = fmt::format("no candidate '{}' for this problem", r.candidate_name);
        if (why.empty() && rec.graph && has_inout)
          why = "graph mode replays launches back to back, and in-out inputs must be restored between them";
        if (why.empty() && rec.graph && im->stage)
          why = "graph mode replays launches back to back, and this impl stages each rank's data before every launch";
        if (!why.empty()) {
          rec.status = Status::unsupported;
          rec.message = why;
          recs.push_back(std::move(rec));
          continue;
        }
        try {
          if (!ref_error.empty()) throw Error(ref_error);
          if (!in) {
            try {
              in = make_inputs(op, p, opt.run_seed);
              ref = make_reference(op, p, *in, opt.run_seed);
            } catch (const std::exception& e) {
              in.reset();
              ref_error = fmt::format("the inputs or the CPU reference failed: {}", e.what());
              throw Error(ref_error);
            }
          }
          dc.ensure_host();
          const PoisonPlan plan = plan_poison(op, im, p, *ref, dc.out_specs);
          if (on_gpu(*im)) {
            dc.ensure_device(*in, stream.s);
            ensure_workspace(dc, *im, p);
            dc.chosen.clear();
            time_gpu(r, p, *in, dc, plan.first, stream.s, flusher, sampler, opt, rec);
            if (rec.candidate.empty()) rec.candidate = dc.chosen;   // what autotuning picked and was timed
            if (std::string bad = recheck_gpu(op, p, r, *in, *ref, plan, dc, stream.s, fresh_seed, fresh); !bad.empty()) {
              rec.status = Status::fail;
              rec.message = bad;
            }
          } else {
            time_cpu(r, p, *in, dc, plan.first, opt, rec);
            // The output of the last timed run is checked again.
            VerifyRecord v;
            judge_ref(op, p, *in, *ref, dc.host_out, plan.first, v, im);
            if (v.status != Status::pass) {
              rec.status = Status::fail;
              rec.message = "last timed output wrong: " + v.message;
            }
          }
        } catch (const NoGpuError&) {
          throw;
        } catch (const std::exception& e) {
          rec.status = Status::error;
          rec.message = e.what();
          if (on_gpu(*im) && ref_error.empty())
            check_context_alive(fmt::format("{}/{} on {}", op.name, run_label(r), p.label()));
        }
        if (rec.median_ms > 0) {
          const double sec = rec.median_ms * 1e-3;
          rec.gbps = bytes / sec * 1e-9;
          rec.tflops = flops / sec * 1e-12;
          const double achieved = op.bound == Bound::compute ? rec.tflops : rec.gbps;
          rec.pct_peak = peak > 0 ? 100.0 * achieved / peak : 0;
        }
        if (rec.status != Status::pass && opt.log)
          opt.log(fail_line(status_name(rec.status), op.name, run_label(r), p, opt.run_seed, rec.message));
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
