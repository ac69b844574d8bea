#include "klab/dtype.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "klab/error.hpp"

namespace klab {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
  }
  return "?";
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 0;
}

bool dtype_is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "u8" || s == "uint8") return DType::u8;
  return std::nullopt;
}

std::string dtype_list(const std::vector<DType>& ts) {
  std::string out;
  for (auto t : ts) {
    if (!out.empty()) out += ", ";
    out += dtype_name(t);
  }
  return out;
}

std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) return static_cast<std::uint16_t>(sign | (absx > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (absx >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (absx < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    // value = absx_float; half subnormal unit is 2^-24. Round to nearest even.
    const float a = std::bit_cast<float>(absx);
    const float scaled = a * 16777216.0f;  // 2^24, exact
    const float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(r));
  }
  // normal: rebias exponent (127 -> 15), round mantissa from 23 to 10 bits, nearest even
  std::uint32_t m = absx + 0xC8000000u;  // subtract (127-15) << 23
  m += 0xFFFu + ((m >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (m >> 13));
}

float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  const std::uint32_t man = h & 0x3FFu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

float bf16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

double load_as_double(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return half_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::bf16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::i32: return static_cast<const std::int32_t*>(base)[i];
    case DType::u8: return static_cast<const std::uint8_t*>(base)[i];
  }
  return 0;
}

void store_from_double(void* base, DType t, std::int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::f16: static_cast<std::uint16_t*>(base)[i] = float_to_half_bits(static_cast<float>(v)); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16_bits(static_cast<float>(v)); break;
    case DType::i32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(std::llround(v)); break;
    case DType::u8: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(std::llround(v)); break;
  }
}

double round_to(DType t, double v) {
  unsigned char buf[8];
  store_from_double(buf, t, 0, v);
  return load_as_double(buf, t, 0);
}

}  // namespace klab
