//===- MoeReferenceTest.cpp - Tests of the float64 reference --------------===//
//
// Part of moec. The reference is the oracle for every kernel, so it is checked
// two ways: small cases worked out by hand, and identities between ops on
// random inputs (permute/unpermute invert each other and their gradients are
// their adjoints, a gathered matmul equals permute then matmul, the weight
// gradient is the adjoint of the forward matmul, swiglu_grad matches finite
// differences, ...).
//
//===----------------------------------------------------------------------===//

#include "moec/Reference/MoeReference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

using namespace moec::ref;

namespace {

DTensor randomTensor(std::vector<int64_t> shape, std::mt19937 &rng,
                     double scale = 1.0) {
  DTensor t(std::move(shape));
  std::normal_distribution<double> normal(0.0, scale);
  for (double &v : t.data)
    v = normal(rng);
  return t;
}

/// Random top-k routing of `tokens` tokens over `experts` experts.
RouterResult randomRouting(int64_t tokens, int64_t experts, int64_t k,
                           std::mt19937 &rng) {
  RouterOptions options;
  options.k = k;
  options.renormalize = true;
  return routerTopK(randomTensor({tokens, experts}, rng), options);
}

double dot(const DTensor &a, const DTensor &b) {
  double sum = 0;
  for (size_t i = 0; i < a.data.size(); ++i)
    sum += a.data[i] * b.data[i];
  return sum;
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

TEST(Reference, RouterSoftmaxThenTopK) {
  DTensor logits({1, 4}, {1.0, 3.0, 2.0, 0.0});
  RouterOptions options;
  options.k = 2;
  RouterResult r = routerTopK(logits, options);
  double sum = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  EXPECT_EQ(r.ids.data, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights.data[0], std::exp(3.0) / sum, 1e-15);
  EXPECT_NEAR(r.weights.data[1], std::exp(2.0) / sum, 1e-15);

  options.renormalize = true;
  options.scalingFactor = 2.0;
  r = routerTopK(logits, options);
  double top2 = std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(r.weights.data[0], 2.0 * std::exp(3.0) / top2, 1e-15);
  EXPECT_NEAR(r.weights.data[1], 2.0 * std::exp(2.0) / top2, 1e-15);
}

TEST(Reference, RouterTiesGoToTheLowerExpert) {
  DTensor logits({1, 4}, {0.5, 2.0, 2.0, 2.0});
  RouterOptions options;
  options.k = 2;
  EXPECT_EQ(routerTopK(logits, options).ids.data,
            (std::vector<int32_t>{1, 2}));
}

TEST(Reference, RouterTopKThenSoftmaxEqualsRenormalizedSoftmax) {
  std::mt19937 rng(1);
  DTensor logits = randomTensor({32, 16}, rng, 3.0);
  RouterOptions mixtral;
  mixtral.k = 4;
  mixtral.order = TopKOrder::TopKThenSoftmax;
  RouterOptions qwen;
  qwen.k = 4;
  qwen.renormalize = true;
  RouterResult a = routerTopK(logits, mixtral), b = routerTopK(logits, qwen);
  EXPECT_EQ(a.ids.data, b.ids.data);
  EXPECT_LT(relativeError(a.weights, b.weights), 1e-14);
}

TEST(Reference, RouterSigmoidBiasSelectsButDoesNotWeigh) {
  DTensor logits({1, 3}, {2.0, 1.0, 0.0});
  RouterOptions options;
  options.k = 1;
  options.scoring = Scoring::Sigmoid;
  options.selectionBias = {0.0, 0.0, 1.0};
  RouterResult r = routerTopK(logits, options);
  // sigmoid(0) + 1 = 1.5 beats sigmoid(2) = 0.88, but the weight is
  // sigmoid(0), unbiased.
  EXPECT_EQ(r.ids.data[0], 2);
  EXPECT_NEAR(r.weights.data[0], 0.5, 1e-15);
}

TEST(Reference, RouterGroupLimited) {
  // Groups {0,1} and {2,3}. Expert 2 is the single best, but group 0 has the
  // better sum of its two best scores, so only experts 0 and 1 qualify.
  DTensor logits({1, 4}, {2.0, 2.0, 3.0, -5.0});
  RouterOptions options;
  options.k = 2;
  options.scoring = Scoring::Sigmoid;
  options.numGroups = 2;
  options.topkGroups = 1;
  EXPECT_EQ(routerTopK(logits, options).ids.data,
            (std::vector<int32_t>{0, 1}));
  options.numGroups = 0;
  options.topkGroups = 0;
  EXPECT_EQ(routerTopK(logits, options).ids.data,
            (std::vector<int32_t>{2, 0}));
}

TEST(Reference, RouterRejectsBadArguments) {
  DTensor logits({2, 4});
  RouterOptions options;
  options.k = 5;
  EXPECT_THROW(routerTopK(logits, options), std::invalid_argument);
  options.k = 2;
  options.scoring = Scoring::Sigmoid;
  options.order = TopKOrder::TopKThenSoftmax;
  EXPECT_THROW(routerTopK(logits, options), std::invalid_argument);
}

// router_topk_grad against central differences of router_topk's weights
// (with the ids held: selection is piecewise constant) for every scoring:
// Qwen3 (softmax, renormalized), plain softmax, Mixtral (top-k then
// softmax), DeepSeek-V3 (sigmoid, bias, renormalized, scaled), and a
// scaled sigmoid without renormalization.
TEST(Reference, RouterTopKGradMatchesFiniteDifferences) {
  std::mt19937 rng(11);
  const int64_t tokens = 5, experts = 12;
  std::vector<RouterOptions> cases(5);
  cases[0].k = 4, cases[0].renormalize = true;
  cases[1].k = 3;
  cases[2].k = 2, cases[2].order = TopKOrder::TopKThenSoftmax;
  cases[3].k = 3, cases[3].scoring = Scoring::Sigmoid,
  cases[3].renormalize = true, cases[3].scalingFactor = 2.5;
  cases[3].selectionBias = randomTensor({experts}, rng).data;
  cases[4].k = 2, cases[4].scoring = Scoring::Sigmoid,
  cases[4].scalingFactor = 0.5;
  for (const RouterOptions &options : cases) {
    DTensor logits = randomTensor({tokens, experts}, rng);
    RouterResult r = routerTopK(logits, options);
    DTensor dw = randomTensor({tokens, options.k}, rng);
    DTensor grad = routerTopKGrad(logits, r.ids, dw, options);
    // <dw, w(logits)> with the selection fixed to r.ids.
    auto loss = [&](const DTensor &l) {
      RouterResult moved = routerTopK(l, options);
      EXPECT_EQ(moved.ids.data, r.ids.data) << "the step changed the routing";
      return dot(dw, moved.weights);
    };
    const double h = 1e-6;
    for (int64_t i = 0; i < logits.numElements(); ++i) {
      DTensor up = logits, down = logits;
      up.data[i] += h;
      down.data[i] -= h;
      double numeric = (loss(up) - loss(down)) / (2 * h);
      EXPECT_NEAR(grad.data[i], numeric, 1e-6)
          << "logit " << i << ", k = " << options.k;
    }
  }
}

TEST(Reference, RouterTopKGradRejectsBadArguments) {
  RouterOptions options;
  DTensor logits({2, 4}, 0.5), dw({2, 1}, 1.0);
  EXPECT_THROW(routerTopKGrad(logits, ITensor({2, 1}, {0, 4}), dw, options),
               std::invalid_argument);
  EXPECT_THROW(
      routerTopKGrad(logits, ITensor({2, 2}, {0, 1, 2, 3}), dw, options),
      std::invalid_argument);
}

TEST(Reference, SortByExpert) {
  ITensor ids({2, 2}, {2, 0, 0, 1});
  SortResult s = sortByExpert(ids, 3);
  EXPECT_EQ(s.sortedExpertIds.data, (std::vector<int32_t>{0, 0, 1, 2}));
  EXPECT_EQ(s.slots.data, (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(s.offsets.data, (std::vector<int32_t>{2, 3, 4}));
}

TEST(Reference, SortByExpertAlignedWithAnEmptyExpert) {
  // Expert 1 gets no token: its group is empty, not padded.
  ITensor ids({2, 2}, {2, 0, 0, 3});
  SortResult s = sortByExpert(ids, 4, 4);
  // Capacity 2*2 + 4*3 = 16.
  ASSERT_EQ(s.slots.dim(0), 16);
  EXPECT_EQ(s.offsets.data, (std::vector<int32_t>{4, 4, 8, 12}));
  EXPECT_EQ(s.slots.data,
            (std::vector<int32_t>{1, 2, -1, -1, 0, -1, -1, -1, 3, -1, -1, -1,
                                  -1, -1, -1, -1}));
  EXPECT_EQ(s.sortedExpertIds.data,
            (std::vector<int32_t>{0, 0, 0, 0, 2, 2, 2, 2, 3, 3, 3, 3, -1, -1,
                                  -1, -1}));
}

TEST(Reference, SortRejectsOutOfRangeIds) {
  EXPECT_THROW(sortByExpert(ITensor({1, 1}, {4}), 4), std::invalid_argument);
  EXPECT_THROW(sortByExpert(ITensor({1, 1}, {0}), 4, 3), std::invalid_argument);
}

//===----------------------------------------------------------------------===//
// Permutation
//===----------------------------------------------------------------------===//

TEST(Reference, PermuteThenUnpermuteRestoresTokens) {
  std::mt19937 rng(2);
  for (int64_t align : {1, 8}) {
    const int64_t tokens = 13, experts = 6, k = 3, hidden = 5;
    RouterResult routing = randomRouting(tokens, experts, k, rng);
    SortResult sorted = sortByExpert(routing.ids, experts, align);
    DTensor x = randomTensor({tokens, hidden}, rng);
    PermuteResult p = permute(x, sorted.slots, sorted.offsets, k,
                              &routing.weights);
    // Renormalized weights sum to one per token: combine gives x back.
    DTensor y = unpermute(p.rows, sorted.slots, sorted.offsets, k, tokens,
                          &routing.weights);
    EXPECT_LT(relativeError(y, x), 1e-14) << "align " << align;
    // Padding rows are zero and carry probability zero.
    for (int64_t i = 0; i < sorted.slots.dim(0); ++i)
      if (sorted.slots.data[i] < 0) {
        EXPECT_EQ(p.permutedProbs.data[i], 0.0);
        EXPECT_EQ(p.rows.at(i, 0), 0.0);
      } else {
        EXPECT_EQ(p.permutedProbs.data[i],
                  routing.weights.data[sorted.slots.data[i]]);
      }
  }
}

TEST(Reference, PermuteCarriesScales) {
  DTensor x({2, 1}, {10.0, 20.0});
  DTensor scales({2, 2}, {1.0, 2.0, 3.0, 4.0});
  ITensor slots({4}, {3, -1, 0, 1});
  ITensor offsets({2}, {2, 4});
  PermuteResult p = permute(x, slots, offsets, 2, nullptr, &scales);
  EXPECT_EQ(p.rows.data, (std::vector<double>{20.0, 0.0, 10.0, 10.0}));
  EXPECT_EQ(p.permutedScales.data,
            (std::vector<double>{3, 4, 0, 0, 1, 2, 1, 2}));
}

TEST(Reference, UnpermuteRejectsBadSlotsAndOffsets) {
  DTensor rows({2, 1});
  EXPECT_THROW(unpermute(rows, ITensor({2}, {0, 4}), ITensor({1}, {2}), 2, 2),
               std::invalid_argument);
  EXPECT_THROW(unpermute(rows, ITensor({2}, {0, 1}), ITensor({2}, {2, 1}), 2,
                         1),
               std::invalid_argument);
}

TEST(Reference, PermuteGradIsTheAdjointOfPermute) {
  std::mt19937 rng(3);
  for (int64_t align : {1, 8}) {
    const int64_t tokens = 11, experts = 5, k = 2, hidden = 4;
    RouterResult routing = randomRouting(tokens, experts, k, rng);
    SortResult sorted = sortByExpert(routing.ids, experts, align);
    const int64_t rows = sorted.slots.dim(0);
    DTensor x = randomTensor({tokens, hidden}, rng);
    PermuteResult p = permute(x, sorted.slots, sorted.offsets, k,
                              &routing.weights);
    // Gradients on every row, padding included: those must be ignored.
    DTensor dRows = randomTensor({rows, hidden}, rng);
    DTensor dProbs = randomTensor({rows}, rng);
    PermuteGradResult g = permuteGrad(dRows, sorted.slots, sorted.offsets, k,
                                      tokens, &dProbs);
    EXPECT_NEAR(dot(p.rows, dRows), dot(x, g.gradTokens), 1e-12)
        << "align " << align;
    EXPECT_NEAR(dot(p.permutedProbs, dProbs),
                dot(routing.weights, g.gradProbs), 1e-12)
        << "align " << align;
  }
}

TEST(Reference, UnpermuteGradIsTheAdjointOfUnpermute) {
  std::mt19937 rng(4);
  for (int64_t align : {1, 4}) {
    const int64_t tokens = 9, experts = 6, k = 3, hidden = 5;
    RouterResult routing = randomRouting(tokens, experts, k, rng);
    SortResult sorted = sortByExpert(routing.ids, experts, align);
    const int64_t rows = sorted.slots.dim(0);
    DTensor r = randomTensor({rows, hidden}, rng);
    DTensor dOut = randomTensor({tokens, hidden}, rng);
    UnpermuteGradResult g = unpermuteGrad(dOut, sorted.slots, sorted.offsets,
                                          k, &routing.weights, &r);
    // unpermute is linear in the rows and in the weights separately.
    DTensor y = unpermute(r, sorted.slots, sorted.offsets, k, tokens,
                          &routing.weights);
    EXPECT_NEAR(dot(y, dOut), dot(r, g.gradRows), 1e-12) << "align " << align;
    DTensor dW = randomTensor({tokens, k}, rng);
    DTensor yW = unpermute(r, sorted.slots, sorted.offsets, k, tokens, &dW);
    EXPECT_NEAR(dot(yW, dOut), dot(dW, g.gradWeights), 1e-12)
        << "align " << align;
    // Padding rows get no gradient.
    for (int64_t i = 0; i < rows; ++i)
      if (sorted.slots.data[i] < 0)
        EXPECT_EQ(g.gradRows.at(i, 0), 0.0);
    // Without weights each row takes its token's gradient as it is.
    UnpermuteGradResult plain =
        unpermuteGrad(dOut, sorted.slots, sorted.offsets, k);
    EXPECT_TRUE(plain.gradWeights.data.empty());
    for (int64_t i = 0; i < rows; ++i)
      if (int32_t slot = sorted.slots.data[i]; slot >= 0)
        EXPECT_EQ(plain.gradRows.at(i, 1), dOut.at(slot / k, 1));
  }
}

TEST(Reference, BackwardRejectsBadArguments) {
  DTensor dOut({2, 1}), w({2, 1});
  ITensor slots({2}, {0, 1}), offsets({1}, {2});
  // weights without the forward rows
  EXPECT_THROW(unpermuteGrad(dOut, slots, offsets, 1, &w),
               std::invalid_argument);
  // a slot past the tokens
  EXPECT_THROW(unpermuteGrad(dOut, ITensor({2}, {0, 2}), offsets, 1),
               std::invalid_argument);
  // one slot per gradient row
  EXPECT_THROW(permuteGrad(DTensor({3, 1}), slots, offsets, 1, 2),
               std::invalid_argument);
}

//===----------------------------------------------------------------------===//
// Grouped matmul
//===----------------------------------------------------------------------===//

TEST(Reference, GroupedMatmulByHand) {
  // Two experts of one row each; a third row past the last offset.
  DTensor x({3, 2}, {1, 2, 3, 4, 5, 6});
  DTensor w({2, 2, 2}, {1, 0, 0, 1, 2, 0, 0, 2});
  ITensor offsets({2}, {1, 2});
  DTensor y = groupedMatmul(x, w, offsets);
  EXPECT_EQ(y.data, (std::vector<double>{1, 2, 6, 8, 0, 0}));
  DTensor bias({2, 2}, {0.5, 0.5, -1, -1});
  GroupedMatmulOptions options;
  options.bias = &bias;
  EXPECT_EQ(groupedMatmul(x, w, offsets, options).data,
            (std::vector<double>{1.5, 2.5, 5, 7, 0, 0}));
}

struct GroupedProblem {
  int64_t tokens = 11, experts = 5, k = 2, red = 7, cols = 6;
  RouterResult routing;
  SortResult sorted;
  DTensor x, w;
};

GroupedProblem makeProblem(std::mt19937 &rng, int64_t align) {
  GroupedProblem p;
  p.routing = randomRouting(p.tokens, p.experts, p.k, rng);
  p.sorted = sortByExpert(p.routing.ids, p.experts, align);
  p.x = randomTensor({p.tokens, p.red}, rng);
  p.w = randomTensor({p.experts, p.red, p.cols}, rng);
  return p;
}

TEST(Reference, GroupedMatmulFusedVariantsMatchTheUnfusedChain) {
  std::mt19937 rng(3);
  for (int64_t align : {1, 4}) {
    GroupedProblem p = makeProblem(rng, align);
    const ITensor &slots = p.sorted.slots, &offsets = p.sorted.offsets;
    DTensor rows = permute(p.x, slots, offsets, p.k).rows;
    DTensor plain = groupedMatmul(rows, p.w, offsets);

    // Gathered lhs == permute, then matmul.
    GroupedMatmulOptions gather;
    gather.gatherSlots = &slots;
    gather.k = p.k;
    EXPECT_LT(relativeError(groupedMatmul(p.x, p.w, offsets, gather), plain),
              1e-15);

    // Transposed weights.
    DTensor wt({p.experts, p.cols, p.red});
    for (int64_t e = 0; e < p.experts; ++e)
      for (int64_t a = 0; a < p.red; ++a)
        for (int64_t b = 0; b < p.cols; ++b)
          wt.at(e, b, a) = p.w.at(e, a, b);
    GroupedMatmulOptions transposed;
    transposed.transposeRhs = true;
    EXPECT_LT(relativeError(groupedMatmul(rows, wt, offsets, transposed),
                            plain),
              1e-15);

    // SwiGLU epilogue == swiglu of the output.
    GroupedMatmulOptions act;
    act.swiglu = true;
    EXPECT_LT(relativeError(groupedMatmul(rows, p.w, offsets, act),
                            swiglu(plain)),
              1e-15);

    // SwiGLU-gradient epilogue (row scaled) == swiglu_grad of the scaled
    // output, with the output as SwiGLU's output gradient.
    DTensor saved = randomTensor({rows.dim(0), 2 * p.cols}, rng, 2.0);
    PermuteResult probs = permute(p.x, slots, offsets, p.k, &p.routing.weights);
    GroupedMatmulOptions grad;
    grad.swigluGradInput = &saved;
    grad.rowScale = &probs.permutedProbs;
    DTensor scaledPlain = plain;
    for (int64_t i = 0; i < plain.dim(0); ++i)
      for (int64_t c = 0; c < p.cols; ++c)
        scaledPlain.at(i, c) *= probs.permutedProbs.data[i];
    EXPECT_LT(relativeError(groupedMatmul(rows, p.w, offsets, grad),
                            swigluGrad(saved, scaledPlain)),
              1e-14);

    // Scatter with weights == unpermute-combine of the output.
    GroupedMatmulOptions scatter;
    scatter.scatterSlots = &slots;
    scatter.scatterWeights = &p.routing.weights;
    scatter.k = p.k;
    scatter.numTokens = p.tokens;
    DTensor combined = unpermute(plain, slots, offsets, p.k, p.tokens,
                                 &p.routing.weights);
    EXPECT_LT(relativeError(groupedMatmul(rows, p.w, offsets, scatter),
                            combined),
              1e-14);

    // Row scale by the permuted probabilities, then an unweighted combine,
    // is the same combine.
    PermuteResult withProbs =
        permute(p.x, slots, offsets, p.k, &p.routing.weights);
    GroupedMatmulOptions scaled = scatter;
    scaled.scatterWeights = nullptr;
    scaled.rowScale = &withProbs.permutedProbs;
    EXPECT_LT(relativeError(groupedMatmul(rows, p.w, offsets, scaled),
                            combined),
              1e-14);
  }
}

TEST(Reference, GroupedMatmulLoRAEqualsMergedWeights) {
  std::mt19937 rng(4);
  GroupedProblem p = makeProblem(rng, 1);
  const int64_t rank = 3;
  DTensor a = randomTensor({p.experts * rank, p.red}, rng);
  DTensor b = randomTensor({p.cols, p.experts * rank}, rng);
  DTensor rows = permute(p.x, p.sorted.slots, p.sorted.offsets, p.k).rows;
  GroupedMatmulOptions lora;
  lora.loraA = &a;
  lora.loraB = &b;
  lora.loraScaling = 0.25;
  DTensor merged = p.w;
  for (int64_t e = 0; e < p.experts; ++e)
    for (int64_t kk = 0; kk < p.red; ++kk)
      for (int64_t n = 0; n < p.cols; ++n)
        for (int64_t r = 0; r < rank; ++r)
          merged.at(e, kk, n) +=
              0.25 * a.at(e * rank + r, kk) * b.at(n, e * rank + r);
  EXPECT_LT(relativeError(groupedMatmul(rows, p.w, p.sorted.offsets, lora),
                          groupedMatmul(rows, merged, p.sorted.offsets)),
            1e-14);
}

// The input gradient's transposed adapter: dy · (W_e + s·A_eᵀ·B_eᵀ)ᵀ.
TEST(Reference, GroupedMatmulTransposedLoRAIsTheInputGradient) {
  std::mt19937 rng(5);
  GroupedProblem p = makeProblem(rng, 1);
  const int64_t rank = 2, rows = p.tokens * p.k;
  DTensor a = randomTensor({p.experts * rank, p.red}, rng);
  DTensor b = randomTensor({p.cols, p.experts * rank}, rng);
  DTensor dy = randomTensor({rows, p.cols}, rng);
  DTensor merged = p.w;
  for (int64_t e = 0; e < p.experts; ++e)
    for (int64_t kk = 0; kk < p.red; ++kk)
      for (int64_t n = 0; n < p.cols; ++n)
        for (int64_t r = 0; r < rank; ++r)
          merged.at(e, kk, n) +=
              1.5 * a.at(e * rank + r, kk) * b.at(n, e * rank + r);
  GroupedMatmulOptions flipped;
  flipped.transposeRhs = true;
  DTensor expected = groupedMatmul(dy, merged, p.sorted.offsets, flipped);
  flipped.loraA = &a;
  flipped.loraB = &b;
  flipped.loraScaling = 1.5;
  flipped.transposeLora = true;
  EXPECT_LT(relativeError(groupedMatmul(dy, p.w, p.sorted.offsets, flipped),
                          expected),
            1e-14);
}

// lora_grad against central differences of <dy, grouped_matmul(...)> in
// every adapter element, with gathered rows and alignment padding (slot -1).
TEST(Reference, LoraGradMatchesFiniteDifferences) {
  std::mt19937 rng(6);
  GroupedProblem p = makeProblem(rng, 4);
  const int64_t rank = 3, rows = p.sorted.slots.dim(0);
  const double scaling = 0.75, h = 1e-4;
  DTensor a = randomTensor({p.experts * rank, p.red}, rng);
  DTensor b = randomTensor({p.cols, p.experts * rank}, rng);
  DTensor dy = randomTensor({rows, p.cols}, rng);
  GroupedMatmulOptions o;
  o.gatherSlots = &p.sorted.slots;
  o.k = p.k;
  o.loraA = &a;
  o.loraB = &b;
  o.loraScaling = scaling;
  auto loss = [&] { return dot(dy, groupedMatmul(p.x, p.w, p.sorted.offsets, o)); };
  LoraGradResult g = loraGrad(p.x, dy, p.sorted.offsets, a, b, scaling,
                              &p.sorted.slots, p.k);
  for (DTensor *adapter : {&a, &b}) {
    const DTensor &grad = adapter == &a ? g.gradA : g.gradB;
    ASSERT_EQ(grad.shape, adapter->shape);
    DTensor numeric(adapter->shape);
    for (size_t i = 0; i < adapter->data.size(); ++i) {
      double saved = adapter->data[i];
      adapter->data[i] = saved + h;
      double up = loss();
      adapter->data[i] = saved - h;
      double down = loss();
      adapter->data[i] = saved;
      numeric.data[i] = (up - down) / (2 * h);
    }
    EXPECT_LT(relativeError(grad, numeric), 1e-8);
  }
  // An expert without rows gets zeros.
  ITensor allToFirst({p.experts}, std::vector<int32_t>(p.experts, rows));
  LoraGradResult first =
      loraGrad(p.x, dy, allToFirst, a, b, scaling, &p.sorted.slots, p.k);
  for (int64_t r = rank; r < p.experts * rank; ++r)
    for (int64_t kk = 0; kk < p.red; ++kk)
      EXPECT_EQ(first.gradA.at(r, kk), 0.0);
  EXPECT_THROW(loraGrad(p.x, dy, p.sorted.offsets, b, a, scaling,
                        &p.sorted.slots, p.k),
               std::invalid_argument);
}

TEST(Reference, GroupedMatmulFP8BlockScales) {
  // FP8 codes times their block scales equal the dequantized product. K = 7
  // and N = 6 are not multiples of the block size 4.
  std::mt19937 rng(9);
  GroupedProblem p = makeProblem(rng, 1);
  const int64_t g = 4;
  QuantizeOptions rowwise;
  rowwise.groupSize = g;
  QuantizeResult qx = quantize(p.x, rowwise);
  DTensor sw = randomTensor({p.experts, 2, 2}, rng);
  for (double &v : sw.data)
    v = std::fabs(v) + 0.1;
  DTensor qw = p.w, dw = p.w;
  for (int64_t e = 0; e < p.experts; ++e)
    for (int64_t kk = 0; kk < p.red; ++kk)
      for (int64_t n = 0; n < p.cols; ++n) {
        double s = sw.at(e, kk / g, n / g);
        qw.at(e, kk, n) = roundToFP8(p.w.at(e, kk, n) / s, FP8Format::E4M3FN);
        dw.at(e, kk, n) = qw.at(e, kk, n) * s;
      }
  GroupedMatmulOptions gather;
  gather.gatherSlots = &p.sorted.slots;
  gather.k = p.k;
  DTensor expected = groupedMatmul(dequantizeFP8(qx.data, qx.scales, rowwise),
                                   dw, p.sorted.offsets, gather);
  GroupedMatmulOptions fp8 = gather;
  fp8.lhsScales = &qx.scales;
  fp8.rhsScales = &sw;
  fp8.scaleGroup = g;
  EXPECT_LT(relativeError(groupedMatmul(qx.data, qw, p.sorted.offsets, fp8),
                          expected),
            1e-14);
  // The transposed layout transposes the scale blocks with the weights.
  DTensor qwt({p.experts, p.cols, p.red}), swt({p.experts, 2, 2});
  for (int64_t e = 0; e < p.experts; ++e) {
    for (int64_t kk = 0; kk < p.red; ++kk)
      for (int64_t n = 0; n < p.cols; ++n)
        qwt.at(e, n, kk) = qw.at(e, kk, n);
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 2; ++b)
        swt.at(e, b, a) = sw.at(e, a, b);
  }
  fp8.transposeRhs = true;
  fp8.rhsScales = &swt;
  EXPECT_LT(relativeError(groupedMatmul(qx.data, qwt, p.sorted.offsets, fp8),
                          expected),
            1e-14);
}

TEST(Reference, WeightGradIsTheAdjointOfTheForward) {
  // <groupedMatmul(x, W), G> == <W, weightGrad(x, G)> for any W and G.
  std::mt19937 rng(5);
  for (int64_t align : {1, 4}) {
    GroupedProblem p = makeProblem(rng, align);
    const ITensor &slots = p.sorted.slots, &offsets = p.sorted.offsets;
    GroupedMatmulOptions gather;
    gather.gatherSlots = &slots;
    gather.k = p.k;
    DTensor y = groupedMatmul(p.x, p.w, offsets, gather);
    DTensor g = randomTensor(y.shape, rng);
    DTensor dw = groupedWeightGrad(p.x, g, offsets, &slots, p.k);
    EXPECT_NEAR(dot(y, g), dot(p.w, dw), 1e-10 * std::fabs(dot(y, g)));
  }
}

TEST(Reference, WeightGradOfAnEmptyExpertIsZero) {
  DTensor x({2, 1}, {1, 2});
  DTensor g({2, 1}, {3, 4});
  DTensor dw = groupedWeightGrad(x, g, ITensor({3}, {0, 2, 2}));
  EXPECT_EQ(dw.data, (std::vector<double>{0, 11, 0}));
}

//===----------------------------------------------------------------------===//
// Activation
//===----------------------------------------------------------------------===//

TEST(Reference, SwigluLayouts) {
  DTensor halves({1, 4}, {1.0, -2.0, 3.0, 4.0});
  DTensor interleaved({1, 4}, {1.0, 3.0, -2.0, 4.0});
  auto silu = [](double g) { return g / (1 + std::exp(-g)); };
  DTensor expected({1, 2}, {silu(1.0) * 3.0, silu(-2.0) * 4.0});
  EXPECT_LT(relativeError(swiglu(halves), expected), 1e-15);
  EXPECT_LT(relativeError(swiglu(interleaved, GateUpLayout::Interleaved),
                          expected),
            1e-15);
}

TEST(Reference, SwigluGradMatchesFiniteDifferences) {
  std::mt19937 rng(6);
  for (GateUpLayout layout : {GateUpLayout::Halves, GateUpLayout::Interleaved}) {
    DTensor h = randomTensor({3, 8}, rng, 2.0);
    DTensor dy = randomTensor({3, 4}, rng);
    DTensor grad = swigluGrad(h, dy, layout);
    const double eps = 1e-6;
    for (int64_t i = 0; i < h.numElements(); ++i) {
      DTensor plus = h, minus = h;
      plus.data[i] += eps;
      minus.data[i] -= eps;
      double numeric =
          (dot(swiglu(plus, layout), dy) - dot(swiglu(minus, layout), dy)) /
          (2 * eps);
      EXPECT_NEAR(grad.data[i], numeric, 1e-7) << "element " << i;
    }
  }
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

TEST(Reference, RoundToFP8) {
  EXPECT_EQ(roundToFP8(448.0, FP8Format::E4M3FN), 448.0);
  EXPECT_EQ(roundToFP8(1000.0, FP8Format::E4M3FN), 448.0); // saturates
  EXPECT_EQ(roundToFP8(-1e9, FP8Format::E5M2), -57344.0);
  EXPECT_EQ(roundToFP8(0.3, FP8Format::E4M3FN), 0.3125);
  EXPECT_EQ(roundToFP8(0.3, FP8Format::E5M2), 0.3125);
  EXPECT_EQ(roundToFP8(1.0625, FP8Format::E4M3FN), 1.0);  // tie to even
  EXPECT_EQ(roundToFP8(1.1875, FP8Format::E4M3FN), 1.25); // tie to even
  EXPECT_EQ(roundToFP8(0.001, FP8Format::E4M3FN), std::ldexp(1.0, -9));
  EXPECT_EQ(roundToFP8(std::ldexp(1.0, -11), FP8Format::E4M3FN), 0.0);
  EXPECT_EQ(roundToFP8(0.0, FP8Format::E5M2), 0.0);
}

TEST(Reference, QuantizeRowwiseRoundTrip) {
  std::mt19937 rng(7);
  DTensor x = randomTensor({5, 300}, rng, 3.0);
  for (FP8Format format : {FP8Format::E4M3FN, FP8Format::E5M2})
    for (bool pow2 : {false, true}) {
      QuantizeOptions options;
      options.format = format;
      options.groupSize = 128;
      options.pow2Scale = pow2;
      QuantizeResult q = quantize(x, options);
      ASSERT_EQ(q.scales.shape, (std::vector<int64_t>{5, 3}));
      for (double v : q.data.data) {
        EXPECT_LE(std::fabs(v), fp8Max(format));
        EXPECT_EQ(v, roundToFP8(v, format)); // on the FP8 grid
      }
      for (double s : q.scales.data) {
        if (pow2) {
          EXPECT_EQ(s, std::exp2(std::round(std::log2(s))));
        }
      }
      // e4m3 keeps 3 mantissa bits, e5m2 keeps 2: relative error per
      // element is at most 2^-4 resp. 2^-3 away from subnormals.
      double bound = format == FP8Format::E4M3FN ? 0.0625 : 0.125;
      EXPECT_LT(relativeError(dequantizeFP8(q.data, q.scales, options), x),
                bound / 2);
      // The largest element of a group maps to ±fmax; with power-of-two
      // scales, to within a factor two below it (rounding may land on fmax/2).
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t g = 0; g < 3; ++g) {
          double peak = 0;
          for (int64_t c = g * 128; c < std::min<int64_t>(300, (g + 1) * 128);
               ++c)
            peak = std::max(peak, std::fabs(q.data.at(i, c)));
          if (pow2) {
            EXPECT_LE(peak, fp8Max(format));
            EXPECT_GE(peak, fp8Max(format) / 2);
          } else {
            EXPECT_EQ(peak, fp8Max(format));
          }
        }
    }
}

TEST(Reference, QuantizeColwiseBlocksStayInsideExperts) {
  // Experts of 3, 0 and 5 rows in blocks of 2 rows: expert 0 has blocks
  // {0,1},{2}; expert 1 none; expert 2 has {3,4},{5,6},{7}. Row 8 is past the
  // last offset. Scale rows: (9 + 3*1) / 2 = 6, the last one unused.
  std::mt19937 rng(8);
  DTensor x = randomTensor({9, 4}, rng);
  ITensor offsets({3}, {3, 3, 8});
  QuantizeOptions options;
  options.axis = QuantAxis::Colwise;
  options.groupSize = 2;
  options.offsets = &offsets;
  QuantizeResult q = quantize(x, options);
  ASSERT_EQ(q.scales.shape, (std::vector<int64_t>{6, 4}));
  const std::vector<std::vector<int64_t>> blocks = {
      {0, 1}, {2}, {3, 4}, {5, 6}, {7}};
  for (int64_t c = 0; c < 4; ++c) {
    for (size_t b = 0; b < blocks.size(); ++b) {
      double amax = 0;
      for (int64_t row : blocks[b])
        amax = std::max(amax, std::fabs(x.at(row, c)));
      EXPECT_DOUBLE_EQ(q.scales.at(b, c), amax / 448.0);
    }
    EXPECT_EQ(q.scales.at(5, c), 1.0);
    EXPECT_EQ(q.data.at(8, c), 0.0);
  }
  DTensor back = dequantizeFP8(q.data, q.scales, options);
  for (int64_t i = 0; i < 8 * 4; ++i)
    EXPECT_NEAR(back.data[i], x.data[i], std::fabs(x.data[i]) * 0.0625 + 1e-12);
}

TEST(Reference, QuantizeBlocksOfExpertWeights) {
  // 2 experts of [5, 3] in blocks of 2: 3 x 2 blocks each, the last row and
  // column of blocks short. Transposed, the same values as [2, 3, 5] with
  // [2, 2, 3] scales.
  std::mt19937 rng(9);
  DTensor w = randomTensor({2, 5, 3}, rng);
  QuantizeOptions options;
  options.axis = QuantAxis::Blocks;
  options.groupSize = 2;
  QuantizeResult q = quantize(w, options);
  options.transpose = true;
  QuantizeResult t = quantize(w, options);
  ASSERT_EQ(q.scales.shape, (std::vector<int64_t>{2, 3, 2}));
  ASSERT_EQ(t.data.shape, (std::vector<int64_t>{2, 3, 5}));
  ASSERT_EQ(t.scales.shape, (std::vector<int64_t>{2, 2, 3}));
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t br = 0; br < 3; ++br)
      for (int64_t bc = 0; bc < 2; ++bc) {
        double amax = 0;
        for (int64_t r = 2 * br; r < std::min<int64_t>(2 * br + 2, 5); ++r)
          for (int64_t c = 2 * bc; c < std::min<int64_t>(2 * bc + 2, 3); ++c)
            amax = std::max(amax, std::fabs(w.at(e, r, c)));
        EXPECT_DOUBLE_EQ(q.scales.at(e, br, bc), amax / 448.0);
        EXPECT_EQ(t.scales.at(e, bc, br), q.scales.at(e, br, bc));
      }
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 3; ++c) {
        EXPECT_EQ(t.data.at(e, c, r), q.data.at(e, r, c));
        double back = q.data.at(e, r, c) * q.scales.at(e, r / 2, c / 2);
        EXPECT_NEAR(back, w.at(e, r, c), std::fabs(w.at(e, r, c)) * 0.0625);
      }
  options.transpose = false;
  DTensor flat({10, 3});
  EXPECT_THROW(quantize(flat, options), std::invalid_argument); // rank 3
  ITensor offsets({2}, {2, 5});
  options.offsets = &offsets;
  EXPECT_THROW(quantize(w, options), std::invalid_argument);
  options.offsets = nullptr;
  EXPECT_THROW(dequantizeFP8(q.data, q.scales, options),
               std::invalid_argument);
}

TEST(Reference, QuantizeRejectsOffsetsMisuse) {
  DTensor x({4, 4});
  ITensor offsets({2}, {2, 4});
  QuantizeOptions options;
  options.offsets = &offsets; // rowwise takes none
  EXPECT_THROW(quantize(x, options), std::invalid_argument);
  options.axis = QuantAxis::Colwise;
  options.offsets = nullptr; // colwise needs them
  EXPECT_THROW(quantize(x, options), std::invalid_argument);
}

TEST(Reference, DequantizeNF4) {
  // One expert, 1 x 4 values in blocks of 2: bytes 0x7F (codes 7, 15) and
  // 0x08 (codes 0, 8); absmax 2 then 0.5.
  Tensor<uint8_t> packed({1, 1, 2}, {0x7F, 0x08});
  DTensor absmax({1, 2}, {2.0, 0.5});
  const std::vector<double> &cb = nf4Codebook();
  DTensor w = dequantizeNF4(packed, absmax, cb, 2);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{1, 1, 4}));
  EXPECT_EQ(w.data, (std::vector<double>{0.0, 2.0, -0.5, 0.5 * cb[8]}));
}

TEST(Reference, DequantizeNF4ExpertSubset) {
  Tensor<uint8_t> packed({3, 1, 1}, {0xF0, 0x0F, 0xFF});
  DTensor absmax({3, 1}, {1.0, 2.0, 3.0});
  ITensor experts({2}, {2, 0});
  DTensor w = dequantizeNF4(packed, absmax, nf4Codebook(), 2, &experts);
  EXPECT_EQ(w.data, (std::vector<double>{3.0, 3.0, 1.0, -1.0}));
  ITensor bad({1}, {3});
  EXPECT_THROW(dequantizeNF4(packed, absmax, nf4Codebook(), 2, &bad),
               std::invalid_argument);
}

} // namespace
