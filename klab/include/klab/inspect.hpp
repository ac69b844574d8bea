// klab/inspect.hpp — what the compiler made of each kernel, read from the built binary with
// no GPU: registers, stack, static shared memory and local memory per thread
// (`cuobjdump --dump-resource-usage`), the instruction mix of its SASS (`cuobjdump -sass`),
// and the occupancy those imply. The parsing and the arithmetic live here (unit-tested on
// fixtures); `klab inspect` (klab/cli/verb_inspect.cpp) runs the tool and prints.
#pragma once

#include <istream>
#include <map>
#include <string>
#include <vector>

namespace klab::inspect {

struct Kernel {
  std::string mangled;                 // the symbol, as cuobjdump names it
  std::string demangled;               // with template arguments and parameters
  std::string base;                    // the function's own name: no scope, template arguments or parameters
  std::string source;                  // the .cu file its cubin was compiled from (the fatbin's identifier)
  std::string arch;                    // "sm_80", "sm_90a"
  int regs = 0, stack = 0, shared = 0, local = 0;   // per thread; shared: static bytes per block
  std::map<std::string, int> sass;     // opcode family ("FFMA", "MUFU", "HGMMA") -> count
  int instructions = 0;                // SASS instructions in all
};

// `cuobjdump --dump-resource-usage BINARY` -> one Kernel per (cubin, function), no SASS yet.
std::vector<Kernel> parse_resource_usage(std::istream& in);

// `cuobjdump -sass ...` -> adds the opcode counts to the kernels of the same arch and symbol
// (SASS of functions not in `kernels` is skipped).
void add_sass(std::istream& in, std::vector<Kernel>& kernels);

std::string demangle(const std::string& mangled);   // the symbol itself when it is not C++
std::string base_name(const std::string& demangled);

// Whether a kernel's base name carries an impl name (docs/design.md, "The impl name is the
// index"): the name as a run of whole `_`-separated words. `softmax_rows_v6_exp2` carries
// `v6_exp2` (and `rows_v6`); it does not carry `v6_exp` or `6_exp2`.
bool names_impl(const std::string& base, const std::string& impl);

// An SM's resources, for the occupancy arithmetic.
struct Limits {
  std::string gpu;                     // "A100", "H100"
  int regs_per_sm = 65536;
  int smem_per_sm = 0;                 // bytes usable by blocks
  int smem_per_block = 0;              // the most one block may have
  int smem_reserved_per_block = 1024;  // the runtime's share of each block's shared memory
  int threads_per_sm = 2048;
  int blocks_per_sm = 32;
  int reg_alloc_unit = 256;            // registers are given to a warp in units of this many
};
Limits limits_for(int cc);             // 80 (A100) or 90 (H100); anything else throws UsageError

struct Occupancy {
  int blocks = 0;                      // resident blocks per SM
  int warps_pct = 0;                   // resident warps over the SM's maximum, in %
  std::string limiter;                 // "registers", "shared memory", "threads", "blocks"
};
// Blocks of `threads` threads using the kernel's registers and static shared memory plus
// `dynamic_smem` bytes (0: unknown to the binary; the launch adds it).
Occupancy occupancy(const Kernel& k, int threads, const Limits& lim, int dynamic_smem = 0);

}  // namespace klab::inspect
