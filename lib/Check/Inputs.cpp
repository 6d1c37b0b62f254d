//===- Inputs.cpp - Random inputs and host buffers for an entry -----------===//
//
// Part of moec. Each input buffer is filled according to its first use in the
// entry's op list, so that ids are valid routings, scales are positive and
// router logits can be skewed to exercise unbalanced routing. Values come
// from splitmix64, not <random>'s distributions, whose output differs across
// standard libraries: a seed gives the same inputs everywhere.
//
//===----------------------------------------------------------------------===//

#include "CheckInternal.h"
#include "moec/Check/Check.h"
#include "moec/Reference/MoeReference.h"
#include "moec/Runtime/Executor.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moec::check {

using namespace detail;

namespace {

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and fully specified.
class Rng {
public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 random bits.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  /// Uniform in [0, n); the modulo bias is below 2^-40 for our n.
  int64_t below(int64_t n) {
    return static_cast<int64_t>(next() % static_cast<uint64_t>(n));
  }

private:
  uint64_t state_;
};

/// The stream for buffer `index`: independent of the other buffers, so that
/// adding an input does not change the values of the others.
Rng bufferRng(uint64_t seed, size_t index) {
  Rng mix(seed ^ (0xD1B54A32D192ED03ull * (index + 1)));
  return Rng(mix.next());
}

struct Use {
  const rt::RefOp *op = nullptr;
  size_t operand = 0;
};

/// The first op of the list reading buffer `b`, and as which operand.
Use firstUse(const rt::Entry &entry, int32_t b) {
  for (const rt::RefOp &op : entry.refOps)
    for (size_t i = 0; i < op.operands.size(); ++i)
      if (op.operands[i] == b)
        return {&op, i};
  return {};
}

/// Writes `k` distinct values drawn from `pool` (partially shuffled) into
/// `out` starting at `at`.
void drawDistinct(Rng &rng, std::vector<int64_t> &pool, int64_t k,
                  HostArray &out, int64_t at) {
  const int64_t n = static_cast<int64_t>(pool.size());
  for (int64_t j = 0; j < k; ++j) {
    std::swap(pool[j], pool[j + rng.below(n - j)]);
    out.set(at + j, static_cast<double>(pool[j]));
  }
}

/// Router ids [T, k] over `experts` experts, per routing mode.
rt::Status fillIds(HostArray &ids, const std::string &name, int64_t experts,
                   Routing routing, Rng &rng) {
  if (ids.shape.size() != 2)
    return {rt::ErrorCode::InvalidArgument,
            "ids input '" + name + "' of moe.sort_by_expert must have rank 2"};
  const int64_t tokens = ids.shape[0], k = ids.shape[1];
  int64_t first = 0, poolSize = experts;
  if (routing == Routing::OneExpert)
    first = 1; // column 0 is expert 0, the rest drawn from [1, E)
  if (routing == Routing::HalfExperts)
    poolSize = experts / 2;
  if (k > poolSize)
    return {rt::ErrorCode::InvalidArgument,
            "cannot draw " + std::to_string(k) + " distinct ids per row for '" +
                name + "' from " + std::to_string(poolSize) + " of " +
                std::to_string(experts) + " experts with routing " +
                routingName(routing) +
                (routing == Routing::HalfExperts
                     ? " (needs k <= E/2; use --routing uniform)"
                     : "")};
  std::vector<int64_t> pool(poolSize - first);
  std::iota(pool.begin(), pool.end(), first);
  for (int64_t t = 0; t < tokens; ++t) {
    if (first)
      ids.set(t * k, 0);
    drawDistinct(rng, pool, k - first, ids, t * k + first);
  }
  return rt::Status::ok();
}

void fillUniform(HostArray &a, Rng &rng, double lo, double hi) {
  for (int64_t i = 0, n = a.numElements(); i < n; ++i)
    a.set(i, rng.uniform(lo, hi));
}

bool isIntegerType(rt::ElemType elem) {
  return elem == rt::ElemType::I32 || elem == rt::ElemType::I64;
}

/// True for operands that are multiplicative scales: filled positive.
bool isScaleOperand(const Use &use) {
  const std::string &name = use.op->name;
  const std::string &operand = operandName(*use.op, use.operand);
  return (name == "moe.grouped_matmul" &&
          (operand == "lhs_scales" || operand == "rhs_scales")) ||
         (name == "moe.grouped_weight_grad" &&
          (operand == "lhs_scales" || operand == "grad_scales")) ||
         (name == "moe.dequantize" && operand == "scales") ||
         (name == "moe.permute" && operand == "scales");
}

/// Fills input buffer `b` per its first use.
rt::Status fillInput(const rt::Entry &entry, int32_t b,
                     const std::vector<std::vector<int64_t>> &shapes,
                     const InputOptions &options, HostArray &array) {
  const rt::BufferDesc &desc = entry.buffers[b];
  Rng rng = bufferRng(options.seed, b);
  const Use use = firstUse(entry, b);
  const std::string opName = use.op ? use.op->name : "";
  const std::string operand = use.op ? operandName(*use.op, use.operand) : "";

  if (desc.elem == rt::ElemType::U8) { // NF4 packed weights: any byte
    for (int64_t i = 0, n = array.numElements(); i < n; ++i)
      array.set(i, static_cast<double>(rng.next() & 0xFF));
    return rt::Status::ok();
  }
  if (isIntegerType(desc.elem)) {
    if (!use.op) // unused: zeros are as good as anything
      return rt::Status::ok();
    if (opName == "moe.sort_by_expert" && operand == "ids")
      return fillIds(array, desc.name, intAttr(*use.op, "num_experts"),
                     options.routing, rng);
    if (opName == "moe.dequantize" && operand == "experts") {
      // NF4 `experts`: distinct experts of the packed data [E, K, N/2].
      const int32_t data = operandNamed(*use.op, "data");
      const int64_t experts =
          data >= 0 && !shapes[data].empty() ? shapes[data][0] : 0;
      const int64_t count = array.numElements();
      if (count > experts)
        return {rt::ErrorCode::InvalidArgument,
                "input '" + desc.name + "' selects " + std::to_string(count) +
                    " distinct experts of " + std::to_string(experts)};
      std::vector<int64_t> pool(experts);
      std::iota(pool.begin(), pool.end(), 0);
      drawDistinct(rng, pool, count, array, 0);
      return rt::Status::ok();
    }
    return {rt::ErrorCode::Unsupported,
            "cannot generate integer input '" + desc.name + "' (operand '" +
                operand + "' of " + opName +
                "): random slots or offsets are not a valid routing; entries "
                "should compute them from ids with moe.sort_by_expert"};
  }
  if (opName == "moe.dequantize" && operand == "codebook" &&
      array.numElements() == 16) { // NF4 codebook
    for (int64_t i = 0; i < 16; ++i)
      array.set(i, ref::nf4Codebook()[i]);
    return rt::Status::ok();
  }
  if (use.op && isScaleOperand(use)) {
    fillUniform(array, rng, 0.5, 2.0);
    return rt::Status::ok();
  }
  fillUniform(array, rng, -1.0, 1.0);
  return rt::Status::ok();
}

bool isInput(const rt::Entry &entry, int32_t b) {
  return b >= 0 && static_cast<size_t>(b) < entry.buffers.size() &&
         entry.buffers[b].role == rt::BufferRole::Input;
}

/// Skews the logits of every moe.router_topk that reads them from an input
/// (or from a linalg.matmul of two inputs) towards the routing mode.
void skewRouterLogits(const rt::Entry &entry, const InputOptions &options,
                      const std::vector<int32_t> &inputSlot,
                      std::vector<HostArray> &inputs) {
  if (options.routing == Routing::Uniform)
    return;
  std::vector<bool> done(entry.buffers.size(), false);
  for (const rt::RefOp &router : entry.refOps) {
    if (router.name != "moe.router_topk")
      continue;
    const int32_t logits = operandNamed(router, "logits");
    if (logits < 0 || done[logits])
      continue;
    done[logits] = true;
    if (isInput(entry, logits)) {
      HostArray &a = inputs[inputSlot[logits]];
      if (a.shape.size() != 2)
        continue;
      const int64_t tokens = a.shape[0], experts = a.shape[1];
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t e = 0; e < experts; ++e) {
          double shift = 0;
          if (options.routing == Routing::OneExpert && e == 0)
            shift = 8;
          if (options.routing == Routing::HalfExperts && e >= experts / 2)
            shift = -8;
          if (shift != 0)
            a.set(t * experts + e, a.get(t * experts + e) + shift);
        }
      continue;
    }
    // logits = A · B (or A · Bᵀ): a constant feature in column 0 of A, and
    // a large weight for it in B, shifts each expert's logit. The dot
    // products of [-1, 1] values have a spread of sqrt(K/9); outweigh it.
    for (const rt::RefOp &mm : entry.refOps) {
      if (mm.name != "linalg.matmul" || resultNamed(mm, "result") != logits)
        continue;
      const int32_t aIdx = operandNamed(mm, "A"), bIdx = operandNamed(mm, "B");
      if (!isInput(entry, aIdx) || !isInput(entry, bIdx))
        break;
      HostArray &a = inputs[inputSlot[aIdx]];
      HostArray &b = inputs[inputSlot[bIdx]];
      if (a.shape.size() != 2 || b.shape.size() != 2 ||
          boolAttr(mm, "transpose_a"))
        break;
      const bool transposed = boolAttr(mm, "transpose_b");
      const int64_t rows = a.shape[0], red = a.shape[1];
      const int64_t experts = transposed ? b.shape[0] : b.shape[1];
      const double shift = 8.0 + 8.0 * std::sqrt(red / 9.0);
      for (int64_t t = 0; t < rows; ++t)
        a.set(t * red, 1.0);
      for (int64_t e = 0; e < experts; ++e) {
        double w = 0;
        if (options.routing == Routing::OneExpert && e == 0)
          w = shift;
        if (options.routing == Routing::HalfExperts && e >= experts / 2)
          w = -shift;
        b.set(transposed ? e * red : e, w);
      }
      break;
    }
  }
}

} // namespace

bool parseRouting(const std::string &name, Routing &routing) {
  std::string n = name;
  for (char &c : n)
    if (c == '_')
      c = '-';
  if (n == "uniform")
    routing = Routing::Uniform;
  else if (n == "one-expert")
    routing = Routing::OneExpert;
  else if (n == "half-experts")
    routing = Routing::HalfExperts;
  else
    return false;
  return true;
}

const char *routingName(Routing routing) {
  switch (routing) {
  case Routing::Uniform:
    return "uniform";
  case Routing::OneExpert:
    return "one-expert";
  case Routing::HalfExperts:
    return "half-experts";
  }
  return "?";
}

rt::Status makeInputs(const rt::Entry &entry,
                      const std::vector<int64_t> &symbols,
                      const InputOptions &options,
                      std::vector<HostArray> &inputs) {
  inputs.clear();
  std::vector<std::vector<int64_t>> shapes;
  if (rt::Status s = rt::bufferShapes(entry, symbols, shapes); !s)
    return s;
  // inputSlot[b]: position of buffer b among the inputs.
  std::vector<int32_t> inputSlot(entry.buffers.size(), -1);
  try {
    for (size_t b = 0; b < entry.buffers.size(); ++b) {
      if (entry.buffers[b].role != rt::BufferRole::Input)
        continue;
      inputSlot[b] = static_cast<int32_t>(inputs.size());
      inputs.push_back(makeHostArray(entry.buffers[b].elem, shapes[b]));
      if (rt::Status s = fillInput(entry, static_cast<int32_t>(b), shapes,
                                   options, inputs.back());
          !s) {
        inputs.clear();
        return s;
      }
    }
    skewRouterLogits(entry, options, inputSlot, inputs);
  } catch (const std::invalid_argument &e) {
    inputs.clear();
    return {rt::ErrorCode::InvalidArgument,
            "entry '" + entry.name + "': " + e.what()};
  }
  return rt::Status::ok();
}

rt::Status allocateBuffers(const rt::Entry &entry,
                           const std::vector<int64_t> &symbols,
                           const std::vector<HostArray> &inputs,
                           std::vector<HostArray> &buffers) {
  buffers.clear();
  std::vector<std::vector<int64_t>> shapes;
  if (rt::Status s = rt::bufferShapes(entry, symbols, shapes); !s)
    return s;
  size_t next = 0;
  for (size_t b = 0; b < entry.buffers.size(); ++b) {
    const rt::BufferDesc &desc = entry.buffers[b];
    if (desc.role != rt::BufferRole::Input) {
      // All-ones bytes (NaN for floats, -1 for integers): an element no
      // kernel writes cannot pass for a correct zero.
      buffers.push_back(makeHostArray(desc.elem, shapes[b]));
      std::fill(buffers.back().bytes.begin(), buffers.back().bytes.end(),
                uint8_t(0xFF));
      continue;
    }
    if (next >= inputs.size()) {
      buffers.clear();
      return {rt::ErrorCode::InvalidArgument,
              "entry '" + entry.name + "' has more inputs than the " +
                  std::to_string(inputs.size()) + " given"};
    }
    const HostArray &in = inputs[next++];
    if (in.elem != desc.elem || in.shape != shapes[b] ||
        in.bytes.size() != static_cast<size_t>(in.numElements()) *
                               rt::elemSize(in.elem)) {
      buffers.clear();
      return {rt::ErrorCode::InvalidArgument,
              "input '" + desc.name + "' is " + rt::elemTypeName(in.elem) +
                  " " + shapeString(in.shape) + ", the entry expects " +
                  rt::elemTypeName(desc.elem) + " " + shapeString(shapes[b])};
    }
    buffers.push_back(in);
  }
  if (next != inputs.size()) {
    buffers.clear();
    return {rt::ErrorCode::InvalidArgument,
            "entry '" + entry.name + "' has " + std::to_string(next) +
                " inputs, " + std::to_string(inputs.size()) + " given"};
  }
  return rt::Status::ok();
}

} // namespace moec::check
