// `klab inspect [lessons...] [--impl X] [--arch 80|90] [--threads N] [--json FILE]`: for each
// kernel an impl launches, what the compiler made of it — registers, stack, local memory,
// static shared memory, the SASS instruction mix — and the occupancy those imply, read from
// klab's own binary with the toolkit's cuobjdump. No GPU needed. The parsing and the
// arithmetic are klab/inspect.hpp's.
//
// Kernels are found by name (docs/design.md, "The impl name is the index"): a kernel of the
// lesson's files whose own name carries `<op>_<impl>`, else `<impl>`, plus the kernels named
// for their technique that the impl declares (Impl::kernels; one it declares but the binary
// lacks is an error). Triton and vendor impls have no kernels in klab's binary (Triton's
// cubins are built by tools/triton_aot.py: tools/triton_ptx.py reads them).
#include "verb_inspect.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "klab/cli.hpp"
#include "klab/device.hpp"
#include "klab/error.hpp"
#include "klab/inspect.hpp"
#include "klab/op.hpp"
#include "validators.hpp"

namespace klab {

namespace fs = std::filesystem;
using inspect::Kernel;

namespace {

// The columns of the instruction mix: a name and the opcode families it counts
// (tools/triton_ptx.py's SASS_MIX prints the same for Triton's cubins).
struct MixColumn {
  const char* name;
  std::vector<const char*> ops;
};
const std::vector<MixColumn> kMix = {
    {"HGMMA", {"HGMMA"}},           {"HMMA", {"HMMA"}},   {"TMA", {"UTMALDG", "UTMASTG", "UBLKCP"}},
    {"LDGSTS", {"LDGSTS"}},         {"LDG", {"LDG"}},     {"STG", {"STG"}},
    {"LDS", {"LDS", "LDSM"}},       {"STS", {"STS"}},     {"BAR", {"BAR"}},
    {"FFMA", {"FFMA"}},             {"MUFU", {"MUFU"}},
};

int mix(const Kernel& k, const MixColumn& c) {
  int n = 0;
  for (const char* op : c.ops)
    if (const auto it = k.sass.find(op); it != k.sass.end()) n += it->second;
  return n;
}

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
}

std::string capture(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) throw Error("klab inspect: cannot run " + cmd.substr(0, cmd.find(' ')));
  char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int rc = pclose(f);
  if (rc != 0) throw Error(fmt::format("klab inspect: `{}` failed (status {})", cmd.substr(0, 80), rc));
  return out;
}

}  // namespace

// cuobjdump: $KLAB_CUOBJDUMP, the toolkit klab was built with, PATH, then the copy that
// ships inside the Triton package of the build's Python (the machine may have no toolkit
// binaries besides nvcc).
std::string find_cuobjdump() {
  std::vector<fs::path> tried;
  if (const char* e = std::getenv("KLAB_CUOBJDUMP"); e && *e) {
    if (executable(e)) return e;
    throw UsageError(fmt::format("KLAB_CUOBJDUMP={} is not an executable file", e));
  }
#ifdef KLAB_CUDA_BIN_DIR
  tried.push_back(fs::path(KLAB_CUDA_BIN_DIR) / "cuobjdump");
#endif
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');)
      if (!dir.empty()) tried.push_back(fs::path(dir) / "cuobjdump");
  }
#ifdef KLAB_PYTHON_EXE
  if (std::string py = KLAB_PYTHON_EXE; !py.empty() && executable(py)) {
    try {
      std::string dir = capture("'" + py + "' -c \"import importlib.util as u; "
                                "print(u.find_spec('triton').submodule_search_locations[0])\" 2>/dev/null");
      while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r')) dir.pop_back();
      if (!dir.empty()) tried.push_back(fs::path(dir) / "backends" / "nvidia" / "bin" / "cuobjdump");
    } catch (const Error&) {
    }
  }
#endif
  for (const auto& p : tried)
    if (executable(p)) return p.string();
  throw Error("klab inspect: no cuobjdump found (the CUDA toolkit's, on PATH, or Triton's); set KLAB_CUOBJDUMP to one");
}

namespace {

// 90 on a 9.x device, 80 on an 8.x one; 90 without a GPU.
int default_arch() {
  const DeviceInfo& d = device_info();
  return d.present && d.cc_major < 9 ? 80 : 90;
}

bool arch_is(const Kernel& k, int cc) { return k.arch.rfind(fmt::format("sm_{}", cc), 0) == 0; }

// "vector_add_v3_vec16<float>": the demangled name without return type, scope or parameters.
std::string display_name(const Kernel& k) {
  std::string s = k.demangled;
  const std::size_t at = s.find(k.base + "<") != std::string::npos ? s.find(k.base + "<") : s.find(k.base + "(");
  if (at == std::string::npos) return k.base;
  s = s.substr(at);
  int depth = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {   // up to the parameter list
    if (s[i] == '<') ++depth;
    else if (s[i] == '>') --depth;
    else if (s[i] == '(' && depth == 0) return s.substr(0, i);
  }
  return s;
}

struct Row {
  std::string lesson, op, impl;
  const Kernel* kernel = nullptr;   // null: the impl has no kernel of its own in the binary
  std::string note;
};

}  // namespace

CLI::App* add_inspect_verb(CLI::App& app, InspectArgs& a) {
  auto* c = app.add_subcommand("inspect", "registers, shared memory, spills, SASS mix and occupancy of each kernel (no GPU)");
  c->add_option("lessons", a.lessons, "only these lessons (default: all)");
  c->add_option("--impl", a.impls, "only these impls (repeatable or comma-separated)")->delimiter(',');
  c->add_option("--arch", a.arch, "80 (A100) or 90 (H100): whose cubins and limits (default: this GPU's, else 90)")
      ->check(whole_number<int>("80 (A100) or 90 (H100)"));
  c->add_option("--threads", a.threads, "threads per block for the occupancy column (default 256)")
      ->check(whole_number<int>("a block size: a whole number from 1 to 1024"));
  return c;   // --json: klab_main adds it with the other verbs' (one writability check)
}

int cmd_inspect(const InspectArgs& a) {
  const Registry& reg = registry();
  const int threads = a.threads;
  if (threads < 1 || threads > 1024) throw UsageError(fmt::format("--threads {}: must be 1 to 1024", threads));
  const int cc = a.arch ? a.arch : default_arch();
  const inspect::Limits lim = inspect::limits_for(cc);
  std::vector<const Lesson*> lessons;
  for (const auto& key : a.lessons) {
    const Lesson* l = reg.find_lesson(key);
    if (!l) throw UsageError(fmt::format("unknown lesson '{}' (see `klab list`)", key));
    lessons.push_back(l);
  }
  if (lessons.empty())
    for (const auto& l : reg.lessons()) lessons.push_back(&l);
  std::set<std::string> wanted(a.impls.begin(), a.impls.end()), seen;

  const std::string tool = find_cuobjdump();
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::istringstream usage(capture(fmt::format("'{}' --dump-resource-usage '{}' 2>/dev/null", tool, exe)));
  std::vector<Kernel> all = inspect::parse_resource_usage(usage);
  std::erase_if(all, [&](const Kernel& k) { return !arch_is(k, cc); });

  std::vector<Row> rows;
  for (const Lesson* l : lessons) {
    const std::string folder = "/" + lesson_folder(*l) + "/";   // lessons/NN-slug, or debugging
    for (const Op* op : reg.ops_of(l->id))
      for (const Impl* impl : reg.impls_of(op->name)) {
        if (!wanted.empty() && !wanted.count(impl->name)) continue;
        seen.insert(impl->name);
        Row base{l->id, op->name, impl->name, nullptr, ""};
        const bool triton = impl->kind == ImplKind::triton || impl->built_from.ends_with(".py");
        if (triton || (impl->kind != ImplKind::cuda && impl->kind != ImplKind::exercise)) {
          base.note = triton ? "Triton: its cubins are not in klab's binary (tools/triton_ptx.py reads them)"
                             : "no kernel of its own here (a library or the CPU)";
          rows.push_back(base);
          continue;
        }
        // <op>_<impl> first; else a template serving several ops, which carries <impl> alone
        // (and not another op's <op>_<impl>).
        const auto other_ops_kernel = [&](const Kernel& k) {
          for (const Op* o : reg.ops_of(l->id))
            if (o != op && inspect::names_impl(k.base, o->name + "_" + impl->name)) return true;
          return false;
        };
        const auto in_lesson = [&](const Kernel& k) { return k.source.find(folder) != std::string::npos; };
        std::vector<const Kernel*> mine;
        for (const Kernel& k : all)
          if (in_lesson(k) && inspect::names_impl(k.base, op->name + "_" + impl->name)) mine.push_back(&k);
        if (mine.empty()) {   // a template serving several ops; another op's own kernels left out unless that leaves none
          std::vector<const Kernel*> shared, own_of_other;
          for (const Kernel& k : all)
            if (in_lesson(k) && inspect::names_impl(k.base, impl->name))
              (other_ops_kernel(k) ? own_of_other : shared).push_back(&k);
          mine = shared.empty() ? own_of_other : shared;
        }
        // A template serving several ops (map_v2_grid_stride<T, Gelu>): keep the instances
        // whose template arguments name this op, when some do.
        const auto folded = [](std::string s) {
          std::erase(s, '_');
          for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          return s;
        };
        std::vector<const Kernel*> of_op;
        for (const Kernel* k : mine)
          if (!inspect::names_impl(k->base, op->name + "_" + impl->name) &&
              folded(display_name(*k)).find(folded(op->name)) != std::string::npos)
            of_op.push_back(k);
        if (!of_op.empty()) mine = of_op;
        // The kernels it declares, named for their technique (Impl::kernels).
        for (const std::string& name : impl->kernels) {
          bool found = false;
          // "base@text": the instances of kernel base whose demangled name contains text.
          const std::size_t at = name.find('@');
          const std::string kbase = name.substr(0, at), text = at == std::string::npos ? "" : name.substr(at + 1);
          for (const Kernel& k : all)
            if (in_lesson(k) && k.base == kbase && k.demangled.find(text) != std::string::npos) {
              found = true;
              if (std::find(mine.begin(), mine.end(), &k) == mine.end()) mine.push_back(&k);
            }
          if (!found)
            throw Error(fmt::format("klab inspect: {}/{} declares kernel {}, which is not in the lesson's cubins for sm_{}",
                                    op->name, impl->name, name, cc));
        }
        // A kernel defined in a header is compiled into each file that includes it (lesson
        // 09's attention_bwd.cuh into v1's file and the exercise's): the same name once, the
        // instance of the impl's own file where there is one.
        const std::string own_file = fs::path(impl->source).filename().string();
        const auto own = [&](const Kernel* k) { return fs::path(k->source).filename().string() == own_file; };
        std::vector<const Kernel*> unique;
        for (const Kernel* k : mine) {
          const auto same = std::find_if(unique.begin(), unique.end(),
                                         [&](const Kernel* u) { return u->demangled == k->demangled; });
          if (same == unique.end()) unique.push_back(k);
          else if (own(k) && !own(*same)) *same = k;
        }
        mine = std::move(unique);
        if (mine.empty()) {
          base.note = "no kernel named for it, and none declared (Impl::kernels): see its launcher run_" + impl->name;
          rows.push_back(base);
        }
        for (const Kernel* k : mine) rows.push_back({l->id, op->name, impl->name, k, ""});
      }
  }
  for (const auto& w : wanted)
    if (!seen.count(w)) throw UsageError(fmt::format("--impl {}: no such impl in the lessons named (see `klab list`)", w));

  // The SASS of the chosen kernels, in one call.
  std::set<std::string> names;
  for (const Row& r : rows)
    if (r.kernel) names.insert(r.kernel->mangled);
  if (!names.empty()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ",") + n;
    std::istringstream sass(capture(fmt::format("'{}' -sass -arch sm_{}{} -fun '{}' '{}' 2>/dev/null", tool, cc,
                                                cc == 90 ? "a" : "", list, exe)));
    inspect::add_sass(sass, all);
  }

  std::printf("%s: %s's limits (%d registers, %d KB shared memory, %d threads an SM); occupancy at %d threads a block, "
              "static shared memory only\n",
              fmt::format("sm_{}", cc).c_str(), lim.gpu.c_str(), lim.regs_per_sm, lim.smem_per_sm / 1024,
              lim.threads_per_sm, threads);
  std::string head = fmt::format("{:<6} {:<20} {:>4} {:>5} {:>5} {:>7} {:>11}", "lesson", "impl", "regs", "stack", "local",
                                 "smem", "occupancy");
  for (const auto& c : kMix) head += fmt::format(" {:>6}", c.name);
  head += fmt::format(" {:>6}  kernel", "SASS");
  std::printf("%s\n", head.c_str());
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    if (!r.kernel) {
      std::printf("%-6s %-20s %s\n", r.lesson.c_str(), r.impl.c_str(), r.note.c_str());
      out.push_back({{"lesson", r.lesson}, {"op", r.op}, {"impl", r.impl}, {"kernel", nullptr}, {"note", r.note}});
      continue;
    }
    const Kernel& k = *r.kernel;
    const inspect::Occupancy o = inspect::occupancy(k, threads, lim);
    std::string line = fmt::format("{:<6} {:<20} {:>4} {:>5} {:>5} {:>7} {:>11}", r.lesson, r.impl, k.regs, k.stack,
                                   k.local, fmt::format("{} B", k.shared), fmt::format("{} blk {}%", o.blocks, o.warps_pct));
    nlohmann::json mixj = nlohmann::json::object();
    for (const auto& c : kMix) {
      line += fmt::format(" {:>6}", mix(k, c));
      mixj[c.name] = mix(k, c);
    }
    line += fmt::format(" {:>6}  {}", k.instructions, display_name(k));
    std::printf("%s\n", line.c_str());
    out.push_back({{"lesson", r.lesson},
                   {"op", r.op},
                   {"impl", r.impl},
                   {"kernel", display_name(k)},
                   {"symbol", k.mangled},
                   {"arch", k.arch},
                   {"registers", k.regs},
                   {"stack", k.stack},
                   {"local", k.local},
                   {"shared_static", k.shared},
                   {"occupancy", {{"threads", threads}, {"blocks", o.blocks}, {"warps_pct", o.warps_pct},
                                  {"limiter", o.limiter}}},
                   {"mix", mixj},
                   {"opcodes", k.sass},
                   {"instructions", k.instructions}});
  }
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    if (!f) throw UsageError(fmt::format("--json {}: cannot be written", a.json));
    f << out.dump(1) << "\n";
  }
  return kExitOk;
}

}  // namespace klab
