//===- HostJit.h - Run a module's kernels on the host CPU -------*- C++ -*-===//
//
// Part of moec. Lowers a module for the host (see Target.h), JIT-compiles it
// with MLIR's ExecutionEngine and launches its kernels as a
// rt::KernelLauncher, so the runtime's executor runs host entries exactly as
// it runs CUDA ones. Or loads the host object of a bundle's entry (ORC's
// LLJIT) and launches its kernels the same way. Used by `moec run` and the
// Python compiler module.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TARGET_HOSTJIT_H
#define MOEC_TARGET_HOSTJIT_H

#include "moec/Pipelines/Pipelines.h"
#include "moec/Runtime/Executor.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
class Module;
} // namespace llvm

namespace moec {

/// Adds `void _mlir_<f>(void **args)` for every function `f` defined in
/// `module`: it calls `f` with the values args[i] point to (and stores a
/// result through args[n]). The packed form MLIR's ExecutionEngine
/// launches; host objects carry it, so that HostProgram::load launches
/// their kernels the same way.
void addPackedWrappers(llvm::Module &module);

class HostProgram : public rt::KernelLauncher {
public:
  /// Lowers `module` (moe dialect on tensors; not modified) for the host and
  /// JIT-compiles it. Failures are reported as diagnostics.
  static mlir::FailureOr<std::unique_ptr<HostProgram>>
  create(mlir::ModuleOp module, const TileOverride &tile = {});
  /// Loads the host object of `entries` (a bundle's entries for the host,
  /// which share one object); on failure says why in `error`.
  static std::unique_ptr<HostProgram> load(std::vector<rt::Entry> entries,
                                           std::string &error);
  ~HostProgram() override;

  /// One entry per function (from create: without binaries).
  const std::vector<rt::Entry> &entries() const { return entries_; }
  /// nullptr when there is no function `name`.
  const rt::Entry *find(const std::string &name) const;

  rt::Status prepare(const rt::Entry &entry) override;
  /// Host kernels take the number of blocks first, then the step's params.
  rt::Status launch(const rt::Entry &entry, const rt::LaunchStep &step,
                    uint64_t gridBlocks, void **params) override;
  rt::Status allocate(size_t bytes, void **ptr) override;
  void release(void *ptr) override;

private:
  HostProgram();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<rt::Entry> entries_;
};

} // namespace moec

#endif // MOEC_TARGET_HOSTJIT_H
