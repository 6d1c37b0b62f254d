//===- MoeOpsTest.cpp - C++ API tests of the moe dialect ------------------===//
//
// Part of moec. Builds moe ops through the C++ API (as the Python frontend
// will), and checks that the verifier's diagnostics reach a handler.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace moec::moe;

namespace {

class MoeOpsTest : public ::testing::Test {
protected:
  MoeOpsTest() {
    context.loadDialect<MoeDialect, func::FuncDialect>();
  }

  /// A func with the given argument types whose body the test fills in.
  func::FuncOp makeFunc(ModuleOp module, TypeRange argTypes) {
    OpBuilder builder(module.getBodyRegion());
    auto func = func::FuncOp::create(builder, builder.getUnknownLoc(), "f",
                                     builder.getFunctionType(argTypes, {}));
    func.addEntryBlock();
    return func;
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element) {
    return RankedTensorType::get(shape, element);
  }

  MLIRContext context;
};

TEST_F(MoeOpsTest, EnumsRoundTrip) {
  EXPECT_EQ(stringifyScoring(Scoring::sigmoid), "sigmoid");
  EXPECT_EQ(symbolizeTopKOrder("topk_then_softmax"),
            TopKOrder::topk_then_softmax);
  EXPECT_EQ(symbolizeQuantAxis("colwise"), QuantAxis::colwise);
  EXPECT_FALSE(symbolizeActivation("relu").has_value());
}

TEST_F(MoeOpsTest, BuildRoutingChain) {
  OpBuilder builder(&context);
  Location loc = builder.getUnknownLoc();
  auto module = ModuleOp::create(loc);
  int64_t dyn = ShapedType::kDynamic;
  Type f32 = builder.getF32Type(), i32 = builder.getI32Type();
  func::FuncOp func =
      makeFunc(module, {tensor({dyn, 64}, builder.getBF16Type())});
  builder.setInsertionPointToStart(&func.getBody().front());

  auto router = RouterTopKOp::create(builder, loc, func.getArgument(0), 4);
  router.setRenormalize(true);
  auto sort = SortByExpertOp::create(
      builder, loc,
      TypeRange{tensor({dyn}, i32), tensor({dyn}, i32), tensor({64}, i32)},
      router.getIds(), builder.getI64IntegerAttr(64),
      builder.getI64IntegerAttr(16));
  func::ReturnOp::create(builder, loc);

  EXPECT_TRUE(succeeded(verify(module)));
  EXPECT_EQ(router.getWeights().getType(), tensor({dyn, 4}, f32));
  EXPECT_EQ(router.getIds().getType(), tensor({dyn, 4}, i32));
  EXPECT_EQ(router.getScoring(), Scoring::softmax);
  EXPECT_EQ(router.getOrder(), TopKOrder::softmax_then_topk);
  EXPECT_EQ(sort.getAlign(), 16);
  module->destroy();
}

TEST_F(MoeOpsTest, VerifierNamesTheOperand) {
  OpBuilder builder(&context);
  Location loc = builder.getUnknownLoc();
  auto module = ModuleOp::create(loc);
  func::FuncOp func = makeFunc(module, {tensor({16, 8}, builder.getF32Type())});
  builder.setInsertionPointToStart(&func.getBody().front());
  // k = 9 exceeds the 8 experts of the logits.
  RouterTopKOp::create(builder, loc, func.getArgument(0), 9);
  func::ReturnOp::create(builder, loc);

  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  EXPECT_TRUE(failed(verify(module)));
  EXPECT_NE(message.find("attribute 'k' (9) must not exceed the number of "
                         "experts (8)"),
            std::string::npos)
      << message;
  module->destroy();
}

TEST_F(MoeOpsTest, ParsesTheExampleLayer) {
  context.allowUnregisteredDialects(false);
  const char *source = R"mlir(
    func.func @layer(%x: tensor<?x32xbf16>, %logits: tensor<?x8xbf16>,
                     %w1: tensor<8x64x32xbf16>, %w2: tensor<8x32x32xbf16>)
        -> tensor<?x32xbf16> {
      %w, %ids = moe.router_topk %logits k = 2
          : tensor<?x8xbf16> -> tensor<?x2xf32>, tensor<?x2xi32>
      %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
          : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
      %h = moe.grouped_matmul %x, %w1, %offsets gather(%slots : tensor<?xi32>)
          {k = 2 : i64, transpose_rhs, activation = #moe.activation<swiglu>}
          : tensor<?x32xbf16>, tensor<8x64x32xbf16>, tensor<8xi32>
          -> tensor<?x32xbf16>
      %y = moe.grouped_matmul %h, %w2, %offsets
          scatter(%slots : tensor<?xi32>) scatter_weights(%w : tensor<?x2xf32>)
          {k = 2 : i64, transpose_rhs}
          : tensor<?x32xbf16>, tensor<8x32x32xbf16>, tensor<8xi32>
          -> tensor<?x32xbf16>
      return %y : tensor<?x32xbf16>
    }
  )mlir";
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&context));
  ASSERT_TRUE(module);
  int numMoeOps = 0;
  module->walk([&](Operation *op) {
    if (isa<MoeDialect>(op->getDialect()))
      ++numMoeOps;
  });
  EXPECT_EQ(numMoeOps, 4);
}

} // namespace
