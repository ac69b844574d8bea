// CPU tests of the bench's metrics: each op's byte count and the peak it is judged against,
// the peaks cache, clock and power telemetry (through a fake NVML, fake_libnvml.c), and how
// bench records carry telemetry into the table, the JSON and the CSV.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "klab/harness.hpp"
#include "klab/peaks.hpp"
#include "klab/report.hpp"
#include "klab/telemetry.hpp"

using namespace klab;

namespace {

// Every problem of an op's test and bench shapes that its validate accepts.
std::vector<Problem> all_problems(const Op& op) {
  std::vector<Problem> out;
  for (const auto* shapes : {&op.test_shapes, &op.bench_shapes})
    for (const auto& s : *shapes)
      for (DType t : op.dtypes)
        for (const auto& v : op.variants) {
          Problem p{s, t, v};
          if (s.size() == op.dims.size() && (!op.validate || op.validate(p).empty())) out.push_back(p);
        }
  return out;
}

double tensor_bytes(const std::vector<TensorSpec>& specs, bool only_inout = false) {
  double b = 0;
  for (const auto& s : specs)
    if (!only_inout || s.init == Init::inout) b += static_cast<double>(numel_of(s.shape)) * dtype_size(s.dtype);
  return b;
}

double bytes_of(const Op& op, const Problem& p) { return op.bytes ? op.bytes(p) : default_bytes(op, p); }

}  // namespace

// ---- byte counts and the peak each op is judged against -----------------------------------

// An op's bytes are what it must move: every output written once (at least that), each
// input read at most once, an in-out input also written once. Counting more would credit a
// kernel with traffic the op does not need; less than its outputs, with writes it skipped.
// Not for an op bound by the link between GPUs (lesson 16): its bytes are what crosses each
// GPU's link, the all-reduce's bus bytes (NCCL's definition), not its memory traffic.
TEST(Bytes, EveryOpCountsBetweenItsOutputsAndItsTensors) {
  for (const Op& op : registry().ops())
    for (const Problem& p : all_problems(op)) {
      if (op.bound == Bound::link) continue;
      const double b = bytes_of(op, p), out = tensor_bytes(op.outputs(p));
      const double all = tensor_bytes(op.inputs(p)) + out + tensor_bytes(op.inputs(p), true);
      EXPECT_GE(b, out) << op.name << " " << p.label();
      EXPECT_LE(b, all) << op.name << " " << p.label();
    }
}

// Row r of a causal (rows, cols) softmax keeps columns j <= r + cols - rows (the op's
// definition); the masked ones are never read and are written as 0. So the bytes are
// (kept + rows * cols) elements and the flops 5 per kept element. Hand-counted cases, then
// the definition counted element by element on the op's own test shapes.
TEST(Bytes, CausalSoftmaxCountsOnlyTheReadsItNeeds) {
  const Op* op = registry().find_op("softmax_rows");
  if (!op) GTEST_SKIP() << "lesson 04 is not built";
  struct Case { std::int64_t rows, cols, kept; };
  // 7x3: rows 0-3 keep nothing, rows 4-6 keep 1, 2, 3. 4x4: 1+2+3+4. 3x5: 3+4+5.
  for (const Case c : {Case{7, 3, 6}, Case{4, 4, 10}, Case{3, 5, 12}, Case{1, 1, 1}, Case{0, 128, 0}, Case{4, 0, 0}}) {
    const Problem f32{{c.rows, c.cols}, DType::f32, "causal"}, bf16{{c.rows, c.cols}, DType::bf16, "causal"};
    EXPECT_EQ(op->bytes(f32), 4.0 * static_cast<double>(c.kept + c.rows * c.cols)) << f32.label();
    EXPECT_EQ(op->bytes(bf16), 2.0 * static_cast<double>(c.kept + c.rows * c.cols)) << bf16.label();
    EXPECT_EQ(op->flops(f32), 5.0 * static_cast<double>(c.kept)) << f32.label();
  }
  const Problem plain{{3, 5}, DType::f32, ""};
  EXPECT_EQ(op->bytes(plain), 4.0 * 30);
  for (const auto& s : op->test_shapes) {
    if (s[0] * s[1] > (std::int64_t{1} << 24)) continue;   // counted one by one: keep it quick
    std::int64_t kept = 0;
    for (std::int64_t r = 0; r < s[0]; ++r)
      for (std::int64_t j = 0; j < s[1]; ++j) kept += j <= r + s[1] - s[0];
    const Problem p{s, DType::f32, "causal"};
    EXPECT_EQ(op->bytes(p), 4.0 * static_cast<double>(kept + s[0] * s[1])) << p.label();
  }
}

// The read peak is the ceiling of an op whose traffic is reads: one that writes at most 1%
// of its bytes at every bench shape. Judged against the copy peak (reads + writes, the
// slower mix) it could show over 100%; an op writing more than 1% moves enough writes that
// the copy's mix describes it better. Every memory-bound op must declare the peak this rule
// gives, so an op added later is held to it with no new test.
TEST(Bytes, ReadOnlyOpsAreJudgedAgainstTheReadPeak) {
  int read_only = 0;
  for (const Op& op : registry().ops()) {
    if (op.bound == Bound::compute || op.bound == Bound::link) continue;
    bool reads_only = !op.bench_shapes.empty();
    for (const auto& s : op.bench_shapes)
      for (DType t : op.dtypes)
        for (const auto& v : op.variants) {
          const Problem p{s, t, v};
          if (op.validate && !op.validate(p).empty()) continue;
          reads_only = reads_only && tensor_bytes(op.outputs(p)) <= 0.01 * bytes_of(op, p);
        }
    read_only += reads_only;
    EXPECT_EQ(op.bound == Bound::memory_read, reads_only)
        << op.name << ": writes " << (reads_only ? "at most" : "more than") << " 1% of its bytes, so its bound must be "
        << (reads_only ? "Bound::memory_read" : "Bound::memory");
  }
  if (registry().find_op("sum")) EXPECT_GE(read_only, 4);   // sum, mean, argmax, histogram at least
}

// ---- peaks: the cache and the label ----------------------------------------------------------

namespace {
Peaks sample_peaks() {
  Peaks p;
  p.device_name = "NVIDIA H100 80GB HBM3";
  p.device_uuid = "GPU-1234";
  p.measured_at = "2026-11-22T10:31:05Z";
  p.copy_gbps = 2950;
  p.read_gbps = 3210;
  p.sgemm_tflops = 51.2;
  p.tf32_tflops = 378;
  p.bf16_tflops = 744;
  p.f16_tflops = 750;
  return p;
}
}  // namespace

TEST(Peaks, CacheRoundTrips) {
  const auto p = peaks_from_json(peaks_json(sample_peaks()), "GPU-1234");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->copy_gbps, 2950);
  EXPECT_EQ(p->read_gbps, 3210);
  EXPECT_EQ(p->f16_tflops, 750);
  EXPECT_EQ(p->measured_at, "2026-11-22T10:31:05Z");
}

// A cache written before the read peak existed has no read_gbps: it must be measured again,
// never read as a peak of 0 (every read-only op would then show 0% or a division by 0).
TEST(Peaks, CacheWithoutAPeakIsMeasuredAgain) {
  auto j = peaks_json(sample_peaks());
  j.erase("read_gbps");
  EXPECT_FALSE(peaks_from_json(j, "GPU-1234").has_value());
  for (const char* field : {"read_gbps", "copy_gbps", "bf16_tflops"}) {
    auto k = peaks_json(sample_peaks());
    k[field] = 0.0;
    EXPECT_FALSE(peaks_from_json(k, "GPU-1234").has_value()) << field << " = 0";
    k[field] = "fast";
    EXPECT_FALSE(peaks_from_json(k, "GPU-1234").has_value()) << field << " a string";
  }
  EXPECT_FALSE(peaks_from_json(peaks_json(sample_peaks()), "GPU-5678").has_value());   // another device's
}

TEST(Peaks, TheLabelNamesThePeakUsed) {
  const Peaks p = sample_peaks();
  EXPECT_EQ(peak_for(p, Bound::memory_read, DType::f32), std::make_pair(3210.0, std::string("read 3210 GB/s")));
  EXPECT_EQ(peak_for(p, Bound::link, DType::f32).first, 0.0);   // no percentage of an unmeasured peak
  EXPECT_EQ(peak_for(p, Bound::memory, DType::bf16), std::make_pair(2950.0, std::string("copy 2950 GB/s")));
  EXPECT_EQ(peak_for(p, Bound::compute, DType::bf16).first, 744);
  EXPECT_EQ(peak_for(p, Bound::compute, DType::f32).first, 51.2);
}

// ---- clock-event names -----------------------------------------------------------------------

TEST(Telemetry, NamesEachClockEventBit) {
  EXPECT_TRUE(clock_event_names(0).empty());
  EXPECT_EQ(clock_event_names(0x4), std::vector<std::string>{"sw_power_cap"});
  EXPECT_EQ(clock_event_names(0x1 | 0x40), (std::vector<std::string>{"gpu_idle", "hw_thermal"}));
  EXPECT_EQ(clock_event_names(0x1ff),
            (std::vector<std::string>{"gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
                                      "sw_thermal", "hw_thermal", "hw_power_brake", "display_clock"}));
  // A bit NVML adds later is reported by value, not dropped.
  EXPECT_EQ(clock_event_names(0x8 | 0x400), (std::vector<std::string>{"hw_slowdown", "reason_0x400"}));
}

TEST(Telemetry, OnlyPowerAndThermalEventsThrottle) {
  for (const char* e : {"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})
    EXPECT_TRUE(is_throttle_event(e)) << e;
  for (const char* e : {"gpu_idle", "applications_clocks", "sync_boost", "display_clock", "reason_0x400", ""})
    EXPECT_FALSE(is_throttle_event(e)) << e;
}

// ---- the sampler -----------------------------------------------------------------------------

namespace {

// Sets an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

const NvmlTarget kFakeGpu{"GPU-fake", "00000000:01:00.0"};   // what fake_libnvml.c answers to

// How many clock readings the fake NVML has given (while a sampler holds it loaded).
unsigned fake_clock_calls() {
  void* lib = dlopen(KLAB_FAKE_NVML, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(lib, nullptr);
  if (!lib) return 0;
  auto calls = reinterpret_cast<unsigned (*)()>(dlsym(lib, "fake_nvml_clock_calls"));
  const unsigned n = calls ? calls() : 0;
  dlclose(lib);
  return n;
}

}  // namespace

TEST(Telemetry, WithoutNvmlTheSamplerSaysWhy) {
  TelemetrySampler s(kFakeGpu, "libklab-no-such-nvml.so.1");
  for (int i = 0; i < 2; ++i) {   // and again: start() after stop() works the same
    s.start();
    const Telemetry t = s.stop();
    EXPECT_FALSE(t.available);
    EXPECT_NE(t.why_unavailable.find("libklab-no-such-nvml.so.1"), std::string::npos) << t.why_unavailable;
    EXPECT_EQ(t.samples, 0);
    EXPECT_FALSE(t.throttled);
  }
}

// As bench() builds it: on a machine without the driver it must say why; with one, sample.
TEST(Telemetry, TheBenchSamplerSamplesOrSaysWhy) {
  TelemetrySampler s(0);
  s.start();
  const Telemetry t = s.stop();
  if (t.available) EXPECT_GE(t.samples, 2);
  else EXPECT_FALSE(t.why_unavailable.empty());
}

TEST(Telemetry, AFailingNvmlInitSaysWhy) {
  ScopedEnv init("FAKE_NVML_INIT_RESULT", "9");   // NVML_ERROR_DRIVER_NOT_LOADED
  TelemetrySampler s(kFakeGpu, KLAB_FAKE_NVML);
  s.start();
  const Telemetry t = s.stop();
  EXPECT_FALSE(t.available);
  EXPECT_NE(t.why_unavailable.find("nvmlInit"), std::string::npos) << t.why_unavailable;
}

// The window's samples: one at start(), one at stop(), and every ~10 ms between from the
// thread. The fake alternates its readings, so min, max and the events of both show.
TEST(Telemetry, SamplesTheWindowAndFlagsAPowerCap) {
  ScopedEnv mhz("FAKE_NVML_SM_MHZ", "1980,1410");
  ScopedEnv mw("FAKE_NVML_POWER_MW", "650000,700000");
  ScopedEnv reasons("FAKE_NVML_REASONS", "0x1,0x4");
  TelemetrySampler s(kFakeGpu, KLAB_FAKE_NVML);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const Telemetry t = s.stop();
  ASSERT_TRUE(t.available) << t.why_unavailable;
  // 2 ends + ~10 from the thread; 4 leaves room for a loaded machine's late wake-ups but
  // fails a sampler whose thread never samples.
  EXPECT_GE(t.samples, 4);
  EXPECT_EQ(t.sm_mhz_min, 1410);
  EXPECT_EQ(t.sm_mhz_max, 1980);
  EXPECT_GE(t.sm_mhz_median, 1410);
  EXPECT_LE(t.sm_mhz_median, 1980);
  EXPECT_EQ(t.power_w_max, 700);
  EXPECT_GE(t.power_w_median, 650);
  EXPECT_EQ(t.events, (std::vector<std::string>{"gpu_idle", "sw_power_cap"}));
  EXPECT_TRUE(t.throttled);
}

TEST(Telemetry, AShortWindowHasItsTwoEnds) {
  TelemetrySampler s(kFakeGpu, KLAB_FAKE_NVML);
  s.start();
  const Telemetry t = s.stop();
  ASSERT_TRUE(t.available) << t.why_unavailable;
  EXPECT_GE(t.samples, 2);
  EXPECT_EQ(t.sm_mhz_median, 1980);   // the fake's default
  EXPECT_EQ(t.power_w_median, 300);
}

TEST(Telemetry, IdleIsNoThrottle) {
  ScopedEnv reasons("FAKE_NVML_REASONS", "0x1");
  TelemetrySampler s(kFakeGpu, KLAB_FAKE_NVML);
  s.start();
  const Telemetry t = s.stop();
  EXPECT_EQ(t.events, std::vector<std::string>{"gpu_idle"});
  EXPECT_FALSE(t.throttled);
}

// The older drivers' name of the clock-event function is used when the new one is absent.
TEST(Telemetry, ReadsClockEventsUnderTheOlderName) {
  ScopedEnv reasons("FAKE_NVML_REASONS", "0x40");
  TelemetrySampler s(kFakeGpu, KLAB_FAKE_NVML_OLD);
  s.start();
  const Telemetry t = s.stop();
  ASSERT_TRUE(t.available) << t.why_unavailable;
  EXPECT_EQ(t.events, std::vector<std::string>{"hw_thermal"});
  EXPECT_TRUE(t.throttled);
}

// CUDA_VISIBLE_DEVICES renumbers CUDA's devices, not NVML's: the device is found by UUID,
// else by PCI bus id, and a device NVML does not know is reported, not guessed.
TEST(Telemetry, FindsTheDeviceByUuidOrPciBusId) {
  {
    TelemetrySampler by_uuid({"GPU-fake", ""}, KLAB_FAKE_NVML);
    by_uuid.start();
    EXPECT_TRUE(by_uuid.stop().available);
  }
  {
    TelemetrySampler by_pci({"GPU-unknown", "00000000:01:00.0"}, KLAB_FAKE_NVML);
    by_pci.start();
    EXPECT_TRUE(by_pci.stop().available);
  }
  TelemetrySampler neither({"GPU-unknown", "00000000:99:00.0"}, KLAB_FAKE_NVML);
  neither.start();
  const Telemetry t = neither.stop();
  EXPECT_FALSE(t.available);
  EXPECT_NE(t.why_unavailable.find("GPU-unknown"), std::string::npos) << t.why_unavailable;
  EXPECT_NE(t.why_unavailable.find("00000000:99:00.0"), std::string::npos) << t.why_unavailable;
}

// stop() joins the thread: no reading after it. A sampler destroyed while sampling joins too.
TEST(Telemetry, NothingSamplesAfterStop) {
  TelemetrySampler s(kFakeGpu, KLAB_FAKE_NVML);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  s.stop();
  const unsigned after_stop = fake_clock_calls();
  EXPECT_GT(after_stop, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(fake_clock_calls(), after_stop);
  {
    TelemetrySampler running(kFakeGpu, KLAB_FAKE_NVML);
    running.start();
  }
  const Telemetry t = s.stop();   // a stop() without a start() has nothing to report
  EXPECT_FALSE(t.available);
  EXPECT_EQ(t.samples, 0);
}

// ---- bench records: JSON, table, CSV ---------------------------------------------------------

namespace {

Telemetry throttled_window() {
  Telemetry t;
  t.available = true;
  t.samples = 12;
  t.sm_mhz_min = 1410;
  t.sm_mhz_median = 1755;
  t.sm_mhz_max = 1980;
  t.power_w_median = 690;
  t.power_w_max = 700;
  t.events = {"gpu_idle", "sw_power_cap"};
  t.throttled = true;
  return t;
}

BenchRecord timed_row(const std::string& impl, Telemetry t) {
  BenchRecord r;
  r.lesson = "05";
  r.op = "matmul";
  r.impl = impl;
  r.problem = Problem{{8192, 8192, 8192}, DType::bf16, "nn"};
  r.reps = 20;
  r.min_ms = r.median_ms = r.max_ms = 1.6;
  r.tflops = 687;
  r.pct_peak = 92.3;
  r.peak_name = "cuBLAS bf16 744 TFLOP/s";
  r.telemetry = std::move(t);
  return r;
}

std::string printed(const std::vector<BenchRecord>& recs) {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  print_bench(f, recs);
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST(Report, BenchJsonCarriesTheTelemetry) {
  const auto j = to_json(timed_row("v13_mma", throttled_window()));
  ASSERT_TRUE(j.contains("telemetry"));
  const auto& t = j["telemetry"];
  EXPECT_EQ(t["available"], true);
  EXPECT_EQ(t["samples"], 12);
  EXPECT_EQ(t["sm_mhz"]["min"], 1410);
  EXPECT_EQ(t["sm_mhz"]["median"], 1755);
  EXPECT_EQ(t["sm_mhz"]["max"], 1980);
  EXPECT_EQ(t["power_w"]["median"], 690);
  EXPECT_EQ(t["power_w"]["max"], 700);
  EXPECT_EQ(t["events"], nlohmann::json::array({"gpu_idle", "sw_power_cap"}));
  EXPECT_EQ(t["throttled"], true);

  Telemetry none;
  none.why_unavailable = "NVML not loaded: libnvidia-ml.so.1: cannot open shared object file";
  const auto u = to_json(timed_row("v13_mma", none))["telemetry"];
  EXPECT_EQ(u, nlohmann::json({{"available", false}, {"why_unavailable", none.why_unavailable}}));
}

TEST(Report, VerifyJsonCarriesWhereTheHostTimeWent) {
  VerifyRecord r;
  r.inputs_s = 1.5, r.reference_s = 4.25, r.check_s = 0.75;
  const auto j = to_json(r);
  ASSERT_TRUE(j.contains("seconds"));
  EXPECT_EQ(j["seconds"], nlohmann::json({{"inputs", 1.5}, {"reference", 4.25}, {"check", 0.75}}));
}

TEST(Report, TheTableFlagsAThrottledRowAndNamesTheEvent) {
  Telemetry calm = throttled_window();
  calm.events = {"gpu_idle"};
  calm.throttled = false;
  const auto lines = lines_of(printed({timed_row("cublas", calm), timed_row("v13_mma", throttled_window())}));
  int flagged = 0, notes = 0;
  for (const auto& l : lines) {
    if (l.rfind("cublas", 0) == 0) EXPECT_EQ(l.find("throttled"), std::string::npos) << l;
    if (l.rfind("v13_mma", 0) == 0) flagged += l.find("throttled") != std::string::npos;
    if (l.find("throttled: v13_mma: sw_power_cap") != std::string::npos) {
      ++notes;
      EXPECT_NE(l.find("1410-1980 MHz"), std::string::npos) << l;
      EXPECT_NE(l.find("max 700 W"), std::string::npos) << l;
    }
  }
  EXPECT_EQ(flagged, 1);
  EXPECT_EQ(notes, 1);
}

TEST(Report, TheTableSaysOnceWhyTelemetryIsMissing) {
  Telemetry none;
  none.why_unavailable = "NVML not loaded: no driver";
  const std::string out = printed({timed_row("cublas", none), timed_row("v13_mma", none)});
  const auto at = out.find("telemetry unavailable: NVML not loaded: no driver");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_EQ(out.find("telemetry unavailable", at + 1), std::string::npos) << out;
}

TEST(Report, CsvHasClockAndPowerColumns) {
  const std::string path = ::testing::TempDir() + "klab_metrics_test.csv";
  Telemetry none;
  none.why_unavailable = "no NVML";
  write_bench_csv(path, {timed_row("v13_mma", throttled_window()), timed_row("cublas", none)});
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  std::remove(path.c_str());
  ASSERT_EQ(lines.size(), 3u);
  auto fields = [](const std::string& l) {
    std::vector<std::string> v;
    std::stringstream ss(l);
    for (std::string x; std::getline(ss, x, ',');) v.push_back(x);
    if (!l.empty() && l.back() == ',') v.push_back("");
    return v;
  };
  const auto head = fields(lines[0]), throttled = fields(lines[1]), missing = fields(lines[2]);
  ASSERT_EQ(throttled.size(), head.size());
  ASSERT_EQ(missing.size(), head.size());
  auto col = [&](const std::vector<std::string>& row, const std::string& name) {
    for (std::size_t i = 0; i < head.size(); ++i)
      if (head[i] == name) return row[i];
    ADD_FAILURE() << "no column " << name;
    return std::string();
  };
  EXPECT_EQ(col(throttled, "sm_mhz_min"), "1410");
  EXPECT_EQ(col(throttled, "sm_mhz_max"), "1980");
  EXPECT_EQ(col(throttled, "power_w_max"), "700");
  EXPECT_EQ(col(throttled, "throttled"), "1");
  EXPECT_EQ(col(throttled, "clock_events"), "gpu_idle|sw_power_cap");
  EXPECT_EQ(col(missing, "sm_mhz_median"), "");
  EXPECT_EQ(col(missing, "throttled"), "");
}

// An autotuned row names the configuration it timed, in the table and in the JSON; a row
// without one shows the impl alone.
TEST(Report, ABenchRowShowsTheCandidateItTimed) {
  Telemetry quiet;
  BenchRecord tuned = timed_row("v8_autotuned", quiet);
  tuned.candidate = "256x128x16";
  const std::string out = printed({tuned, timed_row("cublas", quiet)});
  EXPECT_NE(out.find("v8_autotuned[256x128x16]"), std::string::npos) << out;
  EXPECT_EQ(out.find("cublas["), std::string::npos) << out;
  EXPECT_EQ(to_json(tuned)["candidate"], "256x128x16");
}
