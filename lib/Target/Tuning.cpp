//===- Tuning.cpp - Candidate kernels for the autotuner -------------------===//
//
// Part of moec. See Tuning.h.
//
//===----------------------------------------------------------------------===//

#include "moec/Target/Tuning.h"

#include "moec/Conversion/TuningSpace.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"
#include "moec/Dialect/Moe/Transforms/TuningCache.h"
#include "moec/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"

#include <set>

using namespace mlir;

namespace {

/// The ODS operand groups of moe.grouped_matmul and moe.grouped_weight_grad,
/// in order: the argument roles of the manifest.
constexpr const char *kMatmulOperands[] = {
    "lhs",           "rhs",           "offsets",           "gather_slots",
    "bias",          "lora_a",        "lora_b",            "row_scale",
    "scatter_slots", "scatter_weights", "scatter_positions", "lhs_scales",
    "rhs_scales",    "activation_input"};
constexpr const char *kWeightGradOperands[] = {
    "lhs",        "grad_out",  "offsets",    "gather_slots",
    "accumulate", "lhs_scales", "grad_scales"};

/// Left out of the candidates: the inverse map of the slots only spares
/// the combine two small kernels, and the tuner times the matmul.
constexpr const char *kUntunedOperand = "scatter_positions";

/// Roles whose leading size is the op's row count (the weight gradient's
/// grad_out has one row per grouped row).
bool isRowsRole(StringRef role, bool gathered) {
  return role == "gather_slots" || role == "row_scale" ||
         role == "scatter_slots" || role == "lhs_scales" ||
         role == "activation_input" || role == "grad_out" ||
         (role == "lhs" && !gathered);
}

/// Each operand of a tuned op once, with its role (the ODS group's name).
SmallVector<std::pair<StringRef, Value>> tunedArgs(Operation *op) {
  SmallVector<std::pair<StringRef, Value>> args;
  auto collect = [&](auto typed, ArrayRef<const char *> roles) {
    for (auto [group, role] : llvm::enumerate(roles))
      for (Value v : typed.getODSOperands(group))
        if (StringRef(role) != kUntunedOperand &&
            !llvm::is_contained(llvm::make_second_range(args), v))
          args.push_back({role, v});
  };
  static_assert(std::size(kMatmulOperands) == 14,
                "one role per operand group of moe.grouped_matmul");
  static_assert(std::size(kWeightGradOperands) == 7,
                "one role per operand group of moe.grouped_weight_grad");
  if (auto matmul = dyn_cast<moec::moe::GroupedMatmulOp>(op))
    collect(matmul, kMatmulOperands);
  else
    collect(cast<moec::moe::GroupedWeightGradOp>(op), kWeightGradOperands);
  return args;
}

std::string printed(Attribute attr) {
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

} // namespace

FailureOr<moec::TuningCandidates>
moec::buildTuningCandidates(ModuleOp module, const std::string &target) {
  MLIRContext *context = module.getContext();
  // Tune the ops as the compiler will see them: after fusion.
  OwningOpRef<ModuleOp> fused(cast<ModuleOp>(module->clone()));
  PassManager pm(context);
  buildMoeOptimizePipeline(pm);
  if (failed(pm.run(*fused)))
    return failure();

  TuningCandidates result;
  result.module = ModuleOp::create(module.getLoc());
  OpBuilder builder(context);
  llvm::json::Array ops;
  std::set<std::string> seen;
  for (auto func : fused->getOps<func::FuncOp>()) {
    func.walk([&](Operation *op) {
      if (!isa<moe::GroupedMatmulOp, moe::GroupedWeightGradOp>(op))
        return;
      std::optional<std::string> key = moe::tuningKey(op);
      if (!key || seen.count(*key))
        return;
      SmallVector<moe::TileAttr> tiles = tuningCandidates(op, target);
      if (tiles.empty())
        return;
      seen.insert(*key);
      SmallVector<std::pair<StringRef, Value>> args = tunedArgs(op);
      auto k = op->getAttrOfType<IntegerAttr>("k");
      bool gathered = llvm::is_contained(llvm::make_first_range(args),
                                         StringRef("gather_slots"));

      llvm::json::Array candidates, roles;
      for (auto &arg : args)
        roles.push_back(arg.first.str());
      std::string opIndex = std::to_string(result.numOps);
      for (auto [j, tile] : llvm::enumerate(tiles)) {
        std::string name = "tune" + opIndex + "_" + std::to_string(j);
        SmallVector<Type> types;
        for (auto &arg : args)
          types.push_back(arg.second.getType());
        builder.setInsertionPointToEnd(result.module->getBody());
        auto candidate = func::FuncOp::create(
            builder, op->getLoc(), name,
            builder.getFunctionType(types, op->getResultTypes()));
        Block *body = candidate.addEntryBlock();
        builder.setInsertionPointToStart(body);
        IRMapping mapping;
        for (auto [i, arg] : llvm::enumerate(args)) {
          mapping.map(arg.second, body->getArgument(i));
          if (isRowsRole(arg.first, gathered))
            candidate.setArgAttr(i,
                                 moe::MoeDialect::SymAttrHelper::getNameStr(),
                                 builder.getStringAttr("M"));
        }
        Operation *copy = builder.clone(*op, mapping);
        if (auto matmul = dyn_cast<moe::GroupedMatmulOp>(copy))
          matmul.getScatterPositionsMutable().clear();
        copy->setAttr(moe::kTileAttrName, tile);
        copy->removeAttr(moe::kTileBucketsAttrName);
        func::ReturnOp::create(builder, op->getLoc(), copy->getResults());
        candidates.push_back(llvm::json::Object{
            {"entry", name}, {"tile", printed(tile)}, {"default", j == 0}});
      }
      ops.push_back(llvm::json::Object{
          {"key", *key},
          {"function", func.getSymName().str()},
          {"k", k ? k.getInt() : int64_t(1)},
          {"args", std::move(roles)},
          {"candidates", std::move(candidates)}});
      ++result.numOps;
    });
  }
  if (result.numOps == 0)
    return module.emitError("nothing to tune for ")
           << target << ": no op has a kernel that reads tuned tiles there "
           << "(the sm_90a grouped matmul or weight gradient, "
              "bf16/f16, no LoRA or FP8 scales, static K and N)";
  result.manifest = llvm::json::Object{{"moec_tuning_manifest", 1},
                                       {"target", target},
                                       {"ops", std::move(ops)}};
  return result;
}
