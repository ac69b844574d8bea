// Helpers the CPU tests share: an environment variable set for a scope, whole-file reads and
// writes, and the harness's verdict on hand-made outputs.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "klab/harness.hpp"
#include "klab/op.hpp"

namespace klab_test {

// Sets an environment variable (nullptr: unsets it) for the life of the object, and restores
// what was there after.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~EnvVar() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes s as the whole file, creating its folder first.
inline void write_text(const std::filesystem::path& p, const std::string& s) {
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// "" when the harness's judge passes the outputs, else its message ("output dx: ...").
inline std::string check(const klab::Op& op, const klab::Problem& p, const klab::Inputs& in,
                         const klab::Reference& ref, const std::vector<klab::HostTensor>& out) {
  klab::VerifyRecord rec;
  klab::judge(op, p, in, ref, out, rec);
  return rec.status == klab::Status::pass ? std::string() : rec.message;
}

}  // namespace klab_test
