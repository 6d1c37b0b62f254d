//===- TuningCache.cpp - Tiles measured by the autotuner ------------------===//
//
// Part of moec. Reads the JSON tuning cache (format in TuningCache.h) and
// turns its buckets into `moe.tile` / `moe.tile_buckets` attributes.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/Transforms/TuningCache.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace moec::moe;

namespace {

std::string dimText(int64_t size) {
  return ShapedType::isDynamic(size) ? std::string("?") : std::to_string(size);
}

/// out [E, K, N] ([K, E, N], [E, N, K]) from lhs [M, K] (or gathered) and
/// grad_out [M, N]. The text is the one of the weight gradient before it
/// was an op of its own, so that earlier tuning caches still apply.
std::string weightGradKey(GroupedWeightGradOp wgrad) {
  auto lhs = cast<ShapedType>(wgrad.getLhs().getType());
  auto grad = cast<ShapedType>(wgrad.getGradOut().getType());
  auto out = cast<ShapedType>(wgrad.getOut().getType());
  int64_t experts =
      cast<ShapedType>(wgrad.getOffsets().getType()).getDimSize(0);
  // FP8 with scales: both operands transposed, K and N their rows.
  unsigned sizeDim = wgrad.getLhsScales() ? 0 : 1;
  std::string key;
  llvm::raw_string_ostream os(key);
  os << "grouped_matmul weight_grad " << lhs.getElementType() << "x"
     << grad.getElementType() << "->" << out.getElementType()
     << " E=" << dimText(experts) << " K=" << dimText(lhs.getDimSize(sizeDim))
     << " N=" << dimText(grad.getDimSize(sizeDim));
  if (wgrad.getLhsScales())
    os << " scales";
  if (wgrad.getExpertsInColumns())
    os << " out=KEN";
  else if (wgrad.getTransposeRhs())
    os << " out=ENK";
  if (wgrad.getGatherSlots())
    os << " gather k=" << wgrad.getK().value_or(1);
  return key;
}

} // namespace

std::optional<std::string> moec::moe::tuningKey(Operation *op) {
  if (auto wgrad = dyn_cast<GroupedWeightGradOp>(op))
    return weightGradKey(wgrad);
  auto matmul = dyn_cast<GroupedMatmulOp>(op);
  if (!matmul)
    return std::nullopt;
  auto lhs = cast<ShapedType>(matmul.getLhs().getType());
  auto rhs = cast<ShapedType>(matmul.getRhs().getType());
  auto out = cast<ShapedType>(matmul.getOut().getType());
  auto dim = dimText;
  std::string key;
  llvm::raw_string_ostream os(key);
  // The experts: the offsets' length (whatever dimension of the weights
  // holds them).
  int64_t experts =
      cast<ShapedType>(matmul.getOffsets().getType()).getDimSize(0);
  // N is the rhs width (gate and up together for SwiGLU): what the kernel
  // tiles.
  os << "grouped_matmul " << lhs.getElementType() << "x"
     << rhs.getElementType() << "->" << out.getElementType()
     << " E=" << dim(experts) << " K=" << dim(lhs.getDimSize(1))
     << " N=" << dim(rhs.getDimSize(matmul.getTransposeRhs() ? 1 : 2));
  if (matmul.getExpertsInColumns())
    os << " rhs=KEN";
  else if (!matmul.getTransposeRhs())
    os << " rhs=EKN";
  if (matmul.getGatherSlots())
    os << " gather k=" << matmul.getK().value_or(1);
  if (matmul.getActivation() != Activation::none)
    os << " " << stringifyActivation(matmul.getActivation());
  // The saved input's type picks the epilogue (16-byte chunks or pairs).
  if (Value input = matmul.getActivationInput())
    os << "(" << cast<ShapedType>(input.getType()).getElementType() << ")";
  if (matmul.getBias())
    os << " bias";
  if (matmul.getRowScale())
    os << " row_scale";
  if (matmul.getLhsScales())
    os << " lhs_scales";
  // The rank decides the plan (n = 128 past 64) and the epilogue's work.
  if (matmul.getLoraA()) {
    int64_t rows = cast<ShapedType>(matmul.getLoraA().getType()).getDimSize(0);
    int64_t experts =
        cast<ShapedType>(matmul.getOffsets().getType()).getDimSize(0);
    os << " lora r="
       << (ShapedType::isDynamic(rows) || experts <= 0
               ? std::string("?")
               : std::to_string(rows / experts));
  }
  return key;
}

FailureOr<TuningCache>
TuningCache::load(StringRef path, MLIRContext *context,
                  function_ref<InFlightDiagnostic()> emitError) {
  auto fail = [&](const Twine &what) {
    emitError() << "tuning cache '" << path << "': " << what;
    return failure();
  };
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(path);
  if (!file)
    return fail("cannot read it: " + file.getError().message());
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*file)->getBuffer());
  if (!json)
    return fail("not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root || root->getInteger("moec_tuning_cache") != 1)
    return fail("not a version 1 tuning cache (expected an object with "
                "\"moec_tuning_cache\": 1)");
  const llvm::json::Array *entries = root->getArray("entries");
  if (!entries)
    return fail("no \"entries\" array");

  TuningCache cache;
  for (auto [i, value] : llvm::enumerate(*entries)) {
    std::string where = "entry " + std::to_string(i);
    const llvm::json::Object *entry = value.getAsObject();
    if (!entry)
      return fail(where + " is not an object");
    std::optional<StringRef> target = entry->getString("target");
    std::optional<StringRef> key = entry->getString("key");
    std::optional<StringRef> tileText = entry->getString("tile");
    std::optional<int64_t> maxRows = entry->getInteger("max_rows");
    if (!target || !key || !tileText || !maxRows)
      return fail(where + " needs \"target\", \"key\", \"tile\" (strings) and "
                          "\"max_rows\" (an integer)");
    if (*maxRows < 1)
      return fail(where + ": \"max_rows\" must be >= 1, got " +
                  Twine(*maxRows));
    auto tile = dyn_cast_or_null<TileAttr>(parseAttribute(*tileText, context));
    if (!tile)
      return fail(where + ": \"tile\" is not a #moe.tile<...>: '" +
                  *tileText + "'");
    SmallVector<TunedTile> &list = cache.buckets[{target->str(), key->str()}];
    if (llvm::any_of(list, [&](const TunedTile &t) {
          return t.maxRows == *maxRows;
        }))
      return fail(where + ": a second tile for \"" + *key + "\" on " +
                  *target + " at max_rows " + Twine(*maxRows));
    list.push_back({*maxRows, tile});
    ++cache.count;
  }
  for (auto &[id, list] : cache.buckets)
    llvm::sort(list, [](const TunedTile &a, const TunedTile &b) {
      return a.maxRows < b.maxRows;
    });
  return cache;
}

SmallVector<TunedTile> TuningCache::lookup(StringRef target,
                                           StringRef key) const {
  auto it = buckets.find({target.str(), key.str()});
  if (it == buckets.end())
    return {};
  // A bucket with the tile of the next one adds nothing: the next one's
  // range then starts lower.
  SmallVector<TunedTile> merged;
  for (const TunedTile &bucket : it->second) {
    if (!merged.empty() && merged.back().tile == bucket.tile)
      merged.back().maxRows = bucket.maxRows;
    else
      merged.push_back(bucket);
  }
  return merged;
}

bool TuningCache::apply(Operation *op, StringRef target,
                        bool perBucketKernels) const {
  std::optional<std::string> key = tuningKey(op);
  if (!key)
    return false;
  SmallVector<TunedTile> tiles = lookup(target, *key);
  if (tiles.empty())
    return false;
  // With a kernel per bucket, every bucket, the largest too: rows above it
  // were never measured, so they keep the cost model's tile (on the H200,
  // a largest bucket's tile carried to 4x its rows ran 6 % slower than the
  // default).
  if (!perBucketKernels) {
    op->setAttr(kTileAttrName, tiles.back().tile);
    tiles.pop_back();
    if (tiles.empty())
      return true;
  }
  SmallVector<Attribute> list;
  for (const TunedTile &bucket : tiles)
    list.push_back(
        TileBucketAttr::get(op->getContext(), bucket.maxRows, bucket.tile));
  op->setAttr(kTileBucketsAttrName, ArrayAttr::get(op->getContext(), list));
  return true;
}
