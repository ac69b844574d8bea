// CPU tests of lesson 05's autotuned impls as the harness sees them: each names the
// candidates it chooses among (Impl::candidates, what `klab test` verifies one by one and
// `--candidate` selects), and refuses a candidate index it does not have before it
// launches anything, so these run without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "klab/autotune.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"

using namespace klab;

namespace {

// The impls that time configurations and keep the fastest (klab::autotune, klab/autotune.hpp).
const std::vector<std::pair<std::string, std::string>> kAutotuned = {
    {"matmul", "v8_autotuned"},      {"matmul_batched", "v8_autotuned"}, {"matmul", "v13_mma_autotuned"},
    {"matmul_batched", "v13_mma_autotuned"}, {"matmul", "v20_autotuned"}, {"matmul", "triton"}};

}  // namespace

// Lesson 05's autotuned impls must be among them (a registry walk that found none would
// prove nothing); every impl of every op that declares candidates is then checked.
TEST(AutotuneCandidates, EveryAutotunedImplNamesItsCandidatesAtEveryTestShape) {
  if (!registry().find_op("matmul")) GTEST_SKIP() << "lesson 05 is not in this build";
  for (const auto& [op_name, impl_name] : kAutotuned) {
    const Impl* im = registry().find_impl(op_name, impl_name);
    ASSERT_NE(im, nullptr) << op_name << "/" << impl_name;
    ASSERT_TRUE(static_cast<bool>(im->candidates)) << op_name << "/" << impl_name << " declares no candidates";
  }
  int checked = 0;
  for (const Op& op_ref : registry().ops())
    for (const Impl* im : registry().impls_of(op_ref.name)) {
      if (!im->candidates) continue;
      ++checked;
      const Op* op = &op_ref;
      const std::string& impl_name = im->name;
      for (const auto& shape : op->test_shapes)
        for (const DType t : op->dtypes)
          for (const auto& v : op->variants) {
            const Problem p{shape, t, v};
            const std::vector<std::string> names = im->candidates(p);
            // An autotuner chooses among two or more; each name selects exactly one.
            EXPECT_GE(names.size(), 2u) << impl_name << " " << p.label();
            EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size())
                << impl_name << " " << p.label() << ": two candidates share a name";
          }
    }
  EXPECT_GE(checked, static_cast<int>(kAutotuned.size()));
}

// v8, v13 and v20 check the index before any CUDA call (triton loads its kernels first, so it
// needs a GPU to get that far): past the list, or negative other than -1 (autotune), the
// launch is a klab::Error that names the candidate, never a run of some other candidate.
TEST(AutotuneCandidates, AnIndexTheImplDoesNotHaveIsAnError) {
  if (!registry().find_op("matmul")) GTEST_SKIP() << "lesson 05 is not in this build";
  for (const auto& [impl_name, dtype] : {std::pair{"v8_autotuned", DType::f32}, std::pair{"v13_mma_autotuned", DType::bf16},
                                         std::pair{"v20_autotuned", DType::bf16}}) {
    const Impl* im = registry().find_impl("matmul", impl_name);
    ASSERT_NE(im, nullptr) << impl_name;
    const Problem p{{8, 8, 8}, dtype, "nn"};
    const std::vector<double> scalars;
    const TensorView a{nullptr, dtype, {8, 8}, {8, 1}};   // never dereferenced: refused first
    const int n = static_cast<int>(im->candidates(p).size());
    for (const int bad : {n, n + 7, -2}) {
      const Launch l{p, {a, a}, {a}, scalars, nullptr, nullptr, 0, bad};
      try {
        im->run(l);
        ADD_FAILURE() << impl_name << " ran candidate " << bad << " of " << n;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("candidate " + std::to_string(bad)), std::string::npos)
            << impl_name << ": " << e.what();
      }
    }
  }
}

// klab::autotune itself, on its paths that need no GPU: a forced candidate is returned
// untimed and its name reported through Launch::chosen; a bad index or fallback is an error
// that launches nothing.
TEST(Autotune, AForcedCandidateIsReportedAndNothingIsTimed) {
  const Problem p{{8, 8, 8}, DType::f32, "nn"};
  const std::vector<double> scalars;
  const std::vector<std::string> names = {"small", "large", "huge"};
  int launches = 0;
  const auto launch = [&](int) { ++launches; };
  std::string chosen;
  const Launch l{p, {}, {}, scalars, nullptr, nullptr, 0, 1, &chosen};
  EXPECT_EQ(autotune(l, "test|forced", names, 0, launch), 1);
  EXPECT_EQ(chosen, "large");
  EXPECT_EQ(launches, 0);
  const Launch unasked{p, {}, {}, scalars, nullptr, nullptr, 0, 2};   // no chosen pointer: fine
  EXPECT_EQ(autotune(unasked, "test|forced", names, 0, launch), 2);

  for (const int bad : {3, -2}) {
    chosen.clear();
    const Launch b{p, {}, {}, scalars, nullptr, nullptr, 0, bad, &chosen};
    EXPECT_THROW(autotune(b, "test|bad", names, 0, launch), Error) << bad;
    EXPECT_TRUE(chosen.empty()) << bad;
  }
  const Launch tune{p, {}, {}, scalars, nullptr, nullptr, 0, -1, &chosen};
  EXPECT_THROW(autotune(tune, "test|fallback", names, 3, launch), Error);   // fallback past the list
  EXPECT_THROW(autotune(tune, "test|none", {}, 0, launch), Error);          // nothing to choose from
  EXPECT_EQ(launches, 0);
}

// Lesson 04's Triton softmax: a row that fits a tile offers that tile's warp counts first
// (candidate 0, what a graph capture falls back to), then every loop configuration; a longer
// row offers only the loop. Every candidate is verified by `klab test` like lesson 05's.
TEST(AutotuneCandidates, TritonSoftmaxOffersTheRowTileThenTheLoop) {
  const Impl* im = registry().find_impl("softmax_rows", "triton");
  if (!im) GTEST_SKIP() << "lesson 04 is not in this build";
  ASSERT_TRUE(static_cast<bool>(im->candidates));
  auto names = [&](std::int64_t cols) { return im->candidates(Problem{{4, cols}, DType::bf16, ""}); };
  const auto fits = names(32768), longer = names(32769), small = names(1000);
  ASSERT_GE(fits.size(), 3u);
  EXPECT_EQ(fits[0].rfind("row/32768/", 0), 0u) << fits[0];
  EXPECT_EQ(small[0].rfind("row/1024/", 0), 0u) << small[0];
  ASSERT_FALSE(longer.empty());
  for (const auto& n : longer)   // the loop, with or without its prefetch of the next block
    EXPECT_TRUE(n.rfind("loop/", 0) == 0 || n.rfind("loop+prefetch/", 0) == 0) << n;
  // The loop configurations close every list, the same ones in the same order.
  EXPECT_TRUE(std::equal(longer.rbegin(), longer.rend(), fits.rbegin())) << "the loop candidates differ";
  EXPECT_EQ(std::set<std::string>(fits.begin(), fits.end()).size(), fits.size());
}

// Lesson 03's Triton sum and argmax time their first stage's configurations (the chunk a
// program sums, and its shape) per problem: at least two, each name once, the same list
// for both ops (one table, reductions.cuh's kTritonStage1).
TEST(AutotuneCandidates, TritonReductionsNameTheirChunks) {
  const Impl* sum = registry().find_impl("sum", "triton");
  const Impl* argmax = registry().find_impl("argmax", "triton");
  if (!sum || !argmax) GTEST_SKIP() << "lesson 03 is not in this build";
  ASSERT_TRUE(static_cast<bool>(sum->candidates));
  ASSERT_TRUE(static_cast<bool>(argmax->candidates));
  const Problem p{{1 << 24}, DType::f32, ""};
  const auto names = sum->candidates(p);
  EXPECT_GE(names.size(), 2u);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_EQ(names, argmax->candidates(p));
}

// The persistent Triton kernels' offsets inside a tile are 32-bit (lesson05::triton_offsets_fit):
// lesson 05 offers its persistent configurations only below 2^23 in every dimension, and
// lesson 06's persistent-only Triton impls report such a shape unsupported, with the reason.
TEST(AutotuneCandidates, PersistentTritonConfigurationsStopAtTwoToThe23) {
  if (!registry().find_op("matmul")) GTEST_SKIP() << "lesson 05 is not in this build";
  const Impl* mm = registry().find_impl("matmul", "triton");
  ASSERT_NE(mm, nullptr);
  auto persistent = [&](const Dims& d) {
    const auto names = mm->candidates(Problem{d, DType::bf16, "nt"});
    return std::count_if(names.begin(), names.end(),
                         [](const std::string& n) { return n.find("/persistent") != std::string::npos; });
  };
  EXPECT_EQ(persistent({4096, 4096, 4096}), 3);
  EXPECT_EQ(persistent({8, 8, (1 << 23) - 1}), 3);
  EXPECT_EQ(persistent({8, 8, 1 << 23}), 0);
  EXPECT_EQ(persistent({1 << 23, 8, 8}), 0);
  if (!registry().find_op("linear_swiglu")) return;   // lesson 06 not in this build
  for (const std::string op : {"linear_bias_act", "linear_swiglu"}) {
    const Impl* tr = registry().find_impl(op, "triton");
    ASSERT_NE(tr, nullptr) << op;
    const std::string variant = op == "linear_bias_act" ? "gelu" : "";
    EXPECT_NE(tr->supports(Problem{{8, 1 << 23, 8}, DType::bf16, variant}).find("2^23"), std::string::npos) << op;
    EXPECT_EQ(tr->supports(Problem{{8, (1 << 23) - 1, 8}, DType::bf16, variant}).find("2^23"), std::string::npos) << op;
  }
}
