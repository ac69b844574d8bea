// CPU tests of the failure paths: sizes that overflow or cannot fit (plan.hpp), a --shape
// that only some dtypes take, the GPU's absence told from a broken installation
// (device.hpp), and every exception at the top of `klab` as one line and an exit code.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <new>
#include <stdexcept>

#include "klab/cli.hpp"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/plan.hpp"

using namespace klab;

namespace {
constexpr std::int64_t kP62 = std::int64_t{1} << 62;

// An unregistered op (the registry's tests iterate every registered one): y = f(x), both
// of the problem's shape and dtype.
Op unary_op(bool sampled_reference = false) {
  Op op;
  op.name = "synthetic";
  op.dims = {"M", "N"};
  op.dtypes = {DType::f32};
  op.inputs = [](const Problem& p) { return std::vector<TensorSpec>{{"x", p.dtype, p.shape}}; };
  op.outputs = [](const Problem& p) { return std::vector<TensorSpec>{{"y", p.dtype, p.shape}}; };
  if (sampled_reference) op.sample_only = [](const Problem&) { return true; };
  return op;
}

int lines_of(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}
}  // namespace

// ---- sizes -------------------------------------------------------------------------------

TEST(PlanSizes, ElementCountsOverflowIsDetected) {
  EXPECT_EQ(checked_numel({}), 1);
  EXPECT_EQ(checked_numel({kP62, 1}), kP62);
  EXPECT_EQ(checked_numel({0, kP62, kP62}), 0);   // an empty tensor, however long its other dims
  EXPECT_EQ(checked_numel({kP62, kP62}), std::nullopt);
  EXPECT_EQ(checked_numel({kP62, 2}), std::nullopt);   // 2^63: one past INT64_MAX
  EXPECT_EQ(checked_numel({4, -4}), std::nullopt);
}

TEST(PlanSizes, ByteCountsOverflowIsDetected) {
  const Op op = unary_op();
  // 2^31 x 2^31 = 2^62 elements fit an int64; 2^62 f32 elements are 2^64 bytes.
  const std::string why = why_too_large(op, {{std::int64_t{1} << 31, std::int64_t{1} << 31}, DType::f32, ""}, {});
  EXPECT_NE(why.find("more than 2^63 bytes"), std::string::npos) << why;
  // 2^60 f32 elements are 2^62 bytes, which fits; x and y together are 2^63, which does not.
  EXPECT_NE(why_too_large(op, {{std::int64_t{1} << 30, std::int64_t{1} << 30}, DType::f32, ""}, {}).find("2^63"),
            std::string::npos);
}

TEST(PlanSizes, MemoryLimitsAreLowerBoundsOfWhatTheHarnessHolds) {
  const Op op = unary_op();
  // 2^28 f32 elements: x and y take 2 GiB on the device; the host also holds the fp64
  // reference of y (2 GiB), 4 GiB = 4294967296 bytes in all.
  const Problem p{{1 << 14, 1 << 14}, DType::f32, ""};
  EXPECT_EQ(why_too_large(op, p, {4294967296, 2147483648}), "");
  EXPECT_NE(why_too_large(op, p, {4294967296, 2147483647}).find("GPU memory"), std::string::npos);
  EXPECT_NE(why_too_large(op, p, {4294967295, 0}).find("host memory"), std::string::npos);
  // Without a GPU only the host is checked; limits of 0 check nothing.
  EXPECT_EQ(why_too_large(op, p, {4294967296, 0}), "");
  EXPECT_EQ(why_too_large(op, p, {}), "");
  // An op whose reference is sampled holds no full fp64 copy: 2 GiB of host is enough.
  EXPECT_EQ(why_too_large(unary_op(true), p, {2147483648, 0}), "");
}

// ---- a --shape that only some dtypes take --------------------------------------------------

namespace {
Selection relu_at(std::int64_t n) {
  Selection s;
  s.lessons = {"01"};
  s.ops = {"relu"};
  s.shape = Dims{n};
  return s;
}
std::vector<DType> dtypes_of(const Plan& p) {
  std::vector<DType> v;
  for (const auto& c : p.cases) v.push_back(c.problem.dtype);
  return v;
}
}  // namespace

TEST(PlanShape, DtypesThatCannotTakeTheShapeAreNotedAndTheOthersRun) {
  // relu runs bf16 up to 2^31 - 1 elements and f32 past it (lesson 01's validate).
  const Plan p = make_plan(relu_at(std::int64_t{1} << 31), false, {});
  EXPECT_EQ(dtypes_of(p), (std::vector<DType>{DType::f32}));
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("relu at 2147483648: unsupported: bf16 (past 2^31 elements"), std::string::npos) << p.notes[0];
}

TEST(PlanShape, TheMessagePast2To31IsTrueBelowIt) {
  // 999,999,937 elements is below 2^31: every dtype takes it, nothing is noted.
  const Plan p = make_plan(relu_at(999999937), false, {});
  EXPECT_EQ(dtypes_of(p), (std::vector<DType>{DType::f32, DType::bf16}));
  EXPECT_TRUE(p.notes.empty());
}

TEST(PlanShape, OnlyAShapeNoDtypeTakesIsAUsageError) {
  Selection bf16 = relu_at(std::int64_t{1} << 31);
  bf16.dtype = DType::bf16;
  EXPECT_THROW(make_plan(bf16, false, {}), UsageError);
  // f32 past 2^31 needs 2 x 8 GiB of tensors and 16 GiB of reference: not on a 16 GB host.
  EXPECT_THROW(make_plan(relu_at(std::int64_t{1} << 31), false, {16000000000, 0}), UsageError);
  EXPECT_THROW(make_plan(relu_at(kP62), false, {}), UsageError);        // bytes overflow
  EXPECT_THROW(make_plan(relu_at(kP62), true, {}), UsageError);         // the bench's plan too
  try {
    make_plan(relu_at(std::int64_t{1} << 40), false, {std::int64_t{1} << 40, std::int64_t{80} << 30});
    ADD_FAILURE() << "2^40 elements planned on an 80 GiB GPU";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("GPU memory"), std::string::npos) << e.what();
  }
}

TEST(PlanShape, RegisteredShapesAreNotHeldToTheMemoryOfThisMachine) {
  // Only a --shape is checked against memory: the op's own test shapes are the registry's.
  Selection s;
  s.lessons = {"01"};
  s.ops = {"relu"};
  EXPECT_EQ(make_plan(s, false, {1, 1}).cases.size(), make_plan(s, false, {}).cases.size());
}

// ---- the GPU's absence ---------------------------------------------------------------------

TEST(Device, InitialisationOutcomesAreClassified) {
  EXPECT_EQ(classify_cuda_init(cudaSuccess, 1, 13000), GpuState::present);
  EXPECT_EQ(classify_cuda_init(cudaSuccess, 0, 13000), GpuState::no_device);
  EXPECT_EQ(classify_cuda_init(cudaErrorNoDevice, 0, 13000), GpuState::no_device);
  // The runtime says "insufficient driver" both when there is none and when it is old.
  EXPECT_EQ(classify_cuda_init(cudaErrorInsufficientDriver, 0, 0), GpuState::no_driver);
  EXPECT_EQ(classify_cuda_init(cudaErrorInsufficientDriver, 0, 11080), GpuState::driver_too_old);
  EXPECT_EQ(classify_cuda_init(cudaErrorStubLibrary, 0, 0), GpuState::no_driver);
  EXPECT_EQ(classify_cuda_init(cudaErrorSystemDriverMismatch, 0, 13000), GpuState::init_failed);
  EXPECT_EQ(classify_cuda_init(cudaErrorUnknown, 0, 13000), GpuState::init_failed);
}

TEST(Device, OnlyNoDriverAndNoDeviceSkip) {
  for (GpuState s : {GpuState::no_driver, GpuState::no_device}) {
    DeviceInfo d;
    d.state = s;
    EXPECT_TRUE(gpu_absence_is_skip(s));
    EXPECT_THROW(require_gpu(d), NoGpuError) << gpu_state_name(s);
  }
  for (GpuState s : {GpuState::driver_too_old, GpuState::init_failed}) {
    DeviceInfo d;
    d.state = s;
    d.why_absent = "the reason";
    EXPECT_FALSE(gpu_absence_is_skip(s));
    try {
      require_gpu(d);
      ADD_FAILURE() << gpu_state_name(s) << " passed require_gpu";
    } catch (const NoGpuError&) {
      ADD_FAILURE() << gpu_state_name(s) << " would exit 77";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the reason"), std::string::npos);
    }
  }
  DeviceInfo gpu;
  gpu.present = true;
  gpu.state = GpuState::present;
  EXPECT_NO_THROW(require_gpu(gpu));
}

TEST(Device, CudaErrorsOtherThanAbsenceAreNotSkips) {
  EXPECT_THROW(check_cuda(cudaErrorNoDevice, "call", "f", 1), NoGpuError);
  bool skip = false, error = false;
  try {
    check_cuda(cudaErrorSystemDriverMismatch, "call", "f", 1);
  } catch (const NoGpuError&) {
    skip = true;
  } catch (const Error&) {
    error = true;
  }
  EXPECT_TRUE(error && !skip) << "a driver mismatch must be an error (exit 1), not a skip";
}

// ---- every exception at the top: one line, an exit code ---------------------------------------

namespace {
std::pair<int, std::string> report(std::exception_ptr e, bool shape_requested) {
  testing::internal::CaptureStderr();
  const int rc = report_error(std::move(e), shape_requested);
  return {rc, testing::internal::GetCapturedStderr()};
}
}  // namespace

TEST(Cli, EveryExceptionIsOneLineAndAnExitCode) {
  const struct {
    std::exception_ptr e;
    bool shape;
    int rc;
    const char* says;
  } cases[] = {
      {std::make_exception_ptr(std::bad_alloc()), true, kExitUsage, "out of host memory for the requested --shape"},
      {std::make_exception_ptr(std::bad_alloc()), false, kExitFail, "out of host memory"},
      {std::make_exception_ptr(std::length_error("vector")), false, kExitFail, "internal error: vector"},
      {std::make_exception_ptr(42), false, kExitFail, "unknown type"},
      {std::make_exception_ptr(UsageError("bad\nshape")), false, kExitUsage, "bad shape"},
      {std::make_exception_ptr(NoGpuError("no GPU")), false, kExitNoGpu, "no GPU"},
      {std::make_exception_ptr(Error("CUDA error")), true, kExitFail, "CUDA error"},
  };
  for (const auto& c : cases) {
    const auto [rc, text] = report(c.e, c.shape);
    EXPECT_EQ(rc, c.rc) << text;
    EXPECT_EQ(lines_of(text), 1) << text;
    EXPECT_EQ(text.rfind("klab: ", 0), 0u) << text;
    EXPECT_NE(text.find(c.says), std::string::npos) << text;
  }
}
