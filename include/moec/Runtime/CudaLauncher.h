//===- CudaLauncher.h - Run bundle kernels with the CUDA driver -*- C++ -*-===//
//
// Part of moec. A KernelLauncher over the CUDA driver API (libcuda only, no
// cudart), plus the few device helpers a runner needs: copies, allocation,
// device info and event timing. This header does not include cuda.h: streams
// are passed as `void *` (a CUstream; nullptr is the default stream) and
// device addresses as `void *` holding a CUdeviceptr.
//
// Every call first makes sure the driver is initialized and a context is
// current on the calling thread: the current one if there is one (e.g.
// PyTorch's), otherwise the primary context of device 0.
//
// Built only when CMake finds the CUDA toolkit (target MoecCudaRuntime,
// definition MOEC_HAVE_CUDA).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_RUNTIME_CUDALAUNCHER_H
#define MOEC_RUNTIME_CUDALAUNCHER_H

#include "moec/Runtime/Executor.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace moec::rt {

class CudaLauncher : public KernelLauncher {
public:
  /// Launches on `stream` (a CUstream; nullptr = the default stream).
  explicit CudaLauncher(void *stream = nullptr);
  /// Unloads every module this launcher loaded.
  ~CudaLauncher() override;
  CudaLauncher(const CudaLauncher &) = delete;
  CudaLauncher &operator=(const CudaLauncher &) = delete;

  /// Loads the entry's module (Cubin, or Ptx that the driver JIT-compiles)
  /// once and resolves every step's kernel; later calls for the same entry
  /// only look it up. Other binary kinds are Unsupported.
  Status prepare(const Entry &entry) override;
  /// cuLaunchKernel(grid,1,1, blockSize,1,1, dynamicSharedBytes, stream);
  /// a step with clusterBlocks > 1 by cuLaunchKernelEx in clusters, at
  /// most as many as fit on the device at once (docs/bundle.md).
  /// Asynchronous: errors of the kernel itself show at synchronize().
  Status launch(const Entry &entry, const LaunchStep &step, uint64_t gridBlocks,
                void **params) override;
  /// cuTensorMapEncodeTiled: tiled, 128-byte swizzle, zeros out of bounds.
  Status encodeTensorMap(void *address, ElemType elem,
                         const std::vector<int64_t> &shape,
                         const std::vector<uint32_t> &box,
                         void *map) override;
  /// cuMemAlloc / cuMemFree / cuMemsetD8Async on the stream.
  Status allocate(size_t bytes, void **ptr) override;
  void release(void *ptr) override;

  /// Waits for the stream; reports errors of kernels launched earlier.
  Status synchronize();
  void *stream() const;

private:
  /// launch() of a step in clusters; `function` is its CUfunction.
  Status launchClusters(const LaunchStep &step, void *function,
                        uint64_t gridBlocks, void **params);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Initializes the driver and makes a context current (see above).
Status cudaInit();

struct CudaDeviceInfo {
  std::string name; ///< "NVIDIA H200"
  int major = 0;    ///< compute capability, 9 for sm_90a
  int minor = 0;
  int multiprocessors = 0;
  size_t totalMemory = 0; ///< bytes
  size_t l2CacheBytes = 0;
};
/// The device of the current context.
Status cudaDeviceInfo(CudaDeviceInfo &info);

/// Device memory (a CUdeviceptr in a `void *`).
Status cudaAlloc(size_t bytes, void **ptr);
Status cudaFree(void *ptr);
/// Synchronous copies. They wait for all work in the context first, so they
/// see what kernels on any stream wrote.
Status cudaCopyToDevice(void *dst, const void *src, size_t bytes);
Status cudaCopyToHost(void *dst, const void *src, size_t bytes);
/// Waits for all work in the current context.
Status cudaSynchronize();

/// Times `fn` (which launches work on `stream`) with CUDA events: `warmup`
/// untimed calls, then `iters` timed ones; `msPerIter[i]` is the device
/// time of call i in milliseconds. With `flushL2`, a buffer twice the L2
/// size is overwritten before each timed call (outside the timed region),
/// so that every call starts with a cold cache. Stops at the first error.
Status cudaTimeLaunches(void *stream, const std::function<Status()> &fn,
                        int warmup, int iters, std::vector<double> &msPerIter,
                        bool flushL2 = false);

} // namespace moec::rt

#endif // MOEC_RUNTIME_CUDALAUNCHER_H
