// klab/dtype.hpp — element types and host-side conversions.
//
// The host never does arithmetic in fp16/bf16: inputs are generated in fp64, rounded once
// to the storage type (round-to-nearest-even, the same rounding the GPU's conversion
// instructions use), and read back as fp64 for references and comparisons.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace klab {

enum class DType { f32, f16, bf16, i32, u8 };

const char* dtype_name(DType t);             // "f32", "f16", "bf16", "i32", "u8"
std::size_t dtype_size(DType t);             // bytes per element
bool dtype_is_float(DType t);
std::optional<DType> parse_dtype(std::string_view s);  // accepts "f32"/"fp32"/"float32", ...
std::string dtype_list(const std::vector<DType>& ts);  // "f32, bf16"

// Bit-exact host conversions (round to nearest even; NaN stays NaN, overflow goes to Inf).
std::uint16_t float_to_half_bits(float f);
float half_bits_to_float(std::uint16_t h);
std::uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(std::uint16_t b);

// Read element i of a buffer of type t as double / write a double (rounded) into it.
double load_as_double(const void* base, DType t, std::int64_t i);
void store_from_double(void* base, DType t, std::int64_t i, double v);

// The value a double takes once rounded to t and read back (used by references that
// must see exactly what the kernel saw, e.g. bf16-rounded intermediates).
double round_to(DType t, double v);

}  // namespace klab
