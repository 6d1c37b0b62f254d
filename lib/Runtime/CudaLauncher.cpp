//===- CudaLauncher.cpp - Launch bundle kernels with the CUDA driver ------===//
//
// Part of moec. Driver API only (libcuda), so the runtime builds and runs
// wherever the driver is, with no toolkit runtime to match. Every CUresult is
// checked and reported with the call and the kernel it concerned.
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/CudaLauncher.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

namespace moec::rt {

namespace {

/// The driver's entry points, loaded from libcuda at the first use
/// (dlopen): the runtime and the tools that link it start, print their help
/// and report "no driver" on a machine without one, instead of failing to
/// load. Members are named as in cuda.h, whose macros map some to their
/// versioned symbols (cuMemAlloc is cuMemAlloc_v2), for the member and
/// the symbol looked up alike.
struct Driver {
#define MOEC_DRIVER_FN(name) decltype(&::name) name = nullptr
  MOEC_DRIVER_FN(cuCtxGetCurrent);
  MOEC_DRIVER_FN(cuCtxGetDevice);
  MOEC_DRIVER_FN(cuCtxPopCurrent);
  MOEC_DRIVER_FN(cuCtxPushCurrent);
  MOEC_DRIVER_FN(cuCtxSetCurrent);
  MOEC_DRIVER_FN(cuCtxSynchronize);
  MOEC_DRIVER_FN(cuDeviceGet);
  MOEC_DRIVER_FN(cuDeviceGetAttribute);
  MOEC_DRIVER_FN(cuDeviceGetMemPool);
  MOEC_DRIVER_FN(cuDeviceGetName);
  MOEC_DRIVER_FN(cuDevicePrimaryCtxRetain);
  MOEC_DRIVER_FN(cuDeviceTotalMem);
  MOEC_DRIVER_FN(cuEventCreate);
  MOEC_DRIVER_FN(cuEventDestroy);
  MOEC_DRIVER_FN(cuEventElapsedTime);
  MOEC_DRIVER_FN(cuEventRecord);
  MOEC_DRIVER_FN(cuEventSynchronize);
  MOEC_DRIVER_FN(cuFuncSetAttribute);
  MOEC_DRIVER_FN(cuGetErrorName);
  MOEC_DRIVER_FN(cuGetErrorString);
  MOEC_DRIVER_FN(cuInit);
  MOEC_DRIVER_FN(cuLaunchKernel);
  MOEC_DRIVER_FN(cuLaunchKernelEx);
  MOEC_DRIVER_FN(cuMemAlloc);
  MOEC_DRIVER_FN(cuMemAllocAsync);
  MOEC_DRIVER_FN(cuMemFree);
  MOEC_DRIVER_FN(cuMemFreeAsync);
  MOEC_DRIVER_FN(cuMemPoolSetAttribute);
  MOEC_DRIVER_FN(cuMemcpyDtoH);
  MOEC_DRIVER_FN(cuMemcpyHtoD);
  MOEC_DRIVER_FN(cuMemsetD8Async);
  MOEC_DRIVER_FN(cuModuleGetFunction);
  MOEC_DRIVER_FN(cuModuleLoadDataEx);
  MOEC_DRIVER_FN(cuModuleUnload);
  MOEC_DRIVER_FN(cuOccupancyMaxActiveClusters);
  MOEC_DRIVER_FN(cuStreamIsCapturing);
  MOEC_DRIVER_FN(cuStreamSynchronize);
  MOEC_DRIVER_FN(cuTensorMapEncodeTiled);
#undef MOEC_DRIVER_FN
  /// Empty when loaded, else why not.
  std::string error;
};

#define MOEC_STRINGIFY(x) #x
#define MOEC_SYMBOL_NAME(x) MOEC_STRINGIFY(x)

Driver loadDriver() {
  Driver d;
  void *lib = nullptr;
  for (const char *file : {"libcuda.so.1", "libcuda.so"})
    if ((lib = dlopen(file, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!lib) {
    const char *why = dlerror();
    d.error = std::string("cannot load the CUDA driver (libcuda.so.1): ") +
              (why ? why : "not found") +
              "; install the NVIDIA driver, or run where a GPU is";
    return d;
  }
#define MOEC_DRIVER_FN(name)                                                   \
  if (!(d.name = reinterpret_cast<decltype(d.name)>(                          \
            dlsym(lib, MOEC_SYMBOL_NAME(name))))) {                            \
    d.error = std::string("the CUDA driver (libcuda) has no ") +              \
              MOEC_SYMBOL_NAME(name) + ": update the NVIDIA driver";           \
  }
  MOEC_DRIVER_FN(cuCtxGetCurrent)
  MOEC_DRIVER_FN(cuCtxGetDevice)
  MOEC_DRIVER_FN(cuCtxPopCurrent)
  MOEC_DRIVER_FN(cuCtxPushCurrent)
  MOEC_DRIVER_FN(cuCtxSetCurrent)
  MOEC_DRIVER_FN(cuCtxSynchronize)
  MOEC_DRIVER_FN(cuDeviceGet)
  MOEC_DRIVER_FN(cuDeviceGetAttribute)
  MOEC_DRIVER_FN(cuDeviceGetMemPool)
  MOEC_DRIVER_FN(cuDeviceGetName)
  MOEC_DRIVER_FN(cuDevicePrimaryCtxRetain)
  MOEC_DRIVER_FN(cuDeviceTotalMem)
  MOEC_DRIVER_FN(cuEventCreate)
  MOEC_DRIVER_FN(cuEventDestroy)
  MOEC_DRIVER_FN(cuEventElapsedTime)
  MOEC_DRIVER_FN(cuEventRecord)
  MOEC_DRIVER_FN(cuEventSynchronize)
  MOEC_DRIVER_FN(cuFuncSetAttribute)
  MOEC_DRIVER_FN(cuGetErrorName)
  MOEC_DRIVER_FN(cuGetErrorString)
  MOEC_DRIVER_FN(cuInit)
  MOEC_DRIVER_FN(cuLaunchKernel)
  MOEC_DRIVER_FN(cuLaunchKernelEx)
  MOEC_DRIVER_FN(cuMemAlloc)
  MOEC_DRIVER_FN(cuMemAllocAsync)
  MOEC_DRIVER_FN(cuMemFree)
  MOEC_DRIVER_FN(cuMemFreeAsync)
  MOEC_DRIVER_FN(cuMemPoolSetAttribute)
  MOEC_DRIVER_FN(cuMemcpyDtoH)
  MOEC_DRIVER_FN(cuMemcpyHtoD)
  MOEC_DRIVER_FN(cuMemsetD8Async)
  MOEC_DRIVER_FN(cuModuleGetFunction)
  MOEC_DRIVER_FN(cuModuleLoadDataEx)
  MOEC_DRIVER_FN(cuModuleUnload)
  MOEC_DRIVER_FN(cuOccupancyMaxActiveClusters)
  MOEC_DRIVER_FN(cuStreamIsCapturing)
  MOEC_DRIVER_FN(cuStreamSynchronize)
  MOEC_DRIVER_FN(cuTensorMapEncodeTiled)
#undef MOEC_DRIVER_FN
  return d;
}

/// The driver, loaded once; check `error` (ensureContext does) before a call.
const Driver &driver() {
  static const Driver loaded = loadDriver();
  return loaded;
}

/// "cuLaunchKernel (kernel 'foo'): CUDA_ERROR_INVALID_VALUE: invalid
/// argument".
Status cuStatus(CUresult result, const std::string &call) {
  if (result == CUDA_SUCCESS)
    return Status::ok();
  const char *name = nullptr;
  const char *text = nullptr;
  if (driver().cuGetErrorName(result, &name) != CUDA_SUCCESS || !name)
    name = nullptr;
  if (driver().cuGetErrorString(result, &text) != CUDA_SUCCESS || !text)
    text = nullptr;
  std::string message = call + ": ";
  if (name)
    message += name;
  else
    message += "CUresult " + std::to_string(static_cast<int>(result));
  if (text)
    message += std::string(": ") + text;
  return Status(ErrorCode::DeviceError, message);
}

#define MOEC_CU(call, what)                                                    \
  do {                                                                         \
    if (::moec::rt::Status moecStatus_ = cuStatus((call), (what));             \
        !moecStatus_)                                                          \
      return moecStatus_;                                                      \
  } while (false)

std::string kernelContext(const std::string &call, const std::string &kernel) {
  return call + " (kernel '" + kernel + "')";
}

CUdeviceptr toDevice(const void *ptr) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
}

void *fromDevice(CUdeviceptr ptr) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(ptr));
}

// Process-wide driver state. cuInit's result is sticky: a machine without a
// GPU answers the same way every time.
std::mutex gMutex;
bool gInitDone = false;
CUresult gInitResult = CUDA_SUCCESS;
CUcontext gPrimary = nullptr; // retained for the life of the process

Status ensureContext(CUcontext *current = nullptr) {
  {
    std::lock_guard<std::mutex> lock(gMutex);
    if (!gInitDone && driver().error.empty()) {
      gInitResult = driver().cuInit(0);
      gInitDone = true;
    }
  }
  if (!driver().error.empty())
    return Status(ErrorCode::DeviceError, driver().error);
  MOEC_CU(gInitResult, "cuInit");
  CUcontext ctx = nullptr;
  MOEC_CU(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (!ctx) {
    // No context on this thread (a plain C++ runner): use the primary
    // context of device 0, which PyTorch and cudart share.
    std::lock_guard<std::mutex> lock(gMutex);
    if (!gPrimary) {
      CUdevice device;
      MOEC_CU(driver().cuDeviceGet(&device, 0), "driver().cuDeviceGet(0)");
      MOEC_CU(driver().cuDevicePrimaryCtxRetain(&gPrimary, device),
              "cuDevicePrimaryCtxRetain");
    }
    MOEC_CU(driver().cuCtxSetCurrent(gPrimary), "cuCtxSetCurrent");
    ctx = gPrimary;
  }
  if (current)
    *current = ctx;
  return Status::ok();
}

/// FNV-1a over the size and both ends of the binary: cheap enough to run on
/// every prepare(), and tells apart two binaries that happen to live at the
/// same address one after the other.
uint64_t sampleHash(const std::vector<uint8_t> &binary) {
  constexpr size_t kSample = 4096;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint8_t byte) {
    h ^= byte;
    h *= 1099511628211ull;
  };
  for (int i = 0; i < 8; ++i)
    mix(static_cast<uint8_t>(binary.size() >> (8 * i)));
  size_t head = std::min(binary.size(), kSample);
  for (size_t i = 0; i < head; ++i)
    mix(binary[i]);
  for (size_t i =
           std::max(head, binary.size() - std::min(binary.size(), kSample));
       i < binary.size(); ++i)
    mix(binary[i]);
  return h;
}

/// Whether the current device allocates stream-ordered (memory pools). The
/// first call per device and process outside a stream capture also keeps
/// freed scratch reserved in the device's pool: with the default release
/// threshold (0) every synchronization hands it back and the next call maps
/// it again, which costs more GPU time than small kernels take. A pool
/// attribute set during a capture invalidates the capture (seen on the
/// H200 under torch.cuda.graph), so a capturing call only asks.
Status streamOrderedAllocation(CUstream stream, bool &supported) {
  static std::mutex mutex;
  static std::map<CUdevice, bool> configured; // device -> pools supported
  CUdevice device;
  MOEC_CU(driver().cuCtxGetDevice(&device), "cuCtxGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = configured.find(device); it != configured.end()) {
    supported = it->second;
    return Status::ok();
  }
  int pools = 0;
  MOEC_CU(driver().cuDeviceGetAttribute(
              &pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device),
          "driver().cuDeviceGetAttribute(memory pools supported)");
  supported = pools != 0;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  MOEC_CU(driver().cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing");
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return Status::ok(); // configured by the first call outside a capture
  if (supported) {
    CUmemoryPool pool;
    cuuint64_t keep = ~cuuint64_t(0);
    MOEC_CU(driver().cuDeviceGetMemPool(&pool, device), "cuDeviceGetMemPool");
    MOEC_CU(
        driver().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
        "driver().cuMemPoolSetAttribute(release threshold)");
  }
  configured[device] = supported;
  return Status::ok();
}

} // namespace

//===----------------------------------------------------------------------===//
// CudaLauncher
//===----------------------------------------------------------------------===//

struct CudaLauncher::Impl {
  struct Module {
    CUcontext ctx = nullptr;
    CUmodule module = nullptr;
    std::unordered_map<std::string, CUfunction> functions;
    /// Largest dynamic shared memory opted into, per function.
    std::unordered_map<CUfunction, uint32_t> sharedLimit;
    /// Clusters of a step's shape that fit on the device at once, per
    /// function (each function has one block size, cluster and shared size).
    std::unordered_map<CUfunction, int> maxClusters;
  };
  using Key =
      std::tuple<const Entry *, const void *, size_t, uint64_t, CUcontext>;

  CUstream stream = nullptr;
  std::map<Key, Module> modules;
  /// The module of the last prepare(), for launch()'s fast path.
  const Entry *lastEntry = nullptr;
  Module *last = nullptr;
  /// Whether allocations are stream-ordered (cuMemAllocAsync): no implicit
  /// device synchronization when runEntry frees its scratch. -1: not known.
  int asyncAlloc = -1;

  Status load(const Entry &entry, CUcontext ctx, Module &m);
  Status function(Module &m, const LaunchStep &step, CUfunction &f);
};

Status CudaLauncher::Impl::load(const Entry &entry, CUcontext ctx, Module &m) {
  std::string what =
      "cuModuleLoadData (entry '" + entry.name + "', " + entry.target + ")";
  if (entry.binaryKind != BinaryKind::Cubin &&
      entry.binaryKind != BinaryKind::Ptx)
    return Status(ErrorCode::Unsupported,
                  "entry '" + entry.name + "' (" + entry.target +
                      "): the CUDA launcher cannot load a " +
                      binaryKindName(entry.binaryKind) + " binary");
  if (entry.binary.empty())
    return Status(ErrorCode::InvalidArgument, "entry '" + entry.name + "' (" +
                                                  entry.target +
                                                  "): empty binary");
  // PTX is text the driver reads up to a NUL; the bundle stores no NUL.
  std::vector<uint8_t> image;
  const void *data = entry.binary.data();
  if (entry.binaryKind == BinaryKind::Ptx) {
    image.reserve(entry.binary.size() + 1);
    image.assign(entry.binary.begin(), entry.binary.end());
    image.push_back(0);
    data = image.data();
  }
  // The JIT log says why PTX did not compile (wrong sm, bad syntax).
  char log[8192] = {0};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log, reinterpret_cast<void *>(uintptr_t(sizeof(log)))};
  CUresult r = driver().cuModuleLoadDataEx(&m.module, data, 2, options, values);
  if (r != CUDA_SUCCESS) {
    Status s = cuStatus(r, what);
    log[sizeof(log) - 1] = 0;
    if (log[0])
      return Status(s.code(), s.message() + "\n" + log);
    return s;
  }
  m.ctx = ctx;
  return Status::ok();
}

Status CudaLauncher::Impl::function(Module &m, const LaunchStep &step,
                                    CUfunction &f) {
  auto it = m.functions.find(step.kernel);
  if (it != m.functions.end()) {
    f = it->second;
  } else {
    CUresult r = driver().cuModuleGetFunction(&f, m.module, step.kernel.c_str());
    if (r == CUDA_ERROR_NOT_FOUND)
      return Status(ErrorCode::NotFound,
                    "kernel '" + step.kernel + "' is not in the binary");
    MOEC_CU(r, kernelContext("cuModuleGetFunction", step.kernel));
    m.functions.emplace(step.kernel, f);
  }
  // Above 48 KiB of dynamic shared memory a kernel must opt in.
  constexpr uint32_t kDefaultShared = 48 * 1024;
  if (step.dynamicSharedBytes > kDefaultShared) {
    uint32_t &limit = m.sharedLimit[f];
    if (step.dynamicSharedBytes > limit) {
      MOEC_CU(
          driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             static_cast<int>(step.dynamicSharedBytes)),
          kernelContext("driver().cuFuncSetAttribute(max dynamic shared " +
                            std::to_string(step.dynamicSharedBytes) + ")",
                        step.kernel));
      limit = step.dynamicSharedBytes;
    }
  }
  return Status::ok();
}

CudaLauncher::CudaLauncher(void *stream) : impl_(new Impl) {
  impl_->stream = static_cast<CUstream>(stream);
}

CudaLauncher::~CudaLauncher() {
  // Best effort: at process exit the driver may already be shut down.
  for (auto &item : impl_->modules) {
    Impl::Module &m = item.second;
    if (!m.module)
      continue;
    if (driver().cuCtxPushCurrent(m.ctx) != CUDA_SUCCESS)
      continue;
    (void)driver().cuModuleUnload(m.module);
    CUcontext popped;
    (void)driver().cuCtxPopCurrent(&popped);
  }
}

void *CudaLauncher::stream() const { return impl_->stream; }

Status CudaLauncher::prepare(const Entry &entry) {
  CUcontext ctx;
  if (Status s = ensureContext(&ctx); !s)
    return s;
  Impl::Key key(&entry, entry.binary.data(), entry.binary.size(),
                sampleHash(entry.binary), ctx);
  auto it = impl_->modules.find(key);
  if (it == impl_->modules.end()) {
    Impl::Module m;
    if (Status s = impl_->load(entry, ctx, m); !s)
      return s;
    it = impl_->modules.emplace(key, std::move(m)).first;
  }
  Impl::Module &m = it->second;
  // Resolve every kernel now, so a missing one fails before any launch.
  for (const LaunchStep &step : entry.steps) {
    CUfunction f;
    if (Status s = impl_->function(m, step, f); !s)
      return Status(s.code(), "entry '" + entry.name + "' (" + entry.target +
                                  "): " + s.message());
  }
  impl_->lastEntry = &entry;
  impl_->last = &m;
  return Status::ok();
}

Status CudaLauncher::launch(const Entry &entry, const LaunchStep &step,
                            uint64_t gridBlocks, void **params) {
  if (gridBlocks == 0)
    return Status::ok();
  if (gridBlocks > 0x7fffffffull)
    return Status(ErrorCode::InvalidArgument,
                  "kernel '" + step.kernel + "': grid of " +
                      std::to_string(gridBlocks) +
                      " blocks exceeds the limit of 2^31-1");
  if (impl_->lastEntry != &entry) {
    if (Status s = prepare(entry); !s)
      return s;
  }
  CUfunction f;
  if (Status s = impl_->function(*impl_->last, step, f); !s)
    return s;
  if (step.clusterBlocks > 1)
    return launchClusters(step, f, gridBlocks, params);
  MOEC_CU(driver().cuLaunchKernel(f, static_cast<unsigned>(gridBlocks), 1, 1,
                         step.blockSize, 1, 1, step.dynamicSharedBytes,
                         impl_->stream, params, nullptr),
          kernelContext("cuLaunchKernel", step.kernel) + " grid " +
              std::to_string(gridBlocks) + " block " +
              std::to_string(step.blockSize) + " shared " +
              std::to_string(step.dynamicSharedBytes));
  return Status::ok();
}

Status CudaLauncher::launchClusters(const LaunchStep &step, void *function,
                                    uint64_t gridBlocks, void **params) {
  CUfunction f = static_cast<CUfunction>(function);
  uint32_t cluster = step.clusterBlocks;
  if (gridBlocks % cluster != 0)
    return Status(ErrorCode::InvalidArgument,
                  "kernel '" + step.kernel + "': grid of " +
                      std::to_string(gridBlocks) +
                      " blocks is not a multiple of its cluster of " +
                      std::to_string(cluster));
  CUlaunchAttribute clusterShape;
  clusterShape.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  clusterShape.value.clusterDim.x = cluster;
  clusterShape.value.clusterDim.y = 1;
  clusterShape.value.clusterDim.z = 1;
  CUlaunchConfig config = {};
  config.gridDimX = static_cast<unsigned>(gridBlocks);
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = step.blockSize;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = step.dynamicSharedBytes;
  config.hStream = impl_->stream;
  config.attrs = &clusterShape;
  config.numAttrs = 1;
  std::string shape = " grid " + std::to_string(gridBlocks) + " block " +
                      std::to_string(step.blockSize) + " cluster " +
                      std::to_string(cluster) + " shared " +
                      std::to_string(step.dynamicSharedBytes);
  // Clusters past those resident at once would wait for a second wave; the
  // kernel walks its work with a grid stride (Bundle.h), so fewer do it.
  auto known = impl_->last->maxClusters.find(f);
  if (known == impl_->last->maxClusters.end()) {
    int fit = 0;
    MOEC_CU(driver().cuOccupancyMaxActiveClusters(&fit, f, &config),
            kernelContext("cuOccupancyMaxActiveClusters", step.kernel) +
                shape);
    if (fit < 1)
      return Status(ErrorCode::Unsupported,
                    "kernel '" + step.kernel + "': not one cluster of" +
                        shape + " fits on the device");
    known = impl_->last->maxClusters.emplace(f, fit).first;
  }
  uint64_t clusters = gridBlocks / cluster;
  if (clusters > static_cast<uint64_t>(known->second))
    config.gridDimX = static_cast<unsigned>(known->second) * cluster;
  MOEC_CU(driver().cuLaunchKernelEx(&config, f, params, nullptr),
          kernelContext("cuLaunchKernelEx", step.kernel) + shape);
  return Status::ok();
}

Status CudaLauncher::encodeTensorMap(void *address, ElemType elem,
                                     const std::vector<int64_t> &shape,
                                     const std::vector<uint32_t> &box,
                                     void *map) {
  // FP8 moves as bytes: the copy does not look at the values.
  CUtensorMapDataType dataType;
  switch (elem) {
  case ElemType::BF16:
    dataType = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    break;
  case ElemType::F16:
    dataType = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    break;
  case ElemType::F8E4M3FN:
  case ElemType::F8E5M2:
    dataType = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    break;
  default:
    return Status(ErrorCode::InvalidArgument,
                  std::string("tensor map of ") + elemTypeName(elem) +
                      " elements (only bf16, f16 and FP8)");
  }
  size_t rank = shape.size();
  if (rank < 1 || rank > 5 || box.size() != rank)
    return Status(ErrorCode::InvalidArgument,
                  "tensor map of rank " + std::to_string(rank) + " with a " +
                      std::to_string(box.size()) + "-d box");
  // The driver counts dimensions from the innermost; row-major strides in
  // bytes for all but that one.
  cuuint64_t dims[5], strides[4];
  cuuint32_t boxDims[5], elementStrides[5];
  uint64_t stride = elemSize(elem);
  for (size_t i = 0; i < rank; ++i) {
    int64_t extent = shape[rank - 1 - i];
    if (extent < 1)
      return Status(ErrorCode::InvalidArgument,
                    "tensor map of shape " + formatShape(shape) +
                        " (every extent must be at least 1)");
    dims[i] = static_cast<cuuint64_t>(extent);
    if (i > 0)
      strides[i - 1] = stride;
    stride *= static_cast<uint64_t>(extent);
    boxDims[i] = box[i];
    elementStrides[i] = 1;
  }
  if (Status s = ensureContext(); !s)
    return s;
  MOEC_CU(driver().cuTensorMapEncodeTiled(
              static_cast<CUtensorMap *>(map),
              dataType, static_cast<cuuint32_t>(rank), address, dims, strides, boxDims,
              elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "cuTensorMapEncodeTiled (shape " + formatShape(shape) + ")");
  return Status::ok();
}

Status CudaLauncher::allocate(size_t bytes, void **ptr) {
  *ptr = nullptr;
  if (bytes == 0)
    return Status::ok();
  if (Status s = ensureContext(); !s)
    return s;
  if (impl_->asyncAlloc < 0) {
    bool pools = false;
    if (Status s = streamOrderedAllocation(impl_->stream, pools); !s)
      return s;
    impl_->asyncAlloc = pools;
  }
  CUdeviceptr p = 0;
  std::string what = "driver().cuMemAlloc(" + std::to_string(bytes) + " bytes)";
  if (impl_->asyncAlloc)
    MOEC_CU(driver().cuMemAllocAsync(&p, bytes, impl_->stream), what);
  else
    MOEC_CU(driver().cuMemAlloc(&p, bytes), what);
  *ptr = fromDevice(p);
  return Status::ok();
}

void CudaLauncher::release(void *ptr) {
  if (!ptr)
    return;
  // Stream-ordered: freed once the kernels queued before it are done.
  if (impl_->asyncAlloc > 0)
    (void)driver().cuMemFreeAsync(toDevice(ptr), impl_->stream);
  else
    (void)driver().cuMemFree(toDevice(ptr));
}

Status CudaLauncher::synchronize() {
  if (Status s = ensureContext(); !s)
    return s;
  MOEC_CU(driver().cuStreamSynchronize(impl_->stream), "cuStreamSynchronize");
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Helpers for runners
//===----------------------------------------------------------------------===//

Status cudaInit() { return ensureContext(); }

Status cudaDeviceInfo(CudaDeviceInfo &info) {
  if (Status s = ensureContext(); !s)
    return s;
  CUdevice device;
  MOEC_CU(driver().cuCtxGetDevice(&device), "cuCtxGetDevice");
  char name[256] = {0};
  MOEC_CU(driver().cuDeviceGetName(name, sizeof(name) - 1, device), "cuDeviceGetName");
  info.name = name;
  auto attr = [&](CUdevice_attribute a, int &v, const char *what) {
    return cuStatus(driver().cuDeviceGetAttribute(&v, a, device),
                    std::string("driver().cuDeviceGetAttribute(") + what + ")");
  };
  int l2 = 0;
  if (Status s = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, info.major,
                      "compute capability major");
      !s)
    return s;
  if (Status s = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, info.minor,
                      "compute capability minor");
      !s)
    return s;
  if (Status s = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                      info.multiprocessors, "multiprocessor count");
      !s)
    return s;
  if (Status s = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, l2, "L2 cache size");
      !s)
    return s;
  info.l2CacheBytes = static_cast<size_t>(l2);
  size_t total = 0;
  MOEC_CU(driver().cuDeviceTotalMem(&total, device), "cuDeviceTotalMem");
  info.totalMemory = total;
  return Status::ok();
}

Status cudaAlloc(size_t bytes, void **ptr) {
  *ptr = nullptr;
  if (bytes == 0)
    return Status::ok();
  if (Status s = ensureContext(); !s)
    return s;
  CUdeviceptr p = 0;
  MOEC_CU(driver().cuMemAlloc(&p, bytes),
          "driver().cuMemAlloc(" + std::to_string(bytes) + " bytes)");
  *ptr = fromDevice(p);
  return Status::ok();
}

Status cudaFree(void *ptr) {
  if (!ptr)
    return Status::ok();
  if (Status s = ensureContext(); !s)
    return s;
  MOEC_CU(driver().cuMemFree(toDevice(ptr)), "cuMemFree");
  return Status::ok();
}

Status cudaCopyToDevice(void *dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  if (Status s = ensureContext(); !s)
    return s;
  MOEC_CU(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  MOEC_CU(driver().cuMemcpyHtoD(toDevice(dst), src, bytes),
          "driver().cuMemcpyHtoD(" + std::to_string(bytes) + " bytes)");
  return Status::ok();
}

Status cudaCopyToHost(void *dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  if (Status s = ensureContext(); !s)
    return s;
  MOEC_CU(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  MOEC_CU(driver().cuMemcpyDtoH(dst, toDevice(src), bytes),
          "driver().cuMemcpyDtoH(" + std::to_string(bytes) + " bytes)");
  return Status::ok();
}

Status cudaSynchronize() {
  if (Status s = ensureContext(); !s)
    return s;
  MOEC_CU(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  return Status::ok();
}

namespace {

/// Owns the events and the flush buffer of one cudaTimeLaunches call.
struct TimingResources {
  std::vector<CUevent> events;
  CUdeviceptr flush = 0;
  ~TimingResources() {
    if (flush) {
      (void)driver().cuCtxSynchronize();
      (void)driver().cuMemFree(flush);
    }
    for (CUevent e : events)
      (void)driver().cuEventDestroy(e);
  }
};

} // namespace

Status cudaTimeLaunches(void *stream, const std::function<Status()> &fn,
                        int warmup, int iters, std::vector<double> &msPerIter,
                        bool flushL2) {
  msPerIter.clear();
  if (warmup < 0 || iters < 1)
    return Status(ErrorCode::InvalidArgument,
                  "timing needs warmup >= 0 and iters >= 1, got " +
                      std::to_string(warmup) + " and " + std::to_string(iters));
  if (Status s = ensureContext(); !s)
    return s;
  CUstream s = static_cast<CUstream>(stream);
  TimingResources res;
  size_t flushBytes = 0;
  if (flushL2) {
    CudaDeviceInfo info;
    if (Status st = cudaDeviceInfo(info); !st)
      return st;
    flushBytes = std::max<size_t>(2 * info.l2CacheBytes, 1 << 20);
    MOEC_CU(driver().cuMemAlloc(&res.flush, flushBytes), "driver().cuMemAlloc(L2 flush buffer)");
  }
  res.events.resize(2 * static_cast<size_t>(iters), nullptr);
  for (CUevent &e : res.events)
    MOEC_CU(driver().cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");

  for (int i = 0; i < warmup; ++i)
    if (Status st = fn(); !st)
      return st;
  for (int i = 0; i < iters; ++i) {
    if (flushL2)
      MOEC_CU(driver().cuMemsetD8Async(res.flush, static_cast<unsigned char>(i),
                              flushBytes, s),
              "driver().cuMemsetD8Async(L2 flush buffer)");
    MOEC_CU(driver().cuEventRecord(res.events[2 * i], s), "cuEventRecord");
    if (Status st = fn(); !st)
      return st;
    MOEC_CU(driver().cuEventRecord(res.events[2 * i + 1], s), "cuEventRecord");
  }
  MOEC_CU(driver().cuEventSynchronize(res.events.back()), "cuEventSynchronize");
  msPerIter.resize(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    MOEC_CU(driver().cuEventElapsedTime(&ms, res.events[2 * i], res.events[2 * i + 1]),
            "cuEventElapsedTime");
    msPerIter[i] = ms;
  }
  return Status::ok();
}

#undef MOEC_CU

} // namespace moec::rt
