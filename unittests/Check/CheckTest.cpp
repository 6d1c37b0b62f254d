//===- CheckTest.cpp - Tests of the checker against the reference ---------===//
//
// Part of moec. No kernels here: entries are built by hand, their buffers
// filled with the reference's own values (computeReference), which must pass,
// and then perturbed, which must fail. Encodings are checked bit by bit and
// the op mappings against direct calls of lib/Reference.
//
//===----------------------------------------------------------------------===//

#include "moec/Check/Check.h"
#include "moec/Reference/MoeReference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

using namespace moec;
using namespace moec::check;
using rt::BufferRole;
using rt::ElemType;

namespace {

//===----------------------------------------------------------------------===//
// Entry building helpers
//===----------------------------------------------------------------------===//

struct EntryBuilder {
  rt::Entry entry;

  EntryBuilder() {
    entry.name = "test";
    entry.target = "host";
  }
  int32_t buffer(const std::string &name, BufferRole role, ElemType elem,
                 std::vector<std::string> dims) {
    entry.buffers.push_back({name, role, elem, std::move(dims)});
    return static_cast<int32_t>(entry.buffers.size() - 1);
  }
  void symbol(const std::string &name, uint32_t buffer, uint32_t dim) {
    entry.symbols.push_back({name, buffer, dim});
  }
  /// A record as convert-moe-to-kernels writes it: the ODS names of the
  /// operand groups and results (recordShapes), and every attribute, those
  /// `attrs` leaves out at their ODS defaults.
  void op(const std::string &name, std::vector<int32_t> operands,
          std::vector<int32_t> results,
          std::vector<std::pair<std::string, std::string>> attrs = {}) {
    const RecordShape &shape = recordShapes().at(name);
    for (const auto &[attr, text] : shape.defaults) {
      bool given = false;
      for (const auto &a : attrs)
        given |= a.first == attr;
      if (!given)
        attrs.push_back({attr, text});
    }
    // Groups past those given are absent (-1), as the compiler records
    // them.
    operands.resize(shape.operands.size(), -1);
    results.resize(shape.results.size(), -1);
    rt::RefOp op{name,     std::move(attrs),   std::move(operands),
                 shape.operands, std::move(results), shape.results};
    entry.refOps.push_back(std::move(op));
  }

  /// What the compiler records of the ops these tests build (MoeOpNames.inc
  /// and RefOps.cpp): names, and the attributes it writes when the op does
  /// not set them.
  struct RecordShape {
    std::vector<std::string> operands, results;
    std::vector<std::pair<std::string, std::string>> defaults;
  };
  static const std::map<std::string, RecordShape> &recordShapes() {
    static const std::map<std::string, RecordShape> shapes = {
        {"linalg.matmul",
         {{"A", "B"}, {"result"}, {{"transpose_a", "false"},
                                   {"transpose_b", "false"}}}},
        {"tensor.pad", {{"source"}, {"result"}, {}}},
        {"tensor.extract_slice", {{"source"}, {"result"}, {}}},
        {"moe.dequantize",
         {{"data", "scales", "offsets", "codebook", "experts"},
          {"output"},
          {{"axis", "rowwise"}}}},
        {"moe.grouped_matmul",
         {{"lhs", "rhs", "offsets", "gather_slots", "bias", "lora_a",
           "lora_b", "row_scale", "scatter_slots", "scatter_weights",
           "scatter_positions", "lhs_scales", "rhs_scales",
           "activation_input"},
          {"out"},
          {{"transpose_rhs", "false"},
           {"lora_scaling", "1"},
           {"activation", "none"},
           {"scale_group", "128"},
           {"transpose_lora", "false"},
           {"experts_in_columns", "false"}}}},
        {"moe.grouped_weight_grad",
         {{"lhs", "grad_out", "offsets", "gather_slots", "accumulate",
           "lhs_scales", "grad_scales"},
          {"out"},
          {{"transpose_rhs", "false"}, {"experts_in_columns", "false"}}}},
        {"moe.permute",
         {{"tokens", "slots", "offsets", "probs", "scales", "positions"},
          {"rows", "permuted_probs", "permuted_scales"},
          {}}},
        {"moe.quantize",
         {{"input", "offsets"},
          {"data", "scales"},
          {{"axis", "rowwise"}, {"pow2_scale", "false"}, {"transpose", "false"}}}},
        {"moe.router_topk",
         {{"logits", "selection_bias"},
          {"weights", "ids"},
          {{"scoring", "softmax"},
           {"order", "softmax_then_topk"},
           {"renormalize", "false"},
           {"scaling_factor", "1"}}}},
        {"moe.sort_by_expert",
         {{"ids"}, {"sorted_expert_ids", "slots", "offsets", "positions"}, {}}},
        {"moe.swiglu", {{"input"}, {"output"}, {{"layout", "halves"}}}},
        {"moe.swiglu_grad",
         {{"input", "grad_output"}, {"grad_input"}, {{"layout", "halves"}}}},
        {"moe.unpermute",
         {{"rows", "slots", "offsets", "weights", "positions"}, {"out"}, {}}},
    };
    return shapes;
  }
};

/// Inputs from makeInputs, every other buffer from the reference.
std::vector<HostArray> referenceRun(const rt::Entry &entry,
                                    const std::vector<int64_t> &symbols,
                                    InputOptions options = {}) {
  std::vector<HostArray> inputs, buffers;
  rt::Status s = makeInputs(entry, symbols, options, inputs);
  EXPECT_TRUE(s.isOk()) << s.toString();
  s = allocateBuffers(entry, symbols, inputs, buffers);
  EXPECT_TRUE(s.isOk()) << s.toString();
  s = computeReference(entry, symbols, buffers);
  EXPECT_TRUE(s.isOk()) << s.toString();
  return buffers;
}

CheckReport check(const rt::Entry &entry, const std::vector<int64_t> &symbols,
                  const std::vector<HostArray> &buffers) {
  CheckReport report;
  rt::Status s = checkEntry(entry, symbols, buffers, report);
  EXPECT_TRUE(s.isOk()) << s.toString();
  return report;
}

const OpReport *findReport(const std::vector<OpReport> &reports,
                           const std::string &result) {
  for (const OpReport &r : reports)
    if (r.result == result)
      return &r;
  return nullptr;
}

ref::DTensor tensorOf(const HostArray &a) {
  ref::DTensor t(a.shape);
  for (int64_t i = 0; i < a.numElements(); ++i)
    t.data[i] = a.get(i);
  return t;
}

ref::ITensor intsOf(const HostArray &a) {
  ref::ITensor t(a.shape);
  for (int64_t i = 0; i < a.numElements(); ++i)
    t.data[i] = static_cast<int32_t>(a.get(i));
  return t;
}

//===----------------------------------------------------------------------===//
// HostArray encodings
//===----------------------------------------------------------------------===//

TEST(CheckHostArray, KnownEncodings) {
  EXPECT_EQ(encodeFloat(ElemType::BF16, 1.0), 0x3F80u);
  EXPECT_EQ(encodeFloat(ElemType::BF16, -2.0), 0xC000u);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1.0).
  EXPECT_EQ(encodeFloat(ElemType::BF16, 1.0 + std::ldexp(1.0, -8)), 0x3F80u);
  EXPECT_EQ(encodeFloat(ElemType::BF16, 1.0 + 3 * std::ldexp(1.0, -8)),
            0x3F82u);
  EXPECT_EQ(encodeFloat(ElemType::BF16, 1e39), 0x7F80u); // overflow: inf
  EXPECT_EQ(encodeFloat(ElemType::F16, 1.0), 0x3C00u);
  EXPECT_EQ(encodeFloat(ElemType::F16, 65504.0), 0x7BFFu);
  EXPECT_EQ(encodeFloat(ElemType::F16, 65520.0), 0x7C00u); // rounds to inf
  EXPECT_EQ(encodeFloat(ElemType::F16, std::ldexp(1.0, -24)), 0x0001u);
  EXPECT_EQ(encodeFloat(ElemType::F32, 1.0), 0x3F800000u);
  EXPECT_EQ(encodeFloat(ElemType::F8E4M3FN, 1.0), 0x38u);
  EXPECT_EQ(encodeFloat(ElemType::F8E4M3FN, 448.0), 0x7Eu);
  EXPECT_EQ(encodeFloat(ElemType::F8E4M3FN, 1000.0), 0x7Eu); // saturates
  EXPECT_EQ(encodeFloat(ElemType::F8E4M3FN, -1000.0), 0xFEu);
  EXPECT_EQ(encodeFloat(ElemType::F8E4M3FN, std::ldexp(1.0, -9)), 0x01u);
  EXPECT_EQ(encodeFloat(ElemType::F8E5M2, 1.0), 0x3Cu);
  EXPECT_EQ(encodeFloat(ElemType::F8E5M2, 57344.0), 0x7Bu);
  EXPECT_EQ(encodeFloat(ElemType::F8E5M2, 1e6), 0x7Bu);
  EXPECT_TRUE(std::isnan(decodeFloat(ElemType::F8E4M3FN, 0x7F)));
  EXPECT_TRUE(std::isnan(decodeFloat(ElemType::BF16,
                                     encodeFloat(ElemType::BF16, NAN))));
  EXPECT_EQ(decodeFloat(ElemType::F8E4M3FN, 0x7E), 448.0);
  EXPECT_EQ(decodeFloat(ElemType::F8E5M2, 0x7C), INFINITY);
}

TEST(CheckHostArray, EveryCodeRoundTrips) {
  struct Case {
    ElemType elem;
    uint32_t codes;
  };
  for (Case c : {Case{ElemType::F8E4M3FN, 256}, Case{ElemType::F8E5M2, 256},
                 Case{ElemType::BF16, 65536}, Case{ElemType::F16, 65536}}) {
    for (uint32_t code = 0; code < c.codes; ++code) {
      double v = decodeFloat(c.elem, code);
      if (std::isnan(v))
        continue;
      if (c.elem == ElemType::F8E5M2 && std::isinf(v))
        continue; // e5m2 saturates, as the reference does
      ASSERT_EQ(encodeFloat(c.elem, v), code)
          << rt::elemTypeName(c.elem) << " code " << code << " value " << v;
    }
  }
}

TEST(CheckHostArray, FP8MatchesReferenceRounding) {
  for (double v = -500; v <= 500; v += 0.37) {
    EXPECT_EQ(decodeFloat(ElemType::F8E4M3FN,
                          encodeFloat(ElemType::F8E4M3FN, v)),
              ref::roundToFP8(v, ref::FP8Format::E4M3FN));
    EXPECT_EQ(decodeFloat(ElemType::F8E5M2, encodeFloat(ElemType::F8E5M2, v)),
              ref::roundToFP8(v, ref::FP8Format::E5M2));
  }
}

TEST(CheckHostArray, GetSetEveryType) {
  HostArray bf = makeHostArray(ElemType::BF16, {2, 3});
  EXPECT_EQ(bf.numElements(), 6);
  EXPECT_EQ(bf.bytes.size(), 12u);
  bf.set(4, 1.0);
  EXPECT_EQ(bf.bits(4), 0x3F80u);
  EXPECT_EQ(bf.bytes[8], 0x80);
  EXPECT_EQ(bf.bytes[9], 0x3F);
  EXPECT_EQ(bf.get(4), 1.0);
  bf.set(0, 0.1);
  EXPECT_NEAR(bf.get(0), 0.1, 0.1 / 256);

  HostArray f = makeHostArray(ElemType::F32, {1});
  f.set(0, 0.1);
  EXPECT_EQ(f.get(0), static_cast<double>(0.1f));

  HostArray i32 = makeHostArray(ElemType::I32, {3});
  i32.set(0, -3);
  i32.set(1, 2.6);
  i32.set(2, 1e12);
  EXPECT_EQ(i32.get(0), -3);
  EXPECT_EQ(i32.get(1), 3);
  EXPECT_EQ(i32.get(2), 2147483647.0);

  HostArray i64 = makeHostArray(ElemType::I64, {1});
  i64.set(0, 1e15);
  EXPECT_EQ(i64.get(0), 1e15);

  HostArray u8 = makeHostArray(ElemType::U8, {2});
  u8.set(0, 300);
  u8.set(1, -5);
  EXPECT_EQ(u8.get(0), 255);
  EXPECT_EQ(u8.get(1), 0);

  std::vector<HostArray> arrays{bf, u8};
  std::vector<rt::ArrayRef> refs = arrayRefs(arrays);
  ASSERT_EQ(refs.size(), 2u);
  EXPECT_EQ(refs[0].data, arrays[0].bytes.data());
  EXPECT_EQ(refs[0].elem, ElemType::BF16);
  EXPECT_EQ(refs[1].shape, std::vector<int64_t>{2});
}

TEST(CheckRouting, Parse) {
  Routing r = Routing::Uniform;
  EXPECT_TRUE(parseRouting("one-expert", r));
  EXPECT_EQ(r, Routing::OneExpert);
  EXPECT_TRUE(parseRouting("half_experts", r));
  EXPECT_EQ(r, Routing::HalfExperts);
  EXPECT_TRUE(parseRouting("uniform", r));
  EXPECT_EQ(r, Routing::Uniform);
  EXPECT_FALSE(parseRouting("zipf", r));
  EXPECT_STREQ(routingName(Routing::HalfExperts), "half-experts");
}

//===----------------------------------------------------------------------===//
// makeInputs
//===----------------------------------------------------------------------===//

/// ids [T, k] -> sort_by_expert over E experts; plus an unrelated f32 input.
EntryBuilder idsEntry(int64_t k, int64_t experts) {
  EntryBuilder b;
  int32_t ids = b.buffer("ids", BufferRole::Input, ElemType::I32,
                         {"s0", std::to_string(k)});
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::BF16, {"s0", "16"});
  std::string m = "s0 " + std::to_string(k) + " *";
  int32_t sorted = b.buffer("sorted", BufferRole::Output, ElemType::I32, {m});
  int32_t slots = b.buffer("slots", BufferRole::Output, ElemType::I32, {m});
  int32_t offsets = b.buffer("offsets", BufferRole::Output, ElemType::I32,
                             {std::to_string(experts)});
  b.symbol("T", ids, 0);
  b.op("moe.sort_by_expert", {ids}, {sorted, slots, offsets},
       {{"num_experts", std::to_string(experts)}});
  (void)x;
  return b;
}

TEST(CheckInputs, DeterministicPerSeed) {
  EntryBuilder b = idsEntry(4, 16);
  std::vector<HostArray> one, two, other;
  ASSERT_TRUE(makeInputs(b.entry, {64}, {7, Routing::Uniform}, one).isOk());
  ASSERT_TRUE(makeInputs(b.entry, {64}, {7, Routing::Uniform}, two).isOk());
  ASSERT_TRUE(makeInputs(b.entry, {64}, {8, Routing::Uniform}, other).isOk());
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0].bytes, two[0].bytes);
  EXPECT_EQ(one[1].bytes, two[1].bytes);
  EXPECT_NE(one[0].bytes, other[0].bytes);
  EXPECT_NE(one[1].bytes, other[1].bytes);
  // Floats uniform in [-1, 1], not all equal.
  std::set<double> values;
  for (int64_t i = 0; i < one[1].numElements(); ++i) {
    EXPECT_LE(std::fabs(one[1].get(i)), 1.0);
    values.insert(one[1].get(i));
  }
  EXPECT_GT(values.size(), 100u);
}

void expectValidIds(const HostArray &ids, int64_t lo, int64_t hi) {
  const int64_t tokens = ids.shape[0], k = ids.shape[1];
  for (int64_t t = 0; t < tokens; ++t) {
    std::set<double> row;
    for (int64_t j = 0; j < k; ++j) {
      double e = ids.get(t * k + j);
      EXPECT_GE(e, lo);
      EXPECT_LT(e, hi);
      row.insert(e);
    }
    EXPECT_EQ(row.size(), static_cast<size_t>(k)) << "row " << t;
  }
}

TEST(CheckInputs, IdsPerRoutingMode) {
  EntryBuilder b = idsEntry(4, 16);
  std::vector<HostArray> in;
  ASSERT_TRUE(makeInputs(b.entry, {200}, {1, Routing::Uniform}, in).isOk());
  expectValidIds(in[0], 0, 16);
  std::set<double> used;
  for (int64_t i = 0; i < in[0].numElements(); ++i)
    used.insert(in[0].get(i));
  EXPECT_EQ(used.size(), 16u); // 800 draws reach every expert

  ASSERT_TRUE(makeInputs(b.entry, {200}, {1, Routing::OneExpert}, in).isOk());
  expectValidIds(in[0], 0, 16);
  for (int64_t t = 0; t < 200; ++t)
    EXPECT_EQ(in[0].get(t * 4), 0);

  ASSERT_TRUE(
      makeInputs(b.entry, {200}, {1, Routing::HalfExperts}, in).isOk());
  expectValidIds(in[0], 0, 8);

  // The ids feed the sort: the whole entry evaluates.
  std::vector<HostArray> buffers = referenceRun(b.entry, {200});
  EXPECT_TRUE(check(b.entry, {200}, buffers).pass);
}

TEST(CheckInputs, HalfExpertsNeedsSmallK) {
  EntryBuilder b = idsEntry(5, 8);
  std::vector<HostArray> in;
  rt::Status s = makeInputs(b.entry, {4}, {1, Routing::HalfExperts}, in);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("k <= E/2"), std::string::npos) << s.message();
  EXPECT_TRUE(makeInputs(b.entry, {4}, {1, Routing::Uniform}, in).isOk());
}

TEST(CheckInputs, SlotsGivenDirectlyAreUnsupported) {
  EntryBuilder b;
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::BF16, {"s0", "8"});
  int32_t slots = b.buffer("my_slots", BufferRole::Input, ElemType::I32,
                           {"s0 2 *"});
  int32_t offsets =
      b.buffer("my_offsets", BufferRole::Input, ElemType::I32, {"4"});
  int32_t rows =
      b.buffer("rows", BufferRole::Output, ElemType::BF16, {"s0 2 *", "8"});
  b.symbol("T", x, 0);
  b.op("moe.permute", {x, slots, offsets, -1, -1}, {rows, -1, -1},
       {{"k", "2"}});
  std::vector<HostArray> in;
  rt::Status s = makeInputs(b.entry, {4}, {}, in);
  EXPECT_EQ(s.code(), rt::ErrorCode::Unsupported);
  EXPECT_NE(s.message().find("my_slots"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("moe.sort_by_expert"), std::string::npos);
}

/// Index of the largest of `n` values.
int64_t argmax(const double *v, int64_t n) {
  return std::max_element(v, v + n) - v;
}

TEST(CheckInputs, SkewsDirectLogits) {
  EntryBuilder b;
  int32_t logits =
      b.buffer("logits", BufferRole::Input, ElemType::BF16, {"s0", "16"});
  int32_t w = b.buffer("w", BufferRole::Output, ElemType::F32, {"s0", "4"});
  int32_t ids = b.buffer("ids", BufferRole::Output, ElemType::I32, {"s0", "4"});
  b.symbol("T", logits, 0);
  b.op("moe.router_topk", {logits, -1}, {w, ids}, {{"k", "4"}});

  std::vector<HostArray> in;
  ASSERT_TRUE(makeInputs(b.entry, {100}, {3, Routing::OneExpert}, in).isOk());
  ref::DTensor l = tensorOf(in[0]);
  for (int64_t t = 0; t < 100; ++t)
    EXPECT_EQ(argmax(&l.data[t * 16], 16), 0);

  ASSERT_TRUE(
      makeInputs(b.entry, {100}, {3, Routing::HalfExperts}, in).isOk());
  ref::RouterOptions o;
  o.k = 4;
  ref::RouterResult r = ref::routerTopK(tensorOf(in[0]), o);
  for (int32_t e : r.ids.data)
    EXPECT_LT(e, 8);
}

TEST(CheckInputs, SkewsMatmulFedLogits) {
  for (bool transposed : {true, false}) {
    EntryBuilder b;
    int32_t h =
        b.buffer("hidden", BufferRole::Input, ElemType::BF16, {"s0", "256"});
    int32_t wr = b.buffer("router_w", BufferRole::Input, ElemType::BF16,
                          transposed ? std::vector<std::string>{"8", "256"}
                                     : std::vector<std::string>{"256", "8"});
    int32_t logits =
        b.buffer("logits", BufferRole::Temp, ElemType::F32, {"s0", "8"});
    int32_t w = b.buffer("w", BufferRole::Output, ElemType::F32, {"s0", "2"});
    int32_t ids =
        b.buffer("ids", BufferRole::Output, ElemType::I32, {"s0", "2"});
    b.symbol("T", h, 0);
    b.op("linalg.matmul", {h, wr}, {logits},
         {{"transpose_b", transposed ? "true" : "false"}});
    b.op("moe.router_topk", {logits, -1}, {w, ids}, {{"k", "2"}});

    std::vector<HostArray> buffers =
        referenceRun(b.entry, {64}, {5, Routing::OneExpert});
    for (int64_t t = 0; t < 64; ++t)
      EXPECT_EQ(buffers[ids].get(t * 2), 0) << "token " << t;
    EXPECT_TRUE(check(b.entry, {64}, buffers).pass);

    buffers = referenceRun(b.entry, {64}, {5, Routing::HalfExperts});
    for (int64_t i = 0; i < 128; ++i)
      EXPECT_LT(buffers[ids].get(i), 4);
  }
}

//===----------------------------------------------------------------------===//
// checkEntry
//===----------------------------------------------------------------------===//

TEST(CheckEntry, MatmulTransposeB) {
  for (bool transposed : {true, false}) {
    EntryBuilder b;
    int32_t a = b.buffer("A", BufferRole::Input, ElemType::F32, {"2", "3"});
    int32_t w = b.buffer("B", BufferRole::Input, ElemType::F32,
                         transposed ? std::vector<std::string>{"2", "3"}
                                    : std::vector<std::string>{"3", "2"});
    int32_t c = b.buffer("C", BufferRole::Output, ElemType::F32, {"2", "2"});
    b.op("linalg.matmul", {a, w}, {c},
         {{"transpose_b", transposed ? "true" : "false"}});

    std::vector<HostArray> in{makeHostArray(ElemType::F32, {2, 3}),
                              makeHostArray(ElemType::F32, {0})};
    in[1] = makeHostArray(ElemType::F32, transposed
                                             ? std::vector<int64_t>{2, 3}
                                             : std::vector<int64_t>{3, 2});
    const double av[] = {1, 2, 3, 4, 5, 6};
    const double bt[] = {1, 0, -1, 2, 1, 0}; // Bᵀ rows
    for (int i = 0; i < 6; ++i)
      in[0].set(i, av[i]);
    for (int n = 0; n < 2; ++n)
      for (int l = 0; l < 3; ++l)
        in[1].set(transposed ? n * 3 + l : l * 2 + n, bt[n * 3 + l]);
    std::vector<HostArray> buffers;
    ASSERT_TRUE(allocateBuffers(b.entry, {}, in, buffers).isOk());
    const double expected[] = {-2, 4, -2, 13};
    for (int i = 0; i < 4; ++i)
      buffers[c].set(i, expected[i]);
    CheckReport report = check(b.entry, {}, buffers);
    EXPECT_TRUE(report.pass) << report.summary();
    ASSERT_EQ(report.perOp.size(), 1u);
    EXPECT_EQ(report.perOp[0].relError, 0);
    EXPECT_EQ(report.perOp[0].tolerance, 1e-5);

    buffers[c].set(3, 13.01); // 7e-4 relative: too much for f32
    report = check(b.entry, {}, buffers);
    EXPECT_FALSE(report.pass);
    EXPECT_NEAR(report.perOp[0].relError, 0.01 / std::sqrt(4 + 16 + 4 + 169),
                1e-6);
  }
}

TEST(CheckEntry, PadThenSlice) {
  // A [2, 3] = 1..6 padded with 0.5 (one column before, one after, one row
  // after) into B [3, 5], then C [2, 2] = B[1 + i, 1 + 2j].
  EntryBuilder b;
  int32_t a = b.buffer("A", BufferRole::Input, ElemType::F32, {"2", "3"});
  int32_t padded = b.buffer("B", BufferRole::Output, ElemType::F32, {"3", "5"});
  int32_t c = b.buffer("C", BufferRole::Output, ElemType::F32, {"2", "2"});
  b.op("tensor.pad", {a}, {padded}, {{"low", "0,1"}, {"value", "0.5"}});
  b.op("tensor.extract_slice", {padded}, {c},
       {{"offsets", "1,1"}, {"strides", "1,2"}});
  std::vector<HostArray> in{makeHostArray(ElemType::F32, {2, 3})};
  for (int i = 0; i < 6; ++i)
    in[0].set(i, i + 1);
  std::vector<HostArray> buffers;
  ASSERT_TRUE(allocateBuffers(b.entry, {}, in, buffers).isOk());
  const double expectedB[] = {0.5, 1, 2, 3, 0.5, 0.5, 4,   5,
                              6,   0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
  for (int i = 0; i < 15; ++i)
    buffers[padded].set(i, expectedB[i]);
  const double expectedC[] = {4, 6, 0.5, 0.5};
  for (int i = 0; i < 4; ++i)
    buffers[c].set(i, expectedC[i]);
  CheckReport report = check(b.entry, {}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();
  ASSERT_EQ(report.perOp.size(), 2u);
  EXPECT_EQ(report.perOp[0].relError, 0);
  EXPECT_EQ(report.perOp[1].relError, 0);

  buffers[c].set(1, 5); // the slice's stride taken as 1
  EXPECT_FALSE(check(b.entry, {}, buffers).pass);
  buffers[c].set(1, 6);
  buffers[padded].set(0, 0); // a pad value other than the attribute's
  EXPECT_FALSE(check(b.entry, {}, buffers).pass);
}

/// logits -> router_topk -> sort_by_expert (align 4) -> permute with probs.
EntryBuilder routerChain() {
  EntryBuilder b;
  int32_t logits =
      b.buffer("logits", BufferRole::Input, ElemType::F32, {"s0", "8"});
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::BF16, {"s0", "16"});
  int32_t w = b.buffer("weights", BufferRole::Temp, ElemType::F32, {"s0", "2"});
  int32_t ids = b.buffer("ids", BufferRole::Temp, ElemType::I32, {"s0", "2"});
  const std::string m = "s0 2 * 24 +"; // T*k + E*(align-1)
  int32_t sorted = b.buffer("sorted", BufferRole::Temp, ElemType::I32, {m});
  int32_t slots = b.buffer("slots", BufferRole::Temp, ElemType::I32, {m});
  int32_t offsets =
      b.buffer("offsets", BufferRole::Temp, ElemType::I32, {"8"});
  int32_t rows = b.buffer("rows", BufferRole::Output, ElemType::BF16, {m, "16"});
  int32_t probs = b.buffer("probs", BufferRole::Output, ElemType::F32, {m});
  b.symbol("T", logits, 0);
  b.op("moe.router_topk", {logits, -1}, {w, ids},
       {{"k", "2"}, {"renormalize", "true"}, {"moe.tile", "ignored"}});
  b.op("moe.sort_by_expert", {ids}, {sorted, slots, offsets},
       {{"num_experts", "8"}, {"align", "4"}});
  b.op("moe.permute", {x, slots, offsets, w, -1}, {rows, probs, -1},
       {{"k", "2"}});
  return b;
}

TEST(CheckEntry, RouterSortPermuteChain) {
  EntryBuilder b = routerChain();
  std::vector<HostArray> buffers = referenceRun(b.entry, {32});
  CheckReport report = check(b.entry, {32}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();
  ASSERT_EQ(report.perOp.size(), 7u); // 2 + 3 + 2 (no permuted scales)
  const OpReport *ids = findReport(report.perOp, "ids");
  ASSERT_TRUE(ids);
  EXPECT_TRUE(ids->integer);
  EXPECT_EQ(ids->mismatches, 0);
  const OpReport *rows = findReport(report.perOp, "rows");
  ASSERT_TRUE(rows);
  EXPECT_EQ(rows->tolerance, 1e-2); // bf16 involved
  EXPECT_EQ(rows->relError, 0);     // a copy is exact
  EXPECT_EQ(findReport(report.perOp, "weights")->tolerance, 1e-5);
  ASSERT_EQ(report.endToEnd.size(), 2u);
  for (const OpReport &r : report.endToEnd)
    EXPECT_TRUE(r.pass) << r.result;
  EXPECT_NE(report.summary().find("moe.sort_by_expert"), std::string::npos);
  EXPECT_NE(report.summary().find("PASS"), std::string::npos);
}

TEST(CheckEntry, PerturbedFloatFails) {
  EntryBuilder b = routerChain();
  std::vector<HostArray> buffers = referenceRun(b.entry, {32});
  HostArray &rows = buffers[7];
  int64_t i = 0;
  while (rows.get(i) == 0)
    ++i;
  rows.set(i, rows.get(i) + 2.0);
  CheckReport report = check(b.entry, {32}, buffers);
  EXPECT_FALSE(report.pass);
  for (const OpReport &r : report.perOp)
    EXPECT_EQ(r.pass, r.result != "rows") << r.result;
  EXPECT_NE(report.summary().find("FAIL (1 of 7 results)"), std::string::npos)
      << report.summary();
}

TEST(CheckEntry, SwappedIdsAreIntegerMismatches) {
  EntryBuilder b = routerChain();
  std::vector<HostArray> buffers = referenceRun(b.entry, {32});
  HostArray &ids = buffers[3];
  double first = ids.get(10), second = ids.get(11);
  ids.set(10, second);
  ids.set(11, first);
  CheckReport report = check(b.entry, {32}, buffers);
  EXPECT_FALSE(report.pass);
  const OpReport *r = findReport(report.perOp, "ids");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->pass);
  EXPECT_EQ(r->mismatches, 2);
  // The sort is checked on the ids the kernel wrote: its (reference-made)
  // output no longer matches them.
  EXPECT_FALSE(findReport(report.perOp, "slots")->pass);

  // Swapped sorted slots: the sort fails, and permute is checked on them.
  buffers = referenceRun(b.entry, {32});
  HostArray &slots = buffers[5];
  first = slots.get(0);
  slots.set(0, slots.get(1));
  slots.set(1, first);
  report = check(b.entry, {32}, buffers);
  r = findReport(report.perOp, "slots");
  EXPECT_EQ(r->mismatches, 2);
  EXPECT_TRUE(findReport(report.perOp, "ids")->pass);
}

TEST(CheckEntry, ReferenceRejectingKernelValuesIsAFailingRow) {
  EntryBuilder b = routerChain();
  std::vector<HostArray> buffers = referenceRun(b.entry, {32});
  buffers[6].set(0, 1000); // offsets out of range
  CheckReport report;
  rt::Status s = checkEntry(b.entry, {32}, buffers, report);
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_FALSE(report.pass);
  const OpReport *rows = findReport(report.perOp, "rows");
  ASSERT_TRUE(rows);
  EXPECT_FALSE(rows->pass);
  EXPECT_NE(rows->note.find("offsets"), std::string::npos) << rows->note;
  EXPECT_FALSE(findReport(report.perOp, "offsets")->pass);
}

TEST(CheckEntry, RouterNearTiesAreExcused) {
  EntryBuilder b;
  int32_t logits =
      b.buffer("logits", BufferRole::Input, ElemType::F32, {"1", "4"});
  int32_t w = b.buffer("w", BufferRole::Output, ElemType::F32, {"1", "1"});
  int32_t ids = b.buffer("ids", BufferRole::Output, ElemType::I32, {"1", "1"});
  b.op("moe.router_topk", {logits, -1}, {w, ids}, {{"k", "1"}});
  std::vector<HostArray> in{makeHostArray(ElemType::F32, {1, 4})};
  const double row[] = {0.5, std::nextafter(0.5f, 1.0f), -1, -1};
  for (int e = 0; e < 4; ++e)
    in[0].set(e, row[e]);
  std::vector<HostArray> buffers;
  ASSERT_TRUE(allocateBuffers(b.entry, {}, in, buffers).isOk());
  ASSERT_TRUE(computeReference(b.entry, {}, buffers).isOk());
  EXPECT_EQ(buffers[ids].get(0), 1);
  CheckReport report = check(b.entry, {}, buffers);
  EXPECT_TRUE(report.pass);

  // The kernel picked expert 0, 6e-8 worse: excused, weight checked for it.
  buffers[ids].set(0, 0);
  double sum = 0;
  for (double l : row)
    sum += std::exp(l);
  buffers[w].set(0, std::exp(row[0]) / sum);
  report = check(b.entry, {}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();
  EXPECT_NE(report.perOp[1].note.find("near-tied"), std::string::npos);

  buffers[ids].set(0, 2); // clearly worse: not a tie
  report = check(b.entry, {}, buffers);
  EXPECT_FALSE(report.pass);
}

/// A whole MoE layer: router, sort, permute with probs, gate/up matmul with
/// SwiGLU, down matmul scaled by the probs, unpermute.
TEST(CheckEntry, FullLayer) {
  EntryBuilder b;
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::BF16, {"s0", "32"});
  int32_t logits =
      b.buffer("logits", BufferRole::Input, ElemType::BF16, {"s0", "4"});
  int32_t w1 =
      b.buffer("w1", BufferRole::Input, ElemType::BF16, {"4", "16", "32"});
  int32_t w2 =
      b.buffer("w2", BufferRole::Input, ElemType::BF16, {"4", "8", "32"});
  int32_t rw = b.buffer("rw", BufferRole::Temp, ElemType::F32, {"s0", "2"});
  int32_t ids = b.buffer("ids", BufferRole::Temp, ElemType::I32, {"s0", "2"});
  const std::string m = "s0 2 *";
  int32_t sorted = b.buffer("sorted", BufferRole::Temp, ElemType::I32, {m});
  int32_t slots = b.buffer("slots", BufferRole::Temp, ElemType::I32, {m});
  int32_t offsets = b.buffer("offsets", BufferRole::Temp, ElemType::I32, {"4"});
  int32_t rows = b.buffer("rows", BufferRole::Temp, ElemType::BF16, {m, "32"});
  int32_t probs = b.buffer("probs", BufferRole::Temp, ElemType::F32, {m});
  int32_t h = b.buffer("h", BufferRole::Temp, ElemType::BF16, {m, "8"});
  int32_t y = b.buffer("y", BufferRole::Temp, ElemType::BF16, {m, "32"});
  int32_t out = b.buffer("out", BufferRole::Output, ElemType::BF16, {"s0", "32"});
  b.symbol("T", x, 0);
  b.op("moe.router_topk", {logits, -1}, {rw, ids},
       {{"k", "2"}, {"order", "topk_then_softmax"}});
  b.op("moe.sort_by_expert", {ids}, {sorted, slots, offsets},
       {{"num_experts", "4"}});
  b.op("moe.permute", {x, slots, offsets, rw, -1}, {rows, probs, -1},
       {{"k", "2"}});
  b.op("moe.grouped_matmul",
       {rows, w1, offsets, -1, -1, -1, -1, -1, -1, -1, -1, -1}, {h},
       {{"transpose_rhs", "true"}, {"activation", "swiglu"}});
  b.op("moe.grouped_matmul",
       {h, w2, offsets, -1, -1, -1, -1, probs, -1, -1, -1, -1}, {y},
       {{"transpose_rhs", "false"}, {"mode", "forward"}});
  b.op("moe.unpermute", {y, slots, offsets, -1}, {out}, {{"k", "2"}});
  (void)w2;

  // w2 is [E, K=8, N=32] without transpose_rhs.
  std::vector<HostArray> buffers = referenceRun(b.entry, {16});
  CheckReport report = check(b.entry, {16}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();
  ASSERT_EQ(report.endToEnd.size(), 1u);
  EXPECT_LT(report.endToEnd[0].relError, 1e-2);
  EXPECT_GT(report.endToEnd[0].relError, 0); // out was rounded to bf16

  // The gather/scatter-free pieces match direct reference calls.
  ref::DTensor rowsRef = ref::permute(tensorOf(buffers[x]),
                                      intsOf(buffers[slots]),
                                      intsOf(buffers[offsets]), 2)
                             .rows;
  ref::GroupedMatmulOptions o;
  o.transposeRhs = true;
  o.swiglu = true;
  ref::DTensor hRef = ref::groupedMatmul(rowsRef, tensorOf(buffers[w1]),
                                         intsOf(buffers[offsets]), o);
  EXPECT_LT(ref::relativeError(tensorOf(buffers[h]), hRef), 1e-2);
}

TEST(CheckEntry, GatherScatterMatmulMatchesReference) {
  EntryBuilder b;
  int32_t ids = b.buffer("ids", BufferRole::Input, ElemType::I32, {"s0", "2"});
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::F32, {"s0", "8"});
  int32_t w = b.buffer("w", BufferRole::Input, ElemType::F32, {"4", "6", "8"});
  int32_t bias = b.buffer("bias", BufferRole::Input, ElemType::F32, {"4", "6"});
  int32_t loraA =
      b.buffer("lora_a", BufferRole::Input, ElemType::F32, {"8", "8"});
  int32_t loraB =
      b.buffer("lora_b", BufferRole::Input, ElemType::F32, {"6", "8"});
  int32_t sw = b.buffer("sw", BufferRole::Input, ElemType::F32, {"s0", "2"});
  int32_t sorted =
      b.buffer("sorted", BufferRole::Temp, ElemType::I32, {"s0 2 *"});
  int32_t slots = b.buffer("slots", BufferRole::Temp, ElemType::I32, {"s0 2 *"});
  int32_t offsets = b.buffer("offsets", BufferRole::Temp, ElemType::I32, {"4"});
  int32_t out = b.buffer("out", BufferRole::Output, ElemType::F32, {"s0", "6"});
  int32_t grad =
      b.buffer("grad", BufferRole::Input, ElemType::F32, {"s0 2 *", "6"});
  int32_t dw = b.buffer("dw", BufferRole::Output, ElemType::F32, {"4", "8", "6"});
  b.symbol("T", ids, 0);
  b.op("moe.sort_by_expert", {ids}, {sorted, slots, offsets},
       {{"num_experts", "4"}});
  b.op("moe.grouped_matmul",
       {x, w, offsets, slots, bias, loraA, loraB, -1, slots, sw, -1, -1},
       {out},
       {{"k", "2"},
        {"transpose_rhs", "true"},
        {"lora_scaling", "0.5"},
        {"scale_group", "128"}});
  b.op("moe.grouped_weight_grad", {x, grad, offsets, slots, -1, -1, -1}, {dw},
       {{"k", "2"}});

  std::vector<HostArray> buffers = referenceRun(b.entry, {12});
  CheckReport report = check(b.entry, {12}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();

  const ref::ITensor slotsT = intsOf(buffers[slots]);
  const ref::ITensor offsetsT = intsOf(buffers[offsets]);
  const ref::DTensor biasT = tensorOf(buffers[bias]);
  const ref::DTensor aT = tensorOf(buffers[loraA]), bT = tensorOf(buffers[loraB]);
  const ref::DTensor swT = tensorOf(buffers[sw]);
  ref::GroupedMatmulOptions o;
  o.transposeRhs = true;
  o.k = 2;
  o.gatherSlots = &slotsT;
  o.bias = &biasT;
  o.loraA = &aT;
  o.loraB = &bT;
  o.loraScaling = 0.5;
  o.scatterSlots = &slotsT;
  o.scatterWeights = &swT;
  o.numTokens = 12;
  ref::DTensor outRef =
      ref::groupedMatmul(tensorOf(buffers[x]), tensorOf(buffers[w]), offsetsT,
                         o);
  EXPECT_LT(ref::relativeError(tensorOf(buffers[out]), outRef), 1e-6);
  ref::DTensor dwRef = ref::groupedWeightGrad(
      tensorOf(buffers[x]), tensorOf(buffers[grad]), offsetsT, &slotsT, 2);
  EXPECT_LT(ref::relativeError(tensorOf(buffers[dw]), dwRef), 1e-6);
}

/// Steps an FP8 value `steps` codes up (positive, below the maximum).
void bumpFP8(HostArray &a, int64_t i, int steps) {
  a.bytes[i] = static_cast<uint8_t>(a.bytes[i] + steps);
}

TEST(CheckEntry, QuantizeFP8WithinOneUlp) {
  EntryBuilder b;
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::BF16, {"s0", "256"});
  int32_t q = b.buffer("q", BufferRole::Temp, ElemType::F8E4M3FN, {"s0", "256"});
  int32_t s = b.buffer("s", BufferRole::Temp, ElemType::F32, {"s0", "2"});
  int32_t y = b.buffer("y", BufferRole::Output, ElemType::BF16, {"s0", "256"});
  b.symbol("T", x, 0);
  b.op("moe.quantize", {x, -1}, {q, s},
       {{"group_size", "128"}, {"pow2_scale", "true"}});
  b.op("moe.dequantize", {q, s, -1, -1, -1}, {y}, {{"group_size", "128"}});

  std::vector<HostArray> buffers = referenceRun(b.entry, {8});
  CheckReport report = check(b.entry, {8}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();
  const OpReport *data = findReport(report.perOp, "q");
  ASSERT_TRUE(data);
  EXPECT_TRUE(data->fp8);
  EXPECT_EQ(data->relError, 0);
  // Dequantized ≈ input (FP8 keeps 3 mantissa bits).
  EXPECT_LT(ref::relativeError(tensorOf(buffers[y]), tensorOf(buffers[x])),
            0.05);

  int64_t i = 0;
  while (!(buffers[q].get(i) > 0 && buffers[q].get(i) < 200))
    ++i;
  bumpFP8(buffers[q], i, 1);
  report = check(b.entry, {8}, buffers);
  EXPECT_TRUE(findReport(report.perOp, "q")->pass) << report.summary();
  bumpFP8(buffers[q], i, 1); // two steps away now
  report = check(b.entry, {8}, buffers);
  data = findReport(report.perOp, "q");
  EXPECT_FALSE(data->pass);
  EXPECT_EQ(data->mismatches, 1);
  EXPECT_FALSE(report.pass);
}

TEST(CheckEntry, ColwiseQuantizeUsesOffsets) {
  EntryBuilder b;
  int32_t ids = b.buffer("ids", BufferRole::Input, ElemType::I32, {"s0", "2"});
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::F32, {"s0 2 *", "32"});
  int32_t sorted =
      b.buffer("sorted", BufferRole::Temp, ElemType::I32, {"s0 2 *"});
  int32_t slots = b.buffer("slots", BufferRole::Temp, ElemType::I32, {"s0 2 *"});
  int32_t offsets = b.buffer("offsets", BufferRole::Temp, ElemType::I32, {"4"});
  int32_t q =
      b.buffer("q", BufferRole::Output, ElemType::F8E5M2, {"s0 2 *", "32"});
  // (M + min(E, M)·(g−1)) / g with M >= E.
  int32_t s = b.buffer("s", BufferRole::Output, ElemType::F32,
                       {"s0 2 * 12 + 4 /", "32"});
  b.symbol("T", ids, 0);
  b.op("moe.sort_by_expert", {ids}, {sorted, slots, offsets},
       {{"num_experts", "4"}});
  b.op("moe.quantize", {x, offsets}, {q, s},
       {{"group_size", "4"}, {"axis", "colwise"}});
  std::vector<HostArray> buffers = referenceRun(b.entry, {8});
  CheckReport report = check(b.entry, {8}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();

  ref::QuantizeOptions o;
  o.format = ref::FP8Format::E5M2;
  o.axis = ref::QuantAxis::Colwise;
  o.groupSize = 4;
  ref::ITensor offsetsT = intsOf(buffers[offsets]);
  o.offsets = &offsetsT;
  ref::QuantizeResult r = ref::quantize(tensorOf(buffers[x]), o);
  EXPECT_EQ(tensorOf(buffers[q]).data, r.data.data);
}

TEST(CheckEntry, NF4DequantizeAndSwiglu) {
  EntryBuilder b;
  int32_t packed =
      b.buffer("packed", BufferRole::Input, ElemType::U8, {"2", "4", "4"});
  int32_t absmax =
      b.buffer("absmax", BufferRole::Input, ElemType::F32, {"2", "2"});
  int32_t codebook =
      b.buffer("codebook", BufferRole::Input, ElemType::F32, {"16"});
  int32_t experts = b.buffer("experts", BufferRole::Input, ElemType::I32, {"1"});
  int32_t w =
      b.buffer("w", BufferRole::Output, ElemType::BF16, {"1", "4", "8"});
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::F32, {"s0", "8"});
  int32_t dy = b.buffer("dy", BufferRole::Input, ElemType::F32, {"s0", "4"});
  int32_t a = b.buffer("a", BufferRole::Output, ElemType::F32, {"s0", "4"});
  int32_t dx = b.buffer("dx", BufferRole::Output, ElemType::F32, {"s0", "8"});
  b.symbol("T", x, 0);
  b.op("moe.dequantize", {packed, absmax, -1, codebook, experts}, {w},
       {{"group_size", "16"}});
  b.op("moe.swiglu", {x}, {a}, {{"layout", "interleaved"}});
  b.op("moe.swiglu_grad", {x, dy}, {dx}, {{"layout", "interleaved"}});

  std::vector<HostArray> buffers = referenceRun(b.entry, {5});
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(buffers[codebook].get(i),
              static_cast<double>(static_cast<float>(ref::nf4Codebook()[i])));
  EXPECT_GT(buffers[absmax].get(0), 0);
  CheckReport report = check(b.entry, {5}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();

  ref::Tensor<uint8_t> bytes({2, 4, 4});
  for (int i = 0; i < 32; ++i)
    bytes.data[i] = static_cast<uint8_t>(buffers[packed].get(i));
  ref::ITensor sel = intsOf(buffers[experts]);
  ref::DTensor wRef = ref::dequantizeNF4(bytes, tensorOf(buffers[absmax]),
                                         tensorOf(buffers[codebook]).data, 16,
                                         &sel);
  EXPECT_LT(ref::relativeError(tensorOf(buffers[w]), wRef), 1e-2);
  EXPECT_LT(ref::relativeError(
                tensorOf(buffers[a]),
                ref::swiglu(tensorOf(buffers[x]),
                            ref::GateUpLayout::Interleaved)),
            1e-6);
  EXPECT_LT(ref::relativeError(
                tensorOf(buffers[dx]),
                ref::swigluGrad(tensorOf(buffers[x]), tensorOf(buffers[dy]),
                                ref::GateUpLayout::Interleaved)),
            1e-6);
}

TEST(CheckEntry, Errors) {
  EntryBuilder b = routerChain();
  std::vector<HostArray> buffers = referenceRun(b.entry, {32});
  CheckReport report;

  // A buffer of the wrong shape.
  std::vector<HostArray> wrong = buffers;
  wrong[7] = makeHostArray(ElemType::BF16, {3, 16});
  rt::Status s = checkEntry(b.entry, {32}, wrong, report);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("rows"), std::string::npos) << s.message();

  // Too few buffers.
  wrong.pop_back();
  EXPECT_EQ(checkEntry(b.entry, {32}, wrong, report).code(),
            rt::ErrorCode::InvalidArgument);

  // An op the checker does not know.
  EntryBuilder unknown = routerChain();
  unknown.entry.refOps[2].name = "moe.frobnicate";
  s = checkEntry(unknown.entry, {32}, buffers, report);
  EXPECT_EQ(s.code(), rt::ErrorCode::Unsupported);
  EXPECT_NE(s.message().find("moe.frobnicate"), std::string::npos);

  // A reference error on the inputs themselves: k larger than E.
  EntryBuilder badK = routerChain();
  badK.entry.refOps[0].attrs[0].second = "9";
  s = checkEntry(badK.entry, {32}, buffers, report);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("'k'"), std::string::npos) << s.message();

  // A buffer written twice.
  EntryBuilder twice = routerChain();
  twice.entry.refOps[2].results[1] = 2;
  EXPECT_EQ(checkEntry(twice.entry, {32}, buffers, report).code(),
            rt::ErrorCode::Unsupported);

  // A bad enum keyword.
  EntryBuilder badEnum = routerChain();
  for (auto &[name, text] : badEnum.entry.refOps[0].attrs)
    if (name == "scoring")
      text = "tanh";
  s = checkEntry(badEnum.entry, {32}, buffers, report);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("tanh"), std::string::npos);

  // Inputs that do not match the entry.
  std::vector<HostArray> in{makeHostArray(ElemType::F32, {32, 8})}, all;
  EXPECT_EQ(allocateBuffers(b.entry, {32}, in, all).code(),
            rt::ErrorCode::InvalidArgument);
}

/// swiglu_grad's record with its operands [input, grad_output] at
/// `inputAt` and `gradAt`; the names go with the buffers when `named`, stay
/// in ODS order otherwise.
EntryBuilder swigluGradEntry(size_t inputAt, size_t gradAt, bool named) {
  EntryBuilder b;
  int32_t x = b.buffer("x", BufferRole::Input, ElemType::F32, {"s0", "8"});
  int32_t dy = b.buffer("dy", BufferRole::Input, ElemType::F32, {"s0", "4"});
  b.buffer("dx", BufferRole::Output, ElemType::F32, {"s0", "8"});
  b.symbol("T", x, 0);
  b.op("moe.swiglu_grad", {x, dy}, {2});
  rt::RefOp &op = b.entry.refOps[0];
  op.operands = {-1, -1};
  op.operands[inputAt] = x;
  op.operands[gradAt] = dy;
  if (named) {
    op.operandNames[inputAt] = "input";
    op.operandNames[gradAt] = "grad_output";
  }
  return b;
}

// The record names its operands: listed in another order than ODS's, they
// are read by name, not by position.
TEST(CheckEntry, OperandsAreReadByName) {
  std::vector<HostArray> buffers =
      referenceRun(swigluGradEntry(0, 1, true).entry, {4});
  std::vector<HostArray> swapped =
      referenceRun(swigluGradEntry(1, 0, true).entry, {4});
  ASSERT_EQ(swapped.size(), 3u);
  EXPECT_EQ(tensorOf(swapped[2]).data, tensorOf(buffers[2]).data);
  EXPECT_LT(ref::relativeError(
                tensorOf(buffers[2]),
                ref::swigluGrad(tensorOf(buffers[0]), tensorOf(buffers[1]),
                                ref::GateUpLayout::Halves)),
            1e-6);
  // Read by position, the swapped record would take dy [T, 4] for the
  // input [T, 8]: the same buffers with the names left in ODS order are
  // rejected.
  std::vector<HostArray> positional = buffers;
  rt::Status s = computeReference(swigluGradEntry(1, 0, false).entry, {4},
                                  positional);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("'grad_output'"), std::string::npos)
      << s.message();
  CheckReport report =
      check(swigluGradEntry(1, 0, true).entry, {4}, buffers);
  EXPECT_TRUE(report.pass) << report.summary();
}

// What the reference needs and the record lacks is an error naming it:
// nothing of ODS (operand order, attribute defaults) is restated.
TEST(CheckEntry, MissingOperandOrAttributeIsNamed) {
  EntryBuilder b = swigluGradEntry(0, 1, true);
  std::vector<HostArray> buffers = referenceRun(b.entry, {4});
  CheckReport report;

  EntryBuilder noGrad = swigluGradEntry(0, 1, true);
  noGrad.entry.refOps[0].operands[1] = -1;
  std::vector<HostArray> in{buffers[0], buffers[1]}, all;
  ASSERT_TRUE(allocateBuffers(noGrad.entry, {4}, in, all).isOk());
  rt::Status s = computeReference(noGrad.entry, {4}, all);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("lacks its operand 'grad_output'"),
            std::string::npos)
      << s.message();

  EntryBuilder unnamed = swigluGradEntry(0, 1, true);
  unnamed.entry.refOps[0].operandNames[1] = "dy";
  s = checkEntry(unnamed.entry, {4}, buffers, report);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("no operand named 'grad_output'"),
            std::string::npos)
      << s.message();

  EntryBuilder noLayout = swigluGradEntry(0, 1, true);
  noLayout.entry.refOps[0].attrs.clear();
  s = checkEntry(noLayout.entry, {4}, buffers, report);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("lacks its attribute 'layout'"),
            std::string::npos)
      << s.message();

  // A router record without its default-valued scoring: an error, not
  // softmax restated.
  EntryBuilder noScoring = routerChain();
  auto &attrs = noScoring.entry.refOps[0].attrs;
  attrs.erase(std::remove_if(attrs.begin(), attrs.end(),
                             [](const auto &a) { return a.first == "scoring"; }),
              attrs.end());
  std::vector<HostArray> chain = referenceRun(routerChain().entry, {32});
  s = checkEntry(noScoring.entry, {32}, chain, report);
  EXPECT_EQ(s.code(), rt::ErrorCode::InvalidArgument);
  EXPECT_NE(s.message().find("lacks its attribute 'scoring'"),
            std::string::npos)
      << s.message();
}

TEST(CheckEntry, EndToEndCanBeSkipped) {
  EntryBuilder b = routerChain();
  std::vector<HostArray> buffers = referenceRun(b.entry, {16});
  CheckOptions options;
  options.endToEnd = false;
  CheckReport report;
  ASSERT_TRUE(checkEntry(b.entry, {16}, buffers, options, report).isOk());
  EXPECT_TRUE(report.pass);
  EXPECT_TRUE(report.endToEnd.empty());
  EXPECT_EQ(report.perOp.size(), 7u);
}

} // namespace
