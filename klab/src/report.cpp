#include "klab/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/peaks.hpp"
#include "klab/telemetry.hpp"

namespace klab {

Table::Table(std::vector<std::string> header, std::vector<bool> right_align)
    : header_(std::move(header)), right_(std::move(right_align)) {
  right_.resize(header_.size(), false);
}

void Table::add(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void Table::print(std::FILE* f) const {
  std::vector<std::size_t> w(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) {
    w[c] = header_[c].size();
    for (const auto& r : rows_) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t c = 0; c < r.size(); ++c) {
      const std::size_t pad = w[c] - r[c].size();
      if (c) s += "  ";
      if (right_[c]) s += std::string(pad, ' ') + r[c];
      else s += r[c] + (c + 1 < r.size() ? std::string(pad, ' ') : "");
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::fprintf(f, "%s\n", s.c_str());
  };
  line(header_);
  std::vector<std::string> rule;
  for (auto x : w) rule.push_back(std::string(x, '-'));
  line(rule);
  for (const auto& r : rows_) line(r);
}

ProgressLine::ProgressLine(std::size_t total, bool enabled)
    : total_(total), enabled_(enabled && isatty(STDERR_FILENO)) {
  const char* lines = std::getenv("KLAB_PROGRESS_LINES");
  lines_ = enabled && !enabled_ && lines && std::string_view(lines) == "1";
}

void ProgressLine::update(std::size_t done, const std::string& what) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (lines_) {
    std::fprintf(stderr, "[%*zu/%zu] %.1f s %s\n", static_cast<int>(std::to_string(total_).size()), done + 1, total_,
                 elapsed, what.c_str());
    std::fflush(stderr);
    return;
  }
  if (!enabled_) return;
  const std::string eta = eta_text(elapsed, done, total_);
  std::string s = fmt::format("[{:>{}}/{}]{}{} {}", done + 1, std::to_string(total_).size(), total_,
                              eta.empty() ? "" : " ", eta, what);
  if (s.size() > 100) s.resize(100);
  std::fprintf(stderr, "\r%s%s", s.c_str(), std::string(last_len_ > s.size() ? last_len_ - s.size() : 0, ' ').c_str());
  std::fflush(stderr);
  last_len_ = s.size();
}

std::string eta_text(double elapsed_s, std::size_t done, std::size_t total) {
  if (done == 0 || done >= total || !(elapsed_s >= 2.0)) return "";
  const double left = elapsed_s / static_cast<double>(done) * static_cast<double>(total - done);
  const long long s = std::llround(left);
  if (s < 60) return fmt::format("ETA {}s", s);
  if (s < 3600) return fmt::format("ETA {}m{:02}s", s / 60, s % 60);
  return fmt::format("ETA {}h{:02}m", s / 3600, (s % 3600) / 60);
}

void ProgressLine::finish() {
  if (enabled_ && last_len_) std::fprintf(stderr, "\r%s\r", std::string(last_len_, ' ').c_str());
  last_len_ = 0;
}

ProgressLine::~ProgressLine() { finish(); }

std::string fmt_ms(double ms) {
  if (ms <= 0) return "-";
  if (ms < 0.01) return fmt::format("{:.2f} us", ms * 1e3);
  if (ms < 1) return fmt::format("{:.1f} us", ms * 1e3);
  if (ms < 1000) return fmt::format("{:.3f} ms", ms);
  return fmt::format("{:.2f} s", ms * 1e-3);
}

std::string fmt_sig(double v, int digits) {
  if (v == 0 || !std::isfinite(v)) return "-";
  const int mag = static_cast<int>(std::floor(std::log10(std::fabs(v))));
  const int dec = std::max(0, digits - 1 - mag);
  return fmt::format("{:.{}f}", v, dec);
}

std::string fmt_sci(double v) { return fmt::format("{:.1e}", v); }

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void print_verify(std::FILE* f, const std::vector<VerifyRecord>& recs, bool all_rows) {
  // One row per (op, impl): how many checks passed, and the worst errors seen.
  struct Agg {
    int pass = 0, fail = 0, unsup = 0, error = 0;
    double rel = 0, abs = 0;
    std::string note;
  };
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, Agg> agg;
  for (const auto& r : recs) {
    const auto key = std::make_pair(r.op, r.impl);
    if (!agg.count(key)) order.push_back(key);
    auto& a = agg[key];
    switch (r.status) {
      case Status::pass: ++a.pass; break;
      case Status::fail: ++a.fail; break;
      case Status::unsupported: ++a.unsup; if (a.note.empty()) a.note = r.message; break;
      case Status::error: ++a.error; break;
    }
    a.rel = std::max(a.rel, r.rel_l2);
    a.abs = std::max(a.abs, r.max_abs);
  }
  Table t({"op", "impl", "checks", "passed", "failed", "unsupported", "worst rel_l2", "worst max_abs", "note"},
          {false, false, true, true, true, true, true, true, false});
  for (const auto& key : order) {
    const auto& a = agg[key];
    const int n = a.pass + a.fail + a.unsup + a.error;
    t.add({key.first, key.second, std::to_string(n), std::to_string(a.pass),
           std::to_string(a.fail + a.error), std::to_string(a.unsup),
           a.pass + a.fail ? fmt_sci(a.rel) : "-", a.pass + a.fail ? fmt_sci(a.abs) : "-",
           a.fail + a.error ? "FAILED" : (a.unsup && !a.pass ? a.note : "")});
  }
  t.print(f);
  if (all_rows) {
    std::fprintf(f, "\n");
    Table d({"op", "impl", "problem", "seed", "status", "rel_l2", "max_abs", "detail"},
            {false, false, false, true, false, true, true, false});
    for (const auto& r : recs)
      d.add({r.op, r.impl, r.problem.label(), std::to_string(r.seed), status_name(r.status),
             r.status == Status::pass || r.status == Status::fail ? fmt_sci(r.rel_l2) : "-",
             r.status == Status::pass || r.status == Status::fail ? fmt_sci(r.max_abs) : "-", r.message});
    d.print(f);
  }
  bool header = false;
  for (const auto& r : recs) {
    if (r.status != Status::fail && r.status != Status::error) continue;
    if (!header) { std::fprintf(f, "\nFailures (replay with --seed <seed> and --shape):\n"); header = true; }
    std::fprintf(f, "  %s %s/%s %s seed %llu: %s\n", status_name(r.status), r.op.c_str(), r.impl.c_str(),
                 r.problem.label().c_str(), static_cast<unsigned long long>(r.seed), r.message.c_str());
  }
}

std::string throttle_note(const Telemetry& t) {
  std::string events;
  for (const auto& e : t.events)
    if (is_throttle_event(e)) events += (events.empty() ? "" : ", ") + e;
  return fmt::format("{} during the timed launches; SM clock {:.0f}-{:.0f} MHz, power median {:.0f} W, max {:.0f} W",
                     events, t.sm_mhz_min, t.sm_mhz_max, t.power_w_median, t.power_w_max);
}

void print_bench(std::FILE* f, const std::vector<BenchRecord>& recs) {
  std::size_t i = 0;
  while (i < recs.size()) {
    std::size_t j = i;
    while (j < recs.size() && recs[j].op == recs[i].op && recs[j].problem.label() == recs[i].problem.label()) ++j;
    const auto& head = recs[i];
    std::fprintf(f, "\n%s  %s%s   (%% of peak: %s)\n", head.op.c_str(), head.problem.label().c_str(),
                 head.graph ? "  [CUDA graph replay]" : "", head.peak_name.c_str());
    std::string base;
    for (std::size_t k = i; k < j; ++k)
      if (!recs[k].baseline.empty()) base = recs[k].baseline;
    Table t({"impl", "median", "min", "max", "GB/s", "TFLOP/s", "% peak", base.empty() ? "vs baseline" : "vs " + base, "reps", "status"},
            {false, true, true, true, true, true, true, true, true, false});
    std::vector<std::string> notes;
    for (std::size_t k = i; k < j; ++k) {
      const auto& r = recs[k];
      if (r.status == Status::unsupported) {
        t.add({r.impl, "-", "-", "-", "-", "-", "-", "-", "-", "unsupported: " + r.message});
        continue;
      }
      std::string status = r.status == Status::pass ? "ok" : std::string(status_name(r.status)) + ": " + r.message;
      if (r.telemetry.throttled) {
        status += " (throttled, see below)";
        notes.push_back(fmt::format("  throttled: {}: {}", r.impl, throttle_note(r.telemetry)));
      }
      t.add({r.candidate.empty() ? r.impl : fmt::format("{}[{}]", r.impl, r.candidate), fmt_ms(r.median_ms), fmt_ms(r.min_ms), fmt_ms(r.max_ms), fmt_sig(r.gbps, 4), fmt_sig(r.tflops, 3),
             r.pct_peak > 0 ? fmt::format("{:.1f}%", r.pct_peak) : "-",
             r.speedup > 0 ? fmt::format("{:.2f}x", r.speedup) : "-", std::to_string(r.reps), status});
    }
    t.print(f);
    for (const auto& n : notes) std::fprintf(f, "%s\n", n.c_str());
    i = j;
  }
  // Once per run: why no row could be checked for throttling (no NVML, no driver access).
  for (const auto& r : recs)
    if (!r.telemetry.available && !r.telemetry.why_unavailable.empty()) {
      std::fprintf(f, "\n(clock and power telemetry unavailable: %s)\n", r.telemetry.why_unavailable.c_str());
      break;
    }
}

static nlohmann::json problem_json(const Problem& p) {
  return {{"shape", p.shape}, {"dtype", dtype_name(p.dtype)}, {"variant", p.variant}};
}

nlohmann::json to_json(const VerifyRecord& r) {
  nlohmann::json outs = nlohmann::json::array();
  for (const auto& c : r.outputs)
    outs.push_back({{"ok", c.ok}, {"count", c.count}, {"bad", c.bad}, {"nonfinite", c.nonfinite},
                    {"rel_l2", c.rel_l2}, {"max_abs", c.max_abs}});
  return {{"lesson", r.lesson}, {"op", r.op}, {"impl", r.impl}, {"candidate", r.candidate},
          {"kind", impl_kind_name(r.kind)}, {"problem", problem_json(r.problem)}, {"seed", r.seed}, {"status", status_name(r.status)},
          {"message", r.message}, {"rel_l2", r.rel_l2}, {"max_abs", r.max_abs}, {"outputs", outs},
          {"seconds", {{"inputs", r.inputs_s}, {"reference", r.reference_s}, {"check", r.check_s}}}};
}

nlohmann::json to_json(const Telemetry& t) {
  if (!t.available) return {{"available", false}, {"why_unavailable", t.why_unavailable}};
  return {{"available", true}, {"samples", t.samples},
          {"sm_mhz", {{"min", t.sm_mhz_min}, {"median", t.sm_mhz_median}, {"max", t.sm_mhz_max}}},
          {"power_w", {{"median", t.power_w_median}, {"max", t.power_w_max}}},
          {"events", t.events}, {"throttled", t.throttled}};
}

nlohmann::json to_json(const BenchRecord& r) {
  return {{"lesson", r.lesson}, {"op", r.op}, {"impl", r.impl}, {"candidate", r.candidate},
          {"kind", impl_kind_name(r.kind)}, {"problem", problem_json(r.problem)}, {"status", status_name(r.status)},
          {"message", r.message}, {"reps", r.reps}, {"min_ms", r.min_ms}, {"median_ms", r.median_ms},
          {"max_ms", r.max_ms}, {"gbps", r.gbps}, {"tflops", r.tflops}, {"pct_peak", r.pct_peak},
          {"peak", r.peak_name}, {"speedup", r.speedup}, {"baseline", r.baseline}, {"graph", r.graph},
          {"telemetry", to_json(r.telemetry)}};
}

nlohmann::json device_json() {
  const auto& d = device_info();
  nlohmann::json j = {{"present", d.present}};
  if (!d.present) {
    j["why_absent"] = d.why_absent;
    return j;
  }
  j.update({{"name", d.name}, {"uuid", d.uuid}, {"cc", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
            {"sms", d.sms}, {"l2_bytes", d.l2_bytes}, {"global_mem", d.global_mem},
            {"driver_version", d.driver_version}, {"runtime_version", d.runtime_version}});
  if (auto p = load_peaks())
    j["peaks"] = {{"measured_at", p->measured_at}, {"copy_gbps", p->copy_gbps}, {"read_gbps", p->read_gbps},
                  {"sgemm_tflops", p->sgemm_tflops}, {"tf32_tflops", p->tf32_tflops}, {"bf16_tflops", p->bf16_tflops},
                  {"f16_tflops", p->f16_tflops}};
  return j;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  if (!f) throw Error("cannot write " + path);
  f << j.dump(2) << "\n";
  if (!f) throw Error("error writing " + path);
}

void write_bench_csv(const std::string& path, const std::vector<BenchRecord>& recs) {
  std::ofstream f(path);
  if (!f) throw Error("cannot write " + path);
  // Telemetry columns are empty where none was sampled (a CPU impl, no NVML); clock_events
  // are joined with '|' so that the column holds no comma.
  f << "lesson,op,impl,kind,shape,dtype,variant,status,reps,min_ms,median_ms,max_ms,gbps,tflops,pct_peak,speedup,baseline,graph,"
       "sm_mhz_min,sm_mhz_median,sm_mhz_max,power_w_median,power_w_max,throttled,clock_events\n";
  for (const auto& r : recs) {
    const Telemetry& t = r.telemetry;
    std::string events;
    for (const auto& e : t.events) events += (events.empty() ? "" : "|") + e;
    const std::string tel = t.available ? fmt::format("{},{},{},{},{},{},{}", t.sm_mhz_min, t.sm_mhz_median, t.sm_mhz_max,
                                                      t.power_w_median, t.power_w_max, t.throttled ? 1 : 0, events)
                                        : ",,,,,,";
    f << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.lesson, r.op, r.impl,
                     impl_kind_name(r.kind), dims_to_string(r.problem.shape), dtype_name(r.problem.dtype),
                     r.problem.variant, status_name(r.status), r.reps, r.min_ms, r.median_ms, r.max_ms, r.gbps,
                     r.tflops, r.pct_peak, r.speedup, r.baseline, r.graph ? 1 : 0, tel);
  }
  if (!f) throw Error("error writing " + path);
}

}  // namespace klab
