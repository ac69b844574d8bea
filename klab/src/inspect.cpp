// klab/src/inspect.cpp — parsing cuobjdump's output and the occupancy arithmetic
// (klab/inspect.hpp).
#include "klab/inspect.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <regex>

#include "klab/error.hpp"

namespace klab::inspect {

namespace {

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  const auto b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// "key = value" header lines of a fatbin entry (arch, identifier).
bool header_value(const std::string& line, const char* key, std::string& out) {
  const std::string t = trim(line);
  const std::string k = std::string(key) + " = ";
  if (t.rfind(k, 0) != 0) return false;
  out = t.substr(k.size());
  return true;
}

// The number after "KEY:" in a resource line ("REG:40 STACK:0 SHARED:0 ..."); 0 if absent.
int field(const std::string& line, const char* key) {
  const std::string k = std::string(key) + ":";
  for (std::size_t at = line.find(k); at != std::string::npos; at = line.find(k, at + 1))
    if (at == 0 || line[at - 1] == ' ') return std::atoi(line.c_str() + at + k.size());
  return 0;
}

}  // namespace

std::string demangle(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && d ? std::string(d.get()) : mangled;
}

// The bracketed group that ends at s[end - 1] (')' or '>'): where it opens.
static std::size_t group_start(const std::string& s, std::size_t end) {
  int depth = 0;
  for (std::size_t i = end; i-- > 0;) {
    if (s[i] == ')' || s[i] == '>') ++depth;
    else if ((s[i] == '(' || s[i] == '<') && --depth == 0) return i;
  }
  return 0;
}

std::string base_name(const std::string& demangled) {
  // "void ns::(anonymous namespace)::k<float, 4>(float const*, int)" -> "k": cut the
  // parameter list and the template arguments from the end, then the scope and the
  // return type from the front.
  std::string s = demangled;
  if (!s.empty() && s.back() == ')') s.resize(group_start(s, s.size()));
  if (!s.empty() && s.back() == '>') s.resize(group_start(s, s.size()));
  if (const std::size_t colon = s.rfind("::"); colon != std::string::npos) s = s.substr(colon + 2);
  if (const std::size_t space = s.rfind(' '); space != std::string::npos) s = s.substr(space + 1);
  return s;
}

bool names_impl(const std::string& base, const std::string& impl) {
  if (impl.empty()) return false;
  for (std::size_t at = base.find(impl); at != std::string::npos; at = base.find(impl, at + 1)) {
    const bool starts = at == 0 || base[at - 1] == '_';
    const std::size_t after = at + impl.size();
    const bool ends = after == base.size() || base[after] == '_';
    if (starts && ends) return true;
  }
  return false;
}

std::vector<Kernel> parse_resource_usage(std::istream& in) {
  std::vector<Kernel> out;
  std::string line, arch, source, pending;
  while (std::getline(in, line)) {
    std::string v;
    if (header_value(line, "arch", v)) arch = v;
    else if (header_value(line, "identifier", v)) source = v;
    else if (const std::string t = trim(line); t.rfind("Function ", 0) == 0 && t.back() == ':') {
      pending = t.substr(9, t.size() - 10);
    } else if (!pending.empty() && t.rfind("REG:", 0) == 0) {
      Kernel k;
      k.mangled = pending;
      k.demangled = demangle(pending);
      k.base = base_name(k.demangled);
      k.source = source;
      k.arch = arch;
      k.regs = field(t, "REG");
      k.stack = field(t, "STACK");
      k.shared = field(t, "SHARED");
      k.local = field(t, "LOCAL");
      out.push_back(std::move(k));
      pending.clear();
    }
  }
  return out;
}

void add_sass(std::istream& in, std::vector<Kernel>& kernels) {
  std::map<std::pair<std::string, std::string>, Kernel*> by;
  for (auto& k : kernels) by[{k.arch, k.mangled}] = &k;
  // An instruction line: "/*0040*/   @!P0 FFMA.FTZ R2, R3, R4, R5 ;" (the encoding-only
  // lines that follow are "/* 0x... */" and do not match).
  const std::regex insn(R"(^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*))");
  std::string line, arch;
  Kernel* cur = nullptr;
  while (std::getline(in, line)) {
    std::string v;
    if (header_value(line, "arch", v)) {
      arch = v;
      cur = nullptr;
      continue;
    }
    const std::string t = trim(line);
    if (t.rfind("Function : ", 0) == 0) {
      const auto it = by.find({arch, t.substr(11)});
      cur = it == by.end() ? nullptr : it->second;
      continue;
    }
    if (!cur) continue;
    std::smatch m;
    if (std::regex_search(line, m, insn)) {
      ++cur->sass[m[1].str()];
      ++cur->instructions;
    }
  }
}

Limits limits_for(int cc) {
  Limits l;
  if (cc == 80) {
    l.gpu = "A100";
    l.smem_per_sm = 164 * 1024;
    l.smem_per_block = 163 * 1024;
  } else if (cc == 90) {
    l.gpu = "H100";
    l.smem_per_sm = 228 * 1024;
    l.smem_per_block = 227 * 1024;
  } else {
    throw UsageError("--arch must be 80 (A100) or 90 (H100): the architectures the build compiles for");
  }
  return l;
}

Occupancy occupancy(const Kernel& k, int threads, const Limits& lim, int dynamic_smem) {
  const int warps = (threads + 31) / 32;
  const int max_warps = lim.threads_per_sm / 32;
  constexpr int kNone = std::numeric_limits<int>::max();
  const int regs_per_warp = (std::max(k.regs, 1) * 32 + lim.reg_alloc_unit - 1) / lim.reg_alloc_unit * lim.reg_alloc_unit;
  const int by_regs = lim.regs_per_sm / regs_per_warp / warps;
  const int smem = k.shared + dynamic_smem;
  const int by_smem = smem == 0 ? kNone
                      : smem > lim.smem_per_block ? 0
                                                  : lim.smem_per_sm / (smem + lim.smem_reserved_per_block);
  const int by_threads = max_warps / warps;
  Occupancy o;
  o.blocks = std::min({by_regs, by_smem, by_threads, lim.blocks_per_sm});
  o.limiter = o.blocks == by_regs ? "registers" : o.blocks == by_smem ? "shared memory"
              : o.blocks == by_threads ? "threads" : "blocks";
  o.warps_pct = o.blocks * warps * 100 / max_warps;
  return o;
}

}  // namespace klab::inspect
