//===- Quantize.cpp - Float64 reference of quantize and dequantize --------===//
//
// Part of moec. FP8 with group scales and NF4 dequantization, written for
// obviousness as MoeReference.cpp.
//
//===----------------------------------------------------------------------===//

#include "moec/Reference/MoeReference.h"

#include "moec/Support/MoeShapes.h"

#include "ReferenceInternal.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace moec::ref {

using namespace detail;

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

namespace {

struct FP8Params {
  int mantissaBits;
  int minExponent; ///< exponent of the smallest normal value
  double max;
};

FP8Params fp8Params(FP8Format format) {
  if (format == FP8Format::E4M3FN)
    return {3, -6, 448.0};
  return {2, -14, 57344.0};
}

/// One scale from a group's absolute maximum.
double groupScale(double amax, const QuantizeOptions &options) {
  if (amax == 0)
    return 1.0;
  double scale = amax / fp8Max(options.format);
  if (options.pow2Scale)
    scale = std::exp2(std::ceil(std::log2(scale)));
  return scale;
}

/// Checks a quantize / dequantize call's shapes and returns the number of
/// scale rows and columns.
std::pair<int64_t, int64_t> scaleShape(const DTensor &data,
                                       const QuantizeOptions &options) {
  expectRank(data, "input", 2);
  if (options.groupSize < 1)
    fail("'group_size' must be positive");
  const int64_t rows = data.dim(0), cols = data.dim(1);
  if (options.axis == QuantAxis::Rowwise) {
    if (options.offsets)
      fail("'offsets' is only used with axis = colwise");
    return {rows, rowwiseScaleCols(cols, options.groupSize)};
  }
  if (!options.offsets)
    fail("axis = colwise requires 'offsets'");
  expectOffsets(*options.offsets, rows);
  return {colwiseScaleRows(rows, options.offsets->dim(0), options.groupSize),
          cols};
}

/// Calls visit(row, col, scaleRow, scaleCol) for every element that belongs
/// to a quantization group.
template <typename Visit>
void forEachGroupedElement(int64_t rows, int64_t cols,
                           const QuantizeOptions &options, Visit visit) {
  const int64_t g = options.groupSize;
  if (options.axis == QuantAxis::Rowwise) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < cols; ++c)
        visit(i, c, i, c / g);
    return;
  }
  const ITensor &offsets = *options.offsets;
  int64_t block = 0;
  for (int64_t e = 0; e < offsets.dim(0); ++e) {
    int64_t start = groupStart(offsets, e), end = offsets.data[e];
    for (int64_t i = start; i < end; ++i)
      for (int64_t c = 0; c < cols; ++c)
        visit(i, c, block + (i - start) / g, c);
    block += ceilDiv(end - start, g);
  }
}

/// moe.quantize {transpose}'s layout of the grouped [M, K] `data`:
/// [K, g * blocks], expert e's row j at column g * b_e + j (b_e the blocks of
/// the experts before e), zeros elsewhere.
DTensor transposeByBlocks(const DTensor &data, const QuantizeOptions &options,
                          int64_t blocks) {
  if (options.axis != QuantAxis::Colwise)
    fail("'transpose' is only used with axis = colwise");
  const int64_t g = options.groupSize, cols = data.dim(1);
  const ITensor &offsets = *options.offsets;
  DTensor out({cols, g * blocks});
  int64_t first = 0;
  for (int64_t e = 0; e < offsets.dim(0); ++e) {
    int64_t start = groupStart(offsets, e), end = offsets.data[e];
    for (int64_t i = start; i < end; ++i)
      for (int64_t c = 0; c < cols; ++c)
        out.at(c, first * g + (i - start)) = data.at(i, c);
    first += ceilDiv(end - start, g);
  }
  return out;
}

/// moe.quantize {axis = blocks}: each g x g block of expert e's [N, K]
/// shares one scale; transposed, data and scales are written [E, K, N] and
/// [E, ceil(K/g), ceil(N/g)].
QuantizeResult quantizeBlocks(const DTensor &input,
                              const QuantizeOptions &options) {
  expectRank(input, "input", 3);
  if (options.groupSize < 1)
    fail("'group_size' must be positive");
  if (options.offsets)
    fail("'offsets' is only used with axis = colwise");
  const int64_t g = options.groupSize;
  const int64_t experts = input.dim(0), rows = input.dim(1),
                cols = input.dim(2);
  const int64_t blockRows = ceilDiv(rows, g), blockCols = ceilDiv(cols, g);
  DTensor amax({experts, blockRows, blockCols});
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        double &m = amax.at(e, r / g, c / g);
        m = std::max(m, std::fabs(input.at(e, r, c)));
      }
  const bool t = options.transpose;
  QuantizeResult result{
      DTensor({experts, t ? cols : rows, t ? rows : cols}),
      DTensor({experts, t ? blockCols : blockRows, t ? blockRows : blockCols})};
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t br = 0; br < blockRows; ++br)
      for (int64_t bc = 0; bc < blockCols; ++bc) {
        double scale = groupScale(amax.at(e, br, bc), options);
        (t ? result.scales.at(e, bc, br) : result.scales.at(e, br, bc)) =
            scale;
      }
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        double scale = t ? result.scales.at(e, c / g, r / g)
                         : result.scales.at(e, r / g, c / g);
        double q = roundToFP8(input.at(e, r, c) / scale, options.format);
        (t ? result.data.at(e, c, r) : result.data.at(e, r, c)) = q;
      }
  return result;
}

} // namespace

double fp8Max(FP8Format format) { return fp8Params(format).max; }

double roundToFP8(double value, FP8Format format) {
  if (std::isnan(value) || value == 0)
    return value;
  const FP8Params p = fp8Params(format);
  double magnitude = std::fabs(value);
  int exponent;
  std::frexp(magnitude, &exponent); // magnitude = f * 2^exponent, f in [.5, 1)
  int unbiased = std::max(exponent - 1, p.minExponent);
  double quantum = std::ldexp(1.0, unbiased - p.mantissaBits);
  double rounded = std::nearbyint(magnitude / quantum) * quantum;
  rounded = std::min(rounded, p.max);
  return std::copysign(rounded, value);
}

QuantizeResult quantize(const DTensor &input, const QuantizeOptions &options) {
  if (options.axis == QuantAxis::Blocks)
    return quantizeBlocks(input, options);
  auto [scaleRows, scaleCols] = scaleShape(input, options);
  const int64_t rows = input.dim(0), cols = input.dim(1);
  DTensor amax({scaleRows, scaleCols});
  forEachGroupedElement(rows, cols, options,
                        [&](int64_t i, int64_t c, int64_t si, int64_t sc) {
                          amax.at(si, sc) = std::max(amax.at(si, sc),
                                                     std::fabs(input.at(i, c)));
                        });
  QuantizeResult result{DTensor({rows, cols}), DTensor({scaleRows, scaleCols})};
  for (int64_t i = 0; i < amax.numElements(); ++i)
    result.scales.data[i] = groupScale(amax.data[i], options);
  forEachGroupedElement(
      rows, cols, options, [&](int64_t i, int64_t c, int64_t si, int64_t sc) {
        result.data.at(i, c) =
            roundToFP8(input.at(i, c) / result.scales.at(si, sc),
                       options.format);
      });
  if (options.transpose)
    result.data = transposeByBlocks(result.data, options, scaleRows);
  return result;
}

DTensor dequantizeFP8(const DTensor &data, const DTensor &scales,
                      const QuantizeOptions &options) {
  if (options.transpose)
    fail("moe.dequantize does not read the transposed layout");
  if (options.axis == QuantAxis::Blocks)
    fail("moe.dequantize does not read axis = blocks");
  auto [scaleRows, scaleCols] = scaleShape(data, options);
  expectRank(scales, "scales", 2);
  expectDim(scales, "scales", 0, scaleRows, "the scale rows");
  expectDim(scales, "scales", 1, scaleCols, "the scale columns");
  DTensor out({data.dim(0), data.dim(1)});
  forEachGroupedElement(data.dim(0), data.dim(1), options,
                        [&](int64_t i, int64_t c, int64_t si, int64_t sc) {
                          out.at(i, c) = data.at(i, c) * scales.at(si, sc);
                        });
  return out;
}

const std::vector<double> &nf4Codebook() {
  // The NF4 data type of QLoRA (Dettmers et al., 2023), as published.
  static const std::vector<double> codebook = {
      -1.0,
      -0.6961928009986877,
      -0.5250730514526367,
      -0.39491748809814453,
      -0.28444138169288635,
      -0.18477343022823334,
      -0.09105003625154495,
      0.0,
      0.07958029955625534,
      0.16093020141124725,
      0.24611230194568634,
      0.33791524171829224,
      0.44070982933044434,
      0.5626170039176941,
      0.7229568362236023,
      1.0};
  return codebook;
}

DTensor dequantizeNF4(const Tensor<uint8_t> &packed, const DTensor &absmax,
                      const std::vector<double> &codebook, int64_t groupSize,
                      const ITensor *experts) {
  expectRank(packed, "data", 3);
  if (codebook.size() != 16)
    fail("'codebook' must hold 16 values");
  if (groupSize < 1)
    fail("'group_size' must be positive");
  const int64_t numExperts = packed.dim(0), rows = packed.dim(1);
  const int64_t cols = 2 * packed.dim(2), perExpert = rows * cols;
  if (perExpert % groupSize != 0)
    fail("'group_size' must divide the elements of each expert");
  expectRank(absmax, "scales", 2);
  expectDim(absmax, "scales", 0, numExperts, "the number of experts");
  expectDim(absmax, "scales", 1, perExpert / groupSize, "the blocks per expert");
  std::vector<int32_t> selected(numExperts);
  std::iota(selected.begin(), selected.end(), 0);
  if (experts) {
    expectRank(*experts, "experts", 1);
    selected = experts->data;
    for (int32_t e : selected)
      if (e < 0 || e >= numExperts)
        fail("'experts' holds expert " + std::to_string(e) + ", outside [0, " +
             std::to_string(numExperts) + ")");
  }
  DTensor out({static_cast<int64_t>(selected.size()), rows, cols});
  for (size_t s = 0; s < selected.size(); ++s) {
    const int64_t e = selected[s];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t byte = packed.at(e, r, c / 2);
        int code = c % 2 == 0 ? byte >> 4 : byte & 0xF;
        int64_t block = (r * cols + c) / groupSize;
        out.at(s, r, c) = codebook[code] * absmax.at(e, block);
      }
  }
  return out;
}

} // namespace moec::ref
