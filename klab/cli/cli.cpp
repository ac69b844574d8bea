// The verbs of `klab`. Each parses its options, asks the harness for the work, prints a
// table and maps the outcome to an exit code; nothing here verifies or times by itself.
#include "klab/cli.hpp"

#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/harness.hpp"
#include "klab/peaks.hpp"
#include "klab/progress.hpp"
#include "klab/report.hpp"
#include "klab/triton.hpp"

namespace klab {

Dims parse_shape(const std::string& s) {
  const std::string hint = fmt::format("bad shape '{}': expected sizes separated by 'x', like 4096x4096 or 2^28", s);
  if (s.empty()) throw UsageError(hint);
  Dims dims;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t end = s.find_first_of("x,", pos);
    if (end == std::string::npos) end = s.size();
    const std::string tok = s.substr(pos, end - pos);
    if (tok.empty()) throw UsageError(hint);
    std::int64_t v = 0;
    const auto caret = tok.find('^');
    auto parse_int = [&](const std::string& t) {
      if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string::npos) throw UsageError(hint);
      return std::stoll(t);
    };
    if (caret != std::string::npos) {
      const auto base = parse_int(tok.substr(0, caret)), e = parse_int(tok.substr(caret + 1));
      if (base != 2 || e > 62) throw UsageError(hint + " (powers: 2^k with k <= 62)");
      v = std::int64_t{1} << e;
    } else {
      v = parse_int(tok);
    }
    dims.push_back(v);
    if (end == s.size()) break;
    pos = end + 1;
  }
  return dims;
}

namespace {

struct Common {
  std::vector<std::string> lessons;
  std::vector<std::string> impls, ops;
  std::string shape, dtype, variant, json, csv;
  std::int64_t max_elems = 0;
  std::uint64_t seed = 0;
  bool seed_given = false, verbose = false, graph = false;
  double time_cap = 1.0;
};

void add_selection(CLI::App* c, Common& o, bool lessons_positional = true) {
  if (lessons_positional) c->add_option("lessons", o.lessons, "lessons by number or name (default: all)");
  c->add_option("--impl", o.impls, "only these impls (repeatable or comma-separated)")->delimiter(',');
  c->add_option("--op", o.ops, "only these ops")->delimiter(',');
  c->add_option("--shape", o.shape, "one shape instead of the op's own, e.g. 4096x4096 or 2^28");
  c->add_option("--dtype", o.dtype, "one dtype: f32, f16, bf16, i32, u8");
  c->add_option("--variant", o.variant, "one variant of ops that have them");
  c->add_option("--max-elems", o.max_elems, "skip problems with a tensor larger than this (for sanitizer runs)");
}

Selection make_selection(const Common& o) {
  Selection s;
  s.lessons = o.lessons;
  s.impls = o.impls;
  s.ops = o.ops;
  if (!o.shape.empty()) s.shape = parse_shape(o.shape);
  if (!o.dtype.empty()) {
    s.dtype = parse_dtype(o.dtype);
    if (!s.dtype) throw UsageError(fmt::format("bad dtype '{}': expected one of f32, f16, bf16, i32, u8", o.dtype));
  }
  if (!o.variant.empty()) s.variant = o.variant;
  s.max_elems = o.max_elems;
  return s;
}

std::uint64_t run_seed(const Common& o) {
  if (o.seed_given) return o.seed;
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32 | rd()) % 1000000000ull + 1000;
}

RunOptions make_options(const Common& o) {
  RunOptions r;
  r.run_seed = run_seed(o);
  r.graph = o.graph;
  r.time_cap_s = o.time_cap;
  r.verbose = o.verbose;
  r.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  return r;
}

void print_device_line() {
  const auto& d = device_info();
  if (d.present)
    std::printf("device: %s (sm_%d%d, %d SMs, %.0f MB L2)\n", d.name.c_str(), d.cc_major, d.cc_minor, d.sms,
                static_cast<double>(d.l2_bytes) / 1e6);
}

// Cases grouped by op, in order.
std::vector<std::vector<Case>> by_op(const std::vector<Case>& cases) {
  std::vector<std::vector<Case>> out;
  for (const auto& c : cases) {
    if (out.empty() || out.back().front().op != c.op) out.emplace_back();
    out.back().push_back(c);
  }
  return out;
}

// One op at a time, each printed as it completes: a long run shows its results as it goes.
std::vector<VerifyRecord> verify_by_op(const std::vector<Case>& cases, const RunOptions& ro, bool all_rows) {
  std::vector<VerifyRecord> recs;
  for (const auto& chunk : by_op(cases)) {
    auto part = verify(chunk, ro);
    print_verify(stdout, part, all_rows);
    recs.insert(recs.end(), part.begin(), part.end());
  }
  return recs;
}

std::vector<BenchRecord> bench_by_op(const std::vector<Case>& cases, const RunOptions& ro) {
  std::vector<BenchRecord> recs;
  for (const auto& chunk : by_op(cases)) {
    auto part = bench(chunk, ro);
    print_bench(stdout, part);
    recs.insert(recs.end(), part.begin(), part.end());
  }
  return recs;
}

bool any_failed(const std::vector<VerifyRecord>& v) {
  for (const auto& r : v)
    if (r.status == Status::fail || r.status == Status::error) return true;
  return false;
}
bool any_failed(const std::vector<BenchRecord>& v) {
  for (const auto& r : v)
    if (r.status == Status::fail || r.status == Status::error) return true;
  return false;
}

// Nothing passed and nothing failed: every case was unsupported here. Not a pass.
bool none_ran(const std::vector<VerifyRecord>& v) {
  for (const auto& r : v)
    if (r.status != Status::unsupported) return false;
  return true;
}

void write_outputs(const Common& o, const RunOptions& ro, const std::vector<VerifyRecord>* v,
                   const std::vector<BenchRecord>* b) {
  if (!o.json.empty()) {
    nlohmann::json j = {{"klab", 1}, {"run_seed", ro.run_seed}, {"device", device_json()}};
    if (v) {
      j["verify"] = nlohmann::json::array();
      for (const auto& r : *v) j["verify"].push_back(to_json(r));
    }
    if (b) {
      j["bench"] = nlohmann::json::array();
      for (const auto& r : *b) j["bench"].push_back(to_json(r));
    }
    write_json(o.json, j);
    std::printf("wrote %s\n", o.json.c_str());
  }
  if (!o.csv.empty() && b) {
    write_bench_csv(o.csv, *b);
    std::printf("wrote %s\n", o.csv.c_str());
  }
}

int cmd_list(const Common& o) {
  auto& reg = registry();
  const ProgressData progress = [] {
    try { return load_progress(); } catch (const Error& e) {
      std::fprintf(stderr, "klab: %s\n", e.what());
      return ProgressData{};
    }
  }();
  nlohmann::json j = nlohmann::json::array();
  std::vector<std::string> keys = o.lessons;
  for (const auto& k : keys)
    if (!reg.find_lesson(k)) throw UsageError(fmt::format("unknown lesson '{}' (see `klab list`)", k));
  for (const auto& l : reg.lessons()) {
    if (!keys.empty() && std::none_of(keys.begin(), keys.end(), [&](const std::string& k) { return reg.find_lesson(k) == &l; }))
      continue;
    const bool solved = progress.exercises.count(l.id) > 0;
    std::printf("%s  %s — %s%s\n", l.id.c_str(), l.slug.c_str(), l.title.c_str(),
                l.exercise_op.empty() ? "" : (solved ? "   [exercise solved]" : "   [exercise open: klab check " + l.id + "]").c_str());
    nlohmann::json jl = {{"id", l.id}, {"slug", l.slug}, {"title", l.title}, {"exercise_solved", solved}, {"ops", nlohmann::json::array()}};
    for (const Op* op : reg.ops_of(l.id)) {
      std::string dims;
      for (const auto& d : op->dims) dims += (dims.empty() ? "" : "x") + d;
      std::printf("    %-18s %-12s %-14s %s\n", op->name.c_str(), dims.c_str(), dtype_list(op->dtypes).c_str(), op->summary.c_str());
      nlohmann::json jo = {{"name", op->name}, {"dims", op->dims}, {"summary", op->summary}, {"impls", nlohmann::json::array()}};
      for (auto t : op->dtypes) jo["dtypes"].push_back(dtype_name(t));
      for (const Impl* im : reg.impls_of(op->name)) {
        std::printf("        %-20s %-8s %s\n", im->name.c_str(), impl_kind_name(im->kind), im->summary.c_str());
        jo["impls"].push_back({{"name", im->name}, {"kind", impl_kind_name(im->kind)}, {"summary", im->summary}});
      }
      jl["ops"].push_back(jo);
    }
    j.push_back(jl);
  }
  if (!o.json.empty()) {
    write_json(o.json, {{"klab", 1}, {"lessons", j}});
    std::printf("wrote %s\n", o.json.c_str());
  }
  return kExitOk;
}

int cmd_test(Common& o, Selection sel) {
  const auto cases = plan(sel, false);
  require_gpu();
  const RunOptions ro = make_options(o);
  print_device_line();
  std::printf("run seed: %llu (replay: --seed %llu)\n", static_cast<unsigned long long>(ro.run_seed),
              static_cast<unsigned long long>(ro.run_seed));
  const auto recs = verify_by_op(cases, ro, o.verbose);
  write_outputs(o, ro, &recs, nullptr);
  if (any_failed(recs)) return kExitFail;
  if (none_ran(recs)) {
    std::printf("nothing ran: every selected impl is unsupported on this device\n");
    return kExitFail;
  }
  return kExitOk;
}

int cmd_bench(Common& o, Selection sel) {
  const auto cases = plan(sel, true);
  (void)l2_flush_by_write();   // a bad KLAB_L2_FLUSH is a usage error, GPU or not
  require_gpu();
  const RunOptions ro = make_options(o);
  print_device_line();
  (void)peaks();
  const auto recs = bench_by_op(cases, ro);
  write_outputs(o, ro, nullptr, &recs);
  return any_failed(recs) ? kExitFail : kExitOk;
}

int cmd_run(Common& o, Selection sel) {
  const auto vcases = plan(sel, false);
  const auto bcases = plan(sel, true);
  (void)l2_flush_by_write();
  require_gpu();
  const RunOptions ro = make_options(o);
  print_device_line();
  std::printf("run seed: %llu\n\n== verify ==\n", static_cast<unsigned long long>(ro.run_seed));
  const auto v = verify_by_op(vcases, ro, o.verbose);
  (void)peaks();
  std::printf("\n== bench ==\n");
  const auto b = bench_by_op(bcases, ro);
  write_outputs(o, ro, &v, &b);
  return any_failed(v) || any_failed(b) ? kExitFail : kExitOk;
}

int cmd_check(Common& o, const std::string& lesson_key) {
  const Lesson* l = registry().find_lesson(lesson_key);
  if (!l) throw UsageError(fmt::format("unknown lesson '{}' (see `klab list`)", lesson_key));
  if (l->exercise_op.empty()) throw UsageError(fmt::format("lesson {} has no exercise", l->id));
  Selection sel;
  sel.lessons = {l->id};
  sel.ops = {l->exercise_op};
  sel.only_exercises = true;
  const auto cases = plan(sel, false);
  require_gpu();
  RunOptions ro = make_options(o);
  // Unseen seeds: the fixed seeds of `klab test` are known; the grader draws its own.
  std::mt19937_64 g(ro.run_seed);
  ro.seeds = {g() % 1000000000ull + 1000, g() % 1000000000ull + 1000};
  print_device_line();
  std::printf("checking the exercise of lesson %s (%s) — run seed %llu\n", l->id.c_str(), l->exercise_hint.c_str(),
              static_cast<unsigned long long>(ro.run_seed));
  const auto v = verify(cases, ro);
  print_verify(stdout, v, o.verbose);
  if (any_failed(v) || none_ran(v)) {
    std::printf("\nNot yet: the exercise's output is wrong on the cases above. Fix %s and run `klab check %s` again.\n",
                l->exercise_hint.c_str(), l->id.c_str());
    return kExitFail;
  }
  // Speed against the lesson's reference version, same run, first bench shape.
  double ratio = 0;
  Selection bsel;
  bsel.lessons = {l->id};
  bsel.ops = {l->exercise_op};
  bsel.exercises = true;
  bsel.impls = {"exercise", l->exercise_reference};
  auto bcases = plan(bsel, true);
  bcases.resize(std::min<std::size_t>(bcases.size(), 1));
  ro.time_cap_s = 0.5;
  (void)peaks();
  const auto b = bench(bcases, ro);
  print_bench(stdout, b);
  if (any_failed(b)) {
    std::printf("\nNot yet: the exercise's timed output was wrong.\n");
    return kExitFail;
  }
  double ex = 0, rf = 0;
  for (const auto& r : b) (r.impl == "exercise" ? ex : rf) = r.median_ms;
  if (ex > 0 && rf > 0) ratio = ex / rf;
  std::printf("\nPassed: correct on every edge case and unseen seed; %.2fx the time of %s.\n", ratio,
              l->exercise_reference.c_str());
  ExerciseRecord rec;
  rec.lesson = l->id;  // passed_at: filled in with the current time by record_exercise_pass
  rec.speed_ratio = ratio;
  rec.seed = ro.run_seed;
  rec.device = device_info().name;
  try {
    record_exercise_pass(rec);
    std::printf("progress recorded in %s (see `klab progress`)\n", progress_path().c_str());
  } catch (const Error& e) {
    std::printf("passed, but not recorded: %s\n", e.what());
  }
  return kExitOk;
}

int cmd_progress() {
  std::vector<std::string> available;
  for (const auto& l : registry().lessons())
    if (!l.exercise_op.empty()) available.push_back(l.id);
  const std::string text = progress_report(load_progress(), available);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

bool on_path(const char* tool) {
  const std::string cmd = fmt::format("command -v {} >/dev/null 2>&1", tool);
  return std::system(cmd.c_str()) == 0;
}

int cmd_doctor(bool remeasure) {
  const auto& d = device_info();
  std::printf("Kernel Lab doctor\n");
  std::printf("  CUDA toolkit at build  %d.%d\n", CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  if (!d.present) {
    std::printf("  GPU                    none: %s\n", d.why_absent.c_str());
    std::printf("                         kernels cannot run here; `klab test`/`bench`/`run`/`check` exit 77\n");
  } else {
    std::printf("  GPU                    %s (%s)\n", d.name.c_str(), d.uuid.c_str());
    std::printf("  compute capability     %d.%d\n", d.cc_major, d.cc_minor);
    std::printf("  driver / runtime       %d.%d / %d.%d\n", d.driver_version / 1000, (d.driver_version % 1000) / 10,
                d.runtime_version / 1000, (d.runtime_version % 1000) / 10);
    std::printf("  SMs                    %d\n", d.sms);
    std::printf("  memory                 %.1f GiB\n", static_cast<double>(d.global_mem) / (1 << 30));
    std::printf("  L2                     %.1f MB\n", static_cast<double>(d.l2_bytes) / 1e6);
    std::printf("  shared memory          %zu KB per SM, %zu KB per block (opt-in)\n", d.smem_per_sm / 1024,
                d.smem_per_block_optin / 1024);
    std::optional<Peaks> p = remeasure ? std::nullopt : load_peaks();
    if (!p) {
      std::printf("  measuring peaks (cached in %s):\n", peaks_cache_path(d.uuid).c_str());
      p = measure_peaks(true);
    }
    std::printf("  measured peaks (%s)\n", p->measured_at.c_str());
    std::printf("    copy bandwidth       %.0f GB/s (read + write)\n", p->copy_gbps);
    std::printf("    cuBLAS fp32          %.1f TFLOP/s (pedantic)\n", p->sgemm_tflops);
    std::printf("    cuBLAS tf32          %.1f TFLOP/s\n", p->tf32_tflops);
    std::printf("    cuBLAS bf16          %.1f TFLOP/s\n", p->bf16_tflops);
    std::printf("    cuBLAS fp16          %.1f TFLOP/s\n", p->f16_tflops);
  }
  const std::string note = triton_build_note();
  if (note.empty()) {
    const std::string why = triton_supported();
    std::printf("  Triton impls           built (AOT, sm_90)%s\n", why.empty() ? "" : ("; not runnable here: " + why).c_str());
  } else {
    std::printf("  Triton impls           missing: %s\n", note.c_str());
  }
  for (const char* tool : {"compute-sanitizer", "ncu", "nvcc"})
    std::printf("  %-22s %s\n", tool, on_path(tool) ? "found" : "not on PATH");
  std::size_t n_ops = registry().ops().size(), n_impls = 0;
  for (const auto& op : registry().ops()) n_impls += registry().impls_of(op.name).size();
  std::printf("  registry               %zu lessons, %zu ops, %zu impls\n", registry().lessons().size(), n_ops, n_impls);
  return kExitOk;
}

}  // namespace

int klab_main(int argc, char** argv) {
  // Line-buffered even into a file or pipe: a run stopped by a time limit keeps its output.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"klab — Kernel Lab: verify, benchmark and learn GPU kernels"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every verb");
  Common o;
  bool remeasure = false;
  std::string check_lesson;

  auto* list = app.add_subcommand("list", "lessons, ops, impls, and which exercises are solved");
  list->add_option("lessons", o.lessons, "only these lessons");
  list->add_option("--json", o.json, "also write the list as JSON to this file");

  auto* run = app.add_subcommand("run", "verify, then bench, every impl (default: the whole curriculum)");
  auto* test = app.add_subcommand("test", "verification only: exit 0 all passed, 1 a failure, 77 no GPU");
  auto* bench_c = app.add_subcommand("bench", "timing only (warm-up, L2 flush, median), with --json/--csv");
  for (auto* c : {run, test, bench_c}) {
    add_selection(c, o);
    c->add_option("--json", o.json, "write the results as JSON to this file");
    auto* s = c->add_option("--seed", o.seed, "the run seed (default: random, printed)");
    s->each([&](const std::string&) { o.seed_given = true; });
    c->add_flag("-v,--verbose", o.verbose, "one row per check");
  }
  for (auto* c : {run, bench_c}) {
    c->add_option("--csv", o.csv, "write the timings as CSV to this file");
    c->add_flag("--graph", o.graph, "time CUDA-graph replays (for tiny problems where launch overhead dominates)");
    c->add_option("--time-cap", o.time_cap, "seconds of timed launches per impl and shape (default 1)")->check(CLI::PositiveNumber);
  }
  auto* check = app.add_subcommand("check", "grade your exercise: unseen seeds and edge cases, then speed");
  check->add_option("lesson", check_lesson, "the lesson, e.g. 01")->required();
  check->add_flag("-v,--verbose", o.verbose, "one row per check");
  auto* progress = app.add_subcommand("progress", "exercises passed, paths and tracks, the certificate");
  auto* doctor = app.add_subcommand("doctor", "GPU, versions, measured peaks, Triton and tools");
  doctor->add_flag("--remeasure", remeasure, "measure the peaks again instead of using the cache");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (what.find("subcommand") != std::string::npos && argc > 1 && argv[1][0] != '-')
      what = fmt::format("unknown verb '{}' (verbs: list, run, test, bench, check, progress, doctor)", argv[1]);
    std::fprintf(stderr, "klab: error: %s\n", what.c_str());
    return kExitUsage;
  }

  try {
    const auto problems = registry().validate();
    if (!problems.empty()) {
      for (const auto& p : problems) std::fprintf(stderr, "klab: registry: %s\n", p.c_str());
      return kExitFail;
    }
    if (list->parsed()) return cmd_list(o);
    if (progress->parsed()) return cmd_progress();
    if (doctor->parsed()) return cmd_doctor(remeasure);
    if (check->parsed()) return cmd_check(o, check_lesson);
    Selection sel = make_selection(o);
    if (test->parsed()) return cmd_test(o, sel);
    if (bench_c->parsed()) return cmd_bench(o, sel);
    if (run->parsed()) return cmd_run(o, sel);
  } catch (const NoGpuError& e) {
    std::fprintf(stderr, "klab: %s\n", e.what());
    return kExitNoGpu;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "klab: error: %s\n", e.what());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "klab: error: %s\n", e.what());
    return kExitFail;
  }
  return kExitUsage;
}

}  // namespace klab
