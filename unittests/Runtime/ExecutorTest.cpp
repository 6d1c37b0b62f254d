//===- ExecutorTest.cpp - Run entries through a host-memory launcher ------===//
//
// Part of moec. The launcher here interprets a few kernel names on the host
// by reading its parameters the way a GPU kernel would, so the tests see
// exactly what the executor passes: addresses, scalars, grids, and the
// allocation and release of scratch buffers.
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/Executor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>

using namespace moec::rt;

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

class HostLauncher : public KernelLauncher {
public:
  ~HostLauncher() override {
    for (void *p : live)
      std::free(p);
  }

  Status prepare(const Entry &) override {
    ++prepares;
    return prepareStatus;
  }

  Status launch(const Entry &, const LaunchStep &step, uint64_t grid,
                void **params) override {
    launches.emplace_back(step.kernel, grid);
    auto buffer = [&](size_t i) {
      return static_cast<float *>(*static_cast<void **>(params[i]));
    };
    auto scalar = [&](size_t i) { return *static_cast<int64_t *>(params[i]); };
    if (step.kernel == "fail")
      return Status(ErrorCode::DeviceError, "kernel crashed");
    if (step.params.size() < 3)
      return Status(ErrorCode::InvalidArgument, "bad kernel signature");
    int64_t n = scalar(2);
    // Like a real kernel: only grid * blockSize threads exist.
    if (static_cast<int64_t>(grid * step.blockSize) < n)
      return Status(ErrorCode::InvalidArgument, "grid too small");
    float *in = buffer(0), *out = buffer(1);
    if (step.kernel == "add_one") {
      for (int64_t i = 0; i < n; ++i)
        out[i] = in[i] + 1;
    } else if (step.kernel == "scale") {
      int64_t factor = scalar(3);
      for (int64_t i = 0; i < n; ++i)
        out[i] = in[i] * static_cast<float>(factor);
    } else {
      return Status(ErrorCode::NotFound, "no kernel " + step.kernel);
    }
    return Status::ok();
  }

  Status allocate(size_t bytes, void **ptr) override {
    if (static_cast<int>(allocations) == failAllocation)
      return Status(ErrorCode::DeviceError, "out of memory");
    ++allocations;
    *ptr = std::malloc(bytes);
    std::memset(*ptr, 0xab, bytes); // garbage, as stale device memory
    live.insert(*ptr);
    sizes.push_back(bytes);
    return Status::ok();
  }

  void release(void *ptr) override {
    ASSERT_EQ(live.count(ptr), 1u) << "release of an unknown pointer";
    live.erase(ptr);
    std::free(ptr);
    ++releases;
  }

  int prepares = 0;
  size_t allocations = 0, releases = 0;
  int failAllocation = -1; ///< index of the allocation that fails
  Status prepareStatus;
  std::set<void *> live;
  std::vector<size_t> sizes;
  std::vector<std::pair<std::string, uint64_t>> launches;
};

BufferDesc buffer(const char *name, BufferRole role, ElemType elem,
                  std::vector<std::string> dims) {
  BufferDesc b;
  b.name = name;
  b.role = role;
  b.elem = elem;
  b.dims = std::move(dims);
  return b;
}

ParamDesc bufferParam(uint32_t index) {
  ParamDesc p;
  p.kind = ParamDesc::Kind::Buffer;
  p.buffer = index;
  return p;
}

ParamDesc scalarParam(const char *expr) {
  ParamDesc p;
  p.kind = ParamDesc::Kind::Scalar;
  p.expr = expr;
  return p;
}

LaunchStep step(const char *kernel, const char *grid,
                std::vector<ParamDesc> params) {
  LaunchStep s;
  s.kernel = kernel;
  s.grid = grid;
  s.blockSize = 64;
  s.params = std::move(params);
  return s;
}

/// y = (x + 1) * 3 + 1 through two scratch buffers. Symbols: T = x.dim0,
/// K = ids.dim1 (ids is only there to have a second input).
Entry makeEntry() {
  Entry e;
  e.name = "f";
  e.target = "host";
  e.binaryKind = BinaryKind::HostObject;
  e.symbols = {{"T", 0, 0}, {"K", 1, 1}};
  e.buffers = {buffer("x", BufferRole::Input, ElemType::F32, {"s0", "4"}),
               buffer("ids", BufferRole::Input, ElemType::I32, {"s0", "s1"}),
               buffer("y", BufferRole::Output, ElemType::F32, {"s0", "4"}),
               buffer("t", BufferRole::Temp, ElemType::F32, {"s0 4 *"}),
               buffer("u", BufferRole::Temp, ElemType::F32, {"s0", "4"})};
  const char *grid = "s0 4 * 64 cdiv";
  e.steps = {step("add_one", grid,
                  {bufferParam(0), bufferParam(3), scalarParam("s0 4 *")}),
             step("scale", grid,
                  {bufferParam(3), bufferParam(4), scalarParam("s0 4 *"),
                   scalarParam("3")}),
             step("add_one", grid,
                  {bufferParam(4), bufferParam(2), scalarParam("s0 4 *")})};
  return e;
}

/// Host arrays for makeEntry() with T tokens.
struct Arrays {
  explicit Arrays(int64_t tokens)
      : xData(tokens * 4), idsData(tokens * 2), yData(tokens * 4, -1) {
    for (size_t i = 0; i < xData.size(); ++i)
      xData[i] = static_cast<float>(i);
    inputs = {{xData.data(), ElemType::F32, {tokens, 4}},
              {idsData.data(), ElemType::I32, {tokens, 2}}};
    outputs = {{yData.data(), ElemType::F32, {tokens, 4}}};
  }
  /// makeEntry's result: y = (x + 1) * 3 + 1, element by element.
  void expectEntryResult() const {
    for (size_t i = 0; i < yData.size(); ++i)
      EXPECT_EQ(yData[i], (xData[i] + 1) * 3 + 1) << i;
  }
  std::vector<float> xData;
  std::vector<int32_t> idsData;
  std::vector<float> yData;
  std::vector<ArrayRef> inputs, outputs;
};

TEST(ExecutorTest, BindSymbols) {
  Entry e = makeEntry();
  Arrays a(5);
  std::vector<int64_t> symbols;
  Status s = bindSymbols(e, a.inputs, symbols);
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(symbols, (std::vector<int64_t>{5, 2}));

  s = bindSymbols(e, {a.inputs[0]}, symbols);
  EXPECT_EQ(s.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(s.message(), "entry 'f' takes 2 inputs, got 1");

  a.inputs[1].shape = {5, 2, 1};
  s = bindSymbols(e, a.inputs, symbols);
  EXPECT_EQ(s.message(),
            "input 1 ('ids'): expected rank 2, got rank 3 (shape [5, 2, 1])");

  a.inputs[1].shape = {5, -2};
  s = bindSymbols(e, a.inputs, symbols);
  EXPECT_TRUE(contains(s.message(), "input 1 ('ids'): negative extent"))
      << s.message();
}

TEST(ExecutorTest, BufferShapes) {
  Entry e = makeEntry();
  std::vector<std::vector<int64_t>> shapes;
  ASSERT_TRUE(bufferShapes(e, {5, 2}, shapes).isOk());
  EXPECT_EQ(shapes, (std::vector<std::vector<int64_t>>{
                        {5, 4}, {5, 2}, {5, 4}, {20}, {5, 4}}));
  e.buffers[3].dims[0] = "s0 6 -";
  Status s = bufferShapes(e, {5, 2}, shapes);
  EXPECT_TRUE(contains(s.message(), "buffer 3 ('t'): dim 0: expression "
                                    "'s0 6 -'"))
      << s.message();
  EXPECT_TRUE(contains(s.message(), "negative result")) << s.message();
}

TEST(ExecutorTest, RunEntry) {
  Entry e = makeEntry();
  Arrays a(5);
  HostLauncher launcher;
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  ASSERT_TRUE(s.isOk()) << s.toString();
  a.expectEntryResult();
  EXPECT_EQ(launcher.prepares, 1);
  ASSERT_EQ(launcher.launches.size(), 3u);
  EXPECT_EQ(launcher.launches[1],
            std::make_pair(std::string("scale"), uint64_t(1)));
  // Two scratch buffers of 20 floats, both live in step 1, in one
  // allocation of two 256-byte slots (not cleared: the kernels write them
  // first, and the result above is right over garbage), then released.
  EXPECT_EQ(launcher.sizes, (std::vector<size_t>{512}));
  EXPECT_EQ(launcher.releases, 1u);
  EXPECT_TRUE(launcher.live.empty());

  // Grids follow the symbols: 100 tokens -> 400 elements -> 7 blocks of 64.
  Arrays big(100);
  HostLauncher launcher2;
  ASSERT_TRUE(runEntry(e, big.inputs, big.outputs, launcher2).isOk());
  EXPECT_EQ(launcher2.launches[0].second, 7u);
  EXPECT_EQ(big.yData[399], (big.xData[399] + 1) * 3 + 1);
}

TEST(ExecutorTest, ShapeAndTypeMismatch) {
  Entry e = makeEntry();
  HostLauncher launcher;
  {
    Arrays a(3);
    a.inputs[0].shape = {3, 5};
    Status s = runEntry(e, a.inputs, a.outputs, launcher);
    EXPECT_EQ(s.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(s.message(), "input 0 ('x'): expected shape [3, 4] (f32), got "
                           "[3, 5] (f32)");
  }
  {
    Arrays a(3);
    a.inputs[1].elem = ElemType::I64;
    Status s = runEntry(e, a.inputs, a.outputs, launcher);
    EXPECT_EQ(s.message(), "input 1 ('ids'): expected shape [3, 2] (i32), got "
                           "[3, 2] (i64)");
  }
  {
    Arrays a(3);
    a.outputs[0].shape = {4, 4};
    Status s = runEntry(e, a.inputs, a.outputs, launcher);
    EXPECT_EQ(s.message(), "output 0 ('y'): expected shape [3, 4] (f32), got "
                           "[4, 4] (f32)");
  }
  {
    Arrays a(3);
    a.outputs.push_back(a.outputs[0]);
    Status s = runEntry(e, a.inputs, a.outputs, launcher);
    EXPECT_EQ(s.message(), "entry 'f' has 1 outputs, got 2");
  }
  {
    Arrays a(3);
    a.outputs[0].data = nullptr;
    Status s = runEntry(e, a.inputs, a.outputs, launcher);
    EXPECT_EQ(s.message(), "output 0 ('y'): null data pointer for 48 bytes");
  }
  // Nothing was prepared, allocated or launched.
  EXPECT_EQ(launcher.prepares, 0);
  EXPECT_EQ(launcher.allocations, 0u);
  EXPECT_TRUE(launcher.launches.empty());
}

TEST(ExecutorTest, ZeroTokens) {
  // Empty arrays may have null data; zero-byte scratch is not allocated
  // and zero-block grids are not launched.
  Entry e = makeEntry();
  std::vector<ArrayRef> inputs = {{nullptr, ElemType::F32, {0, 4}},
                                  {nullptr, ElemType::I32, {0, 2}}};
  std::vector<ArrayRef> outputs = {{nullptr, ElemType::F32, {0, 4}}};
  HostLauncher launcher;
  Status s = runEntry(e, inputs, outputs, launcher);
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(launcher.prepares, 1);
  EXPECT_EQ(launcher.allocations, 0u);
  EXPECT_TRUE(launcher.launches.empty());
}

TEST(ExecutorTest, ZeroGridSkipsOnlyThatStep) {
  Entry e = makeEntry();
  // A step that only runs from 2 tokens on (and would fail if it ran).
  e.steps.insert(e.steps.begin() + 1, step("fail", "s0 2 /", {}));
  Arrays one(1);
  HostLauncher launcher;
  Status s = runEntry(e, one.inputs, one.outputs, launcher);
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(launcher.launches.size(), 3u);
  EXPECT_EQ(one.yData[3], (one.xData[3] + 1) * 3 + 1);

  Arrays two(2);
  HostLauncher launcher2;
  s = runEntry(e, two.inputs, two.outputs, launcher2);
  EXPECT_EQ(s.code(), ErrorCode::DeviceError);
}

TEST(ExecutorTest, LaunchErrorReleasesTemps) {
  Entry e = makeEntry();
  e.steps[1].kernel = "fail";
  Arrays a(4);
  HostLauncher launcher;
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  EXPECT_EQ(s.code(), ErrorCode::DeviceError);
  EXPECT_EQ(s.message(), "step 1 ('fail'): kernel crashed");
  EXPECT_EQ(launcher.launches.size(), 2u); // nothing after the failure
  EXPECT_EQ(launcher.allocations, 1u);
  EXPECT_EQ(launcher.releases, 1u);
  EXPECT_TRUE(launcher.live.empty());
}

// A tensor map needs a launcher with TMA: the host one reports it, naming
// the step, the parameter and the buffer, and the scratch is released.
TEST(ExecutorTest, TensorMapWithoutTmaIsAnError) {
  Entry e = makeEntry();
  ParamDesc map;
  map.kind = ParamDesc::Kind::TensorMap;
  map.buffer = 0;
  map.box = {32, 4};
  e.steps[1].params.push_back(map);
  Arrays a(4);
  HostLauncher launcher;
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  EXPECT_EQ(s.code(), ErrorCode::Unsupported);
  EXPECT_EQ(s.message(), "step 1 ('scale'): param 4 (tensor map of 'x'): "
                         "this launcher has no TMA tensor maps");
  EXPECT_EQ(launcher.launches.size(), 1u);
  EXPECT_TRUE(launcher.live.empty());
}

TEST(ExecutorTest, GridErrorReleasesTemps) {
  Entry e = makeEntry();
  e.steps[2].grid = "s0 5 -";
  Arrays a(3);
  HostLauncher launcher;
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  EXPECT_EQ(s.code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(contains(s.message(), "step 2 ('add_one'): grid: expression "
                                    "'s0 5 -'"))
      << s.message();
  EXPECT_EQ(launcher.releases, 1u);
  EXPECT_TRUE(launcher.live.empty());
}

TEST(ExecutorTest, AllocationFailureNamesTheEntryAndLaunchesNothing) {
  Entry e = makeEntry();
  Arrays a(3);
  HostLauncher launcher;
  launcher.failAllocation = 0;
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  EXPECT_EQ(s.code(), ErrorCode::DeviceError);
  EXPECT_EQ(s.message(), "entry 'f': allocating its scratch (512 bytes): out "
                         "of memory");
  EXPECT_EQ(launcher.allocations, 0u);
  EXPECT_TRUE(launcher.live.empty());
  EXPECT_TRUE(launcher.launches.empty());
}

/// An entry of `temps` scratch buffers of `floats[i]` floats, step i
/// writing temp i from temp i - 1 (the input for i = 0) and the last step
/// writing the output: each temp lives in two consecutive steps.
Entry makeChainEntry(const std::vector<int> &floats) {
  Entry e;
  e.name = "chain";
  e.target = "host";
  e.binaryKind = BinaryKind::HostObject;
  e.symbols = {{"T", 0, 0}};
  e.buffers = {buffer("x", BufferRole::Input, ElemType::F32, {"s0"}),
               buffer("y", BufferRole::Output, ElemType::F32, {"s0"})};
  for (size_t i = 0; i < floats.size(); ++i)
    e.buffers.push_back(buffer(("t" + std::to_string(i)).c_str(),
                               BufferRole::Temp, ElemType::F32,
                               {std::to_string(floats[i])}));
  uint32_t prev = 0;
  for (size_t i = 0; i < floats.size(); ++i) {
    e.steps.push_back(step("add_one", "1", {bufferParam(prev),
                                            bufferParam(2 + i),
                                            scalarParam("1")}));
    prev = 2 + i;
  }
  e.steps.push_back(step("add_one", "1",
                         {bufferParam(prev), bufferParam(1), scalarParam("1")}));
  return e;
}

// Temps whose live ranges do not overlap share bytes: in a chain only
// neighbours are live together. The largest go first: t0 [steps 0, 1] at
// 0, t2 [2, 3] at 0 too (never live with t0), then t1 [1, 2] and t3
// [3, 4] beside them at 512.
TEST(ExecutorTest, ScratchPlanSharesBytesOfTempsNotLiveTogether) {
  Entry e = makeChainEntry({100, 60, 100, 20});
  std::vector<std::vector<int64_t>> shapes;
  ASSERT_TRUE(bufferShapes(e, {1}, shapes).isOk());
  ScratchPlan plan;
  ASSERT_TRUE(planScratch(e, shapes, plan).isOk());
  // 400, 240, 400, 80 bytes -> slots of 512, 256, 512, 256.
  EXPECT_EQ(plan.offsets[2], 0u);   // t0
  EXPECT_EQ(plan.offsets[4], 0u);   // t2
  EXPECT_EQ(plan.offsets[3], 512u); // t1
  EXPECT_EQ(plan.offsets[5], 512u); // t3
  EXPECT_EQ(plan.bytes, 768u);      // the four separately: 1536
  // Neighbours are live together: disjoint bytes.
  for (size_t a = 2; a + 1 < 6; ++a) {
    size_t b = a + 1;
    EXPECT_TRUE(plan.offsets[a] >= plan.offsets[b] + 256 ||
                plan.offsets[b] >= plan.offsets[a] + 256)
        << a << " " << b;
  }
}

// Running through the plan: each temp is written before it is read, so the
// chain's result is right although the temps reuse each other's bytes.
TEST(ExecutorTest, ChainRunsInOneSharedArena) {
  Entry e = makeChainEntry({1, 1, 1, 1, 1});
  std::vector<float> x = {2}, y = {-1};
  HostLauncher launcher;
  Status s = runEntry(e, {{x.data(), ElemType::F32, {1}}},
                      {{y.data(), ElemType::F32, {1}}}, launcher);
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(y[0], 2 + 6);
  EXPECT_EQ(launcher.sizes, (std::vector<size_t>{512})); // two slots
}

// A view's uses keep its source alive.
TEST(ExecutorTest, ScratchPlanCountsViewsForTheirSource) {
  Entry e = makeChainEntry({4, 4, 4});
  BufferDesc view = buffer("v", BufferRole::View, ElemType::F32, {"4"});
  view.source = 2; // t0, written in step 0 and read in step 1
  e.buffers.push_back(view);
  e.steps[2].params.push_back(bufferParam(5)); // and read again in step 2
  std::vector<std::vector<int64_t>> shapes;
  ASSERT_TRUE(bufferShapes(e, {1}, shapes).isOk());
  ScratchPlan plan;
  ASSERT_TRUE(planScratch(e, shapes, plan).isOk());
  // t0 now lives in steps 0-2, with t1 [1, 2] and t2 [2, 3]: three slots.
  EXPECT_EQ(plan.bytes, 768u);
  EXPECT_NE(plan.offsets[2], plan.offsets[4]);
}

TEST(ExecutorTest, PrepareErrorStopsEarly) {
  Entry e = makeEntry();
  Arrays a(3);
  HostLauncher launcher;
  launcher.prepareStatus = Status(ErrorCode::Unsupported, "no host code");
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  EXPECT_EQ(s.code(), ErrorCode::Unsupported);
  EXPECT_EQ(launcher.allocations, 0u);
  EXPECT_TRUE(launcher.launches.empty());
}

TEST(ExecutorTest, RunEntryWithAllBuffers) {
  Entry e = makeEntry();
  Arrays a(6);
  std::vector<float> t(24, 0), u(24, 0);
  std::vector<ArrayRef> buffers = {a.inputs[0],
                                   a.inputs[1],
                                   a.outputs[0],
                                   {t.data(), ElemType::F32, {24}},
                                   {u.data(), ElemType::F32, {6, 4}}};
  HostLauncher launcher;
  Status s = runEntryWithAllBuffers(e, buffers, launcher);
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(launcher.allocations, 0u);
  EXPECT_EQ(launcher.prepares, 1);
  // Intermediates are visible to the caller.
  EXPECT_EQ(t[5], a.xData[5] + 1);
  EXPECT_EQ(u[5], (a.xData[5] + 1) * 3);
  EXPECT_EQ(a.yData[23], (a.xData[23] + 1) * 3 + 1);

  buffers[3].shape = {23};
  s = runEntryWithAllBuffers(e, buffers, launcher);
  EXPECT_EQ(s.message(), "buffer 3 ('t'): expected shape [24] (f32), got [23] "
                         "(f32)");
  buffers.pop_back();
  s = runEntryWithAllBuffers(e, buffers, launcher);
  EXPECT_EQ(s.message(), "entry 'f' has 5 buffers, got 4");
  EXPECT_EQ(launcher.prepares, 1);
}

/// makeEntry with the scratch u read and written through a view [T * 4]:
/// the scale kernel writes the view, the last add_one reads u.
Entry makeViewEntry() {
  Entry e = makeEntry();
  BufferDesc view = buffer("v", BufferRole::View, ElemType::F32, {"s0 4 *"});
  view.source = 4;
  e.buffers.push_back(view);
  e.steps[1].params[1] = bufferParam(5);
  return e;
}

TEST(ExecutorTest, ViewUsesItsSourceBytes) {
  Entry e = makeViewEntry();
  Arrays a(5);
  HostLauncher launcher;
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  ASSERT_TRUE(s.isOk()) << s.toString();
  a.expectEntryResult();
  // Only t and u have slots (live together in step 1): the view has no
  // bytes of its own.
  EXPECT_EQ(launcher.sizes, (std::vector<size_t>{512}));
  EXPECT_TRUE(launcher.live.empty());

  // With every buffer given, the view's own array is left alone.
  Arrays b(6);
  std::vector<float> t(24, 0), u(24, 0), v(24, -7);
  std::vector<ArrayRef> buffers = {b.inputs[0],
                                   b.inputs[1],
                                   b.outputs[0],
                                   {t.data(), ElemType::F32, {24}},
                                   {u.data(), ElemType::F32, {6, 4}},
                                   {v.data(), ElemType::F32, {24}}};
  s = runEntryWithAllBuffers(e, buffers, launcher);
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(u[5], (b.xData[5] + 1) * 3);
  EXPECT_EQ(v[5], -7);
  EXPECT_EQ(b.yData[23], (b.xData[23] + 1) * 3 + 1);
}

TEST(ExecutorTest, ViewOfAnotherSizeIsAnError) {
  Entry e = makeViewEntry();
  e.buffers[5].dims = {"s0 4 * 1 +"};
  Arrays a(5);
  HostLauncher launcher;
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  EXPECT_EQ(s.code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(s.message(), "buffer 5 ('v'): a view of 80 bytes as [21] (84 "
                         "bytes)");
  EXPECT_TRUE(launcher.launches.empty());
  EXPECT_TRUE(launcher.live.empty()); // the temps went back
}

TEST(ExecutorTest, ArrayBytesAndFormatShape) {
  size_t bytes = 0;
  ASSERT_TRUE(arrayBytes(ElemType::BF16, {64, 2048}, bytes).isOk());
  EXPECT_EQ(bytes, 64u * 2048 * 2);
  ASSERT_TRUE(arrayBytes(ElemType::I64, {}, bytes).isOk());
  EXPECT_EQ(bytes, 8u);
  ASSERT_TRUE(arrayBytes(ElemType::F32, {0, 7}, bytes).isOk());
  EXPECT_EQ(bytes, 0u);
  EXPECT_FALSE(
      arrayBytes(ElemType::F32, {1 << 30, 1 << 30, 1 << 30}, bytes).isOk());
  EXPECT_FALSE(arrayBytes(ElemType::F32, {2, -1}, bytes).isOk());
  EXPECT_EQ(formatShape({64, 2048}), "[64, 2048]");
  EXPECT_EQ(formatShape({}), "[]");
}

TEST(ExecutorTest, UnvalidatedEntryDoesNotCrash) {
  // Entries built in memory skip readBundle's validation; bad indices are
  // errors, not out-of-bounds reads.
  Entry e = makeEntry();
  e.steps[0].params[1].buffer = 99;
  Arrays a(2);
  HostLauncher launcher;
  Status s = runEntry(e, a.inputs, a.outputs, launcher);
  EXPECT_EQ(s.code(), ErrorCode::InvalidArgument);
  EXPECT_TRUE(launcher.live.empty());

  e = makeEntry();
  e.symbols[1].dim = 5;
  s = runEntry(e, a.inputs, a.outputs, launcher);
  EXPECT_TRUE(contains(s.message(), "symbol 1 ('K') refers to a dimension of "
                                    "no input"))
      << s.message();
}

} // namespace
