//===- TransposeLoraAdapters.cpp - transpose_lora to the forward form -----===//
//
// Part of moec. The `moe-transpose-lora-adapters` pass: a grouped matmul
// that applies its LoRA adapter transposed (an input gradient) gets
// transposed copies of the adapters instead, in the forward form that the
// fused wgmma kernel runs.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "Transposed.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

namespace moec::moe {
#define GEN_PASS_DEF_MOETRANSPOSELORAADAPTERSPASS
#include "moec/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moec::moe

using namespace mlir;
using namespace moec::moe;

namespace {

struct MoeTransposeLoraAdaptersPass
    : moec::moe::impl::MoeTransposeLoraAdaptersPassBase<
          MoeTransposeLoraAdaptersPass> {
  void runOnOperation() override {
    getOperation()->walk([](GroupedMatmulOp matmul) {
      if (!matmul.getTransposeLora() || !matmul.getLoraA())
        return;
      // s · (x · B_e) · A_e  ==  s · (x · (Bᵀ)_eᵀ) · ((Aᵀ)_e)ᵀ: Bᵀ is the
      // forward form's A [E*r, K], Aᵀ its B [N, E*r].
      OpBuilder builder(matmul);
      Location loc = matmul.getLoc();
      Value a = transposed(builder, loc, matmul.getLoraB(), {1, 0});
      Value b = transposed(builder, loc, matmul.getLoraA(), {1, 0});
      matmul.getLoraAMutable().assign(a);
      matmul.getLoraBMutable().assign(b);
      matmul.setTransposeLora(false);
    });
  }
};

} // namespace
