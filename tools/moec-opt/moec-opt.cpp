//===- moec-opt.cpp - mlir-opt with the moe dialect -----------------------===//
//
// Part of moec. Every upstream dialect, extension and pass, plus moec's own.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeDialect.h"
#include "moec/Conversion/Passes.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"
#include "moec/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  moec::moe::registerMoeTransformsPasses();
  moec::registerMoecConversionPasses();
  moec::registerMoecPipelines();

  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  registry.insert<moec::moe::MoeDialect>();

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "moec optimizer driver: the moe dialect and all of MLIR\n",
      registry));
}
