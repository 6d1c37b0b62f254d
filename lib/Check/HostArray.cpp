//===- HostArray.cpp - Host arrays in every element type's encoding -------===//
//
// Part of moec. Encodes doubles into f32, f16, bf16, the two FP8 formats and
// the integer types, and decodes them back, so the checker can build device
// inputs and read device results bit for bit.
//
//===----------------------------------------------------------------------===//

#include "moec/Check/Check.h"
#include "moec/Reference/MoeReference.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace moec::check {

namespace {

/// A binary floating-point format narrower than double.
struct FloatFormat {
  int expBits;
  int mantBits;
  /// IEEE infinities and NaNs in the all-ones exponent (false for e4m3fn,
  /// whose only NaN is S.1111.111 and which has no infinity).
  bool ieeeSpecials;
  /// Out-of-range values saturate (FP8, as ref::roundToFP8) instead of
  /// becoming infinity.
  bool saturate;
  uint32_t nan; ///< canonical quiet NaN encoding

  int bias() const { return (1 << (expBits - 1)) - 1; }
  int minExponent() const { return 1 - bias(); }
  int maxExpField() const {
    return ieeeSpecials ? (1 << expBits) - 2 : (1 << expBits) - 1;
  }
  double maxFinite() const {
    // e4m3fn: mantissa 111 of the top binade is the NaN, so 1.75 · 2^8.
    double topMantissa = ieeeSpecials ? 2.0 - std::ldexp(1.0, -mantBits)
                                      : 2.0 - std::ldexp(2.0, -mantBits);
    return topMantissa * std::ldexp(1.0, maxExpField() - bias());
  }
};

constexpr FloatFormat kF16{5, 10, true, false, 0x7E00};
constexpr FloatFormat kBF16{8, 7, true, false, 0x7FC0};
constexpr FloatFormat kE4M3FN{4, 3, false, true, 0x7F};
constexpr FloatFormat kE5M2{5, 2, true, true, 0x7E};

const FloatFormat &formatOf(rt::ElemType elem) {
  switch (elem) {
  case rt::ElemType::F16:
    return kF16;
  case rt::ElemType::BF16:
    return kBF16;
  case rt::ElemType::F8E4M3FN:
    return kE4M3FN;
  default:
    return kE5M2;
  }
}

/// Rounds |v| (finite, non-zero) to the format's grid, ties to even. The
/// division by a power of two is exact, so there is a single rounding.
double roundMagnitude(double magnitude, const FloatFormat &f) {
  int exponent;
  std::frexp(magnitude, &exponent); // magnitude = m · 2^exponent, m in [.5, 1)
  int unbiased = std::max(exponent - 1, f.minExponent());
  double quantum = std::ldexp(1.0, unbiased - f.mantBits);
  return std::nearbyint(magnitude / quantum) * quantum;
}

/// Bits of a magnitude already on the grid (no sign).
uint32_t encodeExact(double magnitude, const FloatFormat &f) {
  if (magnitude == 0)
    return 0;
  int exponent;
  std::frexp(magnitude, &exponent);
  int unbiased = exponent - 1;
  if (unbiased < f.minExponent()) // subnormal
    return static_cast<uint32_t>(
        magnitude / std::ldexp(1.0, f.minExponent() - f.mantBits));
  uint32_t field = static_cast<uint32_t>(unbiased + f.bias());
  uint32_t mantissa = static_cast<uint32_t>(
      (magnitude / std::ldexp(1.0, unbiased) - 1.0) *
      std::ldexp(1.0, f.mantBits));
  return (field << f.mantBits) | mantissa;
}

uint32_t encodeNarrow(double v, rt::ElemType elem) {
  const FloatFormat &f = formatOf(elem);
  if (std::isnan(v))
    return f.nan;
  const uint32_t sign = std::signbit(v) ? 1u << (f.expBits + f.mantBits) : 0;
  const uint32_t infinity = static_cast<uint32_t>((1 << f.expBits) - 1)
                            << f.mantBits;
  double magnitude = std::fabs(v);
  if (std::isinf(magnitude))
    return sign | (f.saturate ? encodeExact(f.maxFinite(), f) : infinity);
  if (magnitude == 0)
    return sign;
  double rounded;
  if (isFP8Type(elem)) {
    // The reference's own rounding, so inputs and results agree with it.
    rounded = ref::roundToFP8(magnitude, elem == rt::ElemType::F8E4M3FN
                                             ? ref::FP8Format::E4M3FN
                                             : ref::FP8Format::E5M2);
  } else {
    rounded = roundMagnitude(magnitude, f);
    if (rounded > f.maxFinite())
      return sign | infinity;
  }
  return sign | encodeExact(rounded, f);
}

double decodeNarrow(uint32_t bits, rt::ElemType elem) {
  const FloatFormat &f = formatOf(elem);
  const uint32_t mantMask = (1u << f.mantBits) - 1;
  const uint32_t expMask = (1u << f.expBits) - 1;
  const bool negative = (bits >> (f.expBits + f.mantBits)) & 1;
  const uint32_t field = (bits >> f.mantBits) & expMask;
  const uint32_t mantissa = bits & mantMask;
  double value;
  if (f.ieeeSpecials && field == expMask)
    value = mantissa ? std::numeric_limits<double>::quiet_NaN()
                     : std::numeric_limits<double>::infinity();
  else if (!f.ieeeSpecials && field == expMask && mantissa == mantMask)
    value = std::numeric_limits<double>::quiet_NaN();
  else if (field == 0)
    value = std::ldexp(static_cast<double>(mantissa),
                       f.minExponent() - f.mantBits);
  else
    value = std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa),
                                        -f.mantBits),
                       static_cast<int>(field) - f.bias());
  return negative ? -value : value;
}

/// Rounds to the nearest integer in [lo, hi] (NaN gives 0).
template <typename T> T toInteger(double v) {
  if (std::isnan(v))
    return 0;
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  v = std::nearbyint(v);
  if (v <= lo)
    return std::numeric_limits<T>::min();
  if (v >= hi) // int64's max is not a double: clamp before converting
    return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

} // namespace

bool isFloatType(rt::ElemType elem) {
  switch (elem) {
  case rt::ElemType::F32:
  case rt::ElemType::F16:
  case rt::ElemType::BF16:
  case rt::ElemType::F8E4M3FN:
  case rt::ElemType::F8E5M2:
    return true;
  default:
    return false;
  }
}

bool isFP8Type(rt::ElemType elem) {
  return elem == rt::ElemType::F8E4M3FN || elem == rt::ElemType::F8E5M2;
}

uint32_t encodeFloat(rt::ElemType elem, double v) {
  if (elem == rt::ElemType::F32) {
    float f = static_cast<float>(v); // one IEEE rounding, RNE
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return bits;
  }
  return encodeNarrow(v, elem);
}

double decodeFloat(rt::ElemType elem, uint32_t bits) {
  if (elem == rt::ElemType::F32) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  return decodeNarrow(bits, elem);
}

int64_t HostArray::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

uint64_t HostArray::bits(int64_t i) const {
  const size_t size = rt::elemSize(elem);
  uint64_t value = 0;
  // Little-endian host (x86-64, aarch64), as the device.
  std::memcpy(&value, bytes.data() + i * size, size);
  return value;
}

double HostArray::get(int64_t i) const {
  const uint8_t *p = bytes.data() + i * rt::elemSize(elem);
  switch (elem) {
  case rt::ElemType::I32: {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  case rt::ElemType::I64: {
    int64_t v;
    std::memcpy(&v, p, sizeof v);
    return static_cast<double>(v);
  }
  case rt::ElemType::U8:
    return *p;
  default:
    return decodeFloat(elem, static_cast<uint32_t>(bits(i)));
  }
}

void HostArray::set(int64_t i, double v) {
  uint8_t *p = bytes.data() + i * rt::elemSize(elem);
  switch (elem) {
  case rt::ElemType::I32: {
    int32_t x = toInteger<int32_t>(v);
    std::memcpy(p, &x, sizeof x);
    return;
  }
  case rt::ElemType::I64: {
    int64_t x = toInteger<int64_t>(v);
    std::memcpy(p, &x, sizeof x);
    return;
  }
  case rt::ElemType::U8:
    *p = toInteger<uint8_t>(v);
    return;
  default: {
    uint32_t bits = encodeFloat(elem, v);
    std::memcpy(p, &bits, rt::elemSize(elem));
    return;
  }
  }
}

HostArray makeHostArray(rt::ElemType elem, std::vector<int64_t> shape) {
  HostArray array;
  array.elem = elem;
  array.shape = std::move(shape);
  array.bytes.assign(array.numElements() * rt::elemSize(elem), 0);
  return array;
}

std::vector<rt::ArrayRef> arrayRefs(std::vector<HostArray> &arrays) {
  std::vector<rt::ArrayRef> refs;
  refs.reserve(arrays.size());
  for (HostArray &a : arrays)
    refs.push_back({a.bytes.data(), a.elem, a.shape});
  return refs;
}

} // namespace moec::check
