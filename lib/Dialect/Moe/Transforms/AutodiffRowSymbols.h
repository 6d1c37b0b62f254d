//===- AutodiffRowSymbols.h - Row-count symbols of moe-autodiff -*- C++ -*-===//
//
// Part of moec. Names the dynamic row counts of the forward's values, for
// the `moe.sym` attributes of the backward's arguments (Autodiff.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_DIALECT_MOE_TRANSFORMS_AUTODIFFROWSYMBOLS_H
#define MOEC_LIB_DIALECT_MOE_TRANSFORMS_AUTODIFFROWSYMBOLS_H

#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <string>

namespace moec::moe::autodiff {

/// The symbol name of a dynamic leading dimension of each forward value, for
/// the `moe.sym` of the backward's arguments: values with the same row count
/// share one (the tokens, the sorted rows of one sort, ...), others get a
/// fresh name.
class RowSymbols {
public:
  explicit RowSymbols(mlir::func::FuncOp func) {
    for (mlir::BlockArgument arg : func.getArguments()) {
      auto named =
          func.getArgAttrOfType<mlir::StringAttr>(arg.getArgNumber(), "moe.sym");
      symbols[arg] = named ? named.str() : "T";
    }
    for (mlir::Operation &op : func.getBody().front().without_terminator())
      visit(&op);
  }

  std::string of(mlir::Value v) {
    auto [it, inserted] = symbols.try_emplace(v);
    if (inserted)
      it->second = fresh();
    return it->second;
  }

private:
  std::string fresh() { return "rows" + std::to_string(next++); }

  void visit(mlir::Operation *op) {
    // Results with the row count of `from`; none: each gets a fresh name
    // when asked.
    auto same = [&](mlir::Value from) {
      if (!from)
        return;
      std::string symbol = of(from);
      for (mlir::Value result : op->getResults())
        symbols[result] = symbol;
    };
    llvm::TypeSwitch<mlir::Operation *>(op)
        .Case([&](RouterTopKOp o) { same(o.getLogits()); })
        .Case([&](RouterTopKGradOp o) { same(o.getLogits()); })
        .Case([&](SortByExpertOp o) {
          std::string rows = fresh();
          symbols[o.getSortedExpertIds()] = rows;
          symbols[o.getSlots()] = rows;
          if (o.getPositions())
            symbols[o.getPositions()] = fresh();
        })
        .Case([&](PermuteOp o) { same(o.getSlots()); })
        .Case([&](UnpermuteOp o) { same(o.getWeights()); })
        .Case([&](GroupedWeightGradOp) { same(mlir::Value()); })
        .Case([&](GroupedMatmulOp o) {
          if (o.getScatterSlots())
            return same(o.getScatterWeights() ? o.getScatterWeights()
                        : o.getGatherSlots()  ? o.getLhs()
                                              : mlir::Value());
          same(o.getGatherSlots() ? o.getGatherSlots() : o.getLhs());
        })
        .Case<SwigluOp, SwigluGradOp>([&](auto o) { same(o->getOperand(0)); })
        .Case([&](mlir::linalg::MatmulOp o) { same(o.getInputs()[0]); })
        .Case([&](mlir::linalg::AddOp o) { same(o.getInputs()[0]); })
        .Default([&](mlir::Operation *) { same(mlir::Value()); });
  }

  llvm::DenseMap<mlir::Value, std::string> symbols;
  unsigned next = 0;
};

} // namespace moec::moe::autodiff

#endif // MOEC_LIB_DIALECT_MOE_TRANSFORMS_AUTODIFFROWSYMBOLS_H
