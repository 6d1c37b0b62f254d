//===- TargetInfo.cpp - What kernels may use on each target ---------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Conversion/TargetInfo.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace moec;

namespace {

/// Plain gpu/scf/arith/memref/vector dialects: any backend.
class GenericTarget : public TargetInfo {
public:
  using TargetInfo::TargetInfo;
};

/// The host CPU: a block's threads run one by one, so no warp exchanges.
class HostTarget : public TargetInfo {
public:
  using TargetInfo::TargetInfo;
};

/// AMD GPUs through ROCDL: warp shuffles (a wave64 runs two groups of 32
/// lanes), nothing NVIDIA-specific.
class ROCDLTarget : public TargetInfo {
public:
  using TargetInfo::TargetInfo;
  bool hasWarpShuffles() const override { return true; }
};

/// NVIDIA GPUs from sm_89 on through NVVM. The chip (`sm_89`, `sm_90`, ...;
/// sm_90 when the attribute names none) decides what Hopper adds.
class NVVMTarget : public TargetInfo {
public:
  using TargetInfo::TargetInfo;
  bool hasWarpShuffles() const override { return true; }
  bool hasWarpReduxAndBallot() const override { return true; }
  bool hasPackedFP8Conversions() const override { return true; }
  bool hasStreamingStores() const override { return true; }
  bool hasBulkL2Prefetch() const override { return smVersion() >= 90; }
  bool hasAsyncCopy() const override { return true; }

private:
  /// 89 for sm_89, 90 for sm_90 or sm_90a (the verifier checks the form).
  unsigned smVersion() const {
    unsigned version = 90;
    StringRef chip = attr().getChip();
    if (chip.consume_front("sm_"))
      (void)chip.take_while(llvm::isDigit).getAsInteger(10, version);
    return version;
  }
};

/// Hopper (sm_90a): NVVM plus the warpgroup-MMA matmul.
class Sm90aTarget : public NVVMTarget {
public:
  using NVVMTarget::NVVMTarget;
  bool hasWgmma() const override { return true; }
};

} // namespace

std::unique_ptr<TargetInfo> TargetInfo::create(moe::TargetAttr attr) {
  StringRef kind = attr.getKind();
  if (kind == "sm90a")
    return std::unique_ptr<TargetInfo>(new Sm90aTarget(attr));
  if (kind == "nvvm")
    return std::unique_ptr<TargetInfo>(new NVVMTarget(attr));
  if (kind == "rocdl")
    return std::unique_ptr<TargetInfo>(new ROCDLTarget(attr));
  if (kind == "host")
    return std::unique_ptr<TargetInfo>(new HostTarget(attr));
  return std::unique_ptr<TargetInfo>(new GenericTarget(attr));
}

moe::TargetAttr TargetInfo::defaultAttr(MLIRContext *context, StringRef kind,
                                        StringRef chip) {
  struct Facts {
    StringRef chip;
    int64_t smCount, sharedMemory;
  };
  // sm90a: an H100/H200 (132 SMs, 227 KiB of shared memory a block may
  // opt into); gfx942: an MI300X (304 CUs, 64 KiB LDS); 48 KiB, what any
  // CUDA block gets without opting in, elsewhere. Only the sm90a matmul
  // reads these facts today.
  std::optional<Facts> facts =
      llvm::StringSwitch<std::optional<Facts>>(kind)
          .Case("generic", Facts{"", 0, 48 * 1024})
          .Case("nvvm", Facts{"", 0, 48 * 1024})
          .Case("sm90a", Facts{"sm_90a", 132, 227 * 1024})
          .Case("rocdl", Facts{"gfx942", 304, 64 * 1024})
          .Case("host", Facts{"", 0, 0})
          .Default(std::nullopt);
  if (!facts)
    return {};
  return moe::TargetAttr::get(context, kind, chip.empty() ? facts->chip : chip,
                              facts->smCount, facts->sharedMemory);
}
