// The verbs of `klab`. Each parses its options, asks the harness for the work, prints a
// table and maps the outcome to an exit code; nothing here verifies or times by itself.
#include "klab/cli.hpp"

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/harness.hpp"
#include "klab/peaks.hpp"
#include "klab/plan.hpp"
#include "klab/progress.hpp"
#include "klab/ranks.hpp"
#include "klab/report.hpp"
#include "klab/triton.hpp"
#include "verb_debug.hpp"
#include "verb_exercise.hpp"
#include "verb_report.hpp"
#include "validators.hpp"
#include "verb_inspect.hpp"

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
  std::vector<std::string> impls, ops, variants;
  std::string shape, dtype, json, csv, candidate;
  std::int64_t max_elems = 0;
  std::uint64_t seed = 0;
  bool seed_given = false, verbose = false, graph = false;
  bool shape_given = false, dtype_given = false;   // given, even as '' (which is then an error)
  double time_cap = 1.0;
  bool time_cap_given = false;
  bool full = false;   // run: everything instead of the tour
};

// whole_number: validators.hpp.

CLI::Validator positive_seconds() {
  return CLI::Validator(
      [](std::string& s) {
        double v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        const bool ok = !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(v) && v > 0;
        return ok ? std::string() : fmt::format("'{}' is not a positive number of seconds", s);
      },
      "SECONDS");
}

void add_selection(CLI::App* c, Common& o, bool lessons_positional = true) {
  if (lessons_positional) c->add_option("lessons", o.lessons, "lessons by number or name (default: all)");
  c->add_option("--impl", o.impls, "only these impls (repeatable or comma-separated)")->delimiter(',');
  c->add_option("--op", o.ops, "only these ops")->delimiter(',');
  c->add_option("--shape", o.shape, "one shape instead of the op's own, e.g. 4096x4096 or 2^28");
  c->add_option("--dtype", o.dtype, "one dtype: f32, f16, bf16, i32, u8");
  c->add_option("--variant", o.variants, "only these variants, of the ops that have them (repeatable or comma-separated)")
      ->delimiter(',');
  c->add_option("--candidate", o.candidate,
                 "run this configuration of the autotuned impls instead of tuning (`klab list` names them); "
                 "`all` runs each one in turn (a sweep)");
  c->add_option("--max-elems", o.max_elems, "skip problems with a tensor larger than this (for sanitizer runs)")
      ->check(whole_number<std::int64_t>("a count of elements below 2^63"));
}

Selection make_selection(const Common& o) {
  Selection s;
  s.lessons = o.lessons;
  s.impls = o.impls;
  s.ops = o.ops;
  if (o.shape_given) s.shape = parse_shape(o.shape);
  if (o.dtype_given) {
    s.dtype = parse_dtype(o.dtype);
    if (!s.dtype) throw UsageError(fmt::format("bad dtype '{}': expected one of f32, f16, bf16, i32, u8", o.dtype));
  }
  for (const auto& v : o.variants)
    if (!v.empty()) s.variants.push_back(v);
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
  r.candidate = o.candidate;
  r.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  return r;
}

void print_run_seed(const RunOptions& ro) {
  std::printf("run seed: %llu (replay: --seed %llu)\n", static_cast<unsigned long long>(ro.run_seed),
              static_cast<unsigned long long>(ro.run_seed));
}

// The cases of a selection; for a --shape that some dtypes cannot take, a note per op
// names them (they are left out, and the others run).
std::vector<Case> plan_cases(const Selection& sel, bool bench_shapes, bool print_notes = true) {
  Plan p = make_plan(sel, bench_shapes, sel.shape ? memory_limits() : MemoryLimits{});
  if (print_notes)
    for (const auto& n : p.notes) std::printf("note: %s\n", n.c_str());
  return std::move(p.cases);
}

// --candidate NAME keeps the impls that have candidates (the others have nothing to
// select) and needs one of them to name NAME for some selected problem: a misspelt name is
// a usage error that lists the names there are, not a run where every case is unsupported.
std::vector<Case> keep_candidate(std::vector<Case> cases, const std::string& name) {
  if (name.empty()) return cases;
  std::set<std::string> known;
  bool found = false;
  std::vector<Case> kept;
  for (auto& c : cases) {
    std::vector<const Impl*> impls;
    for (const Impl* im : c.impls) {
      if (!im->candidates) continue;
      impls.push_back(im);
      for (const auto& n : im->candidates(c.problem)) {
        known.insert(n);
        found = found || n == name || name == "all";
      }
    }
    if (!impls.empty()) kept.push_back(Case{c.op, std::move(impls), c.problem});
  }
  if (known.empty())
    throw UsageError(fmt::format("--candidate {}: no selected impl has candidates (`klab list` shows the ones that do)",
                                 name));
  if (!found) {
    std::string list;
    for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
    if (list.size() > 400) list = list.substr(0, 400) + ", ...";
    throw UsageError(fmt::format("--candidate {}: no selected impl has it; candidates here: {}", name, list));
  }
  return kept;
}

// --json and --csv are checked before any work: a run of minutes must not end in "cannot
// write", and without a GPU the mistake would otherwise hide behind exit 77.
void check_writable(const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw UsageError(fmt::format("{} needs a file name", flag));
  std::error_code ec;
  const fs::path file(path);
  if (fs::is_directory(file, ec)) throw UsageError(fmt::format("{} {}: is a directory, not a file", flag, path));
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("{} {}: there is no directory {}", flag, path, dir.string()));
  const fs::path target = fs::exists(file, ec) ? file : dir;
  if (access(target.c_str(), W_OK) != 0)
    throw UsageError(fmt::format("{} {}: {} is not writable ({})", flag, path, target.string(), std::strerror(errno)));
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
template <class Record>
bool none_ran(const std::vector<Record>& v) {
  for (const auto& r : v)
    if (r.status != Status::unsupported) return false;
  return true;
}

int nothing_ran() {
  std::printf("nothing ran: every selected impl is unsupported on this device\n");
  return kExitFail;
}

void write_outputs(const Common& o, const RunOptions& ro, const std::vector<VerifyRecord>* v,
                   const std::vector<BenchRecord>* b) {
  if (!o.json.empty()) {
    // "date": when the results were written (UTC); tools/bench_table.py prints it under the tables.
    nlohmann::json j = {{"klab", 1}, {"date", utc_now_iso()}, {"run_seed", ro.run_seed}, {"device", device_json()}};
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

// The file that registered an impl, relative to the repository root when it lies inside it
// (the compiler names sources by the path the build gave it, absolute under CMake). The root
// is where this file was compiled from: <root>/klab/cli/cli.cpp.
std::string repo_relative(const std::string& file) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path().lexically_normal();
  const fs::path f = fs::path(file).lexically_normal();
  if (root.is_absolute() && f.is_absolute()) {
    const fs::path rel = f.lexically_relative(root);
    if (!rel.empty() && *rel.begin() != "..") return rel.generic_string();
  }
  return f.generic_string();
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
    // Each exercise's state: "[exercise solved]", "[exercise open: klab check 09]"; a
    // further exercise by its id ("[09b open: klab check 09b]").
    std::string states;
    nlohmann::json jx = nlohmann::json::array();
    int fixed = 0;
    for (const auto& e : exercises_of(l)) {
      const bool done = progress.exercises.count(e.id) > 0;
      const std::string name = e.title.empty() ? "exercise" : e.id;
      fixed += done;
      if (l.folder.empty()) states += done ? "   [" + name + " solved]" : "   [" + name + " open: klab check " + e.id + "]";
      jx.push_back({{"id", e.id}, {"op", e.op}, {"file", e.file}, {"solved", done}});
    }
    if (!l.folder.empty())   // the debugging catalog: its cases, counted
      states = fmt::format("   [{} of {} cases fixed: klab debug list]", fixed, l.more_exercises.size());
    std::printf("%s  %s — %s%s\n", l.id.c_str(), l.slug.c_str(), l.title.c_str(), states.c_str());
    nlohmann::json jl = {{"id", l.id}, {"slug", l.slug}, {"title", l.title}, {"exercise_solved", solved},
                         {"exercises", jx}, {"ops", nlohmann::json::array()}};
    for (const Op* op : reg.ops_of(l.id)) {
      std::string dims;
      for (const auto& d : op->dims) dims += (dims.empty() ? "" : "x") + d;
      std::printf("    %-18s %-12s %-14s %s\n", op->name.c_str(), dims.c_str(), dtype_list(op->dtypes).c_str(), op->summary.c_str());
      nlohmann::json jo = {{"name", op->name}, {"dims", op->dims}, {"summary", op->summary}, {"impls", nlohmann::json::array()}};
      for (auto t : op->dtypes) jo["dtypes"].push_back(dtype_name(t));
      for (const Impl* im : reg.impls_of(op->name)) {
        std::printf("        %-20s %-8s %s\n", im->name.c_str(), impl_kind_name(im->kind), im->summary.c_str());
        nlohmann::json ji = {{"name", im->name}, {"kind", impl_kind_name(im->kind)}, {"summary", im->summary},
                             {"source", repo_relative(im->source)}};
        // An autotuned impl's configurations, as --candidate takes them (for its first
        // bench problem; an impl may offer fewer on other problems).
        if (im->candidates && !op->bench_shapes.empty()) {
          const Problem p{op->bench_shapes.front(), op->dtypes.front(), op->variants.empty() ? "" : op->variants.front()};
          std::string names;
          for (const auto& n : im->candidates(p)) {
            names += (names.empty() ? "" : " ") + n;
            ji["candidates"].push_back(n);
          }
          std::printf("            --candidate: %s\n", names.c_str());
        }
        jo["impls"].push_back(ji);
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

// Every usage error of test, bench and run is found before require_gpu(): without a GPU
// a malformed request still exits 2, not 77.
int cmd_test(Common& o, Selection sel) {
  const auto cases = keep_candidate(plan_cases(sel, false), o.candidate);
  require_gpu();
  const RunOptions ro = make_options(o);
  print_device_line();
  print_run_seed(ro);
  const auto recs = verify_by_op(cases, ro, o.verbose);
  write_outputs(o, ro, &recs, nullptr);
  if (any_failed(recs)) return kExitFail;
  return none_ran(recs) ? nothing_ran() : kExitOk;
}

int cmd_bench(Common& o, Selection sel) {
  const auto cases = keep_candidate(plan_cases(sel, true), o.candidate);
  (void)l2_flush_by_write();   // a bad KLAB_L2_FLUSH is a usage error, GPU or not
  require_gpu();
  const RunOptions ro = make_options(o);
  print_device_line();
  print_run_seed(ro);   // the re-check of each timed output draws its inputs from it
  (void)peaks();
  const auto recs = bench_by_op(cases, ro);
  write_outputs(o, ro, nullptr, &recs);
  if (any_failed(recs)) return kExitFail;
  return none_ran(recs) ? nothing_ran() : kExitOk;
}

int cmd_run(Common& o, Selection sel) {
  // No filter and no --full: the tour (plan.hpp), a few minutes however large the curriculum.
  sel.tour = !o.full && sel.ops.empty() && sel.impls.empty() && !sel.shape && !sel.dtype && sel.variants.empty() &&
             sel.max_elems == 0 && o.candidate.empty();
  if (sel.tour && !o.time_cap_given) o.time_cap = 0.25;
  const auto vcases = keep_candidate(plan_cases(sel, false), o.candidate);
  const auto bcases = keep_candidate(plan_cases(sel, true, !sel.shape), o.candidate);   // a --shape's notes are the same twice
  (void)l2_flush_by_write();
  require_gpu();
  const RunOptions ro = make_options(o);
  print_device_line();
  print_run_seed(ro);
  if (sel.tour)
    std::printf("the tour: edge shapes up to 2^24 elements, then each op's first and best versions and its "
                "baseline at one bench shape (`klab run --full` runs everything; `klab test` adds the shapes "
                "past 2^31)\n");
  std::printf("\n== verify ==\n");
  const auto v = verify_by_op(vcases, ro, o.verbose);
  (void)peaks();
  std::printf("\n== bench ==\n");
  const auto b = bench_by_op(bcases, ro);
  write_outputs(o, ro, &v, &b);
  if (any_failed(v) || any_failed(b)) return kExitFail;
  return none_ran(v) && none_ran(b) ? nothing_ran() : kExitOk;
}

// Runs this binary again with the same arguments (after a rebuild replaced it), marked so
// that it does not rebuild a second time. Returns only on failure.
[[noreturn]] void rerun_self() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t b = 0; b < all.size();) {
    const std::size_t e = all.find('\0', b);
    args.push_back(all.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  // The link names the file this process started from, which the rebuild replaced.
  constexpr std::string_view kDeleted = " (deleted)";
  if (self.ends_with(kDeleted)) self.resize(self.size() - kDeleted.size());
  if (ec || args.empty()) throw Error("rebuilt, but cannot run the new binary: run the command again");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::setenv("KLAB_NO_REBUILD", "1", 1);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(self.c_str(), argv.data());
  throw Error(fmt::format("rebuilt, but cannot run {}: {}; run the command again", self, std::strerror(errno)));
}

// After a pass of a catalog's case: when every case of the catalog in this build has passed,
// its checkpoint (the catalog's slug, "debugging") is recorded too, for the paths and the
// certificate.
int record_catalog_if_complete(const Lesson& l, const ExerciseRecord& last) {
  if (l.folder.empty()) return kExitOk;
  ProgressData d;
  try {
    d = load_progress();
  } catch (const Error&) {
    return kExitOk;   // record_pass said so already
  }
  for (const auto& e : exercises_of(l))
    if (!d.exercises.count(e.id)) return kExitOk;
  ExerciseRecord rec = last;
  rec.lesson = l.slug;
  rec.passed_at.clear();
  std::printf("every case of %s/ is fixed: the %s checkpoint is recorded\n", l.folder.c_str(), l.slug.c_str());
  return record_pass(rec, false);
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

int cmd_check(Common& o, const std::string& lesson_key, bool triton) {
  // "09" grades the lesson's exercise, "09b" its second (Lesson::more_exercises).
  const ExerciseInfo xi = exercise_for(lesson_key, triton);
  const Lesson* l = xi.lesson;
  const std::string ex_impl = triton ? kTritonExercise : "exercise";
  const std::string ex_ref = triton ? "triton" : xi.reference;
  const std::string ex_file = triton ? "exercise_triton.py" : xi.file;
  const std::string ex_hint = triton ? fmt::format("lessons/{}-{}/exercise_triton.py", l->id, l->slug) : xi.where;
  const std::string again = fmt::format("klab check {}{}", xi.id, triton ? " --triton" : "");
  Selection sel;
  sel.lessons = {l->id};
  sel.ops = {xi.op};
  sel.only_exercises = true;
  sel.impls = {ex_impl};   // the CUDA and the Triton exercise are graded apart
  const auto cases = plan_cases(sel, false);
  (void)l2_flush_by_write();   // the grade ends with a bench
  check_progress_before_run();  // a file that cannot take the pass fails now, not after the work
  // The learner edits a .py: compile it now (one line on an error) and, when it is newer
  // than this binary, rebuild and run the rebuilt binary with the same arguments.
  if (triton && !std::getenv("KLAB_NO_REBUILD") && prepare_triton_exercise(*triton_exercise_of(*l))) rerun_self();
  if (const std::string w = stale_exercise_warning(*l, ex_file); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  require_gpu();
  RunOptions ro = make_options(o);
  // Unseen seeds: the fixed seeds of `klab test` are known; the grader draws its own.
  std::mt19937_64 g(ro.run_seed);
  ro.seeds = {g() % 1000000000ull + 1000, g() % 1000000000ull + 1000};
  print_device_line();
  const std::string what = !xi.title.empty() ? fmt::format("exercise {} ({})", xi.id, xi.title)
                                              : fmt::format("the {}exercise", triton ? "Triton " : "");
  std::printf("checking %s of lesson %s (%s) — run seed %llu\n", what.c_str(), l->id.c_str(), ex_hint.c_str(),
              static_cast<unsigned long long>(ro.run_seed));
  std::vector<VerifyRecord> v;
  try {
    v = verify(cases, ro);
  } catch (const UsageError&) {
    throw;
  } catch (const NoGpuError&) {
    throw;
  } catch (const Error& e) {
    // A kernel that faults (an illegal or misaligned address) leaves the process's CUDA
    // context unusable, and the harness stops: for the grade that is a wrong exercise.
    std::printf("\nNot yet: the exercise stopped the run: %s\nFix %s and run `%s` again.\n", one_line(e.what()).c_str(),
                ex_hint.c_str(), again.c_str());
    return kExitFail;
  }
  print_verify(stdout, v, o.verbose);
  if (!any_failed(v) && none_ran(v)) {   // e.g. a build without Triton: say why, not "wrong"
    const std::string why = v.empty() ? std::string("no case") : v.front().message;
    std::printf("\nNot run: the exercise cannot run in this build or on this device: %s\n", why.c_str());
    return kExitFail;
  }
  if (any_failed(v)) {
    std::printf("\nNot yet: the exercise's output is wrong on the cases above. Fix %s and run `%s` again.\n",
                ex_hint.c_str(), again.c_str());
    return kExitFail;
  }
  // A case of the debugging catalog: its tool must be clean too (a race can give the right
  // output by luck; a write past the end can land where no check looks).
  if (!triton && !xi.tool.empty()) {
    const ToolRun t = run_tool_on_exercise(xi, kToolMaxElems);
    if (t.no_gpu) return kExitNoGpu;
    if (!t.ran) {
      std::printf("\nNot run: %s: the fix is graded with it.\n", t.why.c_str());
      return kExitFail;
    }
    std::printf("\n%s: %s\n", xi.tool.c_str(), t.summary.c_str());
    if (t.errors != 0 || t.klab_rc != kExitOk) {
      std::printf("\nNot yet: the output is right, but %s still reports the bug (`klab debug run %s` shows the "
                  "report). Fix %s and run `%s` again.\n",
                  xi.tool.c_str(), xi.id.substr(xi.id.find('/') + 1).c_str(), ex_hint.c_str(), again.c_str());
      return kExitFail;
    }
  }
  // Speed against the lesson's reference version, same run, first bench shape (none for a
  // catalog's case: it is graded on being right).
  double ratio = 0;
  if (!triton && ex_ref.empty()) {
    std::printf("\nPassed: correct on every edge case and unseen seed%s.\n",
                xi.tool.empty() ? "" : (", and " + xi.tool + " is clean").c_str());
  } else {
    Selection bsel;
    bsel.lessons = {l->id};
    bsel.ops = {xi.op};
    bsel.exercises = true;
    bsel.impls = {ex_impl, ex_ref};
    auto bcases = plan_cases(bsel, true);
    // The first bench shape that both the exercise and its reference take.
    if (const auto c = first_case_all_run(bcases)) bcases = {*c};
    else bcases.clear();
    ro.time_cap_s = 0.5;
    (void)peaks();
    const auto b = bench(bcases, ro);
    print_bench(stdout, b);
    if (any_failed(b)) {
      std::printf("\nNot yet: the exercise's timed output was wrong.\n");
      return kExitFail;
    }
    double ex = 0, rf = 0;
    for (const auto& r : b) (r.impl == ex_impl ? ex : rf) = r.median_ms;
    if (ex > 0 && rf > 0) ratio = ex / rf;
    if (ratio > 0)
      std::printf("\nPassed: correct on every edge case and unseen seed; %.2fx the time of %s.\n", ratio, ex_ref.c_str());
    else
      std::printf("\nPassed: correct on every edge case and unseen seed (no bench shape runs both it and %s: not timed).\n",
                  ex_ref.c_str());
  }
  ExerciseRecord rec;
  rec.lesson = xi.id;  // passed_at: filled in with the current time by record_exercise_pass
  rec.speed_ratio = ratio;
  rec.seed = ro.run_seed;
  rec.device = device_info().name;
  // A pass that cannot be saved exits 1 and says why.
  if (const int rc = record_pass(rec, triton); rc != kExitOk || triton) return rc;
  return record_catalog_if_complete(*l, rec);
}
int cmd_progress() {
  std::vector<std::string> available;
  for (const auto& l : registry().lessons()) {
    for (const auto& e : exercises_of(l)) available.push_back(e.id);
    // The catalog's checkpoint ("debugging", its slug): recorded when all its cases pass.
    if (!l.folder.empty() && !l.more_exercises.empty()) available.push_back(l.slug);
  }
  // An unreadable or foreign progress file is the user's to fix (KLAB_PROGRESS_FILE or the
  // file itself): a usage error, with load_progress()'s advice.
  const ProgressData data = [] {
    try { return load_progress(); } catch (const Error& e) { throw UsageError(e.what()); }
  }();
  std::vector<std::string> available_triton;
  for (const auto& l : registry().lessons())
    if (triton_exercise_of(l)) available_triton.push_back(l.id);
  const std::string text = progress_report(data, available, available_triton);
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
  if (!d.present && gpu_absence_is_skip(d.state)) {
    std::printf("  GPU                    none: %s\n", d.why_absent.c_str());
    std::printf("                         kernels cannot run here (test/bench/run/check exit 77): see docs/no-gpu.md\n");
  } else if (!d.present) {
    std::printf("  GPU                    unusable (%s): %s\n", gpu_state_name(d.state), d.why_absent.c_str());
    std::printf("                         test/bench/run/check exit 1 until this is fixed: see docs/no-gpu.md\n");
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
    // What the multi-GPU lesson can run: a shape of R ranks needs R GPUs (klab/ranks.hpp).
    if (const int g = gpu_count(); g > 1) {
      const std::string peers = require_peer_access(g);
      std::printf("  GPUs                   %d (ranks of lesson 16; %s)\n", g,
                  peers.empty() ? "peer access between every pair" : peers.c_str());
    } else {
      std::printf("  GPUs                   1 (lesson 16 runs its one-rank shapes; its others need more GPUs)\n");
    }
    std::optional<Peaks> p = remeasure ? std::nullopt : load_peaks();
    if (!p) {
      std::printf("  measuring peaks (cached in %s):\n", peaks_cache_path(d.uuid).c_str());
      p = measure_peaks(true);
    }
    std::printf("  measured peaks (%s; medians of repeated runs)\n", p->measured_at.c_str());
    std::printf("    copy bandwidth       %.0f GB/s (read + write)\n", p->copy_gbps);
    std::printf("    read bandwidth       %.0f GB/s (read only: the peak of reductions)\n", p->read_gbps);
    std::printf("    cuBLAS fp32          %.1f TFLOP/s (pedantic)\n", p->sgemm_tflops);
    std::printf("    cuBLAS tf32          %.1f TFLOP/s\n", p->tf32_tflops);
    std::printf("    cuBLAS bf16          %.1f TFLOP/s\n", p->bf16_tflops);
    std::printf("    cuBLAS fp16          %.1f TFLOP/s\n", p->f16_tflops);
    // What `klab bench` can say about each row's clocks: one short sample now.
    TelemetrySampler sampler(d.index);
    sampler.start();
    const Telemetry t = sampler.stop();
    if (t.available)
      std::printf("  clock/power telemetry  NVML; now SM clock %.0f MHz, %.0f W\n", t.sm_mhz_median, t.power_w_median);
    else
      std::printf("  clock/power telemetry  unavailable: %s\n", t.why_unavailable.c_str());
  }
  const std::string note = triton_build_note();
  if (note.empty()) {
    const std::string why = triton_supported();
    std::printf("  Triton impls           built (AOT, sm_80 and sm_90)%s\n", why.empty() ? "" : ("; not runnable here: " + why).c_str());
  } else {
    std::printf("  Triton impls           missing: %s\n", note.c_str());
  }
  for (const char* tool : {"compute-sanitizer", "ncu", "nvcc"})
    std::printf("  %-22s %s\n", tool, on_path(tool) ? "found" : "not on PATH");
  try {
    std::printf("  %-22s %s (klab inspect)\n", "cuobjdump", find_cuobjdump().c_str());
  } catch (const Error& e) {
    std::printf("  %-22s not found: klab inspect needs it (the CUDA toolkit's, or Triton's; KLAB_CUOBJDUMP)\n", "cuobjdump");
  }
  std::size_t n_ops = registry().ops().size(), n_impls = 0;
  for (const auto& op : registry().ops()) n_impls += registry().impls_of(op.name).size();
  std::printf("  registry               %zu lessons, %zu ops, %zu impls\n", registry().lessons().size(), n_ops, n_impls);
  return kExitOk;
}

// "klab check <lesson> [options]": a verb's usage in one line, from its own options.
std::string usage_of(const CLI::App* c) {
  std::string u = "klab " + c->get_name();
  bool options = false;
  for (const CLI::Option* opt : c->get_options()) {
    if (!opt->get_positional()) {
      options = options || opt != c->get_help_ptr();
      continue;
    }
    const std::string name = opt->get_name();
    u += opt->get_required() ? " <" + name + ">" : opt->get_items_expected_max() > 1 ? " [" + name + "...]" : " [" + name + "]";
  }
  if (options) u += " [options]";
  return fmt::format("usage: {}; `klab {} --help` lists the options", u, c->get_name());
}

std::string verbs_of(const CLI::App& app) {
  std::string v;
  for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; }))
    v += (v.empty() ? "" : ", ") + c->get_name();
  return v;
}

// CLI11's parse errors, and arguments it left over, as one line naming what is wrong, the
// verb, and the verb's usage (never CLI11's raw phrasing or its help text).
std::string parse_problem(const CLI::App& app, const std::string& what, int argc, char** argv) {
  const auto verbs = app.get_subcommands();
  if (verbs.empty()) {
    if (argc < 2) return fmt::format("no verb given (verbs: {})", verbs_of(app));
    const std::string first = argv[1];
    if (!first.empty() && first[0] == '-') return fmt::format("unknown option '{}' before the verb (verbs: {})", first, verbs_of(app));
    return fmt::format("unknown verb '{}' (verbs: {})", first, verbs_of(app));
  }
  // CLI11's "Could not convert: --full = maybe": every option that takes a value has a
  // validator with its own words, so only a flag given a value reaches this.
  static const std::string kConvert = "Could not convert: ";
  if (what.rfind(kConvert, 0) == 0) {
    const std::string rest = what.substr(kConvert.size());
    const auto eq = rest.find(" = ");
    if (eq != std::string::npos)
      return fmt::format("{}: {} takes no value, not '{}' (give it alone) ({})", verbs.front()->get_name(),
                         rest.substr(0, eq), rest.substr(eq + 3), usage_of(verbs.front()));
  }
  return fmt::format("{}: {} ({})", verbs.front()->get_name(), what, usage_of(verbs.front()));
}

// The first argument that nothing took, as a usage problem, or "". Every App allows extras
// so that this, not CLI11's list of them, names it: the verb's own are left on the verb,
// the ones before the verb on the app.
std::string leftover(const CLI::App& app, const CLI::App* verb, int argc, char** argv) {
  auto what = [](const std::string& a) {
    return !a.empty() && a[0] == '-' && a.size() > 1 ? fmt::format("unknown option '{}'", a)
                                                      : fmt::format("unexpected argument '{}'", a);
  };
  if (const auto before = app.remaining(); !before.empty())
    return fmt::format("{} before the verb {} (options follow the verb; {})", what(before.front()), verb->get_name(),
                       usage_of(verb));
  const auto rest = verb->remaining();
  return rest.empty() ? "" : parse_problem(app, what(rest.front()), argc, argv);
}

}  // namespace

int report_error(std::exception_ptr e, bool shape_requested) {
  auto say = [](const char* prefix, const std::string& what) { std::fprintf(stderr, "klab: %s%s\n", prefix, one_line(what).c_str()); };
  try {
    std::rethrow_exception(e);
  } catch (const NoGpuError& x) {
    say("", x.what());
    return kExitNoGpu;
  } catch (const UsageError& x) {
    say("error: ", x.what());
    return kExitUsage;
  } catch (const Error& x) {
    say("error: ", x.what());
    return kExitFail;
  } catch (const std::bad_alloc&) {
    // plan() refuses a --shape whose tensors cannot fit; what is left is the harness's own
    // working memory on top of them: still the requested size's fault.
    if (shape_requested) {
      say("error: ", "out of host memory for the requested --shape; try a smaller one");
      return kExitUsage;
    }
    say("error: ", "out of host memory");
    return kExitFail;
  } catch (const std::exception& x) {
    say("error: ", fmt::format("internal error: {}", x.what()));
    return kExitFail;
  } catch (...) {
    say("error: ", "internal error: an exception of unknown type");
    return kExitFail;
  }
  return kExitFail;
}

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

  auto* run = app.add_subcommand("run", "verify, then bench: the tour of the curriculum (or of the lessons named); --full runs everything");
  auto* test = app.add_subcommand("test", "verification only: exit 0 all passed, 1 a failure, 77 no GPU");
  auto* bench_c = app.add_subcommand("bench", "timing only (warm-up, L2 flush, median), with --json/--csv");
  for (auto* c : {run, test, bench_c}) {
    add_selection(c, o);
    c->add_option("--json", o.json, "write the results as JSON to this file");
    auto* s = c->add_option("--seed", o.seed, "the run seed (default: random, printed)")
                  ->check(whole_number<std::uint64_t>("a seed: a whole number from 0 to 2^64 - 1"));
    s->each([&](const std::string&) { o.seed_given = true; });
    c->add_flag("-v,--verbose", o.verbose, "one row per check");
  }
  for (auto* c : {run, bench_c}) {
    c->add_option("--csv", o.csv, "write the timings as CSV to this file");
    c->add_flag("--graph", o.graph, "time CUDA-graph replays (for tiny problems where launch overhead dominates)");
    c->add_option("--time-cap", o.time_cap, "seconds of timed launches per impl and shape (default 1; the tour 0.25)")
        ->check(positive_seconds())
        ->each([&](const std::string&) { o.time_cap_given = true; });
  }
  run->add_flag("--full", o.full, "every op, impl and shape (default: the tour; any filter also runs what it selects)");
  auto* check = app.add_subcommand("check", "grade your exercise: unseen seeds and edge cases, then speed");
  check->add_option("lesson", check_lesson, "the lesson, e.g. 01 (09b: its second exercise)")->required();
  check->add_flag("-v,--verbose", o.verbose, "one row per check");
  bool check_triton = false;
  check->add_flag("--triton", check_triton, "grade the lesson's Triton exercise (exercise_triton.py) instead");
  auto* progress = app.add_subcommand("progress", "exercises passed, paths and tracks, the certificate");
  auto* doctor = app.add_subcommand("doctor", "GPU, versions, measured peaks, Triton and tools");
  doctor->add_flag("--remeasure", remeasure, "measure the peaks again instead of using the cache");
  ReportArgs report_args;
  auto* report = add_report_verb(app, report_args);
  InspectArgs inspect_args;
  auto* inspect_verb = add_inspect_verb(app, inspect_args);
  inspect_verb->add_option("--json", o.json, "also write the rows as JSON to this file");
  app.allow_extras();
  for (auto* c : {list, run, test, bench_c, check, progress, doctor, inspect_verb}) c->allow_extras();
  ExerciseVerbArgs xa;   // hint, solution, reset (verb_exercise.cpp)
  const auto exercise_verbs = add_exercise_verbs(app, xa);
  for (auto* c : exercise_verbs) c->allow_extras();
  DebugVerbArgs debug_args;   // debug list | show | run (verb_debug.cpp)
  auto* debug_verb = add_debug_verb(app, debug_args);
  debug_verb->allow_extras();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "klab: error: %s\n", one_line(parse_problem(app, e.what(), argc, argv)).c_str());
    return kExitUsage;
  }

  CLI::App* verb = app.get_subcommands().front();
  auto given = [verb](const char* name) {
    const CLI::Option* opt = verb->get_option_no_throw(name);
    return opt && opt->count() > 0;
  };
  o.shape_given = given("--shape");
  o.dtype_given = given("--dtype");
  try {
    if (const std::string extra = leftover(app, verb, argc, argv); !extra.empty()) throw UsageError(extra);
    if (given("--json")) check_writable("--json", o.json);
    if (given("--csv")) check_writable("--csv", o.csv);
    if (given("--candidate") && o.candidate.empty())
      throw UsageError("--candidate needs a configuration's name (`klab list` names them)");
    const auto problems = registry().validate();
    if (!problems.empty()) {
      for (const auto& p : problems) std::fprintf(stderr, "klab: registry: %s\n", p.c_str());
      return kExitFail;
    }
    if (list->parsed()) return cmd_list(o);
    if (progress->parsed()) return cmd_progress();
    if (doctor->parsed()) return cmd_doctor(remeasure);
    if (report->parsed()) return cmd_report(report_args);
    if (inspect_verb->parsed()) {
      inspect_args.json = o.json;
      return cmd_inspect(inspect_args);
    }
    if (check->parsed()) return cmd_check(o, check_lesson, check_triton);
    if (const int rc = run_exercise_verbs(exercise_verbs, xa); rc >= 0) return rc;
    if (const int rc = run_debug_verb(debug_verb, debug_args); rc >= 0) return rc;
    Selection sel = make_selection(o);
    if (test->parsed()) return cmd_test(o, sel);
    if (bench_c->parsed()) return cmd_bench(o, sel);
    if (run->parsed()) return cmd_run(o, sel);
  } catch (...) {
    return report_error(std::current_exception(), o.shape_given);
  }
  return kExitUsage;
}

}  // namespace klab
