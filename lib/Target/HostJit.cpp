//===- HostJit.cpp - Run a module's kernels on the host CPU ---------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Target/HostJit.h"

#include "moec/Target/Target.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ExecutionEngine/Orc/AbsoluteSymbols.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/MemoryBuffer.h"
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

/// The symbols host kernels need beyond the process's own.
llvm::orc::SymbolMap extraSymbols(llvm::orc::MangleAndInterner &interner) {
  llvm::orc::SymbolMap symbols;
  symbols[interner("__truncsfbf2")] = {
      llvm::orc::ExecutorAddr::fromPtr(&moecTruncSFBF2),
      llvm::JITSymbolFlags::Exported};
  return symbols;
}

void initializeNativeTarget() {
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;
}

} // namespace

namespace moec {

void addPackedWrappers(llvm::Module &module) {
  llvm::LLVMContext &context = module.getContext();
  llvm::PointerType *pointer = llvm::PointerType::getUnqual(context);
  std::vector<llvm::Function *> functions;
  for (llvm::Function &function : module)
    if (!function.isDeclaration() && !function.hasLocalLinkage())
      functions.push_back(&function);
  for (llvm::Function *function : functions) {
    auto *wrapper = llvm::Function::Create(
        llvm::FunctionType::get(llvm::Type::getVoidTy(context), {pointer},
                                /*isVarArg=*/false),
        llvm::GlobalValue::ExternalLinkage, "_mlir_" + function->getName(),
        module);
    llvm::IRBuilder<> builder(
        llvm::BasicBlock::Create(context, "entry", wrapper));
    llvm::Value *args = wrapper->getArg(0);
    auto slot = [&](unsigned i) {
      return builder.CreateLoad(pointer,
                                builder.CreateConstGEP1_64(pointer, args, i));
    };
    std::vector<llvm::Value *> values;
    for (llvm::Argument &param : function->args())
      values.push_back(
          builder.CreateLoad(param.getType(), slot(param.getArgNo())));
    llvm::Value *result = builder.CreateCall(function, values);
    if (!result->getType()->isVoidTy())
      builder.CreateStore(result, slot(function->arg_size()));
    builder.CreateRetVoid();
  }
}

struct HostProgram::Impl {
  /// One of the two: the JIT of a module (create) or of an object (load).
  std::unique_ptr<ExecutionEngine> engine;
  std::unique_ptr<llvm::orc::LLJIT> objectJit;
  /// Kernels looked up once: launches repeat on every run.
  llvm::StringMap<void (*)(void **)> kernels;

  /// The packed wrapper of `kernel` (addPackedWrappers).
  llvm::Expected<void (*)(void **)> lookup(llvm::StringRef kernel) {
    if (engine)
      return engine->lookupPacked(kernel);
    auto address = objectJit->lookup(("_mlir_" + kernel).str());
    if (!address)
      return address.takeError();
    return address->toPtr<void (*)(void **)>();
  }
};

HostProgram::HostProgram() : impl_(std::make_unique<Impl>()) {}
HostProgram::~HostProgram() = default;

FailureOr<std::unique_ptr<HostProgram>>
HostProgram::create(ModuleOp module, const TileOverride &tile) {
  std::unique_ptr<HostProgram> program(new HostProgram());
  OwningOpRef<ModuleOp> host = lowerForHost(module, program->entries_, tile);
  if (!host)
    return failure();
  initializeNativeTarget();
  ExecutionEngineOptions options;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Default;
  auto engine = ExecutionEngine::create(*host, options);
  if (!engine)
    return module.emitError("cannot JIT the host kernels: ")
           << llvm::toString(engine.takeError());
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    return extraSymbols(interner);
  });
  program->impl_->engine = std::move(*engine);
  return program;
}

std::unique_ptr<HostProgram> HostProgram::load(std::vector<rt::Entry> entries,
                                               std::string &error) {
  if (entries.empty() ||
      entries.front().binaryKind != rt::BinaryKind::HostObject) {
    error = "no host object to load";
    return nullptr;
  }
  // A compile writes one object for all of a bundle's host entries.
  for (const rt::Entry &entry : entries)
    if (entry.binaryKind != rt::BinaryKind::HostObject ||
        entry.binary != entries.front().binary) {
      error = "host entries " + entries.front().name + " and " + entry.name +
              " do not share one host object (bundles of separate compiles "
              "merged?): load them separately";
      return nullptr;
    }
  initializeNativeTarget();
  auto fail = [&](llvm::Error e) -> std::unique_ptr<HostProgram> {
    error = "cannot load the host object: " + llvm::toString(std::move(e));
    return nullptr;
  };
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit)
    return fail(jit.takeError());
  llvm::orc::JITDylib &main = (*jit)->getMainJITDylib();
  // libc and libm (malloc, expf, ...) from this process.
  auto processSymbols =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
          (*jit)->getDataLayout().getGlobalPrefix());
  if (!processSymbols)
    return fail(processSymbols.takeError());
  main.addGenerator(std::move(*processSymbols));
  llvm::orc::MangleAndInterner interner((*jit)->getExecutionSession(),
                                        (*jit)->getDataLayout());
  if (llvm::Error e =
          main.define(llvm::orc::absoluteSymbols(extraSymbols(interner))))
    return fail(std::move(e));
  const std::vector<uint8_t> &object = entries.front().binary;
  if (llvm::Error e = (*jit)->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(object.data()),
                          object.size()),
          "moec host object")))
    return fail(std::move(e));
  std::unique_ptr<HostProgram> program(new HostProgram());
  program->impl_->objectJit = std::move(*jit);
  // Every kernel resolved now: a missing one fails here, not mid-run.
  for (const rt::Entry &entry : entries)
    for (const rt::LaunchStep &step : entry.steps) {
      auto found = program->impl_->lookup(step.kernel);
      if (!found) {
        llvm::consumeError(found.takeError());
        error = "the host object has no packed entry point _mlir_" +
                step.kernel + " (of " + entry.name +
                "): bundles compiled before `moec run` took bundles lack "
                "them; compile it again";
        return nullptr;
      }
      program->impl_->kernels[step.kernel] = *found;
    }
  program->entries_ = std::move(entries);
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
    auto found = impl_->lookup(step.kernel);
    if (!found)
      return {rt::ErrorCode::NotFound,
              "host kernel '" + step.kernel +
                  "' not in the JIT module: " +
                  llvm::toString(found.takeError())};
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
