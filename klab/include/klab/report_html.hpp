// klab/report_html.hpp — `klab report`: one self-contained HTML page (inline CSS, JS and
// SVG; nothing fetched from the network) from `klab bench --json` files.
//
// Per lesson and per bench file: for each op at each bench problem a bar chart of the
// version ladder (median time and % of the measured peak, vendor impls marked), a roofline
// (arithmetic intensity against achieved FLOP/s, both log scale, roofs from the file's
// measured peaks), and a table of the numbers. Throttled rows are marked in all three.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace klab {

// One bench JSON, read and checked: its path as given, and its content.
struct BenchFile {
  std::string path;
  nlohmann::json doc;
};

// Reads and checks one file; throws UsageError with one line naming the file and what is
// wrong (missing, unreadable, not JSON, no "bench" records, a record missing a field).
BenchFile load_bench_file(const std::string& path);
// Checks an already parsed document the same way (`path` names it in the messages).
void check_bench_doc(const std::string& path, const nlohmann::json& doc);

// The checked-in bench files of a source tree: <root>/lessons/*/bench/*.json, sorted.
std::vector<std::string> checked_in_bench_files(const std::string& root);

// "&<>\"'" as entities: every name and message from a JSON goes through this.
std::string html_escape(const std::string& s);

// The page. `titles` maps a lesson id ("02") to its title where known.
std::string report_html(const std::vector<BenchFile>& files, const std::map<std::string, std::string>& titles = {});

}  // namespace klab
