// The HTML generator of `klab report` on the CPU (klab/report_html.hpp): escaping, the
// checks on a bench JSON, a page that fetches nothing.
#include <gtest/gtest.h>

#include "klab/error.hpp"
#include "klab/report_html.hpp"

namespace {

nlohmann::json doc_with_impl(const std::string& impl) {
  return nlohmann::json::parse(R"({"klab": 1, "device": {"name": "GPU <x>", "peaks": {"copy_gbps": 3000, "bf16_tflops": 700,
    "sgemm_tflops": 50}}, "bench": [{"lesson": "05", "op": "matmul", "impl": "", "kind": "cuda", "status": "pass",
    "median_ms": 1.0, "gbps": 100.0, "tflops": 10.0, "pct_peak": 1.4, "problem": {"shape": [64, 64, 64], "dtype": "bf16"}}]})")
      .patch(nlohmann::json::parse(R"([{"op": "replace", "path": "/bench/0/impl", "value": ")" + impl + R"("}])"));
}

TEST(ReportHtml, EscapesNames) {
  EXPECT_EQ(klab::html_escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  const std::string page = klab::report_html({{"t.json", doc_with_impl("<script>bad()</script>")}});
  EXPECT_EQ(page.find("<script>bad()"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;bad()&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(page.find("GPU &lt;x&gt;"), std::string::npos);
}

TEST(ReportHtml, SelfContained) {
  const std::string page = klab::report_html({{"t.json", doc_with_impl("v1")}});
  for (const char* remote : {"<link", "src=\"http", "href=\"http", "url(http", "@import", "<script src"})
    EXPECT_EQ(page.find(remote), std::string::npos) << remote;
  EXPECT_NE(page.find("<svg class=\"roofline\""), std::string::npos);
  EXPECT_NE(page.find("<svg class=\"bar-chart\""), std::string::npos);
}

TEST(ReportHtml, EmptySaysHowToMakeOne) {
  const std::string page = klab::report_html({});
  EXPECT_NE(page.find("klab bench NN --json FILE"), std::string::npos);
  EXPECT_EQ(page.find("<svg"), std::string::npos);
}

TEST(ReportHtml, RejectsMalformedDocs) {
  using nlohmann::json;
  EXPECT_NO_THROW(klab::check_bench_doc("ok.json", doc_with_impl("v1")));
  EXPECT_THROW(klab::check_bench_doc("a.json", json::array()), klab::UsageError);
  EXPECT_THROW(klab::check_bench_doc("a.json", json{{"verify", json::array()}}), klab::UsageError);
  auto bad = doc_with_impl("v1");
  bad["bench"][0]["median_ms"] = "fast";
  try {
    klab::check_bench_doc("b.json", bad);
    FAIL() << "a string median passed";
  } catch (const klab::UsageError& e) {
    EXPECT_STREQ(e.what(), "b.json: bench[0]: \"median_ms\" missing or not a number (expected the output of `klab bench --json`)");
  }
  bad = doc_with_impl("v1");
  bad["bench"][0]["problem"]["shape"] = json::array({64, "x"});
  EXPECT_THROW(klab::check_bench_doc("c.json", bad), klab::UsageError);
  EXPECT_THROW(klab::load_bench_file("/nonexistent/bench.json"), klab::UsageError);
}

}  // namespace
