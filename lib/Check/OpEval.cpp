//===- OpEval.cpp - Evaluate one RefOp with the float64 reference ---------===//
//
// Part of moec. Maps each op of Entry::refOps onto lib/Reference: one
// evaluator per op name (kEvaluators, at the end), reading operands and
// attributes by their ODS names (the record carries them; an absent optional
// operand is -1) and naming its results. Nothing of ODS is restated: a
// missing operand or attribute is an error naming it. Every value is a
// tensor of double; integer operands (ids, slots, offsets, packed NF4 bytes)
// are converted back, checking that they are integers in range.
//
//===----------------------------------------------------------------------===//

#include "CheckInternal.h"
#include "moec/Check/Check.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace moec::check::detail {

using ref::DTensor;
using ref::ITensor;

namespace {

template <typename T>
ref::Tensor<T> toIntegers(const DTensor &t, const std::string &name) {
  ref::Tensor<T> out;
  out.shape = t.shape;
  out.data.resize(t.data.size());
  for (size_t i = 0; i < t.data.size(); ++i) {
    double v = t.data[i];
    if (!(v >= std::numeric_limits<T>::min() &&
          v <= std::numeric_limits<T>::max()) ||
        v != std::floor(v))
      throw std::invalid_argument("'" + name + "' holds " +
                                  std::to_string(v) + " at element " +
                                  std::to_string(i) +
                                  ", not an integer of its type");
    out.data[i] = static_cast<T>(v);
  }
  return out;
}

DTensor toDoubles(const ITensor &t) {
  DTensor out;
  out.shape = t.shape;
  out.data.assign(t.data.begin(), t.data.end());
  return out;
}

/// Reads an op's operands by ODS name.
class Operands {
public:
  explicit Operands(const OpInputs &in) : in_(in) {}

  /// nullptr when the optional operand is absent; an error when the record
  /// has no operand group of that name.
  const DTensor *optional(const char *name) const {
    size_t i = slot(name);
    return i < in_.operands.size() ? in_.operands[i] : nullptr;
  }
  const DTensor &required(const char *name) const {
    if (const DTensor *t = optional(name))
      return *t;
    throw std::invalid_argument(in_.op->name + " lacks its operand '" + name +
                                "'");
  }
  ITensor ints(const char *name) const {
    return toIntegers<int32_t>(required(name), name);
  }
  std::optional<ITensor> optionalInts(const char *name) const {
    if (!optional(name))
      return std::nullopt;
    return toIntegers<int32_t>(*optional(name), name);
  }
  rt::ElemType operandElem(const char *name) const {
    return in_.entry->buffers[in_.op->operands[slot(name)]].elem;
  }
  /// Whether the op has result `name` (an optional one may be absent).
  bool hasResult(const char *name) const {
    return resultNamed(*in_.op, name) >= 0;
  }
  /// Type of result `name`; f32 when the result is absent.
  rt::ElemType resultElem(const char *name) const {
    int32_t b = resultNamed(*in_.op, name);
    return b >= 0 ? in_.entry->buffers[b].elem : rt::ElemType::F32;
  }
  /// Dimension `d` of result `name`'s buffer.
  int64_t resultDim(const char *name, size_t d) const {
    int32_t b = resultNamed(*in_.op, name);
    if (b < 0 || (*in_.shapes)[b].size() <= d)
      throw std::invalid_argument(in_.op->name + ": result '" + name +
                                  "' has no dimension " + std::to_string(d));
    return (*in_.shapes)[b][d];
  }

  /// The shape of result `name`'s buffer.
  std::vector<int64_t> resultShape(const char *name) const {
    int32_t b = resultNamed(*in_.op, name);
    if (b < 0)
      throw std::invalid_argument(in_.op->name + ": result '" + name +
                                  "' is absent");
    return (*in_.shapes)[b];
  }

private:
  size_t slot(const char *name) const {
    if (std::optional<size_t> i = operandSlot(*in_.op, name))
      return *i;
    throw std::invalid_argument(in_.op->name + " has no operand named '" +
                                name + "' in its record");
  }

  const OpInputs &in_;
};

/// What an evaluator produces: each result by its ODS name (nullopt where
/// the op produces none).
using NamedResults =
    std::vector<std::pair<const char *, std::optional<DTensor>>>;

[[noreturn]] void unsupported(const rt::RefOp &op, const std::string &what) {
  throw UnsupportedError(op.name + ": " + what + " is not supported by the "
                                                 "checker");
}

[[noreturn]] void badEnum(const rt::RefOp &op, const char *attr,
                          const std::string &value) {
  throw std::invalid_argument("attribute '" + std::string(attr) + "' of " +
                              op.name + " has unknown value '" + value + "'");
}

ref::GateUpLayout layoutAttr(const rt::RefOp &op) {
  const std::string &layout = enumAttr(op, "layout");
  if (layout == "halves")
    return ref::GateUpLayout::Halves;
  if (layout == "interleaved")
    return ref::GateUpLayout::Interleaved;
  badEnum(op, "layout", layout);
}

ref::QuantAxis axisAttr(const rt::RefOp &op) {
  const std::string &axis = enumAttr(op, "axis");
  if (axis == "rowwise")
    return ref::QuantAxis::Rowwise;
  if (axis == "colwise")
    return ref::QuantAxis::Colwise;
  if (axis == "blocks")
    return ref::QuantAxis::Blocks;
  badEnum(op, "axis", axis);
}

ref::FP8Format fp8Format(rt::ElemType elem) {
  return elem == rt::ElemType::F8E4M3FN ? ref::FP8Format::E4M3FN
                                        : ref::FP8Format::E5M2;
}

//===----------------------------------------------------------------------===//
// One function per op
//===----------------------------------------------------------------------===//

NamedResults evalRouterTopK(const rt::RefOp &op, const Operands &x) {
  ref::RouterResult r = ref::routerTopK(
      x.required("logits"), routerOptions(op, x.optional("selection_bias")));
  return {{"weights", std::move(r.weights)}, {"ids", toDoubles(r.ids)}};
}

NamedResults evalRouterTopKGrad(const rt::RefOp &op, const Operands &x) {
  return {{"grad_logits",
           ref::routerTopKGrad(x.required("logits"), x.ints("ids"),
                               x.required("grad_weights"),
                               routerScoreOptions(op))}};
}

NamedResults evalSortByExpert(const rt::RefOp &op, const Operands &x) {
  ref::SortResult r =
      ref::sortByExpert(x.ints("ids"), intAttr(op, "num_experts"),
                        optionalIntAttr(op, "align").value_or(1));
  return {{"sorted_expert_ids", toDoubles(r.sortedExpertIds)},
          {"slots", toDoubles(r.slots)},
          {"offsets", toDoubles(r.offsets)},
          {"positions", toDoubles(r.positions)}};
}

NamedResults evalPermute(const rt::RefOp &op, const Operands &x) {
  const DTensor *probs = x.optional("probs"), *scales = x.optional("scales");
  ref::PermuteResult r =
      ref::permute(x.required("tokens"), x.ints("slots"), x.ints("offsets"),
                   intAttr(op, "k"), probs, scales);
  NamedResults results{{"rows", std::move(r.rows)}};
  if (probs)
    results.push_back({"permuted_probs", std::move(r.permutedProbs)});
  if (scales)
    results.push_back({"permuted_scales", std::move(r.permutedScales)});
  return results;
}

NamedResults evalPermuteProbs(const rt::RefOp &op, const Operands &x) {
  return {{"out", ref::permuteProbs(x.required("probs"), x.ints("slots"),
                                    x.ints("offsets"), intAttr(op, "k"),
                                    floatAttr(op, "scale"))}};
}

NamedResults evalUnpermute(const rt::RefOp &op, const Operands &x) {
  return {{"out", ref::unpermute(x.required("rows"), x.ints("slots"),
                                 x.ints("offsets"), intAttr(op, "k"),
                                 x.resultDim("out", 0),
                                 x.optional("weights"))}};
}

NamedResults evalPermuteGrad(const rt::RefOp &op, const Operands &x) {
  const DTensor *gradPermutedProbs = x.optional("grad_permuted_probs");
  ref::PermuteGradResult r = ref::permuteGrad(
      x.required("grad_rows"), x.ints("slots"), x.ints("offsets"),
      intAttr(op, "k"), x.resultDim("grad_tokens", 0), gradPermutedProbs);
  NamedResults results{{"grad_tokens", std::move(r.gradTokens)}};
  if (gradPermutedProbs)
    results.push_back({"grad_probs", std::move(r.gradProbs)});
  return results;
}

NamedResults evalUnpermuteGrad(const rt::RefOp &op, const Operands &x) {
  const DTensor *weights = x.optional("weights"), *rows = x.optional("rows");
  ref::UnpermuteGradResult r = ref::unpermuteGrad(
      x.required("grad_out"), x.ints("slots"), x.ints("offsets"),
      intAttr(op, "k"), weights, rows);
  NamedResults results{{"grad_rows", std::move(r.gradRows)}};
  if (weights)
    results.push_back({"grad_weights", std::move(r.gradWeights)});
  return results;
}

/// A rank-3 tensor with dimensions `d0` and `d1` swapped: [A, B, C] ->
/// [B, A, C] is the [K, E, N] of `experts_in_columns` to the reference's
/// [E, K, N] and back; [A, C, B] the weight gradient's [E, K, N] to the
/// [E, N, K] of `transpose_rhs`.
DTensor swapDims(const DTensor &a, int d0, int d1, const char *attr) {
  if (a.shape.size() != 3)
    throw std::invalid_argument(std::string(attr) +
                                ": expected a rank-3 tensor, got shape " +
                                shapeString(a.shape));
  std::vector<int64_t> shape = a.shape;
  std::swap(shape[d0], shape[d1]);
  DTensor b(shape);
  for (int64_t i = 0; i < a.dim(0); ++i)
    for (int64_t j = 0; j < a.dim(1); ++j)
      for (int64_t l = 0; l < a.dim(2); ++l) {
        int64_t at[3] = {i, j, l};
        std::swap(at[d0], at[d1]);
        b.at(at[0], at[1], at[2]) = a.at(i, j, l);
      }
  return b;
}

NamedResults evalGroupedWeightGrad(const rt::RefOp &op, const Operands &x) {
  const std::optional<ITensor> gather = x.optionalInts("gather_slots");
  const DTensor *lhsScales = x.optional("lhs_scales");
  DTensor grad =
      lhsScales
          ? ref::groupedWeightGradFP8(x.required("lhs"), x.required("grad_out"),
                                      *lhsScales, x.required("grad_scales"),
                                      x.ints("offsets"))
          : ref::groupedWeightGrad(x.required("lhs"), x.required("grad_out"),
                                   x.ints("offsets"),
                                   gather ? &*gather : nullptr,
                                   optionalIntAttr(op, "k").value_or(0));
  if (boolAttr(op, "experts_in_columns"))
    grad = swapDims(grad, 0, 1, "experts_in_columns");
  else if (boolAttr(op, "transpose_rhs"))
    grad = swapDims(grad, 1, 2, "transpose_rhs");
  // accumulate: the gradient added to the given one (same layout).
  if (const DTensor *into = x.optional("accumulate")) {
    if (into->shape != grad.shape)
      throw std::invalid_argument(
          "operand 'accumulate': shape " + shapeString(into->shape) +
          " is not the result's " + shapeString(grad.shape));
    for (size_t i = 0; i < grad.data.size(); ++i)
      grad.data[i] += into->data[i];
  }
  return {{"out", std::move(grad)}};
}

NamedResults evalGroupedMatmul(const rt::RefOp &op, const Operands &x) {
  const DTensor &lhs = x.required("lhs");
  // Weights [K, E, N] instead of [E, K, N].
  DTensor swappedRhs;
  if (boolAttr(op, "experts_in_columns"))
    swappedRhs = swapDims(x.required("rhs"), 0, 1, "experts_in_columns");
  const DTensor &rhs =
      swappedRhs.shape.empty() ? x.required("rhs") : swappedRhs;
  const ITensor offsets = x.ints("offsets");
  const std::optional<ITensor> gather = x.optionalInts("gather_slots");
  const std::optional<ITensor> scatter = x.optionalInts("scatter_slots");
  const int64_t k = optionalIntAttr(op, "k").value_or(0);
  const std::string &activation = enumAttr(op, "activation");
  if (activation != "none" && activation != "swiglu" &&
      activation != "swiglu_grad")
    badEnum(op, "activation", activation);

  ref::GroupedMatmulOptions o;
  o.transposeRhs = boolAttr(op, "transpose_rhs");
  o.k = k;
  o.gatherSlots = gather ? &*gather : nullptr;
  o.bias = x.optional("bias");
  o.loraA = x.optional("lora_a");
  o.loraB = x.optional("lora_b");
  o.loraScaling = floatAttr(op, "lora_scaling");
  o.transposeLora = boolAttr(op, "transpose_lora");
  o.swiglu = activation == "swiglu";
  o.rowScale = x.optional("row_scale");
  o.scatterSlots = scatter ? &*scatter : nullptr;
  o.scatterWeights = x.optional("scatter_weights");
  // scatter_positions only spares the kernels the inverse map.
  if (scatter)
    o.numTokens = x.resultDim("out", 0); // the result is [T, N']
  o.lhsScales = x.optional("lhs_scales");
  o.rhsScales = x.optional("rhs_scales");
  o.scaleGroup = intAttr(op, "scale_group");
  o.swigluGradInput = x.optional("activation_input");
  if (bool(o.swigluGradInput) != (activation == "swiglu_grad"))
    unsupported(op, "operand 'activation_input' without activation = "
                    "swiglu_grad, or the activation without it");
  return {{"out", ref::groupedMatmul(lhs, rhs, offsets, o)}};
}

NamedResults evalLoraGrad(const rt::RefOp &op, const Operands &x) {
  const std::optional<ITensor> gather = x.optionalInts("gather_slots");
  ref::LoraGradResult r = ref::loraGrad(
      x.required("lhs"), x.required("grad_out"), x.ints("offsets"),
      x.required("lora_a"), x.required("lora_b"),
      floatAttr(op, "lora_scaling"), gather ? &*gather : nullptr,
      optionalIntAttr(op, "k").value_or(0));
  return {{"grad_a", std::move(r.gradA)}, {"grad_b", std::move(r.gradB)}};
}

NamedResults evalSwiglu(const rt::RefOp &op, const Operands &x) {
  return {{"output", ref::swiglu(x.required("input"), layoutAttr(op))}};
}

NamedResults evalSwigluGrad(const rt::RefOp &op, const Operands &x) {
  return {{"grad_input",
           ref::swigluGrad(x.required("input"), x.required("grad_output"),
                           layoutAttr(op))}};
}

NamedResults evalQuantize(const rt::RefOp &op, const Operands &x) {
  const rt::ElemType dataElem = x.resultElem("data");
  if (!isFP8Type(dataElem))
    unsupported(op, std::string("a ") + rt::elemTypeName(dataElem) +
                        " data result (not FP8)");
  const std::optional<ITensor> offsets = x.optionalInts("offsets");
  ref::QuantizeOptions o;
  o.format = fp8Format(dataElem);
  o.axis = axisAttr(op);
  o.groupSize = intAttr(op, "group_size");
  o.pow2Scale = boolAttr(op, "pow2_scale");
  o.offsets = offsets ? &*offsets : nullptr;
  o.transpose = boolAttr(op, "transpose");
  ref::QuantizeResult r = ref::quantize(x.required("input"), o);
  NamedResults out{{"data", std::move(r.data)},
                   {"scales", std::move(r.scales)}};
  if (x.hasResult("transposed_data")) {
    // Both weight layouts: the second is the transpose form's.
    o.transpose = true;
    ref::QuantizeResult t = ref::quantize(x.required("input"), o);
    out.push_back({"transposed_data", std::move(t.data)});
    out.push_back({"transposed_scales", std::move(t.scales)});
  }
  return out;
}

NamedResults evalDequantize(const rt::RefOp &op, const Operands &x) {
  const DTensor &data = x.required("data");
  const DTensor &scales = x.required("scales");
  const rt::ElemType dataElem = x.operandElem("data");
  const int64_t groupSize = intAttr(op, "group_size");
  if (isFP8Type(dataElem)) {
    if (x.optional("codebook") || x.optional("experts"))
      unsupported(op, "'codebook' or 'experts' with FP8 data");
    const std::optional<ITensor> offsets = x.optionalInts("offsets");
    ref::QuantizeOptions o;
    o.format = fp8Format(dataElem);
    o.axis = axisAttr(op);
    o.groupSize = groupSize;
    o.offsets = offsets ? &*offsets : nullptr;
    return {{"output", ref::dequantizeFP8(data, scales, o)}};
  }
  if (dataElem == rt::ElemType::U8) {
    if (x.optional("offsets"))
      unsupported(op, "'offsets' with NF4 data");
    // Without a codebook operand, the standard NF4 table.
    std::vector<double> codebook = ref::nf4Codebook();
    if (const DTensor *cb = x.optional("codebook"))
      codebook = cb->data;
    const std::optional<ITensor> experts = x.optionalInts("experts");
    return {{"output", ref::dequantizeNF4(toIntegers<uint8_t>(data, "data"),
                                          scales, codebook, groupSize,
                                          experts ? &*experts : nullptr)}};
  }
  unsupported(op, std::string(rt::elemTypeName(dataElem)) + " data");
}

/// linalg.matmul [A, B] -> [C]: C = A·B, with Aᵀ for transpose_a and Bᵀ
/// for transpose_b.
NamedResults evalMatmul(const rt::RefOp &op, const Operands &x) {
  const DTensor &a = x.required("A"), &b = x.required("B");
  const bool transA = boolAttr(op, "transpose_a");
  const bool transB = boolAttr(op, "transpose_b");
  if (a.shape.size() != 2 || b.shape.size() != 2)
    unsupported(op, "an operand of rank other than 2");
  const int64_t m = a.dim(transA ? 1 : 0), red = a.dim(transA ? 0 : 1);
  const int64_t n = transB ? b.dim(0) : b.dim(1);
  if ((transB ? b.dim(1) : b.dim(0)) != red)
    throw std::invalid_argument(
        "linalg.matmul: shapes " + shapeString(a.shape) + " and " +
        shapeString(b.shape) + " do not multiply" +
        (transA ? " (transpose_a)" : "") + (transB ? " (transpose_b)" : ""));
  DTensor c({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < red; ++l)
        acc += (transA ? a.at(l, i) : a.at(i, l)) *
               (transB ? b.at(j, l) : b.at(l, j));
      c.at(i, j) = acc;
    }
  return {{"result", std::move(c)}};
}

/// linalg.add [A, B] -> [C]: element-wise sum of equal shapes.
NamedResults evalAdd(const rt::RefOp &op, const Operands &x) {
  const DTensor &a = x.required("lhs"), &b = x.required("rhs");
  if (a.shape != b.shape)
    throw std::invalid_argument("linalg.add: shapes " + shapeString(a.shape) +
                                " and " + shapeString(b.shape) + " differ");
  DTensor c = a;
  for (size_t i = 0; i < c.data.size(); ++i)
    c.data[i] += b.data[i];
  return {{"result", std::move(c)}};
}

/// The number an op's "value" attribute holds (a fill's, a pad's).
double valueAttr(const rt::RefOp &op) {
  const std::string *text = findAttr(op, "value");
  if (!text)
    throw std::invalid_argument(op.name + " lacks its attribute 'value'");
  char *end = nullptr;
  const double value = std::strtod(text->c_str(), &end);
  if (text->empty() || *end != '\0')
    throw std::invalid_argument("attribute 'value' of " + op.name + " is '" +
                                *text + "', expected a number");
  return value;
}

/// linalg.fill [] -> [B]: every element of B is the "value" attribute.
NamedResults evalFill(const rt::RefOp &op, const Operands &x) {
  const double value = valueAttr(op);
  DTensor b(x.resultShape("result"));
  std::fill(b.data.begin(), b.data.end(), value);
  return {{"result", std::move(b)}};
}

/// tensor.expand_shape / tensor.collapse_shape [A] -> [B]: the same
/// elements in row-major order, in the result buffer's shape.
NamedResults evalReshape(const rt::RefOp &op, const Operands &x) {
  const DTensor &a = x.required("src");
  DTensor b(x.resultShape("result"));
  if (b.data.size() != a.data.size())
    throw std::invalid_argument(op.name + ": " + shapeString(a.shape) +
                                " has another element count than " +
                                shapeString(b.shape));
  b.data = a.data;
  return {{"result", std::move(b)}};
}

/// An attribute of comma-separated integers (a transpose's permutation, a
/// pad's low padding, a slice's offsets and strides).
std::vector<int64_t> integerListAttr(const rt::RefOp &op,
                                     const std::string &name) {
  const std::string *text = findAttr(op, name);
  if (!text)
    throw std::invalid_argument(op.name + " lacks its attribute '" + name +
                                "'");
  std::vector<int64_t> values;
  for (size_t start = 0; start <= text->size();) {
    size_t comma = std::min(text->find(',', start), text->size());
    const std::string item = text->substr(start, comma - start);
    char *end = nullptr;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0')
      throw std::invalid_argument("attribute '" + name + "' of " + op.name +
                                  " is '" + *text + "', expected integers");
    values.push_back(value);
    start = comma + 1;
  }
  return values;
}

/// Calls `visit(index, flat)` for every index of `shape` in row-major order.
template <typename Visit>
void forEachIndex(const std::vector<int64_t> &shape, Visit visit) {
  size_t count = 1;
  for (int64_t size : shape)
    count *= static_cast<size_t>(size);
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t flat = 0; flat < count; ++flat) {
    visit(index, flat);
    for (size_t d = shape.size(); d-- > 0;) // last dimension fastest
      if (++index[d] < shape[d])
        break;
      else
        index[d] = 0;
  }
}

/// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> stride(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    stride[d - 1] = stride[d] * shape[d];
  return stride;
}

/// tensor.pad [A] -> [B]: B[i] = A[i - low] where that is inside A, else the
/// "value" attribute ("low": comma-separated; B's shape gives the high
/// padding).
NamedResults evalPad(const rt::RefOp &op, const Operands &x) {
  const DTensor &a = x.required("source");
  const std::vector<int64_t> low = integerListAttr(op, "low");
  const double value = valueAttr(op);
  DTensor b(x.resultShape("result"));
  if (low.size() != a.shape.size() || b.shape.size() != a.shape.size())
    throw std::invalid_argument("tensor.pad: 'low' and the result need " +
                                std::to_string(a.shape.size()) +
                                " dimensions like " + shapeString(a.shape));
  const std::vector<int64_t> stride = stridesOf(a.shape);
  forEachIndex(b.shape, [&](const std::vector<int64_t> &index, size_t flat) {
    int64_t source = 0;
    bool inside = true;
    for (size_t d = 0; d < index.size(); ++d) {
      const int64_t i = index[d] - low[d];
      inside = inside && i >= 0 && i < a.shape[d];
      source += i * stride[d];
    }
    b.data[flat] = inside ? a.data[source] : value;
  });
  return {{"result", std::move(b)}};
}

/// tensor.extract_slice [A] -> [B]: B[i] = A[offsets + i * strides] (both
/// comma-separated; B's shape gives the sizes).
NamedResults evalExtractSlice(const rt::RefOp &op, const Operands &x) {
  const DTensor &a = x.required("source");
  const std::vector<int64_t> offsets = integerListAttr(op, "offsets");
  const std::vector<int64_t> strides = integerListAttr(op, "strides");
  DTensor b(x.resultShape("result"));
  const size_t rank = a.shape.size();
  if (offsets.size() != rank || strides.size() != rank ||
      b.shape.size() != rank)
    throw std::invalid_argument("tensor.extract_slice: offsets, strides and "
                                "the result need " + std::to_string(rank) +
                                " dimensions like " + shapeString(a.shape));
  for (size_t d = 0; d < rank; ++d)
    if (offsets[d] < 0 || strides[d] < 1 ||
        (b.shape[d] > 0 &&
         offsets[d] + (b.shape[d] - 1) * strides[d] >= a.shape[d]))
      throw std::invalid_argument("tensor.extract_slice: the slice leaves " +
                                  shapeString(a.shape) + " in dimension " +
                                  std::to_string(d));
  const std::vector<int64_t> stride = stridesOf(a.shape);
  forEachIndex(b.shape, [&](const std::vector<int64_t> &index, size_t flat) {
    int64_t source = 0;
    for (size_t d = 0; d < rank; ++d)
      source += (offsets[d] + index[d] * strides[d]) * stride[d];
    b.data[flat] = a.data[source];
  });
  return {{"result", std::move(b)}};
}

/// linalg.transpose [A] -> [B]: dimension d of B is dimension
/// permutation[d] of A (the "permutation" attribute, comma-separated).
NamedResults evalTranspose(const rt::RefOp &op, const Operands &x) {
  const DTensor &a = x.required("input");
  const std::vector<int64_t> permutation = integerListAttr(op, "permutation");
  const std::string *text = findAttr(op, "permutation");
  const size_t rank = a.shape.size();
  std::vector<bool> seen(rank, false);
  for (int64_t p : permutation) {
    if (p < 0 || static_cast<size_t>(p) >= rank || seen[p])
      throw std::invalid_argument("linalg.transpose: permutation '" + *text +
                                  "' does not permute " + std::to_string(rank) +
                                  " dimensions");
    seen[p] = true;
  }
  if (permutation.size() != rank)
    throw std::invalid_argument("linalg.transpose: permutation '" + *text +
                                "' has the wrong length for an operand of "
                                "shape " + shapeString(a.shape));
  std::vector<int64_t> shape(rank);
  for (size_t d = 0; d < rank; ++d)
    shape[d] = a.shape[permutation[d]];
  const std::vector<int64_t> stride = stridesOf(a.shape);
  DTensor b(shape);
  forEachIndex(shape, [&](const std::vector<int64_t> &index, size_t flat) {
    int64_t source = 0;
    for (size_t d = 0; d < rank; ++d)
      source += index[d] * stride[permutation[d]];
    b.data[flat] = a.data[source];
  });
  return {{"result", std::move(b)}};
}

} // namespace

/// The options moe.router_topk and moe.router_topk_grad share: scoring,
/// order, renormalize, scaling_factor.
ref::RouterOptions routerScoreOptions(const rt::RefOp &op) {
  ref::RouterOptions o;
  const std::string &scoring = enumAttr(op, "scoring");
  if (scoring == "softmax")
    o.scoring = ref::Scoring::Softmax;
  else if (scoring == "sigmoid")
    o.scoring = ref::Scoring::Sigmoid;
  else
    badEnum(op, "scoring", scoring);
  const std::string &order = enumAttr(op, "order");
  if (order == "softmax_then_topk")
    o.order = ref::TopKOrder::SoftmaxThenTopK;
  else if (order == "topk_then_softmax")
    o.order = ref::TopKOrder::TopKThenSoftmax;
  else
    badEnum(op, "order", order);
  o.renormalize = boolAttr(op, "renormalize");
  o.scalingFactor = floatAttr(op, "scaling_factor");
  return o;
}

ref::RouterOptions routerOptions(const rt::RefOp &op, const DTensor *bias) {
  ref::RouterOptions o = routerScoreOptions(op);
  o.k = intAttr(op, "k");
  if (bias) {
    if (bias->shape.size() != 1)
      throw std::invalid_argument("'selection_bias' must have rank 1, got " +
                                  shapeString(bias->shape));
    o.selectionBias = bias->data;
  }
  o.numGroups = optionalIntAttr(op, "num_groups").value_or(0);
  o.topkGroups = optionalIntAttr(op, "topk_groups").value_or(0);
  return o;
}

int64_t excuseRouterTies(const rt::RefOp &op, const DTensor &logits,
                         const DTensor *bias, const DTensor &kernelIds,
                         double tolerance, DTensor &refWeights,
                         DTensor &refIds) {
  const ref::RouterOptions o = routerOptions(op, bias);
  if (logits.shape.size() != 2 || kernelIds.shape != refIds.shape ||
      refWeights.shape != refIds.shape || refIds.shape.size() != 2)
    return 0;
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  const int64_t k = refIds.dim(1);
  const bool logitOrder = o.order == ref::TopKOrder::TopKThenSoftmax;
  std::vector<double> scores, select(experts);
  std::vector<int64_t> ids(k);
  int64_t excused = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    if (std::equal(&kernelIds.data[t * k], &kernelIds.data[t * k] + k,
                   &refIds.data[t * k]))
      continue;
    // The kernel's ids must be a valid selection: distinct, in range.
    bool valid = true;
    for (int64_t j = 0; j < k && valid; ++j) {
      double id = kernelIds.at(t, j);
      valid = id >= 0 && id < experts && id == std::floor(id);
      ids[j] = valid ? static_cast<int64_t>(id) : 0;
      for (int64_t i = 0; i < j && valid; ++i)
        valid = ids[i] != ids[j];
    }
    if (!valid)
      continue;
    const double *row = &logits.data[t * experts];
    ref::rowScores(row, experts, o.scoring, scores);
    double largest = 0;
    for (int64_t e = 0; e < experts; ++e) {
      select[e] = (logitOrder ? row[e] : scores[e]) +
                  (o.selectionBias.empty() ? 0.0 : o.selectionBias[e]);
      largest = std::max(largest, std::fabs(select[e]));
    }
    // Position by position, the kernel's expert must be as good as the
    // reference's up to the tolerance (ids are ordered by selection value).
    for (int64_t j = 0; j < k && valid; ++j) {
      int64_t want = static_cast<int64_t>(refIds.at(t, j));
      valid = std::fabs(select[ids[j]] - select[want]) <=
              tolerance * std::max(largest, 1e-30);
    }
    if (!valid)
      continue;
    // The weights that go with the kernel's choice, as the reference makes
    // them.
    double sum = 0;
    if (logitOrder) {
      double peak = row[ids[0]];
      for (int64_t j = 0; j < k; ++j)
        peak = std::max(peak, row[ids[j]]);
      for (int64_t j = 0; j < k; ++j)
        sum += refWeights.at(t, j) = std::exp(row[ids[j]] - peak);
      for (int64_t j = 0; j < k; ++j)
        refWeights.at(t, j) /= sum;
    } else {
      for (int64_t j = 0; j < k; ++j)
        refWeights.at(t, j) = scores[ids[j]];
    }
    if (o.renormalize) {
      sum = 0;
      for (int64_t j = 0; j < k; ++j)
        sum += refWeights.at(t, j);
      for (int64_t j = 0; j < k; ++j)
        refWeights.at(t, j) /= sum;
    }
    for (int64_t j = 0; j < k; ++j) {
      refWeights.at(t, j) *= o.scalingFactor;
      refIds.at(t, j) = static_cast<double>(ids[j]);
    }
    ++excused;
  }
  return excused;
}

namespace {

using Evaluator = NamedResults (*)(const rt::RefOp &, const Operands &);

/// The evaluator of each op the checker knows, by op name.
const std::unordered_map<std::string, Evaluator> &evaluators() {
  static const std::unordered_map<std::string, Evaluator> table = {
      {"moe.router_topk", evalRouterTopK},
      {"moe.router_topk_grad", evalRouterTopKGrad},
      {"moe.sort_by_expert", evalSortByExpert},
      {"moe.permute", evalPermute},
      {"moe.unpermute", evalUnpermute},
      {"moe.permute_probs", evalPermuteProbs},
      {"moe.permute_grad", evalPermuteGrad},
      {"moe.unpermute_grad", evalUnpermuteGrad},
      {"moe.grouped_matmul", evalGroupedMatmul},
      {"moe.grouped_weight_grad", evalGroupedWeightGrad},
      {"moe.lora_grad", evalLoraGrad},
      {"moe.swiglu", evalSwiglu},
      {"moe.swiglu_grad", evalSwigluGrad},
      {"moe.quantize", evalQuantize},
      {"moe.dequantize", evalDequantize},
      {"linalg.matmul", evalMatmul},
      {"linalg.add", evalAdd},
      {"linalg.transpose", evalTranspose},
      {"linalg.fill", evalFill},
      {"tensor.pad", evalPad},
      {"tensor.extract_slice", evalExtractSlice},
      {"tensor.expand_shape", evalReshape},
      {"tensor.collapse_shape", evalReshape},
  };
  return table;
}

} // namespace

OpResults evaluate(const OpInputs &in) {
  const rt::RefOp &op = *in.op;
  auto it = evaluators().find(op.name);
  if (it == evaluators().end())
    throw UnsupportedError("op '" + op.name +
                           "' is not known to the checker");
  // Each result into the slot of its name; results the op lists beyond
  // those it produces stay empty.
  OpResults results(op.results.size());
  for (auto &[name, value] : it->second(op, Operands(in))) {
    std::optional<size_t> slot = resultSlot(op, name);
    if (!slot)
      throw std::invalid_argument(op.name + " has no result named '" + name +
                                  "' in its record");
    results[*slot] = std::move(value);
  }
  return results;
}

} // namespace moec::check::detail
