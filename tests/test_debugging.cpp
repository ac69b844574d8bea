// tests/test_debugging.cpp — the debugging catalog (debugging/) on the CPU: its lesson and
// cases as registered, and each case op's tolerance against a CPU simulation of the fixed
// kernel (f32, the kernel's order of operations: it must pass) and of the bug or a
// neighbouring mistake (it must fail). The cases themselves are proven on a GPU
// (gpu.debug.*, gpu.exercise_*.debug.*).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/dtype.hpp"
#include "klab/harness.hpp"
#include "klab/op.hpp"
#include "verb_debug.hpp"

namespace {

using klab::DType;
using klab::HostTensor;
using klab::Problem;
using i64 = std::int64_t;
constexpr int kThreads = 256;   // debugging/catalog.cuh

const klab::Op* op_of(const char* name) { return klab::registry().find_op(name); }

// True when `out` passes the op's tolerance against its reference on problem p's inputs.
bool passes(const klab::Op& op, const Problem& p, const klab::Inputs& in, const HostTensor& out) {
  const auto ref = op.reference(p, in);
  return klab::compare(out, ref[0], op.tolerance ? op.tolerance(p, 0) : klab::default_tolerance(DType::f32)).ok;
}

// The fixed row sum in f32: thread t adds elements t, t + 256, ...; then the tree, half the
// threads adding the other half's value. skip_level: a tree step left out (the sum misses
// the values it would have added), -1 none.
HostTensor row_sum_f32(const Problem& p, const klab::Inputs& in, int skip_level = -1, bool drop_last = false) {
  const i64 rows = p.shape[0], cols = p.shape[1];
  HostTensor y(DType::f32, {rows});
  for (i64 r = 0; r < rows; ++r) {
    std::vector<float> part(kThreads, 0.f);
    for (i64 c = 0; c < cols - (drop_last ? 1 : 0); ++c)
      part[static_cast<std::size_t>(c % kThreads)] += static_cast<float>(in.tensors[0].get(r * cols + c));
    int level = 0;
    for (int half = kThreads / 2; half > 0; half /= 2, ++level)
      if (level != skip_level)
        for (int t = 0; t < half; ++t) part[static_cast<std::size_t>(t)] += part[static_cast<std::size_t>(t + half)];
    y.set(r, part[0]);
  }
  return y;
}

TEST(DebuggingCatalog, TheLessonAndItsElevenCases) {
  const klab::Lesson* l = klab::registry().find_lesson("debug");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(klab::lesson_folder(*l), "debugging");
  EXPECT_TRUE(l->exercise_op.empty());
  ASSERT_EQ(l->more_exercises.size(), 11u);
  for (const auto& e : l->more_exercises) {
    const klab::Op* op = op_of(e.op.c_str());
    ASSERT_NE(op, nullptr) << e.id;
    EXPECT_EQ(op->lesson, "debug") << e.id;
    EXPECT_EQ(e.id, "debug/" + e.file.substr(0, e.file.size() - 3)) << "the case is named for its file";
    EXPECT_FALSE(e.symptom.empty()) << e.id;
    klab::ExerciseInfo x;
    ASSERT_TRUE(klab::find_exercise(e.id, x)) << e.id;
    EXPECT_EQ(x.where, "debugging/" + e.file);
    EXPECT_EQ(x.tool, e.tool);
  }
  klab::ExerciseInfo x;
  const klab::Lesson* found = nullptr;
  EXPECT_FALSE(klab::find_exercise("debug/nope", x, &found));
  EXPECT_EQ(found, l);
  EXPECT_FALSE(klab::find_exercise("nope/missing_barrier", x, &found));
  EXPECT_EQ(found, nullptr);
}

// A case's id is <lesson>/<name> in lower case, and its tool one of compute-sanitizer's.
TEST(DebuggingCatalog, ValidateRejectsBadCaseIdsAndTools) {
  klab::Registry r;
  klab::Op op;
  op.lesson = "dbg";
  op.name = "o";
  op.inputs = op.outputs = [](const Problem&) { return std::vector<klab::TensorSpec>{}; };
  op.reference = [](const Problem&, const klab::Inputs&) { return klab::Reference{}; };
  r.add(op);
  klab::Lesson l{.id = "dbg", .slug = "dbg", .folder = "dbg"};
  l.more_exercises = {{.id = "dbg/Bad", .op = "o", .file = "f.cu", .hints = "h.md"},
                      {.id = "other/x", .op = "o", .file = "f.cu", .hints = "h.md"},
                      {.id = "dbg/fine", .op = "o", .file = "f.cu", .hints = "h.md", .tool = "ncu"},
                      {.id = "dbg/good", .op = "o", .file = "f.cu", .hints = "h.md", .tool = "initcheck"}};
  r.add(l);
  const auto problems = r.validate();
  auto said = [&](const std::string& what) {
    for (const auto& p : problems)
      if (p.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(said("case id 'dbg/Bad'"));
  EXPECT_TRUE(said("case id 'other/x'"));
  EXPECT_TRUE(said("tool 'ncu'"));
  EXPECT_FALSE(said("dbg/good")) << problems.size();
}

TEST(DebuggingCatalog, RowSumToleranceTakesTheKernelsOrderAndRejectsAMissingTerm) {
  const klab::Op* op = op_of("debug_row_sum");
  ASSERT_NE(op, nullptr);
  for (const klab::Dims& s : std::vector<klab::Dims>{{3, 257}, {129, 4099}, {64, 4096}, {1000, 33}}) {
    const Problem p{s, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 7);
    EXPECT_TRUE(passes(*op, p, in, row_sum_f32(p, in))) << p.label();
    // The race's outcomes: a tree step's values never added (the first step matters once a
    // row has more than 128 elements; the last always); one element short.
    if (s[1] > 128) EXPECT_FALSE(passes(*op, p, in, row_sum_f32(p, in, 0))) << p.label();
    EXPECT_FALSE(passes(*op, p, in, row_sum_f32(p, in, 7))) << p.label();
    EXPECT_FALSE(passes(*op, p, in, row_sum_f32(p, in, -1, true))) << p.label();
  }
}

// The split sums in f32, the kernel's order: each chunk of 1024 columns added in order to the
// row's running sum, which starts at `start` times the row's own sum (0: the fix; 1: the
// bug's second launch, the last launch's sums left in the workspace).
TEST(DebuggingCatalog, SplitSumToleranceRejectsAStaleWorkspace) {
  const klab::Op* op = op_of("debug_split_sum");
  ASSERT_NE(op, nullptr);
  for (const klab::Dims& s : std::vector<klab::Dims>{{3, 257}, {129, 4099}, {64, 4096}, {1000, 33}, {7, 1}}) {
    const Problem p{s, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 11);
    const i64 rows = s[0], cols = s[1];
    auto sums = [&](int launches, bool skip_chunk) {
      HostTensor y(DType::f32, {rows});
      for (i64 r = 0; r < rows; ++r) {
        float acc = 0.f;
        for (int k = 0; k < launches; ++k)
          for (i64 c0 = 0; c0 < cols; c0 += 1024) {
            if (skip_chunk && c0 == 0) continue;
            for (i64 c = c0; c < std::min<i64>(cols, c0 + 1024); ++c) acc += static_cast<float>(in.tensors[0].get(r * cols + c));
          }
        y.set(r, acc);
      }
      return y;
    };
    EXPECT_TRUE(passes(*op, p, in, sums(1, false))) << p.label();
    EXPECT_FALSE(passes(*op, p, in, sums(2, false))) << p.label() << ": the last launch's sums carried over";
    EXPECT_FALSE(passes(*op, p, in, sums(1, true))) << p.label() << ": the first chunk missing";
  }
}

TEST(DebuggingCatalog, ScaleToleranceRejectsAnElementOffByOne) {
  const klab::Op* op = op_of("debug_scale");
  ASSERT_NE(op, nullptr);
  const Problem p{{4099}, DType::f32, ""};
  const klab::Inputs in = klab::make_inputs(*op, p, 3);
  HostTensor right(DType::f32, {4099}), shifted(DType::f32, {4099});
  for (i64 i = 0; i < 4099; ++i) {
    right.set(i, 2.f * static_cast<float>(in.tensors[0].get(i)) + 1.f);
    shifted.set(i, 2.f * static_cast<float>(in.tensors[0].get(i == 0 ? 0 : i - 1)) + 1.f);
  }
  EXPECT_TRUE(passes(*op, p, in, right));
  EXPECT_FALSE(passes(*op, p, in, shifted));
}

// The softmax's inputs overflow e^x in f32: the textbook form gives NaN (the case's bug);
// the form with the row's max passes.
TEST(DebuggingCatalog, SoftmaxInputsOverflowWithoutTheMaxAndPassWithIt) {
  const klab::Op* op = op_of("debug_softmax");
  ASSERT_NE(op, nullptr);
  for (const klab::Dims& s : std::vector<klab::Dims>{{3, 257}, {129, 1001}, {16, 4096}, {1, 1}}) {
    const Problem p{s, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 5);
    const i64 rows = s[0], cols = s[1];
    auto softmax = [&](bool with_max) {
      HostTensor y(DType::f32, {rows, cols});
      for (i64 r = 0; r < rows; ++r) {
        float m = -std::numeric_limits<float>::infinity();
        if (with_max)
          for (i64 c = 0; c < cols; ++c) m = std::fmax(m, static_cast<float>(in.tensors[0].get(r * cols + c)));
        else
          m = 0.f;
        std::vector<float> lane(32, 0.f);
        for (i64 c = 0; c < cols; ++c)
          lane[static_cast<std::size_t>(c % 32)] += std::exp(static_cast<float>(in.tensors[0].get(r * cols + c)) - m);
        for (int off = 16; off > 0; off /= 2)
          for (int t = 0; t < off; ++t) lane[static_cast<std::size_t>(t)] += lane[static_cast<std::size_t>(t + off)];
        for (i64 c = 0; c < cols; ++c)
          y.set(r * cols + c, std::exp(static_cast<float>(in.tensors[0].get(r * cols + c)) - m) / lane[0]);
      }
      return y;
    };
    EXPECT_TRUE(passes(*op, p, in, softmax(true))) << p.label();
    if (cols > 100) EXPECT_FALSE(passes(*op, p, in, softmax(false))) << p.label();
  }
}

// The variance's inputs share their first seven digits: the one-pass E[x²] − E[x]² in f32
// (the case's bug) fails at every row of two or more elements; the two-pass form (the fix)
// passes, in the kernel's order (each lane every 32nd element, then a tree); and dividing
// by n − 1 (the sample variance, a neighbouring mistake) fails too, at the op's test shapes:
// at 4096 columns its error, var / 4095 = 8e-5, lies within the bound's worst case for the
// mean's rounding, 2 d² = 1.3e-4.
TEST(DebuggingCatalog, VarianceToleranceTakesTwoPassesAndRejectsOne) {
  const klab::Op* op = op_of("debug_variance");
  ASSERT_NE(op, nullptr);
  EXPECT_FALSE(op->validate(Problem{{3, 0}, DType::f32, ""}).empty()) << "rows without elements";
  EXPECT_TRUE(op->validate(Problem{{0, 0}, DType::f32, ""}).empty());
  for (const klab::Dims& s : std::vector<klab::Dims>{{1, 1}, {5, 2}, {3, 257}, {129, 1001}, {1000, 33}, {16, 4096}}) {
    const Problem p{s, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 11);
    const i64 rows = s[0], cols = s[1];
    auto warp_sum = [](std::vector<float>& lane) {
      for (int off = 16; off > 0; off /= 2)
        for (int t = 0; t < off; ++t) lane[static_cast<std::size_t>(t)] += lane[static_cast<std::size_t>(t + off)];
      return lane[0];
    };
    enum class Form { two_pass, one_pass, sample };
    auto variance = [&](Form f) {
      HostTensor y(DType::f32, {rows});
      for (i64 r = 0; r < rows; ++r) {
        auto x = [&](i64 c) { return static_cast<float>(in.tensors[0].get(r * cols + c)); };
        std::vector<float> a(32, 0.f), b(32, 0.f);
        const auto n = static_cast<float>(cols);
        if (f == Form::one_pass) {
          for (i64 c = 0; c < cols; ++c) {
            a[static_cast<std::size_t>(c % 32)] += x(c);
            b[static_cast<std::size_t>(c % 32)] += x(c) * x(c);
          }
          const float mean = warp_sum(a) / n;
          y.set(r, warp_sum(b) / n - mean * mean);
          continue;
        }
        for (i64 c = 0; c < cols; ++c) a[static_cast<std::size_t>(c % 32)] += x(c);
        const float mean = warp_sum(a) / n;
        for (i64 c = 0; c < cols; ++c) b[static_cast<std::size_t>(c % 32)] += (x(c) - mean) * (x(c) - mean);
        y.set(r, warp_sum(b) / (f == Form::sample ? n - 1 : n));
      }
      return y;
    };
    EXPECT_TRUE(passes(*op, p, in, variance(Form::two_pass))) << p.label();
    if (cols >= 2) EXPECT_FALSE(passes(*op, p, in, variance(Form::one_pass))) << p.label();
    if (cols >= 2 && cols <= 1001) EXPECT_FALSE(passes(*op, p, in, variance(Form::sample))) << p.label();
  }
}

// A max rounds nothing: the tolerance is 0, so the kernel's tree passes and anything else
// fails: a tree step left out (a divergent barrier's possible outcome), the next row's max,
// a value one unit off.
TEST(DebuggingCatalog, RowMaxIsExactAndRejectsAMissingStep) {
  const klab::Op* op = op_of("debug_row_max");
  ASSERT_NE(op, nullptr);
  EXPECT_FALSE(op->validate(Problem{{3, 0}, DType::f32, ""}).empty()) << "rows without elements";
  for (const klab::Dims& s : std::vector<klab::Dims>{{3, 257}, {129, 4099}, {1000, 33}, {1, 1}}) {
    const Problem p{s, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 13);
    const i64 rows = s[0], cols = s[1];
    auto row_max = [&](int skip_level, i64 row_shift, bool ulp_off) {
      HostTensor y(DType::f32, {rows});
      for (i64 r = 0; r < rows; ++r) {
        const i64 from = (r + row_shift) % rows;
        std::vector<float> part(kThreads, -std::numeric_limits<float>::infinity());
        for (i64 c = 0; c < cols; ++c)
          part[static_cast<std::size_t>(c % kThreads)] =
              std::fmax(part[static_cast<std::size_t>(c % kThreads)], static_cast<float>(in.tensors[0].get(from * cols + c)));
        int level = 0;
        for (int half = kThreads / 2; half > 0; half /= 2, ++level)
          if (level != skip_level)
            for (int t = 0; t < half; ++t)
              part[static_cast<std::size_t>(t)] = std::fmax(part[static_cast<std::size_t>(t)], part[static_cast<std::size_t>(t + half)]);
        y.set(r, ulp_off ? std::nextafter(part[0], 2.f) : part[0]);
      }
      return y;
    };
    EXPECT_TRUE(passes(*op, p, in, row_max(-1, 0, false))) << p.label();
    EXPECT_FALSE(passes(*op, p, in, row_max(-1, 0, true))) << p.label();
    if (cols > 1) EXPECT_FALSE(passes(*op, p, in, row_max(7, 0, false))) << p.label();
    if (rows > 1) EXPECT_FALSE(passes(*op, p, in, row_max(-1, 1, false))) << p.label();
  }
}

// The bug shows at the test shapes only if some row starts off a 16-byte boundary (cols not
// a multiple of 4, two rows or more), and the fix's vector path runs only if some shape has
// aligned rows. The tolerance takes the f32 product and rejects a row scaled by its
// neighbour's factor.
TEST(DebuggingCatalog, RowScaleShapesHaveMisalignedRowsAndRejectAWrongRow) {
  const klab::Op* op = op_of("debug_row_scale");
  ASSERT_NE(op, nullptr);
  bool misaligned = false, aligned = false;
  for (const klab::Dims& s : op->test_shapes) {
    misaligned |= s[0] >= 2 && s[1] % 4 != 0;
    aligned |= s[0] >= 2 && s[1] % 4 == 0 && s[1] > 0;
  }
  EXPECT_TRUE(misaligned);
  EXPECT_TRUE(aligned);
  for (const klab::Dims& s : std::vector<klab::Dims>{{3, 7}, {129, 1001}, {1000, 64}}) {
    const Problem p{s, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 17);
    const i64 rows = s[0], cols = s[1];
    auto scaled = [&](i64 shift) {
      HostTensor y(DType::f32, {rows, cols});
      for (i64 r = 0; r < rows; ++r)
        for (i64 c = 0; c < cols; ++c)
          y.set(r * cols + c, static_cast<float>(in.tensors[1].get((r + shift) % rows)) *
                                  static_cast<float>(in.tensors[0].get(r * cols + c)));
      return y;
    };
    EXPECT_TRUE(passes(*op, p, in, scaled(0))) << p.label();
    EXPECT_FALSE(passes(*op, p, in, scaled(1))) << p.label();
  }
}

// The bug shows only at a row longer than a block can be (1024 threads); GPT-2's 768 must be
// among the shapes that pass. The tolerance takes the f32 sum and rejects the bias of the
// neighbouring channel.
TEST(DebuggingCatalog, BiasAddShapesPassTheBlockLimitAndRejectAShiftedBias) {
  const klab::Op* op = op_of("debug_bias_add");
  ASSERT_NE(op, nullptr);
  bool over = false, gpt2 = false;
  for (const klab::Dims& s : op->test_shapes) {
    over |= s[0] >= 1 && s[1] > 1024;
    gpt2 |= s[1] == 768;
  }
  EXPECT_TRUE(over);
  EXPECT_TRUE(gpt2);
  for (const klab::Dims& s : std::vector<klab::Dims>{{4, 768}, {5, 3072}, {1000, 33}}) {
    const Problem p{s, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 19);
    const i64 rows = s[0], cols = s[1];
    auto added = [&](i64 shift) {
      HostTensor y(DType::f32, {rows, cols});
      for (i64 i = 0; i < rows * cols; ++i)
        y.set(i, static_cast<float>(in.tensors[0].get(i)) + static_cast<float>(in.tensors[1].get((i % cols + shift) % cols)));
      return y;
    };
    EXPECT_TRUE(passes(*op, p, in, added(0))) << p.label();
    EXPECT_FALSE(passes(*op, p, in, added(1))) << p.label();
  }
}

// The f16 row sums, in the kernel's order (each lane every 32nd element, then the shuffle
// tree), with the sums kept in f32 (the fix: passes) or rounded to f16 after every addition
// (the bug: fails at every row of two or more elements; at 300,007 columns every lane's sum
// stalls at 2048, and the tree's last step overflows f16). And one element short fails too.
TEST(DebuggingCatalog, HalfSumToleranceTakesF32SumsAndRejectsF16Ones) {
  const klab::Op* op = op_of("debug_half_sum");
  ASSERT_NE(op, nullptr);
  for (const klab::Dims& s : op->test_shapes) {
    const Problem p{s, DType::f16, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 23);
    const i64 rows = s[0], cols = s[1];
    auto sums = [&](bool in_f16, bool drop_last) {
      auto round = [&](double v) { return in_f16 ? klab::round_to(DType::f16, v) : static_cast<double>(static_cast<float>(v)); };
      HostTensor y(DType::f32, {rows});
      for (i64 r = 0; r < rows; ++r) {
        std::vector<double> lane(32, 0.0);
        for (i64 c = 0; c < cols - (drop_last ? 1 : 0); ++c)
          lane[static_cast<std::size_t>(c % 32)] = round(lane[static_cast<std::size_t>(c % 32)] + in.tensors[0].get(r * cols + c));
        for (int off = 16; off > 0; off /= 2)
          for (int t = 0; t < off; ++t) lane[static_cast<std::size_t>(t)] = round(lane[static_cast<std::size_t>(t)] + lane[static_cast<std::size_t>(t + off)]);
        y.set(r, lane[0]);
      }
      return y;
    };
    EXPECT_TRUE(passes(*op, p, in, sums(false, false))) << p.label();
    if (rows > 0 && cols >= 2) EXPECT_FALSE(passes(*op, p, in, sums(true, false))) << p.label();
    // One element short fails where an element outweighs the bound: not at 300,007 columns,
    // whose f32 bound (335, the worst case of 9381 roundings of sums up to 300,007) no f32
    // kernel's tolerance can shrink below one element (< 1): the shorter shapes catch it.
    if (rows > 0 && cols >= 1 && cols <= 4099) EXPECT_FALSE(passes(*op, p, in, sums(false, true))) << p.label();
    if (cols == 300007) {   // every lane stalls at 2048, and 32 x 2048 is past f16's largest value, 65504
      const HostTensor bug = sums(true, false);
      for (i64 r = 0; r < rows; ++r) EXPECT_TRUE(std::isinf(bug.get(r))) << bug.get(r);
    }
  }
}

// The grid's bug shows at the test shapes: a size below one block (no block at all), and
// sizes past one that are not a multiple of it (the last n % 256 elements without a
// thread); a multiple of 256 passes with the bug. An output whose last elements still hold
// the poison (NaN) fails; the right one passes.
TEST(DebuggingCatalog, SquareShapesLeaveTheBugsLastElementsUnwritten) {
  const klab::Op* op = op_of("debug_square");
  ASSERT_NE(op, nullptr);
  bool below = false, ragged = false, whole = false;
  for (const klab::Dims& s : op->test_shapes) {
    below |= s[0] >= 1 && s[0] < kThreads;
    ragged |= s[0] > kThreads && s[0] % kThreads != 0;
    whole |= s[0] > 0 && s[0] % kThreads == 0;
  }
  EXPECT_TRUE(below);
  EXPECT_TRUE(ragged);
  EXPECT_TRUE(whole);
  for (i64 n : {257, 4099, 100003}) {
    const Problem p{{n}, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 29);
    HostTensor right(DType::f32, {n}), bug(DType::f32, {n});
    for (i64 i = 0; i < n; ++i) {
      const auto x = static_cast<float>(in.tensors[0].get(i));
      right.set(i, x * x);
      bug.set(i, i < n / kThreads * kThreads ? x * x : std::numeric_limits<double>::quiet_NaN());
    }
    EXPECT_TRUE(passes(*op, p, in, right)) << n;
    EXPECT_FALSE(passes(*op, p, in, bug)) << n;
  }
}

// The bug shows at the test shapes only past 48 KB of dynamic shared memory (12,288 floats a
// row), and the shapes up to it pass with the bug; no row passes 160 KB (the op rejects it:
// no fix could launch it on an A100). A copy is exact: a row off by one position fails.
TEST(DebuggingCatalog, RowReverseShapesPass48KBAndRejectAShiftedRow) {
  const klab::Op* op = op_of("debug_row_reverse");
  ASSERT_NE(op, nullptr);
  bool over = false, under = false;
  for (const klab::Dims& s : op->test_shapes) {
    over |= s[0] >= 1 && s[1] * 4 > 48 * 1024;
    under |= s[0] >= 1 && s[1] * 4 == 48 * 1024;
  }
  EXPECT_TRUE(over);
  EXPECT_TRUE(under);
  EXPECT_FALSE(op->validate(Problem{{1, 40961}, DType::f32, ""}).empty());
  EXPECT_TRUE(op->validate(Problem{{1, 40960}, DType::f32, ""}).empty());
  for (const klab::Dims& s : std::vector<klab::Dims>{{3, 257}, {3, 12289}, {1, 1}}) {
    const Problem p{s, DType::f32, ""};
    const klab::Inputs in = klab::make_inputs(*op, p, 31);
    const i64 rows = s[0], cols = s[1];
    auto reversed = [&](i64 shift) {
      HostTensor y(DType::f32, {rows, cols});
      for (i64 r = 0; r < rows; ++r)
        for (i64 c = 0; c < cols; ++c) y.set(r * cols + c, in.tensors[0].get(r * cols + (cols - 1 - c + shift) % cols));
      return y;
    };
    EXPECT_TRUE(passes(*op, p, in, reversed(0))) << p.label();
    if (cols > 1) EXPECT_FALSE(passes(*op, p, in, reversed(1))) << p.label();
  }
}

TEST(DebuggingCatalog, TailLinesKeepsTheLastLines) {
  EXPECT_EQ(klab::tail_lines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(klab::tail_lines("a\nb\nc", 1), "c");
  EXPECT_EQ(klab::tail_lines("a\nb\n", 5), "a\nb\n");
  EXPECT_EQ(klab::tail_lines("", 3), "");
  EXPECT_EQ(klab::tail_lines("\n\nx\n", 1), "x\n");
}

}  // namespace
