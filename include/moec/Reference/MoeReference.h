//===- MoeReference.h - Float64 reference semantics of the moe ops -*- C++ -*-===//
//
// Part of moec. The oracle every kernel is checked against: a plain, loop-by-
// loop float64 implementation of each moe op, following the semantics written
// in MoeOps.td. Free of MLIR so that the runtime, the `moec run` CLI and the
// GPU machine (which has no MLIR) can all use it.
//
// Tensors are dense row-major arrays of double (float inputs) or int32 (ids,
// slots, offsets). Functions check their arguments and throw
// std::invalid_argument naming the argument at fault.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_REFERENCE_MOEREFERENCE_H
#define MOEC_REFERENCE_MOEREFERENCE_H

#include <cstdint>
#include <vector>

namespace moec::ref {

/// A dense row-major tensor.
template <typename T> struct Tensor {
  std::vector<int64_t> shape;
  std::vector<T> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape, T fill = T());
  Tensor(std::vector<int64_t> shape, std::vector<T> data);

  int64_t numElements() const;
  int64_t dim(unsigned i) const { return shape.at(i); }
  T &at(int64_t i, int64_t j) { return data[i * shape[1] + j]; }
  const T &at(int64_t i, int64_t j) const { return data[i * shape[1] + j]; }
  T &at(int64_t i, int64_t j, int64_t l) {
    return data[(i * shape[1] + j) * shape[2] + l];
  }
  const T &at(int64_t i, int64_t j, int64_t l) const {
    return data[(i * shape[1] + j) * shape[2] + l];
  }
};
using DTensor = Tensor<double>;
using ITensor = Tensor<int32_t>;

/// ‖out − ref‖₂ / ‖ref‖₂ (‖out‖₂ when ref is all zeros). Shapes must match.
double relativeError(const DTensor &out, const DTensor &ref);

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

enum class Scoring { Softmax, Sigmoid };
enum class TopKOrder { SoftmaxThenTopK, TopKThenSoftmax };

struct RouterOptions {
  int64_t k = 1;
  Scoring scoring = Scoring::Softmax;
  TopKOrder order = TopKOrder::SoftmaxThenTopK;
  bool renormalize = false;
  /// Per-expert selection bias [E]; empty for none.
  std::vector<double> selectionBias;
  /// Group-limited routing; 0 for none.
  int64_t numGroups = 0;
  int64_t topkGroups = 0;
  double scalingFactor = 1.0;
};

struct RouterResult {
  DTensor weights; ///< [T, k]
  ITensor ids;     ///< [T, k]
};

/// The softmax (over the row) or sigmoid scores of one row of E logits,
/// into `scores` (resized to E).
void rowScores(const double *row, int64_t experts, Scoring scoring,
               std::vector<double> &scores);

/// moe.router_topk on logits [T, E].
RouterResult routerTopK(const DTensor &logits, const RouterOptions &options);

/// moe.router_topk_grad: the gradient of the logits [T, E] given the
/// forward's logits, its selected `ids` [T, k] and the gradient of its
/// weights [T, k]. Uses options.scoring, order, renormalize and
/// scalingFactor (k comes from `ids`; selection options do not enter).
DTensor routerTopKGrad(const DTensor &logits, const ITensor &ids,
                       const DTensor &gradWeights,
                       const RouterOptions &options);

struct SortResult {
  ITensor sortedExpertIds; ///< [M]
  ITensor slots;           ///< [M]
  ITensor offsets;         ///< [E]
  ITensor positions;       ///< [T*k]: the row of each slot
};

/// moe.sort_by_expert on ids [T, k]; align 1 means no padding.
SortResult sortByExpert(const ITensor &ids, int64_t numExperts,
                        int64_t align = 1);

//===----------------------------------------------------------------------===//
// Permutation
//===----------------------------------------------------------------------===//

struct PermuteResult {
  DTensor rows;           ///< [M, H]
  DTensor permutedProbs;  ///< [M], when probs were given
  DTensor permutedScales; ///< [M, G], when scales were given
};

/// moe.permute. `probs` ([T, k]) and `scales` ([T, G]) may be null.
PermuteResult permute(const DTensor &tokens, const ITensor &slots,
                      const ITensor &offsets, int64_t k,
                      const DTensor *probs = nullptr,
                      const DTensor *scales = nullptr);

/// moe.permute_probs: scale * probs[slots[i]] for each row i ([M]); 0 for
/// padding rows and rows at or past offsets[E-1].
DTensor permuteProbs(const DTensor &probs, const ITensor &slots,
                     const ITensor &offsets, int64_t k, double scale);

/// moe.unpermute into [numTokens, H]. `weights` ([T, k]) may be null.
DTensor unpermute(const DTensor &rows, const ITensor &slots,
                  const ITensor &offsets, int64_t k, int64_t numTokens,
                  const DTensor *weights = nullptr);

struct PermuteGradResult {
  DTensor gradTokens; ///< [numTokens, H]
  DTensor gradProbs;  ///< [numTokens, k], when gradPermutedProbs was given
};

/// moe.permute_grad: grad_rows [M, H] back to [numTokens, H], summing each
/// token's k rows; `gradPermutedProbs` ([M]) may be null.
PermuteGradResult permuteGrad(const DTensor &gradRows, const ITensor &slots,
                              const ITensor &offsets, int64_t k,
                              int64_t numTokens,
                              const DTensor *gradPermutedProbs = nullptr);

struct UnpermuteGradResult {
  DTensor gradRows;    ///< [M, H], M the length of slots
  DTensor gradWeights; ///< [T, k], when weights were given
};

/// moe.unpermute_grad of grad_out [T, H]. `weights` ([T, k]) and `rows`
/// ([M, H], the forward's input rows) are both given or both null.
UnpermuteGradResult unpermuteGrad(const DTensor &gradOut, const ITensor &slots,
                                  const ITensor &offsets, int64_t k,
                                  const DTensor *weights = nullptr,
                                  const DTensor *rows = nullptr);

//===----------------------------------------------------------------------===//
// Grouped matmul
//===----------------------------------------------------------------------===//

struct GroupedMatmulOptions {
  bool transposeRhs = false;
  /// Tokens per slot (slot / k is the token); needed with gather or scatter.
  int64_t k = 0;
  const ITensor *gatherSlots = nullptr;    ///< [M]
  const DTensor *bias = nullptr;           ///< [E, N]
  const DTensor *loraA = nullptr;          ///< [E*r, K]
  const DTensor *loraB = nullptr;          ///< [N, E*r]
  double loraScaling = 1.0;
  /// The adapter applied transposed (an input gradient):
  /// s * (x · B_e) · A_e with A [E*r, N] and B [K, E*r].
  bool transposeLora = false;
  bool swiglu = false;                     ///< halves-layout SwiGLU epilogue
  /// [M, 2N]: the epilogue is swiglu_grad(input, y) (halves layout), the
  /// output [M, 2N]; no scatter.
  const DTensor *swigluGradInput = nullptr;
  const DTensor *rowScale = nullptr;       ///< [M]
  const ITensor *scatterSlots = nullptr;   ///< [M]
  const DTensor *scatterWeights = nullptr; ///< [T, k]
  int64_t numTokens = 0;                   ///< T, the rows of a scattered output
  /// FP8 block scales: lhs [L, ceil(K/g)] for the rows of lhs as given; rhs
  /// [E, ceil(K/g), ceil(N/g)] ([E, ceil(N/g), ceil(K/g)] when transposed).
  const DTensor *lhsScales = nullptr;
  const DTensor *rhsScales = nullptr;
  int64_t scaleGroup = 128;
};

/// moe.grouped_matmul.
DTensor groupedMatmul(const DTensor &lhs, const DTensor &rhs,
                      const ITensor &offsets,
                      const GroupedMatmulOptions &options = {});

/// moe.grouped_weight_grad: per group lhsᵀ · grad -> [E, K, N].
/// `gatherSlots` (with k) gathers the lhs rows as moe.grouped_matmul does.
DTensor groupedWeightGrad(const DTensor &lhs, const DTensor &grad,
                          const ITensor &offsets,
                          const ITensor *gatherSlots = nullptr, int64_t k = 0);

/// moe.grouped_weight_grad with FP8 scales: lhs [K, P] and grad [N, P] in
/// moe.quantize {transpose}'s layout (expert e's row j at column
/// 128 * b_e + j, b_e the 128-row blocks of the experts before it), scales
/// [B, K] and [B, N] per 128-row block -> [E, K, N], each block's products
/// summed, then multiplied by its two scales.
DTensor groupedWeightGradFP8(const DTensor &lhs, const DTensor &grad,
                             const DTensor &lhsScales,
                             const DTensor &gradScales,
                             const ITensor &offsets);

struct LoraGradResult {
  DTensor gradA; ///< [E*r, K], like lora_a
  DTensor gradB; ///< [N, E*r], like lora_b
};

/// moe.lora_grad: the gradients of the adapters A [E*r, K] and B [N, E*r] of
/// a grouped matmul's term s · (x · A_eᵀ) · B_eᵀ, from its lhs (gathered by
/// `gatherSlots` with k as in the forward) and the output gradient `grad`
/// [M, N] in grouped row order.
LoraGradResult loraGrad(const DTensor &lhs, const DTensor &grad,
                        const ITensor &offsets, const DTensor &loraA,
                        const DTensor &loraB, double scaling = 1.0,
                        const ITensor *gatherSlots = nullptr, int64_t k = 0);

//===----------------------------------------------------------------------===//
// Activation
//===----------------------------------------------------------------------===//

enum class GateUpLayout { Halves, Interleaved };

/// moe.swiglu: [M, 2I] -> [M, I].
DTensor swiglu(const DTensor &input, GateUpLayout layout = GateUpLayout::Halves);

/// moe.swiglu_grad: input [M, 2I], grad of output [M, I] -> grad of input.
DTensor swigluGrad(const DTensor &input, const DTensor &gradOutput,
                   GateUpLayout layout = GateUpLayout::Halves);

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

enum class FP8Format { E4M3FN, E5M2 };
/// Rowwise and Colwise: [M, K] in groups along a row or (per expert
/// group) a column. Blocks: [E, N, K] expert weights in groupSize x
/// groupSize blocks of each expert's matrix.
enum class QuantAxis { Rowwise, Colwise, Blocks };

/// Largest finite value: 448 (e4m3fn), 57344 (e5m2).
double fp8Max(FP8Format format);

/// Rounds to the nearest value of the format (ties to even), saturating to
/// ±fp8Max. NaN stays NaN.
double roundToFP8(double value, FP8Format format);

struct QuantizeOptions {
  FP8Format format = FP8Format::E4M3FN;
  QuantAxis axis = QuantAxis::Rowwise;
  int64_t groupSize = 128;
  bool pow2Scale = false;
  const ITensor *offsets = nullptr; ///< required for colwise
  /// colwise: data written transposed, [K, groupSize * blocks], each
  /// expert's rows as columns from its first block's (moe.quantize
  /// {transpose}). blocks: each expert's matrix transposed, data [E, K, N]
  /// and scales [E, ceil(K/g), ceil(N/g)].
  bool transpose = false;
};

struct QuantizeResult {
  DTensor data;   ///< [M, K] ([K, g * blocks] transposed), each value
                  ///< exactly representable in the format
  DTensor scales; ///< rowwise [M, ceil(K/g)]; colwise [blocks bound, K];
                  ///< blocks [E, ceil(N/g), ceil(K/g)]
};

/// moe.quantize.
QuantizeResult quantize(const DTensor &input, const QuantizeOptions &options);

/// moe.dequantize of FP8 data (values already on the FP8 grid).
DTensor dequantizeFP8(const DTensor &data, const DTensor &scales,
                      const QuantizeOptions &options);

/// The 16 NF4 code values (QLoRA's normal-float table).
const std::vector<double> &nf4Codebook();

/// moe.dequantize of packed NF4: packed [E, K, N/2] bytes, absmax
/// [E, K*N/groupSize], codebook [16]; `experts` selects a subset (may be null).
DTensor dequantizeNF4(const Tensor<uint8_t> &packed, const DTensor &absmax,
                      const std::vector<double> &codebook, int64_t groupSize,
                      const ITensor *experts = nullptr);

} // namespace moec::ref

#endif // MOEC_REFERENCE_MOEREFERENCE_H
