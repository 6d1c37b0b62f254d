//===- HostJit.cpp - Run a module's kernels on the host CPU ---------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Target/HostJit.h"

#include "moec/Target/Target.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

using namespace mlir;

namespace {

/// The soft-float f32 -> bf16 conversion that LLVM's x86 backend calls on
/// CPUs without AVX512-BF16 (a bf16 `select` is widened to f32 and rounded
/// back, even after arith-expand turned the conversions into integer ops).
/// compiler-rt provides it, but the JIT resolves symbols from this process,
/// which links libgcc (GCC 12's has none). Round to nearest even, NaNs kept
/// quiet. The bf16 result travels in the low 16 bits of the f32 return
/// register (the SysV x86-64 and AArch64 conventions for bf16).
extern "C" float moecTruncSFBF2(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t half;
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    half = (bits >> 16) | 0x40u; // NaN: quiet, sign kept
  else
    half = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  float result;
  std::memcpy(&result, &half, sizeof(result));
  return result;
}

} // namespace

namespace moec {

struct HostProgram::Impl {
  std::unique_ptr<ExecutionEngine> engine;
  /// Kernels looked up once: launches repeat on every run.
  llvm::StringMap<void (*)(void **)> kernels;
};

HostProgram::HostProgram() : impl_(std::make_unique<Impl>()) {}
HostProgram::~HostProgram() = default;

FailureOr<std::unique_ptr<HostProgram>>
HostProgram::create(ModuleOp module, const TileOverride &tile) {
  std::unique_ptr<HostProgram> program(new HostProgram());
  OwningOpRef<ModuleOp> host = lowerForHost(module, program->entries_, tile);
  if (!host)
    return failure();
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;
  ExecutionEngineOptions options;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Default;
  auto engine = ExecutionEngine::create(*host, options);
  if (!engine)
    return module.emitError("cannot JIT the host kernels: ")
           << llvm::toString(engine.takeError());
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("__truncsfbf2")] = {
        llvm::orc::ExecutorAddr::fromPtr(&moecTruncSFBF2),
        llvm::JITSymbolFlags::Exported};
    return symbols;
  });
  program->impl_->engine = std::move(*engine);
  return program;
}

const rt::Entry *HostProgram::find(const std::string &name) const {
  for (const rt::Entry &entry : entries_)
    if (entry.name == name)
      return &entry;
  return nullptr;
}

rt::Status HostProgram::prepare(const rt::Entry &) { return rt::Status::ok(); }

rt::Status HostProgram::launch(const rt::Entry &, const rt::LaunchStep &step,
                               uint64_t gridBlocks, void **params) {
  if (step.clusterBlocks > 1)
    return {rt::ErrorCode::Unsupported,
            "host kernel '" + step.kernel + "': thread-block clusters (" +
                std::to_string(step.clusterBlocks) +
                " blocks) are a GPU launch"};
  auto &fn = impl_->kernels[step.kernel];
  if (!fn) {
    auto found = impl_->engine->lookupPacked(step.kernel);
    if (!found) {
      llvm::consumeError(found.takeError());
      return {rt::ErrorCode::NotFound,
              "host kernel '" + step.kernel + "' not in the JIT module"};
    }
    fn = *found;
  }
  int64_t blocks = static_cast<int64_t>(gridBlocks);
  std::vector<void *> packed = {&blocks};
  packed.insert(packed.end(), params, params + step.params.size());
  fn(packed.data());
  return rt::Status::ok();
}

rt::Status HostProgram::allocate(size_t bytes, void **ptr) {
  *ptr = std::calloc(1, bytes ? bytes : 1);
  return *ptr ? rt::Status::ok()
              : rt::Status(rt::ErrorCode::DeviceError,
                           "host allocation of " + std::to_string(bytes) +
                               " bytes failed");
}

void HostProgram::release(void *ptr) { std::free(ptr); }

} // namespace moec
