// `klab report`: reads bench JSONs (the checked-in lessons/*/bench/*.json of the source
// tree, then the files named), checks every one before writing anything, and writes one
// self-contained HTML page (klab/report_html.hpp). A missing or malformed JSON, a --root
// that is not a directory and an --out that cannot be written are usage errors (exit 2).
#include "verb_report.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "klab/cli.hpp"
#include "klab/error.hpp"
#include "klab/op.hpp"
#include "klab/report_html.hpp"

namespace klab {

namespace fs = std::filesystem;

namespace {

// The source tree this file was compiled from: <root>/klab/cli/verb_report.cpp.
std::string build_root() { return fs::path(__FILE__).parent_path().parent_path().parent_path().lexically_normal().string(); }

void check_out(const std::string& path) {
  if (path.empty()) throw UsageError("--out needs a file name");
  std::error_code ec;
  const fs::path file(path);
  if (fs::is_directory(file, ec)) throw UsageError(fmt::format("--out {}: is a directory, not a file", path));
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("--out {}: there is no directory {}", path, dir.string()));
  const fs::path target = fs::exists(file, ec) ? file : dir;
  if (access(target.c_str(), W_OK) != 0)
    throw UsageError(fmt::format("--out {}: {} is not writable ({})", path, target.string(), std::strerror(errno)));
}

// A page this verb wrote before is replaced; any other file is kept as FILE.bak (or
// FILE.bak.N): never lose a learner's file.
bool written_by_report(const fs::path& p) {
  std::ifstream f(p);
  std::string head(4096, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(f.gcount()));
  return head.find("<meta name=\"generator\" content=\"klab report\">") != std::string::npos;
}

std::string keep_backup(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec) || written_by_report(p)) return "";
  fs::path bak = p.string() + ".bak";
  for (int i = 1; fs::exists(bak, ec); ++i) bak = fmt::format("{}.bak.{}", p.string(), i);
  fs::rename(p, bak, ec);
  if (ec) throw UsageError(fmt::format("--out {}: cannot keep the existing file as {} ({})", p.string(), bak.string(), ec.message()));
  return bak.string();
}

void write_page(const std::string& path, const std::string& html) {
  const fs::path out(path);
  const fs::path tmp = out.string() + fmt::format(".tmp{}", static_cast<long>(getpid()));
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw UsageError(fmt::format("--out {}: cannot write {} ({})", path, tmp.string(), std::strerror(errno)));
    f << html;
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw UsageError(fmt::format("--out {}: error writing the page", path));
    }
  }
  const std::string bak = keep_backup(out);
  std::error_code ec;
  fs::rename(tmp, out, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw UsageError(fmt::format("--out {}: cannot replace it ({})", path, ec.message()));
  }
  if (!bak.empty()) std::printf("kept the earlier %s as %s\n", path.c_str(), bak.c_str());
}

}  // namespace

CLI::App* add_report_verb(CLI::App& app, ReportArgs& a) {
  auto* c = app.add_subcommand("report", "an HTML page of bench results: version ladders, rooflines, tables");
  c->add_option("json", a.files, "more `klab bench --json` files (the checked-in lessons/*/bench/*.json are always read)");
  c->add_option("--out", a.out, "the page to write (default: klab-report.html here)");
  c->add_option("--root", a.root, "the source tree whose lessons/*/bench/*.json are read (default: the one klab was built from)");
  c->allow_extras();
  return c;
}

int cmd_report(const ReportArgs& a) {
  check_out(a.out);
  std::string root = a.root.empty() ? build_root() : a.root;
  std::error_code ec;
  if (!a.root.empty() && !fs::is_directory(root, ec)) throw UsageError(fmt::format("--root {}: not a directory", root));
  std::vector<std::string> paths = checked_in_bench_files(root);
  paths.insert(paths.end(), a.files.begin(), a.files.end());
  std::vector<BenchFile> files;
  for (const auto& p : paths) files.push_back(load_bench_file(p));   // every file checked before anything is written
  std::map<std::string, std::string> titles;
  for (const auto& l : registry().lessons()) titles[l.id] = l.title;
  write_page(a.out, report_html(files, titles));
  std::printf("read %zu bench file%s; wrote %s\n", files.size(), files.size() == 1 ? "" : "s",
              fs::absolute(a.out, ec).lexically_normal().string().c_str());
  return kExitOk;
}

}  // namespace klab
