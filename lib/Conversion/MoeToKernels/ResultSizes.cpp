//===- ResultSizes.cpp - Host sizes of each op's results ------------------===//
//
// Part of moec. The sizes convert-moe-to-kernels allocates results with
// (and records as size expressions for the bundle), from the sizes of the
// op's operand buffers.
//
//===----------------------------------------------------------------------===//

#include "LoweringContext.h"

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;

LogicalResult
moec::kernels::resultSizes(Operation *op, BufferMap buffer,
                           LoweringContext &ctx,
                           SmallVector<SmallVector<Value>> &sizes) {
  KernelBuilder &h = ctx.host();
  auto sizesOf = [&](Value tensor) { return ctx.sizes(buffer(tensor)); };
  // Static dimensions come from the type; `dynamic(i, d)` supplies the rest.
  auto fill = [&](Value result,
                  const std::function<Value(int64_t)> &dynamic) -> bool {
    auto type = cast<ShapedType>(result.getType());
    SmallVector<Value> dims;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (!type.isDynamicDim(d)) {
        dims.push_back(h.idx(type.getDimSize(d)));
        continue;
      }
      Value v = dynamic(d);
      if (!v)
        return false;
      dims.push_back(v);
    }
    sizes.push_back(dims);
    return true;
  };
  auto fail = [&](const Twine &why) {
    return op->emitOpError("cannot size its result for kernels: ") << why;
  };
  auto rowsOf = [&](Value tensor) {
    return [&, tensor](int64_t d) -> Value {
      return d == 0 ? sizesOf(tensor)[0] : Value();
    };
  };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<moe::RouterTopKOp>([&](auto r) -> LogicalResult {
        for (Value result : r->getResults())
          if (!fill(result, rowsOf(r.getLogits())))
            return fail("dynamic k");
        return success();
      })
      .Case<moe::SortByExpertOp>([&](auto s) -> LogicalResult {
        SmallVector<Value> idSizes = sizesOf(s.getIds());
        Value numSlots = h.mul(idSizes[0], idSizes[1]);
        Value capacity = numSlots;
        int64_t align = s.getAlign().value_or(1);
        if (align > 1)
          capacity = h.add(capacity, h.idx(s.getNumExperts() * (align - 1)));
        for (Value result : s->getResults())
          fill(result, [&](int64_t) {
            return result == s.getPositions() ? numSlots : capacity;
          });
        return success();
      })
      .Case<moe::PermuteOp>([&](auto p) -> LogicalResult {
        Value rows = sizesOf(p.getSlots())[0];
        Value hidden = sizesOf(p.getTokens())[1];
        fill(p.getRows(), [&](int64_t d) { return d == 0 ? rows : hidden; });
        if (p.getPermutedProbs())
          fill(p.getPermutedProbs(), [&](int64_t) { return rows; });
        if (p.getPermutedScales()) {
          Value groups = sizesOf(p.getScales())[1];
          fill(p.getPermutedScales(),
               [&](int64_t d) { return d == 0 ? rows : groups; });
        }
        return success();
      })
      .Case<moe::UnpermuteOp>([&](auto u) -> LogicalResult {
        Value hidden = sizesOf(u.getRows())[1];
        Value tokens = u.getWeights() ? sizesOf(u.getWeights())[0] : Value();
        if (!fill(u.getOut(),
                  [&](int64_t d) { return d == 0 ? tokens : hidden; }))
          return fail("a dynamic token count needs `weights` (the number of "
                      "tokens is their first dimension)");
        return success();
      })
      .Case<moe::PermuteGradOp>([&](auto p) -> LogicalResult {
        Value hidden = sizesOf(p.getGradRows())[1];
        Value tokens = ctx.tokenCount();
        auto dims = [&](int64_t d) {
          return d == 0 ? tokens : d == 1 ? hidden : Value();
        };
        if (!fill(p.getGradTokens(), dims) ||
            (p.getGradProbs() && !fill(p.getGradProbs(), dims)))
          return fail("a dynamic token count needs a function argument whose "
                      "leading dimension is the token count T");
        return success();
      })
      .Case<moe::UnpermuteGradOp>([&](auto u) -> LogicalResult {
        SmallVector<Value> out = sizesOf(u.getGradOut());
        Value rows = sizesOf(u.getSlots())[0];
        fill(u.getGradRows(),
             [&](int64_t d) { return d == 0 ? rows : out[1]; });
        if (u.getGradWeights())
          fill(u.getGradWeights(), [&](int64_t) { return out[0]; });
        return success();
      })
      .Case<moe::GroupedMatmulOp>([&](auto g) -> LogicalResult {
        SmallVector<Value> lhs = sizesOf(g.getLhs());
        SmallVector<Value> rhs = sizesOf(g.getRhs());
        if (g.getMode() == moe::MatmulMode::weight_grad) {
          fill(g.getOut(), [&](int64_t d) -> Value {
            return d == 1 ? lhs[1] : d == 2 ? rhs[1] : Value();
          });
          return success();
        }
        Value n = g.getTransposeRhs() ? rhs[1] : rhs[2];
        if (g.getActivation() == moe::Activation::swiglu)
          n = h.div(n, h.idx(2));
        Value rows;
        if (g.getScatterSlots()) {
          if (g.getScatterWeights())
            rows = sizesOf(g.getScatterWeights())[0];
          else if (g.getGatherSlots())
            rows = lhs[0];
        } else {
          rows = g.getGatherSlots() ? sizesOf(g.getGatherSlots())[0] : lhs[0];
        }
        if (!fill(g.getOut(), [&](int64_t d) { return d == 0 ? rows : n; }))
          return fail("a scatter with a dynamic token count needs "
                      "`scatter_weights` or `gather`");
        return success();
      })
      .Case<moe::SwigluOp>([&](auto s) -> LogicalResult {
        SmallVector<Value> in = sizesOf(s.getInput());
        fill(s.getOutput(), [&](int64_t d) {
          return d == 0 ? in[0] : h.div(in[1], h.idx(2));
        });
        return success();
      })
      .Case<moe::SwigluGradOp>([&](auto s) -> LogicalResult {
        SmallVector<Value> in = sizesOf(s.getInput());
        fill(s.getGradInput(), [&](int64_t d) { return in[d]; });
        return success();
      })
      .Case<moe::QuantizeOp>([&](auto q) -> LogicalResult {
        SmallVector<Value> in = sizesOf(q.getInput());
        int64_t g = q.getGroupSize();
        fill(q.getData(), [&](int64_t d) { return in[d]; });
        if (q.getAxis() == moe::QuantAxis::rowwise) {
          fill(q.getScales(), [&](int64_t d) {
            return d == 0 ? in[0] : h.ceilDiv(in[1], h.idx(g));
          });
        } else {
          int64_t experts =
              cast<ShapedType>(q.getOffsets().getType()).getDimSize(0);
          // (M + min(E, M)·(g − 1)) / g blocks bound the groups' blocks.
          Value rows = h.div(h.add(in[0], h.mul(h.minIdx(h.idx(experts), in[0]),
                                                h.idx(g - 1))),
                             h.idx(g));
          fill(q.getScales(), [&](int64_t d) { return d == 0 ? rows : in[1]; });
        }
        return success();
      })
      .Case<moe::DequantizeOp>([&](auto q) -> LogicalResult {
        SmallVector<Value> in = sizesOf(q.getData());
        bool nf4 = cast<ShapedType>(q.getData().getType())
                       .getElementType()
                       .isUnsignedInteger(8);
        fill(q.getOutput(), [&](int64_t d) -> Value {
          if (!nf4)
            return in[d];
          if (d == 0)
            return q.getExperts() ? sizesOf(q.getExperts())[0] : in[0];
          return d == 1 ? in[1] : h.mul(in[2], h.idx(2));
        });
        return success();
      })
      .Case<linalg::MatmulOp>([&](auto m) -> LogicalResult {
        Value a = m.getInputs()[0], bm = m.getInputs()[1];
        // B is [K, N] or, transposed, [N, K] (checked by the caller).
        FailureOr<bool> transposeB = matmulTransposesB(m);
        bool transposed = succeeded(transposeB) && *transposeB;
        fill(m.getResult(0), [&](int64_t d) {
          return d == 0 ? sizesOf(a)[0] : sizesOf(bm)[transposed ? 0 : 1];
        });
        return success();
      })
      .Default([&](Operation *) -> LogicalResult {
        return op->emitOpError("is not lowered to kernels yet");
      });
}
