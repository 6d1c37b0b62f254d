//===- MoeReference.cpp - Float64 reference semantics of the moe ops ------===//
//
// Part of moec. Written for obviousness, not speed: one loop nest per formula
// of MoeOps.td.
//
//===----------------------------------------------------------------------===//

#include "moec/Reference/MoeReference.h"

#include "ReferenceInternal.h"
#include "moec/Support/MoeShapes.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace moec::ref {

//===----------------------------------------------------------------------===//
// Tensors and argument checks
//===----------------------------------------------------------------------===//

using namespace detail;

template <typename T>
Tensor<T>::Tensor(std::vector<int64_t> shape, T fill)
    : shape(std::move(shape)) {
  data.assign(product(this->shape), fill);
}

template <typename T>
Tensor<T>::Tensor(std::vector<int64_t> shape, std::vector<T> data)
    : shape(std::move(shape)), data(std::move(data)) {
  if (static_cast<int64_t>(this->data.size()) != product(this->shape))
    fail("tensor data has " + std::to_string(this->data.size()) +
         " elements, shape " + shapeStr(this->shape) + " needs " +
         std::to_string(product(this->shape)));
}

template <typename T> int64_t Tensor<T>::numElements() const {
  return product(shape);
}

template struct Tensor<double>;
template struct Tensor<int32_t>;
template struct Tensor<uint8_t>;

double relativeError(const DTensor &out, const DTensor &ref) {
  if (out.shape != ref.shape)
    fail("relativeError: shapes " + shapeStr(out.shape) + " and " +
         shapeStr(ref.shape) + " differ");
  double diff = 0, norm = 0, outNorm = 0;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    diff += (out.data[i] - ref.data[i]) * (out.data[i] - ref.data[i]);
    norm += ref.data[i] * ref.data[i];
    outNorm += out.data[i] * out.data[i];
  }
  if (norm == 0)
    return std::sqrt(outNorm);
  return std::sqrt(diff / norm);
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

void rowScores(const double *row, int64_t experts, Scoring scoring,
               std::vector<double> &scores) {
  scores.resize(experts);
  if (scoring == Scoring::Softmax) {
    double peak = *std::max_element(row, row + experts), sum = 0;
    for (int64_t e = 0; e < experts; ++e)
      sum += scores[e] = std::exp(row[e] - peak);
    for (double &s : scores)
      s /= sum;
  } else {
    for (int64_t e = 0; e < experts; ++e)
      scores[e] = sigmoid(row[e]);
  }
}

RouterResult routerTopK(const DTensor &logits, const RouterOptions &options) {
  expectRank(logits, "logits", 2);
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  const int64_t k = options.k;
  if (k < 1 || k > experts)
    fail("'k' must be in [1, " + std::to_string(experts) + "], got " +
         std::to_string(k));
  if (!options.selectionBias.empty() &&
      static_cast<int64_t>(options.selectionBias.size()) != experts)
    fail("'selection_bias' must have one value per expert");
  if (options.order == TopKOrder::TopKThenSoftmax &&
      options.scoring != Scoring::Softmax)
    fail("order = topk_then_softmax requires scoring = softmax");
  const bool grouped = options.numGroups > 0;
  if (grouped && (experts % options.numGroups != 0 || options.topkGroups < 1 ||
                  options.topkGroups > options.numGroups ||
                  k > options.topkGroups * (experts / options.numGroups)))
    fail("'num_groups' / 'topk_groups' are inconsistent with E and k");

  RouterResult result{DTensor({tokens, k}), ITensor({tokens, k})};
  std::vector<double> scores(experts), select(experts);
  std::vector<int64_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const double *row = &logits.data[t * experts];
    rowScores(row, experts, options.scoring, scores);
    // Selection runs on the raw logits for topk_then_softmax, on the scores
    // otherwise, plus the selection bias.
    for (int64_t e = 0; e < experts; ++e)
      select[e] = (options.order == TopKOrder::TopKThenSoftmax ? row[e]
                                                               : scores[e]) +
                  (options.selectionBias.empty() ? 0.0
                                                 : options.selectionBias[e]);
    std::vector<bool> allowed(experts, true);
    if (grouped) {
      const int64_t size = experts / options.numGroups;
      std::vector<double> groupScore(options.numGroups);
      for (int64_t g = 0; g < options.numGroups; ++g) {
        std::vector<double> members(select.begin() + g * size,
                                    select.begin() + (g + 1) * size);
        std::sort(members.begin(), members.end(), std::greater<double>());
        groupScore[g] = members[0] + (size > 1 ? members[1] : 0.0);
      }
      std::vector<int64_t> groups(options.numGroups);
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) {
        return groupScore[a] > groupScore[b];
      });
      std::fill(allowed.begin(), allowed.end(), false);
      for (int64_t i = 0; i < options.topkGroups; ++i)
        for (int64_t e = groups[i] * size; e < (groups[i] + 1) * size; ++e)
          allowed[e] = true;
    }
    std::iota(order.begin(), order.end(), 0);
    // Decreasing selection score; ties (stable) keep the lower expert id.
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      if (allowed[a] != allowed[b])
        return bool(allowed[a]);
      return select[a] > select[b];
    });
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t e = order[j];
      result.ids.at(t, j) = static_cast<int32_t>(e);
      double w = options.order == TopKOrder::TopKThenSoftmax ? row[e]
                                                             : scores[e];
      result.weights.at(t, j) = w;
    }
    if (options.order == TopKOrder::TopKThenSoftmax) {
      double peak = result.weights.at(t, 0);
      for (int64_t j = 0; j < k; ++j)
        peak = std::max(peak, result.weights.at(t, j));
      for (int64_t j = 0; j < k; ++j)
        sum += result.weights.at(t, j) =
            std::exp(result.weights.at(t, j) - peak);
      for (int64_t j = 0; j < k; ++j)
        result.weights.at(t, j) /= sum;
    }
    if (options.renormalize) {
      sum = 0;
      for (int64_t j = 0; j < k; ++j)
        sum += result.weights.at(t, j);
      for (int64_t j = 0; j < k; ++j)
        result.weights.at(t, j) /= sum;
    }
    for (int64_t j = 0; j < k; ++j)
      result.weights.at(t, j) *= options.scalingFactor;
  }
  return result;
}

DTensor routerTopKGrad(const DTensor &logits, const ITensor &ids,
                       const DTensor &gradWeights,
                       const RouterOptions &options) {
  expectRank(logits, "logits", 2);
  expectRank(ids, "ids", 2);
  expectRank(gradWeights, "grad_weights", 2);
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  const int64_t k = ids.dim(1);
  if (ids.dim(0) != tokens || gradWeights.dim(0) != tokens ||
      gradWeights.dim(1) != k)
    fail("'ids' and 'grad_weights' must be [T, k] for logits of T rows");
  if (k < 1 || k > experts)
    fail("'k' must be in [1, " + std::to_string(experts) + "], got " +
         std::to_string(k));
  const bool topkThenSoftmax = options.order == TopKOrder::TopKThenSoftmax;
  const double c = options.scalingFactor;
  DTensor grad({tokens, experts}, 0.0);
  std::vector<double> scores(experts), p(k), dp(k);
  for (int64_t t = 0; t < tokens; ++t) {
    const double *row = &logits.data[t * experts];
    for (int64_t j = 0; j < k; ++j)
      if (ids.at(t, j) < 0 || ids.at(t, j) >= experts)
        fail("'ids' holds expert " + std::to_string(ids.at(t, j)) +
             " outside [0, " + std::to_string(experts) + ")");
    // The forward's selected values p_j, before renormalization and scaling.
    if (topkThenSoftmax) {
      double peak = row[ids.at(t, 0)], sum = 0;
      for (int64_t j = 0; j < k; ++j)
        peak = std::max(peak, row[ids.at(t, j)]);
      for (int64_t j = 0; j < k; ++j)
        sum += p[j] = std::exp(row[ids.at(t, j)] - peak);
      for (double &v : p)
        v /= sum;
    } else {
      rowScores(row, experts, options.scoring, scores);
      for (int64_t j = 0; j < k; ++j)
        p[j] = scores[ids.at(t, j)];
    }
    // w_j = c p_j / Z: back through the scaling and renormalization.
    double z = 1, dot = 0;
    if (options.renormalize) {
      z = 0;
      for (int64_t j = 0; j < k; ++j)
        z += p[j];
      for (int64_t j = 0; j < k; ++j)
        dot += gradWeights.at(t, j) * p[j] / z;
    }
    for (int64_t j = 0; j < k; ++j)
      dp[j] = c * (gradWeights.at(t, j) - dot) / z;
    // Then back through the scores.
    double *out = &grad.data[t * experts];
    if (topkThenSoftmax || options.scoring == Scoring::Softmax) {
      double mix = 0;
      for (int64_t j = 0; j < k; ++j)
        mix += dp[j] * p[j];
      if (topkThenSoftmax) {
        for (int64_t j = 0; j < k; ++j)
          out[ids.at(t, j)] += p[j] * (dp[j] - mix);
      } else {
        for (int64_t e = 0; e < experts; ++e)
          out[e] = -scores[e] * mix;
        for (int64_t j = 0; j < k; ++j)
          out[ids.at(t, j)] += scores[ids.at(t, j)] * dp[j];
      }
    } else {
      for (int64_t j = 0; j < k; ++j) {
        double s = scores[ids.at(t, j)];
        out[ids.at(t, j)] += dp[j] * s * (1 - s);
      }
    }
  }
  return grad;
}

SortResult sortByExpert(const ITensor &ids, int64_t numExperts,
                        int64_t align) {
  expectRank(ids, "ids", 2);
  if (numExperts < 1)
    fail("'num_experts' must be positive");
  if (!isPowerOfTwo(align))
    fail("'align' must be a positive power of two, got " +
         std::to_string(align));
  const int64_t tokens = ids.dim(0), k = ids.dim(1);
  const int64_t capacity = sortedCapacity(tokens, k, numExperts, align);

  std::vector<int64_t> counts(numExperts, 0);
  for (int32_t e : ids.data) {
    if (e < 0 || e >= numExperts)
      fail("'ids' holds expert " + std::to_string(e) + ", outside [0, " +
           std::to_string(numExperts) + ")");
    ++counts[e];
  }
  SortResult result{ITensor({capacity}, -1), ITensor({capacity}, -1),
                    ITensor({numExperts}), ITensor({tokens * k})};
  std::vector<int64_t> next(numExperts);
  int64_t end = 0;
  for (int64_t e = 0; e < numExperts; ++e) {
    next[e] = end;
    int64_t padded = ceilDiv(counts[e], align) * align;
    for (int64_t i = end; i < end + padded; ++i)
      result.sortedExpertIds.data[i] = static_cast<int32_t>(e);
    end += padded;
    result.offsets.data[e] = static_cast<int32_t>(end);
  }
  // Slots in increasing order: a stable sort by expert.
  for (int64_t slot = 0; slot < tokens * k; ++slot) {
    int64_t row = next[ids.data[slot]]++;
    result.slots.data[row] = static_cast<int32_t>(slot);
    result.positions.data[slot] = static_cast<int32_t>(row);
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Permutation
//===----------------------------------------------------------------------===//

PermuteResult permute(const DTensor &tokens, const ITensor &slots,
                      const ITensor &offsets, int64_t k, const DTensor *probs,
                      const DTensor *scales) {
  expectRank(tokens, "tokens", 2);
  if (k < 1)
    fail("'k' must be positive");
  const int64_t numTokens = tokens.dim(0), hidden = tokens.dim(1);
  expectSlots(slots, "slots", numTokens, k);
  const int64_t rows = slots.dim(0);
  expectOffsets(offsets, rows);
  const int64_t end = offsets.data.back();

  PermuteResult result;
  result.rows = DTensor({rows, hidden});
  if (probs) {
    expectRank(*probs, "probs", 2);
    expectDim(*probs, "probs", 0, numTokens, "the number of tokens");
    expectDim(*probs, "probs", 1, k, "k");
    result.permutedProbs = DTensor({rows});
  }
  if (scales) {
    expectRank(*scales, "scales", 2);
    expectDim(*scales, "scales", 0, numTokens, "the number of tokens");
    result.permutedScales = DTensor({rows, scales->dim(1)});
  }
  for (int64_t i = 0; i < std::min(rows, end); ++i) {
    int32_t slot = slots.data[i];
    if (slot < 0)
      continue;
    int64_t t = slot / k;
    for (int64_t h = 0; h < hidden; ++h)
      result.rows.at(i, h) = tokens.at(t, h);
    if (probs)
      result.permutedProbs.data[i] = probs->data[slot];
    if (scales)
      for (int64_t g = 0; g < scales->dim(1); ++g)
        result.permutedScales.at(i, g) = scales->at(t, g);
  }
  return result;
}

DTensor permuteProbs(const DTensor &probs, const ITensor &slots,
                     const ITensor &offsets, int64_t k, double scale) {
  expectRank(probs, "probs", 2);
  if (k < 1)
    fail("'k' must be positive");
  expectDim(probs, "probs", 1, k, "k");
  DTensor tokens({probs.dim(0), 0});
  PermuteResult r = permute(tokens, slots, offsets, k, &probs, nullptr);
  for (double &p : r.permutedProbs.data)
    p *= scale;
  return std::move(r.permutedProbs);
}


DTensor unpermute(const DTensor &rows, const ITensor &slots,
                  const ITensor &offsets, int64_t k, int64_t numTokens,
                  const DTensor *weights) {
  expectGroupedRows(rows, "rows", slots, offsets, k, numTokens);
  if (weights) {
    expectRank(*weights, "weights", 2);
    expectDim(*weights, "weights", 0, numTokens, "the number of tokens");
    expectDim(*weights, "weights", 1, k, "k");
  }
  const int64_t hidden = rows.dim(1), end = offsets.data.back();
  DTensor out({numTokens, hidden});
  for (int64_t i = 0; i < end; ++i) {
    int32_t slot = slots.data[i];
    if (slot < 0)
      continue;
    double w = weights ? weights->data[slot] : 1.0;
    for (int64_t h = 0; h < hidden; ++h)
      out.at(slot / k, h) += w * rows.at(i, h);
  }
  return out;
}

PermuteGradResult permuteGrad(const DTensor &gradRows, const ITensor &slots,
                              const ITensor &offsets, int64_t k,
                              int64_t numTokens,
                              const DTensor *gradPermutedProbs) {
  expectGroupedRows(gradRows, "grad_rows", slots, offsets, k, numTokens);
  PermuteGradResult result;
  if (gradPermutedProbs) {
    expectRank(*gradPermutedProbs, "grad_permuted_probs", 1);
    expectDim(*gradPermutedProbs, "grad_permuted_probs", 0, gradRows.dim(0),
              "the number of rows");
    result.gradProbs = DTensor({numTokens, k});
  }
  // The token gradients are unpermute's unweighted combine.
  result.gradTokens =
      unpermute(gradRows, slots, offsets, k, numTokens, /*weights=*/nullptr);
  if (gradPermutedProbs)
    for (int64_t i = 0; i < offsets.data.back(); ++i)
      if (int32_t slot = slots.data[i]; slot >= 0)
        result.gradProbs.data[slot] = gradPermutedProbs->data[i];
  return result;
}

UnpermuteGradResult unpermuteGrad(const DTensor &gradOut, const ITensor &slots,
                                  const ITensor &offsets, int64_t k,
                                  const DTensor *weights, const DTensor *rows) {
  expectRank(gradOut, "grad_out", 2);
  if (k < 1)
    fail("'k' must be positive");
  if (bool(weights) != bool(rows))
    fail("'weights' and 'rows' must be given together");
  expectRank(slots, "slots", 1);
  const int64_t numTokens = gradOut.dim(0), hidden = gradOut.dim(1);
  const int64_t numRows = slots.dim(0);
  expectSlots(slots, "slots", numTokens, k);
  expectOffsets(offsets, numRows);
  UnpermuteGradResult result;
  if (weights) {
    expectRank(*weights, "weights", 2);
    expectDim(*weights, "weights", 0, numTokens, "the number of tokens");
    expectDim(*weights, "weights", 1, k, "k");
    expectRank(*rows, "rows", 2);
    expectDim(*rows, "rows", 0, numRows, "the length of 'slots'");
    expectDim(*rows, "rows", 1, hidden, "the hidden size of 'grad_out'");
    result.gradWeights = DTensor({numTokens, k});
  }
  const int64_t end = offsets.data.back();
  result.gradRows = DTensor({numRows, hidden});
  for (int64_t i = 0; i < end; ++i) {
    int32_t slot = slots.data[i];
    if (slot < 0)
      continue;
    const int64_t t = slot / k;
    const double w = weights ? weights->data[slot] : 1.0;
    double dot = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      result.gradRows.at(i, h) = w * gradOut.at(t, h);
      if (rows)
        dot += gradOut.at(t, h) * rows->at(i, h);
    }
    if (weights)
      result.gradWeights.data[slot] = dot;
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Grouped matmul
//===----------------------------------------------------------------------===//

namespace {

/// The lhs rows of a grouped matmul: lhs itself, or lhs[slot / k] gathered.
DTensor groupedRows(const DTensor &lhs, const ITensor *gatherSlots,
                    int64_t k) {
  expectRank(lhs, "lhs", 2);
  if (!gatherSlots)
    return lhs;
  if (k < 1)
    fail("'k' is required (positive) with 'gather_slots'");
  expectSlots(*gatherSlots, "gather_slots", lhs.dim(0), k);
  DTensor rows({gatherSlots->dim(0), lhs.dim(1)});
  for (int64_t i = 0; i < rows.dim(0); ++i) {
    int32_t slot = gatherSlots->data[i];
    if (slot >= 0)
      for (int64_t c = 0; c < lhs.dim(1); ++c)
        rows.at(i, c) = lhs.at(slot / k, c);
  }
  return rows;
}

} // namespace

namespace {

/// lhs times its FP8 block scales (`lhs_scales`, as given: tokens when
/// gathered), or lhs itself.
DTensor scaledLhs(const DTensor &lhs, const GroupedMatmulOptions &options) {
  if (bool(options.lhsScales) != bool(options.rhsScales))
    fail("'lhs_scales' and 'rhs_scales' must be given together");
  const int64_t g = options.scaleGroup;
  if (options.lhsScales && g < 1)
    fail("'scale_group' must be positive");
  DTensor scaled = lhs;
  if (!options.lhsScales)
    return scaled;
  expectRank(lhs, "lhs", 2);
  expectRank(*options.lhsScales, "lhs_scales", 2);
  expectDim(*options.lhsScales, "lhs_scales", 0, lhs.dim(0),
            "the rows of 'lhs'");
  expectDim(*options.lhsScales, "lhs_scales", 1, ceilDiv(lhs.dim(1), g),
            "ceil(K / scale_group)");
  for (int64_t i = 0; i < lhs.dim(0); ++i)
    for (int64_t c = 0; c < lhs.dim(1); ++c)
      scaled.at(i, c) *= options.lhsScales->at(i, c / g);
  return scaled;
}

/// Checks the weights (and their scales) against K and the experts;
/// returns N.
int64_t checkWeights(const DTensor &rhs, int64_t experts, int64_t red,
                     const GroupedMatmulOptions &options) {
  expectRank(rhs, "rhs", 3);
  expectDim(rhs, "rhs", 0, experts, "the number of experts");
  const int64_t cols = options.transposeRhs ? rhs.dim(1) : rhs.dim(2);
  expectDim(rhs, "rhs", options.transposeRhs ? 2 : 1, red,
            "K, the columns of 'lhs'");
  if (const DTensor *rhsScales = options.rhsScales) {
    const int64_t g = options.scaleGroup;
    expectRank(*rhsScales, "rhs_scales", 3);
    expectDim(*rhsScales, "rhs_scales", 0, experts, "the number of experts");
    expectDim(*rhsScales, "rhs_scales", options.transposeRhs ? 2 : 1,
              ceilDiv(red, g), "ceil(K / scale_group)");
    expectDim(*rhsScales, "rhs_scales", options.transposeRhs ? 1 : 2,
              ceilDiv(cols, g), "ceil(N / scale_group)");
  }
  if (options.bias) {
    expectRank(*options.bias, "bias", 2);
    expectDim(*options.bias, "bias", 0, experts, "the number of experts");
    expectDim(*options.bias, "bias", 1, cols, "N");
  }
  return cols;
}

/// Checks the LoRA adapters; returns their rank (0 without).
int64_t checkLora(int64_t experts, int64_t red, int64_t cols,
                  const GroupedMatmulOptions &options) {
  if (bool(options.loraA) != bool(options.loraB))
    fail("'lora_a' and 'lora_b' must be given together");
  if (!options.loraA) {
    if (options.transposeLora)
      fail("'transpose_lora' requires 'lora_a' and 'lora_b'");
    return 0;
  }
  expectRank(*options.loraA, "lora_a", 2);
  expectRank(*options.loraB, "lora_b", 2);
  if (options.loraA->dim(0) % experts != 0)
    fail("dimension 0 of 'lora_a' must be a multiple of the experts");
  const int64_t rank = options.loraA->dim(0) / experts;
  if (options.transposeLora) {
    expectDim(*options.loraA, "lora_a", 1, cols, "N (transposed adapter)");
    expectDim(*options.loraB, "lora_b", 0, red, "K (transposed adapter)");
  } else {
    expectDim(*options.loraA, "lora_a", 1, red, "K");
    expectDim(*options.loraB, "lora_b", 0, cols, "N");
  }
  expectDim(*options.loraB, "lora_b", 1, experts * rank, "E * r");
  return rank;
}

/// Checks the epilogue's operands (SwiGLU, its gradient's saved input, row
/// scale, scatter); returns the output's columns.
int64_t checkEpilogue(int64_t rows, int64_t cols,
                      const GroupedMatmulOptions &options) {
  if (options.swiglu && cols % 2 != 0)
    fail("swiglu needs an even N, got " + std::to_string(cols));
  if (const DTensor *gradInput = options.swigluGradInput) {
    if (options.swiglu || options.scatterSlots)
      fail("'swigluGradInput' excludes swiglu and scatter");
    expectRank(*gradInput, "activation_input", 2);
    expectDim(*gradInput, "activation_input", 0, rows, "the grouped rows");
    expectDim(*gradInput, "activation_input", 1, 2 * cols, "2 * N");
  }
  if (options.rowScale)
    expectDim(*options.rowScale, "row_scale", 0, rows, "the grouped rows");
  if (options.scatterWeights && !options.scatterSlots)
    fail("'scatter_weights' requires 'scatter_slots'");
  if (options.scatterSlots) {
    if (options.k < 1)
      fail("'k' is required (positive) with 'scatter_slots'");
    expectDim(*options.scatterSlots, "scatter_slots", 0, rows,
              "the grouped rows");
    expectSlots(*options.scatterSlots, "scatter_slots", options.numTokens,
                options.k);
    if (options.scatterWeights) {
      expectRank(*options.scatterWeights, "scatter_weights", 2);
      expectDim(*options.scatterWeights, "scatter_weights", 0,
                options.numTokens, "the number of tokens");
      expectDim(*options.scatterWeights, "scatter_weights", 1, options.k, "k");
    }
  }
  return options.swiglu             ? cols / 2
         : options.swigluGradInput ? 2 * cols
                                   : cols;
}

} // namespace

DTensor groupedMatmul(const DTensor &lhs, const DTensor &rhs,
                      const ITensor &offsets,
                      const GroupedMatmulOptions &options) {
  const DTensor x =
      groupedRows(scaledLhs(lhs, options), options.gatherSlots, options.k);
  const int64_t rows = x.dim(0), red = x.dim(1);
  expectOffsets(offsets, rows);
  const int64_t experts = offsets.dim(0);
  const int64_t cols = checkWeights(rhs, experts, red, options);
  const int64_t rank = checkLora(experts, red, cols, options);
  const int64_t outCols = checkEpilogue(rows, cols, options);
  const int64_t g = options.scaleGroup;
  const DTensor *rhsScales = options.rhsScales;
  auto weight = [&](int64_t e, int64_t kk, int64_t n) {
    double w = options.transposeRhs ? rhs.at(e, n, kk) : rhs.at(e, kk, n);
    if (!rhsScales)
      return w;
    return w * (options.transposeRhs ? rhsScales->at(e, n / g, kk / g)
                                     : rhsScales->at(e, kk / g, n / g));
  };
  // The adapter's down (x -> r) and up (r -> N) projections.
  auto loraDown = [&](int64_t e, int64_t r, int64_t kk) {
    return options.transposeLora ? options.loraB->at(kk, e * rank + r)
                                 : options.loraA->at(e * rank + r, kk);
  };
  auto loraUp = [&](int64_t e, int64_t r, int64_t n) {
    return options.transposeLora ? options.loraA->at(e * rank + r, n)
                                 : options.loraB->at(n, e * rank + r);
  };
  const DTensor *gradInput = options.swigluGradInput;
  const bool scatter = options.scatterSlots != nullptr;
  DTensor out(scatter ? std::vector<int64_t>{options.numTokens, outCols}
                      : std::vector<int64_t>{rows, outCols});
  std::vector<double> y(cols), down(rank);
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t i = groupStart(offsets, e); i < offsets.data[e]; ++i) {
      for (int64_t n = 0; n < cols; ++n) {
        double acc = options.bias ? options.bias->at(e, n) : 0.0;
        for (int64_t kk = 0; kk < red; ++kk)
          acc += x.at(i, kk) * weight(e, kk, n);
        y[n] = acc;
      }
      if (rank) {
        for (int64_t r = 0; r < rank; ++r) {
          double acc = 0;
          for (int64_t kk = 0; kk < red; ++kk)
            acc += x.at(i, kk) * loraDown(e, r, kk);
          down[r] = acc;
        }
        for (int64_t n = 0; n < cols; ++n) {
          double acc = 0;
          for (int64_t r = 0; r < rank; ++r)
            acc += down[r] * loraUp(e, r, n);
          y[n] += options.loraScaling * acc;
        }
      }
      if (options.swiglu)
        for (int64_t n = 0; n < outCols; ++n)
          y[n] = swigluAt(y[n], y[n + outCols]);
      double scale = options.rowScale ? options.rowScale->data[i] : 1.0;
      if (gradInput) {
        // y is SwiGLU's output gradient: the input's, gate then up half.
        for (int64_t n = 0; n < cols; ++n)
          std::tie(out.at(i, n), out.at(i, n + cols)) =
              swigluGradAt(scale * y[n], gradInput->at(i, n),
                           gradInput->at(i, n + cols));
        continue;
      }
      if (!scatter) {
        for (int64_t n = 0; n < outCols; ++n)
          out.at(i, n) = scale * y[n];
        continue;
      }
      int32_t slot = options.scatterSlots->data[i];
      if (slot < 0)
        continue;
      double w =
          options.scatterWeights ? options.scatterWeights->data[slot] : 1.0;
      for (int64_t n = 0; n < outCols; ++n)
        out.at(slot / options.k, n) += w * scale * y[n];
    }
  }
  return out;
}

DTensor groupedWeightGrad(const DTensor &lhs, const DTensor &grad,
                          const ITensor &offsets, const ITensor *gatherSlots,
                          int64_t k) {
  const DTensor x = groupedRows(lhs, gatherSlots, k);
  expectRank(grad, "grad", 2);
  expectDim(grad, "grad", 0, x.dim(0), "the grouped rows");
  expectOffsets(offsets, x.dim(0));
  const int64_t experts = offsets.dim(0), red = x.dim(1), cols = grad.dim(1);
  DTensor out({experts, red, cols});
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t i = groupStart(offsets, e); i < offsets.data[e]; ++i)
      for (int64_t kk = 0; kk < red; ++kk)
        for (int64_t n = 0; n < cols; ++n)
          out.at(e, kk, n) += x.at(i, kk) * grad.at(i, n);
  return out;
}

DTensor groupedWeightGradFP8(const DTensor &lhs, const DTensor &grad,
                             const DTensor &lhsScales,
                             const DTensor &gradScales,
                             const ITensor &offsets) {
  constexpr int64_t g = kFp8ScaleBlock;
  expectRank(lhs, "lhs", 2);
  expectRank(grad, "grad_out", 2);
  expectRank(lhsScales, "lhs_scales", 2);
  expectRank(gradScales, "grad_scales", 2);
  const int64_t red = lhs.dim(0), cols = grad.dim(0), padded = lhs.dim(1);
  if (padded % g != 0)
    fail("dimension 1 of 'lhs' must be a multiple of 128");
  const int64_t blocks = padded / g;
  expectDim(grad, "grad_out", 1, padded, "the padded rows of 'lhs'");
  expectDim(lhsScales, "lhs_scales", 0, blocks, "the blocks of 'lhs'");
  expectDim(lhsScales, "lhs_scales", 1, red, "K");
  expectDim(gradScales, "grad_scales", 0, blocks, "the blocks of 'lhs'");
  expectDim(gradScales, "grad_scales", 1, cols, "N");
  const int64_t experts = offsets.dim(0);
  DTensor out({experts, red, cols});
  int64_t first = 0; // b_e
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t rows = offsets.data[e] - groupStart(offsets, e);
    if (rows < 0)
      fail("'offsets' must be non-decreasing");
    const int64_t own = ceilDiv(rows, g);
    if (first + own > blocks)
      fail("'lhs' holds " + std::to_string(blocks) +
           " blocks, fewer than the groups of 'offsets' need");
    for (int64_t b = 0; b < own; ++b) {
      const int64_t p0 = (first + b) * g, p1 = p0 + std::min(g, rows - b * g);
      for (int64_t kk = 0; kk < red; ++kk)
        for (int64_t n = 0; n < cols; ++n) {
          double sum = 0;
          for (int64_t p = p0; p < p1; ++p)
            sum += lhs.at(kk, p) * grad.at(n, p);
          out.at(e, kk, n) += sum * lhsScales.at(first + b, kk) *
                              gradScales.at(first + b, n);
        }
    }
    first += own;
  }
  return out;
}

LoraGradResult loraGrad(const DTensor &lhs, const DTensor &grad,
                        const ITensor &offsets, const DTensor &loraA,
                        const DTensor &loraB, double scaling,
                        const ITensor *gatherSlots, int64_t k) {
  const DTensor x = groupedRows(lhs, gatherSlots, k);
  expectRank(grad, "grad_out", 2);
  expectDim(grad, "grad_out", 0, x.dim(0), "the grouped rows");
  expectOffsets(offsets, x.dim(0));
  expectRank(loraA, "lora_a", 2);
  expectRank(loraB, "lora_b", 2);
  const int64_t experts = offsets.dim(0), red = x.dim(1), cols = grad.dim(1);
  if (loraA.dim(0) % experts != 0 || loraA.dim(0) == 0)
    fail("dimension 0 of 'lora_a' must be a positive multiple of the experts");
  const int64_t rank = loraA.dim(0) / experts;
  expectDim(loraA, "lora_a", 1, red, "K");
  expectDim(loraB, "lora_b", 0, cols, "N");
  expectDim(loraB, "lora_b", 1, experts * rank, "E * r");
  LoraGradResult out{DTensor(loraA.shape), DTensor(loraB.shape)};
  std::vector<double> u(rank), du(rank);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t i = groupStart(offsets, e); i < offsets.data[e]; ++i) {
      for (int64_t r = 0; r < rank; ++r) {
        double up = 0, down = 0;
        for (int64_t kk = 0; kk < red; ++kk)
          up += x.at(i, kk) * loraA.at(e * rank + r, kk);
        for (int64_t n = 0; n < cols; ++n)
          down += grad.at(i, n) * loraB.at(n, e * rank + r);
        u[r] = up;
        du[r] = scaling * down;
      }
      for (int64_t r = 0; r < rank; ++r) {
        for (int64_t kk = 0; kk < red; ++kk)
          out.gradA.at(e * rank + r, kk) += du[r] * x.at(i, kk);
        for (int64_t n = 0; n < cols; ++n)
          out.gradB.at(n, e * rank + r) += scaling * grad.at(i, n) * u[r];
      }
    }
  return out;
}

//===----------------------------------------------------------------------===//
// Activation
//===----------------------------------------------------------------------===//

namespace {

/// Column of the gate (up = false) or up value of output column `c`.
int64_t gateUpColumn(GateUpLayout layout, int64_t half, int64_t c, bool up) {
  if (layout == GateUpLayout::Halves)
    return up ? half + c : c;
  return up ? 2 * c + 1 : 2 * c;
}

} // namespace

DTensor swiglu(const DTensor &input, GateUpLayout layout) {
  expectRank(input, "input", 2);
  if (input.dim(1) % 2 != 0)
    fail("'input' must have an even number of columns");
  const int64_t rows = input.dim(0), half = input.dim(1) / 2;
  DTensor out({rows, half});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < half; ++c) {
      double g = input.at(i, gateUpColumn(layout, half, c, false));
      double u = input.at(i, gateUpColumn(layout, half, c, true));
      out.at(i, c) = swigluAt(g, u);
    }
  return out;
}

DTensor swigluGrad(const DTensor &input, const DTensor &gradOutput,
                   GateUpLayout layout) {
  expectRank(input, "input", 2);
  if (input.dim(1) % 2 != 0)
    fail("'input' must have an even number of columns");
  const int64_t rows = input.dim(0), half = input.dim(1) / 2;
  expectRank(gradOutput, "grad_output", 2);
  expectDim(gradOutput, "grad_output", 0, rows, "the rows of 'input'");
  expectDim(gradOutput, "grad_output", 1, half, "half the width of 'input'");
  DTensor grad({rows, 2 * half});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < half; ++c) {
      int64_t gc = gateUpColumn(layout, half, c, false);
      int64_t uc = gateUpColumn(layout, half, c, true);
      std::tie(grad.at(i, gc), grad.at(i, uc)) = swigluGradAt(
          gradOutput.at(i, c), input.at(i, gc), input.at(i, uc));
    }
  return grad;
}

} // namespace moec::ref
