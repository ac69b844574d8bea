// CPU tests of lesson 05's autotuned impls as the harness sees them: each names the
// candidates it chooses among (Impl::candidates, what `klab test` verifies one by one and
// `--candidate` selects), and refuses a candidate index it does not have before it
// launches anything, so these run without a GPU.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "klab/error.hpp"
#include "klab/op.hpp"

using namespace klab;

namespace {

// The impls that time configurations and keep the fastest (lessons/05-matmul/matmul_autotune.cu).
const std::vector<std::pair<std::string, std::string>> kAutotuned = {
    {"matmul", "v8_autotuned"},      {"matmul_batched", "v8_autotuned"}, {"matmul", "v13_mma_autotuned"},
    {"matmul_batched", "v13_mma_autotuned"}, {"matmul", "triton"}};

}  // namespace

TEST(AutotuneCandidates, EveryAutotunedImplNamesItsCandidatesAtEveryTestShape) {
  if (!registry().find_op("matmul")) GTEST_SKIP() << "lesson 05 is not in this build";
  for (const auto& [op_name, impl_name] : kAutotuned) {
    const Op* op = registry().find_op(op_name);
    const Impl* im = registry().find_impl(op_name, impl_name);
    ASSERT_NE(op, nullptr) << op_name;
    ASSERT_NE(im, nullptr) << op_name << "/" << impl_name;
    ASSERT_TRUE(static_cast<bool>(im->candidates)) << op_name << "/" << impl_name << " declares no candidates";
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
}

// v8 and v13 check the index before any CUDA call (triton loads its kernels first, so it
// needs a GPU to get that far): past the list, or negative other than -1 (autotune), the
// launch is a klab::Error that names the candidate, never a run of some other candidate.
TEST(AutotuneCandidates, AnIndexTheImplDoesNotHaveIsAnError) {
  if (!registry().find_op("matmul")) GTEST_SKIP() << "lesson 05 is not in this build";
  for (const auto& [impl_name, dtype] : {std::pair{"v8_autotuned", DType::f32}, std::pair{"v13_mma_autotuned", DType::bf16}}) {
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
