//===- Compile.cpp - Functions to bundle entries, per target --------------===//
//
// Part of moec. Runs the pipelines (lib/Pipelines) and serializes each
// function's kernels for each target (see Target.h for the recipes).
//
//===----------------------------------------------------------------------===//

#include "moec/Target/Target.h"

#include "moec/Target/HostJit.h"

#include "EntryBuilder.h"

#include "moec/Conversion/TargetInfo.h"
#include "moec/Dialect/Moe/IR/MoeDialect.h"
#include "moec/Dialect/Moe/Transforms/Tiling.h"
#include "moec/Pipelines/Pipelines.h"
#include "moec/Version.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/ROCDL/ROCDLToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVM/ROCDL/Target.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

#include <cstdlib>

using namespace mlir;

namespace moec {

void registerTargetTranslations(DialectRegistry &registry) {
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  registerROCDLDialectTranslation(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  ROCDL::registerROCDLTargetInterfaceExternalModels(registry);
}

void loadCompilerDialects(MLIRContext &context) {
  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registry.insert<moe::MoeDialect>();
  registerTargetTranslations(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

std::string findPtxas() {
  auto executable = [](const std::string &path) {
    return !path.empty() && llvm::sys::fs::can_execute(path);
  };
  if (const char *explicitPath = std::getenv("MOEC_PTXAS"))
    if (executable(explicitPath))
      return explicitPath;
  if (const char *home = std::getenv("CUDA_HOME"))
    if (executable(std::string(home) + "/bin/ptxas"))
      return std::string(home) + "/bin/ptxas";
  if (auto onPath = llvm::sys::findProgramByName("ptxas"))
    return *onPath;
  if (executable("/usr/local/cuda/bin/ptxas"))
    return "/usr/local/cuda/bin/ptxas";
  return "";
}

std::string findLld() {
  std::vector<std::string> paths;
  if (const char *explicitPath = std::getenv("MOEC_LLD"))
    paths.push_back(explicitPath);
  if (const char *rocm = std::getenv("ROCM_PATH"))
    paths.push_back(std::string(rocm) + "/llvm/bin/ld.lld");
  // ROCm's or LLVM 22's before PATH: an older ld.lld on PATH (Debian 12
  // ships 14) does not know code object v5.
  paths.push_back("/opt/rocm/llvm/bin/ld.lld");
  paths.push_back("/usr/lib/llvm-22/bin/ld.lld");
  for (const std::string &path : paths)
    if (llvm::sys::fs::can_execute(path))
      return path;
  for (const char *name : {"ld.lld-22", "ld.lld"})
    if (auto found = llvm::sys::findProgramByName(name))
      if (llvm::sys::fs::can_execute(*found))
        return *found;
  return "";
}

namespace {

LogicalResult runPipeline(ModuleOp module,
                          llvm::function_ref<void(OpPassManager &)> build) {
  PassManager pm(module.getContext());
  build(pm);
  return pm.run(module);
}

/// Runs `program` with `args`; on failure returns its stderr in `message`,
/// and on success too where `log` is given.
bool runTool(StringRef program, ArrayRef<StringRef> args,
             std::string &message, std::string *log = nullptr) {
  SmallString<128> errPath;
  llvm::sys::fs::createTemporaryFile("moec-tool", "err", errPath);
  std::optional<StringRef> redirects[] = {std::nullopt, std::nullopt,
                                          StringRef(errPath)};
  std::string execError;
  int rc = llvm::sys::ExecuteAndWait(program, args, std::nullopt, redirects, 0,
                                     0, &execError);
  // stderr is read only where someone wants it.
  if (rc != 0 || log) {
    auto err = llvm::MemoryBuffer::getFile(errPath);
    std::string errText = err ? (*err)->getBuffer().str() : "";
    if (rc != 0)
      message = execError + errText;
    else
      *log = std::move(errText);
  }
  llvm::sys::fs::remove(errPath);
  return rc == 0;
}

/// One note per kernel that ptxas -v says spills registers to local memory
/// ("Compiling entry function 'K'", then "N bytes spill stores, M bytes
/// spill loads"): still correct, but each spill is memory traffic that the
/// kernel's designer meant to keep in registers.
void noteSpills(StringRef log, StringRef chip, CompileResult &result) {
  llvm::Regex entry("Compiling entry function '([A-Za-z0-9_$.]+)'");
  llvm::Regex spills("([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  std::string kernel;
  SmallVector<StringRef> lines, match;
  log.split(lines, '\n');
  for (StringRef line : lines) {
    if (entry.match(line, &match)) {
      kernel = match[1].str();
    } else if (spills.match(line, &match) &&
               (match[1] != "0" || match[2] != "0")) {
      result.notes.push_back("ptxas: " + kernel + " spills registers for " +
                             chip.str() + " (" + match[1].str() +
                             " bytes stored, " + match[2].str() +
                             " bytes loaded): correct, but it may run slower");
    }
  }
}

bool readFile(StringRef path, std::vector<uint8_t> &bytes) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false);
  if (!buffer)
    return false;
  StringRef data = (*buffer)->getBuffer();
  bytes.assign(data.begin(), data.end());
  return true;
}

/// Emits `module` (LLVM IR) for `triple`/`cpu` as an object or assembly.
LogicalResult emitMachineCode(llvm::Module &module, StringRef triple,
                              StringRef cpu, StringRef features,
                              llvm::CodeGenFileType kind,
                              std::vector<uint8_t> &out, Location loc) {
  std::string error;
  llvm::Triple theTriple(triple);
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(theTriple, error);
  if (!target)
    return emitError(loc) << "no LLVM target for " << triple << ": " << error;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      theTriple, cpu, features, {}, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  module.setTargetTriple(theTriple);
  module.setDataLayout(machine->createDataLayout());
  SmallString<0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (machine->addPassesToEmitFile(pm, os, nullptr, kind))
    return emitError(loc) << "LLVM cannot emit this file type for " << triple;
  pm.run(module);
  out.assign(buffer.begin(), buffer.end());
  return success();
}

/// The gpu.module or gpu.binary of one lowered function.
template <typename OpTy>
OpTy findKernelsOf(ModuleOp module, StringRef entry) {
  for (auto op : module.getOps<OpTy>())
    if (op.getName() == (entry + "_kernels").str())
      return op;
  return nullptr;
}

LogicalResult serializeNVVM(ModuleOp kernels, rt::Entry &entry,
                            const std::string &chip, CompileResult &result,
                            const CompileOptions &options) {
  auto binary = findKernelsOf<gpu::BinaryOp>(kernels, entry.name);
  if (!binary || binary.getObjects().empty())
    return kernels.emitError("no PTX for ") << entry.name;
  auto object = cast<gpu::ObjectAttr>(binary.getObjects()[0]);
  std::string ptx = object.getObject().getValue().str();
  if (options.keepAssembly)
    result.assembly.push_back({entry.name + " " + chip, ptx});

  std::string ptxas = options.assemble ? findPtxas() : std::string();
  if (ptxas.empty() && !options.assemble) {
    entry.binaryKind = rt::BinaryKind::Ptx;
    entry.binary.assign(ptx.begin(), ptx.end());
    return success();
  }
  if (ptxas.empty()) {
    result.notes.push_back(
        "ptxas not found (looked at $MOEC_PTXAS, in $CUDA_HOME/bin, PATH, "
        "/usr/local/cuda/bin and pip's nvidia-cuda-nvcc): " + entry.name +
        " ships PTX for " + chip +
        ", which the CUDA driver compiles at load time; install the CUDA "
        "toolkit or `pip install nvidia-cuda-nvcc` for cubins");
    entry.binaryKind = rt::BinaryKind::Ptx;
    entry.binary.assign(ptx.begin(), ptx.end());
    return success();
  }
  SmallString<128> ptxPath, cubinPath;
  llvm::sys::fs::createTemporaryFile("moec", "ptx", ptxPath);
  llvm::sys::fs::createTemporaryFile("moec", "cubin", cubinPath);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(ptxPath, ec);
    os << ptx;
  }
  std::string arch = "-arch=" + chip, message;
  std::string log;
  bool ok = runTool(ptxas,
                    {ptxas, arch, "-O3", "-v", ptxPath, "-o", cubinPath},
                    message, &log) &&
            readFile(cubinPath, entry.binary);
  if (ok)
    noteSpills(log, chip, result);
  llvm::sys::fs::remove(ptxPath);
  llvm::sys::fs::remove(cubinPath);
  if (!ok)
    return kernels.emitError("ptxas failed on ")
           << entry.name << " for " << chip << ": " << message;
  entry.binaryKind = rt::BinaryKind::Cubin;
  return success();
}

LogicalResult serializeROCDL(ModuleOp kernels, rt::Entry &entry,
                             const std::string &chip, CompileResult &result,
                             const CompileOptions &options) {
  auto gpuModule = findKernelsOf<gpu::GPUModuleOp>(kernels, entry.name);
  if (!gpuModule)
    return kernels.emitError("no kernels for ") << entry.name;
  // A plain module holding the LLVM-dialect kernels, so that the ROCm
  // device libraries (which these kernels never call) are not required.
  OwningOpRef<ModuleOp> plain = ModuleOp::create(gpuModule.getLoc());
  // The data layout puts allocas in AMDGPU's private address space (5).
  for (NamedAttribute attr : gpuModule->getDiscardableAttrs())
    if (attr.getName().getValue().starts_with("llvm."))
      (*plain)->setAttr(attr.getName(), attr.getValue());
  OpBuilder builder(plain->getBodyRegion());
  for (Operation &op : gpuModule.getBody()->without_terminator())
    builder.clone(op);
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(*plain, llvmContext, entry.name);
  if (!llvmModule)
    return kernels.emitError("LLVM IR translation failed for ") << entry.name;

  // Code object v5, as ROCm 6 loads (gpu-module-to-binary sets this from
  // the target's `abi`).
  auto setABI = [](llvm::Module &m) {
    m.addModuleFlag(llvm::Module::Error, "amdhsa_code_object_version", 500);
  };
  setABI(*llvmModule);
  const char *triple = "amdgcn-amd-amdhsa";
  std::vector<uint8_t> assembly, object;
  if (failed(emitMachineCode(*llvmModule, triple, chip, "",
                             llvm::CodeGenFileType::AssemblyFile, assembly,
                             gpuModule.getLoc())))
    return failure();
  if (options.keepAssembly)
    result.assembly.push_back(
        {entry.name + " " + chip, std::string(assembly.begin(), assembly.end())});
  // Translate afresh: codegen consumed the module.
  llvmModule = translateModuleToLLVMIR(*plain, llvmContext, entry.name);
  setABI(*llvmModule);
  if (failed(emitMachineCode(*llvmModule, triple, chip, "",
                             llvm::CodeGenFileType::ObjectFile, object,
                             gpuModule.getLoc())))
    return failure();

  // An HSACO is the object linked as a shared library.
  std::string lld = findLld();
  if (lld.empty())
    return kernels.emitError(
        "ld.lld not found (looked at $MOEC_LLD, in $ROCM_PATH/llvm/bin, "
        "/opt/rocm/llvm/bin, /usr/lib/llvm-22/bin and PATH): it links the "
        "AMDGPU object into an HSACO; install ROCm or Debian's lld-22");
  SmallString<128> objPath, hsacoPath;
  llvm::sys::fs::createTemporaryFile("moec", "o", objPath);
  llvm::sys::fs::createTemporaryFile("moec", "hsaco", hsacoPath);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(objPath, ec);
    os.write(reinterpret_cast<const char *>(object.data()), object.size());
  }
  std::string message;
  bool ok = runTool(lld, {lld, "-shared", objPath, "-o",
                          hsacoPath},
                    message) &&
            readFile(hsacoPath, entry.binary);
  llvm::sys::fs::remove(objPath);
  llvm::sys::fs::remove(hsacoPath);
  if (!ok)
    return kernels.emitError("ld.lld failed on ")
           << entry.name << " (" << lld << "; one older than LLVM 17 does "
           << "not know code object v5: set MOEC_LLD): " << message;
  entry.binaryKind = rt::BinaryKind::Hsaco;
  return success();
}

LogicalResult serializeHost(ModuleOp hostModule, std::vector<uint8_t> &object) {
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(hostModule, llvmContext, "moec_host");
  if (!llvmModule)
    return hostModule.emitError("LLVM IR translation failed (host)");
  // The packed entry points `moec run BUNDLE` launches (HostProgram::load).
  addPackedWrappers(*llvmModule);
  return emitMachineCode(*llvmModule, llvm::sys::getDefaultTargetTriple(),
                         llvm::sys::getHostCPUName(), "",
                         llvm::CodeGenFileType::ObjectFile, object,
                         hostModule.getLoc());
}

/// The convert-moe-to-kernels target for a compile target.
std::string kernelTargetOf(StringRef target) {
  // NVVM's FP8 conversions need sm_89 (Ada) or newer; wgmma needs the
  // architecture-specific sm_90a.
  unsigned sm = 0;
  if (target == "sm_90a")
    return "sm90a";
  if (target.starts_with("sm_"))
    return target.drop_front(3).take_while(llvm::isDigit).getAsInteger(10, sm) ||
                   sm < 89
               ? "generic"
               : "nvvm";
  if (target.starts_with("gfx"))
    return "rocdl";
  return "host";
}

/// A clone of `module` for `kernelTarget`: a `chip` (the compile target,
/// where the kind's kernels depend on it) and an `smCount` (> 0: the SMs
/// persistent kernels fill) go in its #moe.target unless it has one.
OwningOpRef<ModuleOp> cloneForTarget(ModuleOp module,
                                     const std::string &kernelTarget,
                                     StringRef chip, int64_t smCount) {
  OwningOpRef<ModuleOp> kernels(cast<ModuleOp>(module->clone()));
  if ((!chip.empty() || smCount > 0) &&
      !(*kernels)->hasAttr(moe::kTargetAttrName)) {
    MLIRContext *context = module.getContext();
    moe::TargetAttr target =
        TargetInfo::defaultAttr(context, kernelTarget, chip);
    if (smCount > 0)
      target = moe::TargetAttr::get(context, target.getKind(),
                                    target.getChip(), smCount,
                                    target.getSharedMemory());
    (*kernels)->setAttr(moe::kTargetAttrName, target);
  }
  return kernels;
}

/// The chip a compile target's kernels depend on (NVVM's: sm_89 has no
/// bulk L2 prefetch; the other kinds' kernels serve every chip of the
/// kind), and the SM count its persistent grids fill (sm90a's only).
std::pair<std::string, int64_t> targetFacts(const std::string &target,
                                            const CompileOptions &options) {
  std::string family = kernelTargetOf(target);
  return {family == "nvvm" ? target : "",
          family == "sm90a" ? options.smCount : 0};
}

/// A diagnostic on `module` unless `target` names a compile target.
LogicalResult checkTargetName(ModuleOp module, StringRef target) {
  if (llvm::Regex("^(sm_[0-9]+a?|gfx[0-9]+[a-z]*|host)$").match(target))
    return success();
  return module.emitError("unknown target '")
         << target << "' (expected sm_90a, gfx942 or host)";
}

/// Lowers a clone of `module` (cloneForTarget's) to kernels for
/// `kernelTarget` and describes its entries.
FailureOr<OwningOpRef<ModuleOp>> lowerToKernels(ModuleOp module,
                                                std::vector<rt::Entry> &entries,
                                                const TileOverride &tile,
                                                const std::string &kernelTarget,
                                                StringRef chip = "",
                                                int64_t smCount = 0) {
  OwningOpRef<ModuleOp> kernels =
      cloneForTarget(module, kernelTarget, chip, smCount);
  if (failed(runPipeline(*kernels, [&](OpPassManager &pm) {
        buildMoeToKernelsPipeline(pm, tile, kernelTarget);
      })))
    return failure();
  for (auto func : kernels->getOps<func::FuncOp>()) {
    if (!func->hasAttr(moe::MoeDialect::EntryAttrHelper::getNameStr()))
      continue;
    FailureOr<rt::Entry> entry = describeEntry(func);
    if (failed(entry))
      return failure();
    entries.push_back(std::move(*entry));
  }
  return kernels;
}

/// The LLVM backends moec emits for: NVPTX, AMDGPU and the host's. Named
/// one by one, not InitializeAllTargets: where LLVM is linked statically (the
/// wheel's _compiler) that would pull in all 23 backends.
void initializeLLVMTargets() {
  static bool done = [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTarget();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUAsmPrinter();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)done;
}

} // namespace

OwningOpRef<ModuleOp> lowerForHost(ModuleOp module,
                                   std::vector<rt::Entry> &entries,
                                   const TileOverride &tile) {
  FailureOr<OwningOpRef<ModuleOp>> kernels =
      lowerToKernels(module, entries, tile, "host");
  if (failed(kernels) ||
      failed(runPipeline(**kernels, buildKernelsToHostPipeline)))
    return nullptr;
  return std::move(*kernels);
}

const std::vector<std::string> &loweringStages() {
  static const std::vector<std::string> stages = {
      "moe", "optimized", "kernels", "nvvm", "rocdl", "host"};
  return stages;
}

FailureOr<OwningOpRef<ModuleOp>>
lowerToStage(ModuleOp module, const std::string &stage,
             const TileOverride &tile) {
  OwningOpRef<ModuleOp> lowered(cast<ModuleOp>(module->clone()));
  auto build = [&](OpPassManager &pm) {
    if (stage == "optimized") {
      buildMoeOptimizePipeline(pm, tile);
      return;
    }
    if (stage != "moe")
      buildMoeToKernelsPipeline(pm, tile,
                                stage == "kernels" ? "generic" : stage);
    if (stage == "nvvm")
      buildKernelsToNVVMPipeline(pm, {"sm_90a", "+ptx80", 3});
    else if (stage == "rocdl")
      buildKernelsToROCDLPipeline(pm, {"gfx942", "", 3});
    else if (stage == "host")
      buildKernelsToHostPipeline(pm);
  };
  if (!llvm::is_contained(loweringStages(), stage))
    return module.emitError("unknown stage '")
           << stage << "' (expected one of: "
           << llvm::join(loweringStages(), ", ") << ")";
  if (failed(runPipeline(*lowered, build)))
    return failure();
  return lowered;
}

LogicalResult compileModule(ModuleOp module, const CompileOptions &options,
                            CompileResult &result) {
  initializeLLVMTargets();
  if (options.smCount < 0 || options.smCount > 65536)
    return module.emitError("SM count must be in [0, 65536], got ")
           << options.smCount;
  for (const std::string &target : options.targets)
    if (failed(checkTargetName(module, target)))
      return failure();
  // Kernels (and so launch sequences) differ by target family: lower once
  // per family.
  struct Lowered {
    OwningOpRef<ModuleOp> module;
    std::vector<rt::Entry> entries;
  };
  std::map<std::string, Lowered> byFamily;
  auto kernelsFor = [&](const std::string &target) -> FailureOr<Lowered *> {
    std::string family = kernelTargetOf(target);
    auto [chip, smCount] = targetFacts(target, options);
    auto it = byFamily.find(family + ":" + chip);
    if (it != byFamily.end())
      return &it->second;
    Lowered lowered;
    // A target family has one target where tiles are tuned (sm90a).
    TileOverride tile = options.tile;
    tile.tuningTarget = target;
    FailureOr<OwningOpRef<ModuleOp>> kernels =
        lowerToKernels(module, lowered.entries, tile, family, chip, smCount);
    if (failed(kernels))
      return failure();
    if (lowered.entries.empty())
      return module.emitError("no function to compile");
    lowered.module = std::move(*kernels);
    return &byFamily.emplace(family + ":" + chip, std::move(lowered))
                .first->second;
  };
  result.bundle.producer = MOEC_PRODUCER;
  for (const std::string &target : options.targets) {
    FailureOr<Lowered *> kernels = kernelsFor(target);
    if (failed(kernels))
      return failure();
    OwningOpRef<ModuleOp> lowered(
        cast<ModuleOp>((*kernels)->module->clone()));
    std::vector<rt::Entry> targetEntries = (*kernels)->entries;
    if (target == "host") {
      std::vector<uint8_t> object;
      if (failed(runPipeline(*lowered, buildKernelsToHostPipeline)) ||
          failed(serializeHost(*lowered, object)))
        return failure();
      for (rt::Entry &entry : targetEntries) {
        entry.binaryKind = rt::BinaryKind::HostObject;
        entry.binary = object;
      }
    } else if (StringRef(target).starts_with("sm_")) {
      // PTX 8.0 for the wgmma kernels; sm_89 gets its packed FP8
      // conversions only from PTX 8.1 on (sm_90 from 7.8).
      unsigned sm = 0;
      StringRef(target)
          .drop_front(3)
          .take_while(llvm::isDigit)
          .getAsInteger(10, sm);
      GpuTargetOptions gpu{target, sm == 89 ? "+ptx81" : "+ptx80", 3};
      if (failed(runPipeline(*lowered, [&](OpPassManager &pm) {
            buildKernelsToNVVMPipeline(pm, gpu);
          })))
        return failure();
      for (rt::Entry &entry : targetEntries)
        if (failed(serializeNVVM(*lowered, entry, target, result, options)))
          return failure();
    } else if (StringRef(target).starts_with("gfx")) {
      GpuTargetOptions gpu{target, "", 3};
      if (failed(runPipeline(*lowered, [&](OpPassManager &pm) {
            buildKernelsToROCDLPipeline(pm, gpu);
          })))
        return failure();
      for (rt::Entry &entry : targetEntries)
        if (failed(serializeROCDL(*lowered, entry, target, result, options)))
          return failure();
    } else {
      return module.emitError("unknown target '")
             << target << "' (expected sm_90a, gfx942 or host)";
    }
    for (rt::Entry &entry : targetEntries) {
      entry.target = target;
      result.bundle.entries.push_back(std::move(entry));
    }
  }
  return success();
}

/// Where the tile `op`'s kernel was built with came from (KernelChoice).
static std::string tileSource(Operation *op, moe::TileAttr tile) {
  if (op->hasAttr(moe::kTileAttrName))
    return "moe.tile";
  if (!isa_and_nonnull<moe::MoeDialect>(op->getDialect()))
    return "the op kind's";
  return tile == moe::defaultTileFor(op) ? "cost model" : "its moe.kernel";
}

FailureOr<std::vector<KernelChoice>>
kernelChoices(ModuleOp module, const std::string &target,
              const CompileOptions &options) {
  if (failed(checkTargetName(module, target)))
    return failure();
  std::string family = kernelTargetOf(target);
  auto [chip, smCount] = targetFacts(target, options);
  OwningOpRef<ModuleOp> selected =
      cloneForTarget(module, family, chip, smCount);
  TileOverride tile = options.tile;
  tile.tuningTarget = target;
  if (failed(runPipeline(*selected, [&](OpPassManager &pm) {
        buildMoeSelectKernelPipeline(pm, tile, family);
      })))
    return failure();
  std::vector<KernelChoice> choices;
  for (auto func : selected->getOps<func::FuncOp>())
    func.walk([&](Operation *op) {
      auto kernel = op->getAttrOfType<moe::KernelAttr>(moe::kKernelAttrName);
      if (!kernel)
        return;
      KernelChoice choice;
      choice.function = func.getSymName().str();
      choice.op = op->getName().getStringRef().str();
      llvm::raw_string_ostream loc(choice.location);
      op->getLoc().print(loc);
      choice.strategy = moe::stringifyKernelStrategy(kernel.getStrategy());
      llvm::raw_string_ostream tileText(choice.tile);
      tileText << kernel.getTile();
      choice.tileSource = tileSource(op, kernel.getTile());
      if (op->hasAttr(moe::kTileBucketsAttrName))
        choice.tileSource += ", moe.tile_buckets";
      if (kernel.getPlan()) {
        llvm::raw_string_ostream planText(choice.plan);
        planText << kernel.getPlan();
      }
      choices.push_back(std::move(choice));
    });
  return choices;
}

} // namespace moec
