// klab/cli/validators.hpp — CLI11 validators shared by the verbs (cli.cpp, verb_inspect.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <string>
#include <type_traits>

#include <fmt/format.h>

namespace klab {

// Validators that say what a value must be, in place of CLI11's "Could not convert" and its
// range messages (which print 1.8e308 to 309 digits). They see the text before conversion,
// so "-1" cannot wrap into a huge unsigned seed and "nan" cannot pass as a time cap.
template <class Int>
CLI::Validator whole_number(std::string what) {
  return CLI::Validator(
      [what](std::string& s) {
        Int v{};
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        bool ok = !s.empty() && ec == std::errc() && end == s.data() + s.size();
        if constexpr (std::is_signed_v<Int>) ok = ok && v >= 0;
        return ok ? std::string() : fmt::format("'{}' is not {}", s, what);
      },
      "N");
}

}  // namespace klab
