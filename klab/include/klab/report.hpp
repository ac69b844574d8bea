// klab/report.hpp — aligned terminal tables, JSON and CSV files, the progress line.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "klab/harness.hpp"

namespace klab {

class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> right_align = {});
  void add(std::vector<std::string> row);
  void print(std::FILE* f) const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// A line on stderr that rewrites itself ("[ 12/340] vector_add v3_vec4 268435456 f32"),
// shown only when stderr is a terminal; finish() clears it. With KLAB_PROGRESS_LINES=1 and
// stderr not a terminal (a log file, a detached run), each update is a line of its own
// instead, with the seconds since the start: "[ 12/340] 81.4 s bench attention_bwd ...".
class ProgressLine {
 public:
  ProgressLine(std::size_t total, bool enabled);
  void update(std::size_t done, const std::string& what);
  void finish();
  ~ProgressLine();

 private:
  std::size_t total_;
  bool enabled_;
  bool lines_ = false;   // one line per update (KLAB_PROGRESS_LINES, stderr not a terminal)
  std::size_t last_len_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The progress line's estimate of the time left: the mean time of the `done` cases so far
// times the cases left ("ETA 3m07s"); "" before the first case is done or in the first 2 s,
// when the mean says too little.
std::string eta_text(double elapsed_s, std::size_t done, std::size_t total);

std::string fmt_ms(double ms);
std::string fmt_sig(double v, int digits = 3);   // 3 significant digits, "-" for 0
std::string fmt_sci(double v);                   // "1.2e-07"
std::string utc_now_iso();                       // "2026-11-22T10:31:05Z"

void print_verify(std::FILE* f, const std::vector<VerifyRecord>& recs, bool all_rows);
// One table per (op, problem). A row whose timed launches saw a power or thermal clock
// event says "throttled" and gets a line under the table naming the events and the clock
// range (throttle_note); a run without telemetry says why once, at the end.
void print_bench(std::FILE* f, const std::vector<BenchRecord>& recs);
// "sw_power_cap during the timed launches; SM clock 1410-1980 MHz, power median 690 W, max 700 W"
std::string throttle_note(const Telemetry& t);

nlohmann::json to_json(const VerifyRecord& r);
nlohmann::json to_json(const BenchRecord& r);     // with "telemetry": to_json(r.telemetry)
// {"available": true, "samples", "sm_mhz": {min, median, max}, "power_w": {median, max},
//  "events": [...], "throttled"}, or {"available": false, "why_unavailable": "..."}
nlohmann::json to_json(const Telemetry& t);
nlohmann::json device_json();                    // device + peaks block of JSON reports
void write_json(const std::string& path, const nlohmann::json& j);   // throws klab::Error
void write_bench_csv(const std::string& path, const std::vector<BenchRecord>& recs);

}  // namespace klab
