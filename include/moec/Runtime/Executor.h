//===- Executor.h - Run one bundle entry through a launcher -----*- C++ -*-===//
//
// Part of moec. Executes an entry's launch steps: binds the caller's input
// and output arrays, derives the symbols from the input shapes, checks every
// shape against the entry's expressions, allocates scratch buffers, computes
// grids and scalar parameters, and hands each launch to a KernelLauncher. The
// launcher is the only target-specific part: CUDA (CudaLauncher.h) or the
// host CPU (supplied by whoever holds the host code, e.g. `moec run`).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_RUNTIME_EXECUTOR_H
#define MOEC_RUNTIME_EXECUTOR_H

#include "moec/Runtime/Bundle.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moec::rt {

/// A dense row-major array in the launcher's memory space.
struct ArrayRef {
  void *data = nullptr;
  ElemType elem = ElemType::F32;
  std::vector<int64_t> shape;
};

class KernelLauncher {
public:
  virtual ~KernelLauncher() = default;
  /// Called once per entry before its first launch (load the module, ...).
  virtual Status prepare(const Entry &entry) = 0;
  /// Launches `step` over `gridBlocks` blocks. `params[i]` points at the
  /// value of parameter i (a device address or an int64), as cuLaunchKernel
  /// takes them.
  virtual Status launch(const Entry &entry, const LaunchStep &step,
                        uint64_t gridBlocks, void **params) = 0;
  /// Writes the 128-byte TMA descriptor of the row-major array `address`
  /// of `shape`, with boxes of `box` elements (innermost dimension first)
  /// and the 128-byte swizzle, to `map` (64-byte aligned). Only launchers
  /// of GPUs with TMA (sm_90 and newer) have one.
  virtual Status encodeTensorMap(void *address, ElemType elem,
                                 const std::vector<int64_t> &shape,
                                 const std::vector<uint32_t> &box,
                                 void *map) {
    return Status(ErrorCode::Unsupported,
                  "this launcher has no TMA tensor maps");
  }
  /// Scratch memory in the launcher's memory space.
  virtual Status allocate(size_t bytes, void **ptr) = 0;
  virtual void release(void *ptr) = 0;
};

/// Bytes of a dense array of `shape` (InvalidArgument on a negative extent
/// or when the size overflows size_t).
Status arrayBytes(ElemType elem, const std::vector<int64_t> &shape,
                  size_t &bytes);

/// "[64, 2048]".
std::string formatShape(const std::vector<int64_t> &shape);

/// Values of the entry's symbols, read from the input shapes (checks ranks).
Status bindSymbols(const Entry &entry, const std::vector<ArrayRef> &inputs,
                   std::vector<int64_t> &symbols);

/// Shape of every buffer of the entry for the given symbols.
Status bufferShapes(const Entry &entry, const std::vector<int64_t> &symbols,
                    std::vector<std::vector<int64_t>> &shapes);

/// Where one call's scratch goes: every Temp buffer at `offsets[i]` (256-
/// byte aligned; 0 for other buffers) of one allocation of `bytes`. Temps
/// whose live ranges do not overlap share bytes: a temp lives from the
/// first to the last launch step that reads or writes it or a view of it,
/// and the steps run one after another in order (one stream), each writing
/// the scratch it reads before reading it.
struct ScratchPlan {
  size_t bytes = 0;
  std::vector<size_t> offsets;
};

/// The scratch plan of the entry for its buffers' `shapes` (bufferShapes):
/// the largest temps first, each at the lowest offset free of the temps
/// already placed that are live with it.
Status planScratch(const Entry &entry,
                   const std::vector<std::vector<int64_t>> &shapes,
                   ScratchPlan &plan);

/// Runs the entry. `inputs` and `outputs` follow the order of the entry's
/// Input and Output buffers; each must have the expected element type and
/// shape (the message names the argument otherwise). Outputs are written in
/// full. Scratch (Temp) buffers are placed by planScratch in one allocation
/// through the launcher, not cleared (every kernel writes the scratch it
/// reads), and released before returning, on errors too. A View buffer
/// takes its source's address (its byte size must be the source's).
Status runEntry(const Entry &entry, const std::vector<ArrayRef> &inputs,
                const std::vector<ArrayRef> &outputs,
                KernelLauncher &launcher);

/// Runs the entry with every buffer supplied by the caller, scratch buffers
/// included (`buffers[i]` is buffer i). Lets a checker read intermediates.
/// Allocates and clears nothing. A view's array is checked but not used:
/// the kernels read and write its source's (read a view's values there).
Status runEntryWithAllBuffers(const Entry &entry,
                              const std::vector<ArrayRef> &buffers,
                              KernelLauncher &launcher);

} // namespace moec::rt

#endif // MOEC_RUNTIME_EXECUTOR_H
