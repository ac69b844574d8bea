// klab/harness.hpp — verify(op, impl, shape, seed) and bench(op, impl, shape).
//
// Verification (docs/design.md, Harness rules): fresh seeded inputs for every check,
// several seeds per shape plus one random run seed that is printed; outputs poisoned
// before each launch; fp64 CPU reference; per-dtype tolerances with rel-L2 and max-abs
// reported; property checks; unsupported shapes reported as such.
//
// Timing: CUDA events on the launch stream, warm-up, L2 flushed (a read of 2x the L2, so
// the L2 holds only clean lines of no interest; l2_flush.cu says why not a write) before
// every timed launch, repeats until the spread of the samples is under 1% or a
// time cap, min/median/max; GB/s and TFLOP/s from the op's counts; % of the measured
// peak; speedup against the op's baseline impl from the same run; the output of the last
// timed launch verified again. Graph mode (`--graph`) captures a batch of launches in a
// CUDA graph and reports the per-launch time of its replay, for problems where launch
// overhead dominates.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "klab/op.hpp"
#include "klab/telemetry.hpp"

namespace klab {

struct Selection {
  std::vector<std::string> lessons;    // empty: all
  std::vector<std::string> ops;        // empty: all of the lessons
  std::vector<std::string> impls;      // empty: all (exercise impls only when asked)
  std::optional<Dims> shape;           // replaces the op's shapes
  std::optional<DType> dtype;          // replaces the op's dtypes
  std::vector<std::string> variants;   // empty: all of each op's; else those of them listed
  std::int64_t max_elems = 0;          // > 0: skip problems with a larger tensor (sanitizer runs)
  bool exercises = false;              // include impls of kind exercise
  bool only_exercises = false;
  // The tour (`klab run` without --full, plan.hpp): test shapes up to kTourMaxElems, and in
  // bench plans only each op's tour impls and its baseline at its first bench shape.
  bool tour = false;
};

struct RunOptions {
  std::uint64_t run_seed = 0;          // the extra random seed of this run (printed)
  std::vector<std::uint64_t> seeds;    // fixed seeds per shape; empty: 1..op.seeds
  bool graph = false;                  // bench: time CUDA-graph replays
  double time_cap_s = 1.0;             // bench: per (impl, shape) cap on timed launches
  int min_reps = 10, max_reps = 2000;
  double target_spread = 0.01;         // bench: stop once (p75 - p25) / median is under this
  bool progress = true;                // progress line on stderr (when it is a terminal)
  bool verbose = false;
  std::function<void(const std::string&)> log;  // where per-case lines go (default: none)
  std::string candidate;               // run only this candidate of impls that have candidates
};

enum class Status { pass, fail, unsupported, error };
const char* status_name(Status s);

struct VerifyRecord {
  std::string lesson, op, impl;
  ImplKind kind = ImplKind::cuda;
  Problem problem;
  std::uint64_t seed = 0;
  Status status = Status::pass;
  std::string message;                 // failure detail, unsupported reason or error
  std::vector<CompareResult> outputs;  // one per output
  double rel_l2 = 0, max_abs = 0;      // worst over outputs
  std::string candidate;               // the configuration checked, for impls with candidates
  // Wall time on the host, for finding where a check's time goes: the inputs and the fp64
  // reference (on the record that made them: the first impl checked at a seed), and this
  // impl's check (upload, poison, launch, download, compare, properties).
  double inputs_s = 0, reference_s = 0, check_s = 0;
};

struct BenchRecord {
  std::string lesson, op, impl;
  ImplKind kind = ImplKind::cuda;
  Problem problem;
  Status status = Status::pass;        // fail: the re-check of the last timed output failed
  std::string message;
  int reps = 0;
  double min_ms = 0, median_ms = 0, max_ms = 0;
  double gbps = 0, tflops = 0;
  double pct_peak = 0;                 // of copy bandwidth (memory-bound) or vendor GEMM rate
  std::string peak_name;               // "copy 3001 GB/s", "cuBLAS bf16 744 TFLOP/s"
  double speedup = 0;                  // baseline median / this median; 0 when no baseline
  std::string baseline;
  bool graph = false;
  std::string candidate;               // the configuration timed, for impls with candidates
                                       // (given with --candidate, else the one autotuning chose)
  Telemetry telemetry;                 // SM clock, power and clock-event reasons in the timed window
};

struct Case {                          // what verify/bench iterate over
  const Op* op;
  std::vector<const Impl*> impls;
  Problem problem;
};

// The largest tensor (in elements) of a problem: what --max-elems and large_numel compare.
std::int64_t largest_tensor(const Op& op, const Problem& p);

// Expands a selection into cases; throws klab::Error for unknown names or a shape or
// dtype the op rejects (with the reason).
std::vector<Case> plan(const Selection& sel, bool bench_shapes);

// Why `im` cannot run `p` here ("no GPU", or its supports() reason); "" when it can.
std::string unsupported_reason(const Impl& im, const Problem& p);

std::vector<VerifyRecord> verify(const std::vector<Case>& cases, const RunOptions& opt);
std::vector<BenchRecord> bench(const std::vector<Case>& cases, const RunOptions& opt);

// The pieces, exposed for tests: build inputs and reference for one problem and seed.
Inputs make_inputs(const Op& op, const Problem& p, std::uint64_t seed);
double default_bytes(const Op& op, const Problem& p);
// Compare a set of host outputs against a reference with the op's tolerances and
// property checks; fills rec.status/message/outputs.
void judge(const Op& op, const Problem& p, const Inputs& in, const Reference& ref,
           const std::vector<HostTensor>& out, VerifyRecord& rec, const Impl* impl = nullptr);
// The tensors a check compares: the op's outputs, then its in-out inputs (Init::inout).
std::vector<TensorSpec> checked_specs(const Op& op, const Problem& p);
// The poison patterns for one output (0xFF, 0x7F, 0xA5 bytes), best first, each with the
// number of reference elements that would accept an element still holding it (0: an
// unwritten element always fails). The harness poisons with the first; where it is
// accepted somewhere, a second launch uses the second. `index`: the flat output index of
// each ref element, for a sampled reference (nullptr: ref is the whole output).
std::vector<std::pair<unsigned char, std::int64_t>> rank_poisons(DType t, std::span<const double> ref,
                                                                 const Tolerance& tol,
                                                                 const std::vector<std::int64_t>* index = nullptr);
// The tolerance output k of problem p is judged with: the impl's override, else the op's
// (Op::tolerance_at_ref from `ref`, every checked tensor's reference values, where the op
// sets it; then `ref` must be given), else the dtype's default.
Tolerance tolerance_for(const Op& op, const Impl* impl, const Problem& p, int k, DType out_dtype,
                        const std::vector<std::span<const double>>* ref = nullptr);

// Summary statistics of timing samples (exposed for tests).
struct Stats {
  double min = 0, median = 0, max = 0, p25 = 0, p75 = 0;
};
Stats stats_of(std::vector<double> samples);
bool spread_ok(const std::vector<double>& samples, double target);  // (p75-p25)/median < target

// The cold-L2 step before each timed launch (l2_flush.cu): reads `bytes` of an all-zero
// device buffer; `sink` is a device word it never writes in practice. KLAB_L2_FLUSH=write
// selects the older memset flush instead, to compare the two.
void l2_flush_read(const void* buf, std::size_t bytes, unsigned* sink, cudaStream_t s);

// KLAB_L2_FLUSH: unset, empty or "read" -> false; "write" -> true; anything else is a
// UsageError (a misspelt mode must not time silently with the other flush).
bool l2_flush_by_write();

// A checksum of `bytes` of device memory (checksum.cu), synchronous on `s`: the harness
// compares each input's checksum after every launch with the one taken at upload.
std::uint64_t device_checksum(const void* p, std::size_t bytes, cudaStream_t s);

}  // namespace klab
