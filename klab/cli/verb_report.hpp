// klab/cli/verb_report.hpp — `klab report [--out FILE] [--root DIR] [JSON...]`: the HTML
// page of bench results (klab/report_html.hpp), registered by klab_main in cli.cpp.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace klab {

struct ReportArgs {
  std::string out = "klab-report.html";
  std::string root;                 // default: the source tree klab was built from
  std::vector<std::string> files;   // bench JSONs named on the command line
};

// Adds the verb to `app`; its options land in `a`.
CLI::App* add_report_verb(CLI::App& app, ReportArgs& a);

// Writes the page; throws UsageError (exit 2) for a missing or malformed JSON, a --root
// that is not a directory, or an --out that cannot be written.
int cmd_report(const ReportArgs& a);

}  // namespace klab
