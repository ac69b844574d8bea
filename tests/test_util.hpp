// Helpers the CPU tests share: an environment variable set for a scope, whole-file reads and
// writes, the harness's verdict on hand-made outputs, and finite differences.
#pragma once

#include <algorithm>
#include <cmath>
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

// The largest |d L / d v_i (central difference) - grad_i| over the elements of v, for an
// fp64 loss l() that reads v. h = 1e-5: truncation ~h^2, rounding ~1e-16 |L| / h, both far
// below the 1e-7 the tests ask of a gradient of order one.
template <class F>
double worst_fd_gap(std::vector<double>& v, const std::vector<double>& grad, F&& l) {
  constexpr double h = 1e-5;
  double worst = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double up = l();
    v[i] = keep - h;
    const double down = l();
    v[i] = keep;
    worst = std::max(worst, std::abs((up - down) / (2 * h) - grad[i]));
  }
  return worst;
}

}  // namespace klab_test
