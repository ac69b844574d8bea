// CPU tests of lesson 08's plans (lessons/08-layernorm/row_plans.hpp): how the layernorm
// kernels cut a row among threads, and where the Triton backward puts its partial rows.
// Every width a kernel takes gets a plan that covers the row, stays within 1024 threads, and
// names an instance the launcher compiles; the bench shapes get the plans the H100 measured
// best; and the Triton backward's dbeta partials are 16-byte aligned and inside the
// workspace the impl asks for, at every width (the first GPU run failed on every width not a
// multiple of 4, because they were not aligned).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "../lessons/08-layernorm/row_plans.hpp"

using lesson08::i64;

namespace {

bool pow2(i64 v) { return v > 0 && (v & (v - 1)) == 0; }

// Widths 1..5000 one by one, then every width near a multiple of 16 up to the limit.
std::vector<i64> widths(i64 limit) {
  std::vector<i64> w;
  for (i64 c = 1; c <= std::min<i64>(limit, 5000); ++c) w.push_back(c);
  for (i64 c = 5008; c <= limit; c += 16)
    for (i64 d : {-1, 0, 1})
      if (c + d <= limit) w.push_back(c + d);
  return w;
}

TEST(RowPlans, ForwardCoversEveryWidthWithinABlock) {
  for (int vec : {1, 4, 8}) {
    for (i64 cols : widths(lesson08::kRowRegistersMaxCols)) {
      if (vec > 1 && cols % vec != 0) continue;   // the vector path takes whole vectors only
      const lesson08::RowPlan p = lesson08::plan_row_registers(cols, vec);
      ASSERT_GT(p.nv, 0) << "cols " << cols << " vec " << vec;
      EXPECT_TRUE(pow2(p.nv) && p.nv * vec <= 32) << "no compiled instance: nv " << p.nv << " vec " << vec;
      EXPECT_EQ(p.threads % 32, 0);
      EXPECT_LE(p.threads, 1024);
      EXPECT_GE(i64{p.threads} * p.nv * vec, cols) << "the row is not covered: cols " << cols;
      EXPECT_LT(i64{p.threads - 32} * p.nv * vec, cols) << "a whole warp with nothing to do: cols " << cols;
    }
  }
  EXPECT_EQ(lesson08::plan_row_registers(lesson08::kRowRegistersMaxCols + 4, 4).nv, 0);
  EXPECT_EQ(lesson08::plan_row_registers(lesson08::kRowRegistersMaxCols + 1, 1).nv, 0);
}

TEST(RowPlans, ForwardBenchShapesTakeTheMeasuredPlans) {
  const auto is = [](i64 cols, int vec, int threads, int nv) {
    const lesson08::RowPlan p = lesson08::plan_row_registers(cols, vec);
    EXPECT_EQ(p.threads, threads) << "cols " << cols << " vec " << vec;
    EXPECT_EQ(p.nv, nv) << "cols " << cols << " vec " << vec;
  };
  is(768, 4, 192, 1);       // fp32, C = 768: 192 threads of one vector
  is(768, 8, 96, 1);        // bf16
  is(4096, 4, 256, 4);      // at most 256 threads: 16 elements a thread, not 1024 threads of 4
  is(4096, 8, 256, 2);
  is(16384, 4, 512, 8);     // past 256 threads: 32 elements a thread
  is(16384, 8, 512, 4);
  is(32768, 4, 1024, 8);
  is(4097, 1, 544, 8);      // the scalar path: the fewest elements a thread within 1024
}

TEST(RowPlans, BackwardCoversEveryWidthWithinARowGroup) {
  for (int vec : {1, 4, 8}) {
    for (bool resid : {false, true}) {
      for (i64 cols : widths(16384)) {
        if (vec > 1 && cols % vec != 0) continue;
        const lesson08::FusedPlan p = lesson08::choose_fused_plan(cols, vec, resid);
        ASSERT_GT(p.nv, 0) << "cols " << cols << " vec " << vec;
        EXPECT_TRUE(pow2(p.nv) && p.nv * vec <= 16) << "no compiled instance: nv " << p.nv << " vec " << vec;
        EXPECT_EQ(p.tpr % 32, 0);
        EXPECT_LE(p.tpr, 1024);
        EXPECT_GE(i64{p.tpr} * p.nv * vec, cols) << "the row is not covered: cols " << cols;
        EXPECT_TRUE(p.groups >= 1 && p.groups <= 15 && p.groups * p.tpr <= 1024);   // named barriers 1..15
        EXPECT_EQ(p.smem, sizeof(float) * 2 * static_cast<std::size_t>(p.groups * p.tpr * p.nv * vec));
      }
    }
  }
  EXPECT_EQ(lesson08::choose_fused_plan(16388, 4, false).nv, 0);
}

TEST(RowPlans, BackwardBenchShapesTakeTheMeasuredPlans) {
  const auto is = [](i64 cols, int vec, bool resid, int tpr, int nv) {
    const lesson08::FusedPlan p = lesson08::choose_fused_plan(cols, vec, resid);
    EXPECT_EQ(p.tpr, tpr) << "cols " << cols << " vec " << vec << " resid " << resid;
    EXPECT_EQ(p.nv, nv) << "cols " << cols << " vec " << vec << " resid " << resid;
  };
  is(768, 4, false, 96, 2);      // two vectors a thread
  is(768, 8, false, 96, 1);      // bf16: two would leave 16 of 64 lanes idle
  is(4096, 4, false, 512, 2);    // not 1024 threads of one vector
  is(4096, 8, false, 256, 2);
  is(4096, 8, true, 512, 1);     // the residual block's bf16 keeps one (two spill)
  is(4096, 4, true, 512, 2);
  is(16384, 4, false, 1024, 4);  // the widest: the fewest vectors within 1024 threads
  is(16384, 8, false, 1024, 2);
  is(4097, 1, false, 544, 8);    // the scalar path: the fewest vectors within 1024 threads
}

TEST(RowPlans, TritonBackwardPartialsAlignedAndInsideTheWorkspace) {
  for (i64 sms : {132, 114, 1}) {
    for (i64 rows : {1, 2, 7, 127, 1000, 4096, 8192, 262147}) {
      for (i64 cols : widths(16384)) {
        const lesson08::TritonBwdLayout t = lesson08::triton_bwd_layout(rows, cols, sms);
        ASSERT_GE(t.programs, 1);
        ASSERT_GE(t.programs * t.rows_per_prog, rows) << "a row no program takes";
        ASSERT_LT((t.programs - 1) * t.rows_per_prog, rows) << "a program with no row";
        ASSERT_LE(t.programs, sms * lesson08::triton_bwd_programs_per_sm(cols));
        ASSERT_EQ(t.db_at % 4, 0) << "dbeta's partials not 16-byte aligned: rows " << rows << " cols " << cols;
        ASSERT_GE(t.db_at, t.programs * cols) << "dbeta's partials overlap dgamma's";
        ASSERT_LE(static_cast<std::size_t>(t.floats) * sizeof(float), lesson08::triton_bwd_workspace(rows, cols, sms))
            << "rows " << rows << " cols " << cols;
      }
    }
  }
  const lesson08::TritonBwdLayout none = lesson08::triton_bwd_layout(0, 768, 132);
  EXPECT_EQ(none.programs, 0);   // no rows: no partials, and the column sums write 0
  // The bench shapes at the measured residency (8, 2, 1 an SM), then the fewest programs at
  // the same rows a program: 8192 rows over 1056 programs is 8 a program, so 1024 programs.
  const auto is = [](i64 rows, i64 cols, i64 rpp, i64 programs) {
    const lesson08::TritonBwdLayout t = lesson08::triton_bwd_layout(rows, cols, 132);
    EXPECT_EQ(t.rows_per_prog, rpp) << rows << "x" << cols;
    EXPECT_EQ(t.programs, programs) << rows << "x" << cols;
  };
  is(8192, 768, 8, 1024);
  is(8192, 4096, 32, 256);
  is(4096, 16384, 32, 128);
  is(7, 769, 1, 7);          // dgamma's partials end at 5383 floats: dbeta's start at 5384
  EXPECT_EQ(lesson08::triton_bwd_layout(7, 769, 132).db_at, 5384);
}

}  // namespace
