// klab/cli/verb_inspect.hpp — `klab inspect`: each kernel's registers, shared memory, spills,
// SASS instruction mix and occupancy, from klab's own binary (no GPU). Registered by
// klab_main in cli.cpp; the parsing is klab/inspect.hpp's.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace klab {

struct InspectArgs {
  std::vector<std::string> lessons;   // default: all
  std::vector<std::string> impls;     // default: all of the lessons'
  int arch = 0;                       // 80 or 90; 0: this GPU's, else 90
  int threads = 256;                  // block size for the occupancy column, 1..1024
  std::string json;                   // also write the rows here
};

CLI::App* add_inspect_verb(CLI::App& app, InspectArgs& a);

// The cuobjdump inspect runs ($KLAB_CUOBJDUMP, the build's toolkit, PATH, Triton's copy);
// throws Error when there is none (klab doctor reports which).
std::string find_cuobjdump();

// Prints the table (and writes --json); exit 0. Unknown lessons or impls, --arch other than
// 80 or 90, --threads outside 1..1024: UsageError (exit 2). No cuobjdump: Error (exit 1).
int cmd_inspect(const InspectArgs& a);

}  // namespace klab
