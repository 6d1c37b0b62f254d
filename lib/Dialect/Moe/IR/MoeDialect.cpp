//===- MoeDialect.cpp - The moe dialect and its attributes ----------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeDialect.h"
#include "moec/Dialect/Moe/IR/MoeAttrs.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace moec::moe;

#include "moec/Dialect/Moe/IR/MoeDialect.cpp.inc"
#include "moec/Dialect/Moe/IR/MoeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moec/Dialect/Moe/IR/MoeAttrs.cpp.inc"

void MoeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "moec/Dialect/Moe/IR/MoeOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moec/Dialect/Moe/IR/MoeAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// TileAttr
//===----------------------------------------------------------------------===//

LogicalResult TileAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t m, int64_t n, int64_t k,
                               int64_t threads, int64_t stages,
                               int64_t bandM, int64_t producers,
                               int64_t cluster, int64_t rowSplits) {
  if (stages != 0 && (stages < 3 || stages > 16))
    return emitError() << "tile parameter 'stages' must be 0 (the kernel's "
                          "choice) or in [3, 16], got "
                       << stages;
  if (bandM != 0 && (bandM > 64 || !llvm::isPowerOf2_64(bandM)))
    return emitError() << "tile parameter 'band_m' must be 0 (the kernel's "
                          "choice) or a power of two up to 64, got "
                       << bandM;
  for (auto [name, value] : {std::make_pair("m", m), std::make_pair("n", n),
                             std::make_pair("k", k)})
    if (value < 1 || !llvm::isPowerOf2_64(value))
      return emitError() << "tile parameter '" << name
                         << "' must be a power of two >= 1, got " << value;
  if (threads < 32 || threads > 1024 || threads % 32 != 0)
    return emitError() << "tile parameter 'threads' must be a multiple of 32 "
                          "in [32, 1024], got "
                       << threads;
  if ((producers != 0 && producers != 128) || producers >= threads)
    return emitError() << "tile parameter 'producers' must be 0 or 128 (one "
                          "warpgroup) and less than 'threads', got "
                       << producers;
  if (cluster != 1 && cluster != 2)
    return emitError() << "tile parameter 'cluster' must be 1 or 2 (blocks "
                          "per cluster), got "
                       << cluster;
  if (rowSplits < 0 || rowSplits > 16)
    return emitError() << "tile parameter 'row_splits' must be 0 (the "
                          "kernel's choice) or in [1, 16], got "
                       << rowSplits;
  if (cluster == 2 && producers != 128)
    return emitError() << "tile parameter 'cluster' = 2 needs 'producers' = "
                          "128 (the warp-specialized kernel multicasts the "
                          "weights), got producers = "
                       << producers;
  // m*n is a power of two; when it overflows int64 it is far above any
  // thread count, which then divides it only if it is a power of two too.
  int64_t computing = threads - producers;
  std::optional<int64_t> outputs = llvm::checkedMul(m, n);
  bool even = outputs
                  ? (*outputs % computing == 0 || computing % *outputs == 0)
                  : llvm::isPowerOf2_64(computing);
  if (!even)
    return emitError() << "tile of " << m << "x" << n
                       << " outputs does not split evenly over " << computing
                       << " computing threads: one of m*n and 'threads' - "
                          "'producers' must divide the other";
  return success();
}

LogicalResult
TileBucketAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       int64_t maxRows, TileAttr tile) {
  if (maxRows < 1)
    return emitError() << "tile bucket 'max_rows' must be >= 1, got "
                       << maxRows;
  if (!tile)
    return emitError() << "tile bucket needs a tile";
  return success();
}

//===----------------------------------------------------------------------===//
// WgmmaPlanAttr, WgmmaBucketAttr, KernelAttr
//===----------------------------------------------------------------------===//

/// The register split of the warp-specialized kernel: both roles' counts
/// (per thread, setmaxnreg's range and granule) within the 168 x 384
/// registers the block starts with.
static LogicalResult
verifyRegisterSplit(function_ref<InFlightDiagnostic()> emitError,
                    int64_t producers, int64_t mma, int64_t producer) {
  if (producers == 0) {
    if (mma != 0 || producer != 0)
      return emitError() << "wgmma plan without producers has no register "
                            "split: 'mma_registers' and "
                            "'producer_registers' must be 0, got "
                         << mma << " and " << producer;
    return success();
  }
  for (auto [name, value] : {std::make_pair("mma_registers", mma),
                             std::make_pair("producer_registers", producer)})
    if (value < 24 || value > 256 || value % 8 != 0)
      return emitError() << "wgmma plan parameter '" << name
                         << "' must be a multiple of 8 in [24, 256] "
                            "(setmaxnreg), got "
                         << value;
  constexpr int64_t kBlockRegisters = 168 * 384;
  if (256 * mma + 128 * producer > kBlockRegisters)
    return emitError() << "wgmma plan's register split needs 256 x " << mma
                       << " + 128 x " << producer << " = "
                       << 256 * mma + 128 * producer
                       << " registers, more than the " << kBlockRegisters
                       << " (168 x 384) the block starts with";
  return success();
}

LogicalResult WgmmaPlanAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t blockM,
    int64_t blockN, int64_t blockK, int64_t stages, int64_t bandM,
    int64_t producers, int64_t mmaRegisters, int64_t producerRegisters,
    int64_t cluster, int64_t rowSplits, int64_t loraRunTiles,
    bool bulkStores, ArrayAttr buckets) {
  if (blockM != 128 || (blockK != 64 && blockK != 128))
    return emitError() << "wgmma plan needs block_m = 128 and block_k = 64 "
                          "(128 for FP8 operands: two m64 warpgroups, one "
                          "128-byte row of K), got "
                       << blockM << " and " << blockK;
  if (blockN != 64 && blockN != 128 && blockN != 256)
    return emitError() << "wgmma plan parameter 'block_n' must be 64, 128 "
                          "or 256, got "
                       << blockN;
  if (stages < 3 || stages > 16)
    return emitError() << "wgmma plan parameter 'stages' must be in [3, 16], "
                          "got "
                       << stages;
  if (bandM < 1 || bandM > 64 || !llvm::isPowerOf2_64(bandM))
    return emitError() << "wgmma plan parameter 'band_m' must be a power of "
                          "two up to 64, got "
                       << bandM;
  if (producers != 0 && producers != 128)
    return emitError() << "wgmma plan parameter 'producers' must be 0 or 128 "
                          "(one warpgroup), got "
                       << producers;
  if (failed(verifyRegisterSplit(emitError, producers, mmaRegisters,
                                 producerRegisters)))
    return failure();
  if (cluster != 1 && (cluster != 2 || producers == 0))
    return emitError() << "wgmma plan parameter 'cluster' must be 1, or 2 "
                          "with producers = 128, got "
                       << cluster;
  if (rowSplits < 1 || rowSplits > 16)
    return emitError() << "wgmma plan parameter 'row_splits' must be in "
                          "[1, 16], got "
                       << rowSplits;
  if (loraRunTiles < 1 || loraRunTiles > 4)
    return emitError() << "wgmma plan parameter 'lora_run_tiles' must be in "
                          "[1, 4], got "
                       << loraRunTiles;
  if (bulkStores && producers == 0)
    return emitError() << "wgmma plan with 'bulk_stores' needs producers = "
                          "128 (the warp-specialized weight gradient)";
  if (!buckets)
    return success();
  int64_t previous = 0;
  for (Attribute entry : buckets) {
    auto bucket = dyn_cast<WgmmaBucketAttr>(entry);
    if (!bucket)
      return emitError() << "wgmma plan 'buckets' must hold "
                            "#moe.wgmma_bucket<...>, got "
                         << entry;
    if (bucket.getMaxRows() <= previous)
      return emitError() << "wgmma plan 'buckets' need strictly increasing "
                            "max_rows, got "
                         << bucket.getMaxRows() << " after " << previous;
    previous = bucket.getMaxRows();
  }
  return success();
}

LogicalResult
WgmmaBucketAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        int64_t maxRows, WgmmaPlanAttr plan) {
  if (maxRows < 1)
    return emitError() << "wgmma bucket 'max_rows' must be >= 1, got "
                       << maxRows;
  if (!plan)
    return emitError() << "wgmma bucket needs a plan";
  if (plan.getBuckets())
    return emitError() << "a wgmma bucket's plan has no buckets of its own";
  return success();
}

LogicalResult KernelAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 KernelStrategy strategy, TileAttr tile,
                                 WgmmaPlanAttr plan) {
  if (!tile)
    return emitError() << "kernel needs a tile";
  if (plan && strategy != KernelStrategy::sm90_wgmma)
    return emitError() << "kernel plan #moe.wgmma_plan is for strategy "
                          "sm90_wgmma only, got '"
                       << stringifyKernelStrategy(strategy) << "'";
  return success();
}

//===----------------------------------------------------------------------===//
// TargetAttr
//===----------------------------------------------------------------------===//

LogicalResult TargetAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StringRef kind, StringRef chip,
                                 int64_t smCount, int64_t sharedMemory) {
  if (!llvm::is_contained({"generic", "nvvm", "sm90a", "rocdl", "host"}, kind))
    return emitError() << "target kind must be one of generic, nvvm, sm90a, "
                          "rocdl or host, got '"
                       << kind << "'";
  if (smCount < 0 || smCount > 65536)
    return emitError() << "target 'sm_count' must be in [0, 65536], got "
                       << smCount;
  if (sharedMemory < 0 || sharedMemory > (int64_t(1) << 30))
    return emitError() << "target 'shared_memory' must be in [0, 2^30] "
                          "bytes, got "
                       << sharedMemory;
  // NVVM kernels use sm_89's FP8 conversions; the chip decides the rest.
  if (kind == "nvvm" && !chip.empty()) {
    unsigned version = 0;
    StringRef digits = chip;
    if (!digits.consume_front("sm_") ||
        digits.take_while(llvm::isDigit).getAsInteger(10, version) ||
        version < 89)
      return emitError() << "target kind 'nvvm' needs a chip sm_89 or newer "
                            "(e.g. sm_89, sm_90), got '"
                         << chip << "'";
  }
  // The sm90a matmul sizes its persistent grid by the SM count: 0 would
  // launch no blocks.
  if (kind == "sm90a" && smCount < 1)
    return emitError() << "target kind 'sm90a' needs 'sm_count' >= 1 (its "
                          "persistent grid), got "
                       << smCount;
  // What an sm_90 block may opt into: a deeper pipeline would fail at
  // launch.
  if (kind == "sm90a" && sharedMemory > 227 * 1024)
    return emitError() << "target kind 'sm90a' allows at most 232448 bytes "
                          "(227 KiB) of 'shared_memory' per block, got "
                       << sharedMemory;
  return success();
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

LogicalResult MoeDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attr) {
  if (attr.getName() == kTileAttrName && !isa<TileAttr>(attr.getValue()))
    return op->emitError() << "attribute '" << kTileAttrName
                           << "' must be a #moe.tile<...>, got "
                           << attr.getValue();
  if (attr.getName() == kKernelAttrName && !isa<KernelAttr>(attr.getValue()))
    return op->emitError() << "attribute '" << kKernelAttrName
                           << "' must be a #moe.kernel<...>, got "
                           << attr.getValue();
  if (attr.getName() == kTargetAttrName && !isa<TargetAttr>(attr.getValue()))
    return op->emitError() << "attribute '" << kTargetAttrName
                           << "' must be a #moe.target<...>, got "
                           << attr.getValue();
  if (attr.getName() == kTileBucketsAttrName) {
    auto buckets = dyn_cast<ArrayAttr>(attr.getValue());
    if (!buckets || buckets.empty() ||
        !llvm::all_of(buckets, llvm::IsaPred<TileBucketAttr>))
      return op->emitError()
             << "attribute '" << kTileBucketsAttrName
             << "' must be a non-empty array of #moe.tile_bucket<...>, got "
             << attr.getValue();
    int64_t previous = 0;
    for (auto bucket : buckets.getAsRange<TileBucketAttr>()) {
      if (bucket.getMaxRows() <= previous)
        return op->emitError()
               << "attribute '" << kTileBucketsAttrName
               << "' needs strictly increasing max_rows, got "
               << bucket.getMaxRows() << " after " << previous;
      previous = bucket.getMaxRows();
    }
  }
  return verifyLoweredAttribute(op, attr);
}

LogicalResult MoeDialect::verifyRegionArgAttribute(Operation *op,
                                                   unsigned /*regionIndex*/,
                                                   unsigned /*argIndex*/,
                                                   NamedAttribute attr) {
  return verifyLoweredAttribute(op, attr);
}
