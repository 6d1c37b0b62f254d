//===- ReferenceInternal.h - Shared checks of the float64 reference -*- C++ -*-===//
//
// Part of moec (internal to lib/Reference): the argument checks and small
// helpers the reference's files share.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_REFERENCE_REFERENCEINTERNAL_H
#define MOEC_LIB_REFERENCE_REFERENCEINTERNAL_H

#include "moec/Reference/MoeReference.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace moec::ref::detail {

inline int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument("tensor shape has a negative dimension");
    n *= d;
  }
  return n;
}

inline std::string shapeStr(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

[[noreturn]] inline void fail(const std::string &message) {
  throw std::invalid_argument(message);
}

template <typename T>
void expectRank(const Tensor<T> &t, const char *name, size_t rank) {
  if (t.shape.size() != rank)
    fail(std::string("'") + name + "' must have rank " + std::to_string(rank) +
         ", got shape " + shapeStr(t.shape));
}

template <typename T>
void expectDim(const Tensor<T> &t, const char *name, unsigned dim,
               int64_t expected, const char *expectedDesc) {
  if (t.shape.at(dim) != expected)
    fail(std::string("dimension ") + std::to_string(dim) + " of '" + name +
         "' is " + std::to_string(t.shape[dim]) + " but must equal " +
         expectedDesc + " (" + std::to_string(expected) + ")");
}

/// Checks offsets [E]: non-decreasing group ends within [0, rows].
inline void expectOffsets(const ITensor &offsets, int64_t rows) {
  expectRank(offsets, "offsets", 1);
  if (offsets.dim(0) < 1)
    fail("'offsets' must hold at least one expert");
  int32_t previous = 0;
  for (int64_t e = 0; e < offsets.dim(0); ++e) {
    int32_t end = offsets.data[e];
    if (end < previous || end > rows)
      fail("'offsets' must be non-decreasing group ends within [0, " +
           std::to_string(rows) + "], got " + std::to_string(end) +
           " for expert " + std::to_string(e));
    previous = end;
  }
}

inline int64_t groupStart(const ITensor &offsets, int64_t e) {
  return e == 0 ? 0 : offsets.data[e - 1];
}

/// Checks a slot tensor [M] against T tokens with k slots each.
inline void expectSlots(const ITensor &slots, const char *name, int64_t tokens,
                 int64_t k) {
  expectRank(slots, name, 1);
  for (int32_t slot : slots.data)
    if (slot < -1 || slot >= tokens * k)
      fail(std::string("'") + name + "' holds slot " + std::to_string(slot) +
           ", outside [-1, " + std::to_string(tokens * k) + ")");
}

/// Checks grouped rows [M, H] (named `name`), their slots [M] for T tokens
/// with k slots each, and the groups' offsets.
inline void expectGroupedRows(const DTensor &rows, const char *name,
                       const ITensor &slots, const ITensor &offsets, int64_t k,
                       int64_t numTokens) {
  expectRank(rows, name, 2);
  if (k < 1)
    fail("'k' must be positive");
  expectDim(slots, "slots", 0, rows.dim(0), "the number of rows");
  expectSlots(slots, "slots", numTokens, k);
  expectOffsets(offsets, rows.dim(0));
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// SwiGLU of one gate and up value: silu(g)·u.
inline double swigluAt(double g, double u) { return g * sigmoid(g) * u; }

/// SwiGLU's input gradient {dGate, dUp} of silu(g)·u for output gradient dy.
inline std::pair<double, double> swigluGradAt(double dy, double g, double u) {
  double s = sigmoid(g);
  return {dy * u * s * (1 + g * (1 - s)), dy * g * s};
}

} // namespace moec::ref::detail

#endif // MOEC_LIB_REFERENCE_REFERENCEINTERNAL_H
