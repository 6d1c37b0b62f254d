//===- Cli.cpp - The moec command line: compile, inspect, run, tune -------===//
//
// Part of moec.
//
//   moec compile in.mlir -o out.moecb [--target sm_90a,gfx942,host]
//                [--entry NAME,...] [--emit-asm DIR]
//                [--tuning-cache CACHE.json] [--sm-count N] [--print-plan]
//   moec tune in.mlir -o tune.moecb [--target sm_90a]
//   moec inspect out.moecb [--params] [--source]
//   moec run in.mlir|out.moecb [--entry NAME] [--sym T=64 ...] [--routing
//                uniform|one-expert|half-experts] [--seed N] [--iters N]
//   moec cache list|size|clear|path   (the Python package's: moec/_cli.py)
//
// `tune` writes the autotuner's candidate kernels (a bundle) and their
// manifest (tune.moecb.json) for `python3 -m moec.compiler.tune` on the GPU
// machine, whose tuning cache `compile --tuning-cache` then reads
// (Target/Tuning.h). `run` compiles for the host (or loads a bundle's host
// object with ORC's LLJIT), executes the kernels in-process on random
// inputs, checks every op against the float64 reference and prints timing.
// On the GPU machine, `moec-runner` (runtime only) does the same with a
// bundle and the CUDA driver.
// `--entry` makes `compile` and `run` lower only the named functions (and
// those they call).
//
//===----------------------------------------------------------------------===//

#include "moec/Cli/Cli.h"
#include "moec/Check/Check.h"
#include "moec/Runtime/Executor.h"
#include "moec/Runtime/Expr.h"
#include "moec/Target/HostJit.h"
#include "moec/Target/Target.h"
#include "moec/Target/Tuning.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

using namespace mlir;

namespace {

/// One subcommand: how it is called, what it does, and the options it
/// takes (another command's option is an error, not silently ignored).
struct Command {
  const char *name, *synopsis, *summary;
  std::vector<std::pair<std::string, const char *>> options;
};

const std::vector<Command> &commands() {
  static const std::vector<Command> list = {
      {"compile",
       "moec compile IN.mlir -o OUT.moecb [--target sm_90a,gfx942,host] "
       "[--entry NAME,...] [--emit-asm DIR] [--tuning-cache CACHE.json] "
       "[--sm-count N] [--print-plan]",
       "Compiles every function of IN.mlir (moe dialect) for each target "
       "into a bundle the runtime loads.",
       {{"-o", "the bundle to write (optional with --print-plan)"},
        {"--target", "comma-separated: sm_90a (wgmma kernels), other sm_NN "
                     "(nvvm kernels from sm_89, generic ones below), "
                     "gfx942, host (default host)"},
        {"--entry", "compile only these functions (and those they call)"},
        {"--emit-asm", "also write each target's PTX / AMDGPU assembly to "
                       "DIR"},
        {"--tuning-cache", "the autotuner's measured tiles (moec tune)"},
        {"--sm-count", "SMs sm_90a's persistent kernels fill (default 132)"},
        {"--print-plan", "print each op's kernel: strategy, tile and the "
                         "sm_90a wgmma plan"}}},
      {"tune", "moec tune IN.mlir -o TUNE.moecb [--target sm_90a]",
       "Writes the autotuner's candidate kernels and their manifest "
       "(TUNE.moecb.json) for `python3 -m moec.compiler.tune` on the GPU.",
       {{"-o", "the candidates' bundle to write"},
        {"--target", "the one target to tune for (default sm_90a)"}}},
      {"inspect", "moec inspect BUNDLE.moecb [--params] [--source]",
       "Lists a bundle's entries: buffers, symbols, launches, reference ops.",
       {{"--params", "each launch's kernel parameters"},
        {"--source", "each entry's MLIR after fusion"}}},
      {"run",
       "moec run IN.mlir|BUNDLE.moecb [--entry NAME] [--sym T=64 ...] "
       "[--routing uniform|one-expert|half-experts] [--seed N] [--iters N]",
       "Compiles one function for the host (or loads a bundle's host "
       "entry), runs it on random inputs, checks every op against the "
       "float64 reference and prints timing.",
       {{"--entry", "the function to run (needed when there are several)"},
        {"--sym", "NAME=COUNT for a dynamic size, e.g. T=64"},
        {"-T", "short for --sym T=COUNT"},
        {"--routing", "uniform, one-expert or half-experts"},
        {"--seed", "the random inputs' seed (default 1)"},
        {"--iters", "timed runs (default 5)"}}},
      {"cache", "moec cache list|size|clear|path",
       "The Python package's compile cache (moec.cache): `moec cache "
       "--help` there. Answered by the pip-installed moec or `python3 -m "
       "moec`, not by build/bin/moec.",
       {}}};
  return list;
}

const Command *findCommand(llvm::StringRef name) {
  for (const Command &command : commands())
    if (name == command.name)
      return &command;
  return nullptr;
}

/// The synopsis of every command on `os`; 2, the exit code of a bad call.
int usage(llvm::raw_ostream &os = llvm::errs()) {
  os << "usage:\n";
  for (const Command &command : commands())
    os << "  " << command.synopsis << "\n";
  os << "'moec COMMAND --help' describes a command.\n";
  return 2;
}

/// `moec COMMAND --help`.
int commandHelp(const Command &command) {
  llvm::outs() << "usage: " << command.synopsis << "\n\n"
               << command.summary << "\n\noptions:\n";
  for (auto &[option, help] : command.options)
    llvm::outs() << llvm::formatv("  {0,-16} {1}\n", option, help);
  return 0;
}

/// When the command started, for progress().
std::chrono::steady_clock::time_point commandStart;

/// A progress line on stderr, stamped with the seconds since the command
/// started: `run` and `tune` compile for up to minutes, and say what.
void progress(const llvm::Twine &what) {
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - commandStart)
                       .count();
  llvm::errs() << llvm::format("moec: [%6.1f s] ", seconds) << what << "\n";
  llvm::errs().flush();
}

int fail(const llvm::Twine &message) {
  llvm::errs() << "moec: error: " << message << "\n";
  return 1;
}

OwningOpRef<ModuleOp> parseInput(MLIRContext &context, StringRef path) {
  std::string error;
  auto file = openInputFile(path, &error);
  if (!file) {
    llvm::errs() << "moec: error: " << error << "\n";
    return nullptr;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(file), SMLoc());
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}

/// Options shared by the subcommands.
struct Args {
  std::vector<std::string> positional;
  /// Empty: each command's default (host; sm_90a for tune).
  std::string output, targets, emitAsm, entry, tuningCache;
  std::vector<std::pair<std::string, int64_t>> symbols;
  std::string routing = "uniform";
  uint64_t seed = 1;
  int iters = 5;
  int64_t smCount = 0; ///< compile: SMs sm_90a's persistent kernels fill
  bool source = false;
  bool params = false; ///< inspect: list each launch's parameters
  /// compile: print each op's kernel choice (strategy, tile, wgmma plan)
  bool printPlan = false;
  bool help = false; ///< -h / --help after the command
  std::vector<std::string> given; ///< the options on the command line
};

bool parseArgs(int argc, char **argv, Args &args, std::string &error) {
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc) {
        error = "option '" + arg + "' needs a value";
        return false;
      }
      out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "-h" || arg == "--help") {
      args.help = true;
      continue;
    }
    if (!arg.empty() && arg[0] == '-')
      args.given.push_back(arg);
    if (arg == "-o") {
      if (!value(args.output))
        return false;
    } else if (arg == "--target") {
      if (!value(args.targets))
        return false;
    } else if (arg == "--emit-asm") {
      if (!value(args.emitAsm))
        return false;
    } else if (arg == "--tuning-cache") {
      if (!value(args.tuningCache))
        return false;
    } else if (arg == "--entry") {
      if (!value(args.entry))
        return false;
    } else if (arg == "--routing") {
      if (!value(args.routing))
        return false;
    } else if (arg == "--sym" || arg == "-T") {
      if (!value(v))
        return false;
      if (arg == "-T")
        v = "T=" + v;
      size_t eq = v.find('=');
      long long n = 0;
      if (eq == std::string::npos ||
          llvm::StringRef(v).substr(eq + 1).getAsInteger(10, n) || n < 0) {
        error = "'--sym' takes NAME=COUNT with COUNT >= 0, got '" + v + "'";
        return false;
      }
      args.symbols.push_back({v.substr(0, eq), n});
    } else if (arg == "--sm-count") {
      if (!value(v))
        return false;
      long long n = 0;
      if (llvm::StringRef(v).getAsInteger(10, n) || n < 1 || n > 65536) {
        error = "'--sm-count' takes an integer in [1, 65536], got '" + v + "'";
        return false;
      }
      args.smCount = n;
    } else if (arg == "--seed" || arg == "--iters") {
      if (!value(v))
        return false;
      unsigned long long n = 0;
      if (llvm::StringRef(v).getAsInteger(10, n)) {
        error = "'" + arg + "' takes a non-negative integer, got '" + v + "'";
        return false;
      }
      if (arg == "--seed")
        args.seed = n;
      else
        args.iters = std::max<int>(1, static_cast<int>(n));
    } else if (arg == "--source") {
      args.source = true;
    } else if (arg == "--params") {
      args.params = true;
    } else if (arg == "--print-plan") {
      args.printPlan = true;
    } else if (!arg.empty() && arg[0] == '-') {
      error = "unknown option '" + arg + "'";
      return false;
    } else {
      args.positional.push_back(arg);
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// compile / inspect
//===----------------------------------------------------------------------===//

/// Erases every function not named in `names` (a comma-separated list) and
/// not referenced from one that is, so that `compile --entry` and `run
/// --entry` lower one function, not the whole file (the integration tests'
/// files hold up to 60). Returns the first name with no function, or "".
std::string keepOnlyFunctions(ModuleOp module, StringRef names) {
  llvm::SmallPtrSet<Operation *, 4> kept;
  for (StringRef name : llvm::split(names, ',')) {
    auto func = dyn_cast_or_null<func::FuncOp>(
        SymbolTable::lookupSymbolIn(module, name.trim()));
    if (!func)
      return name.trim().str();
    kept.insert(func);
  }
  // Erasing a function can leave another one unused: repeat to a fixpoint.
  for (bool erased = true; erased;) {
    erased = false;
    for (func::FuncOp func :
         llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (!kept.contains(func) &&
          SymbolTable::symbolKnownUseEmpty(func, module)) {
        func.erase();
        erased = true;
      }
  }
  return "";
}

/// keepOnlyFunctions for `--entry`, if given; a missing name is reported.
LogicalResult keepEntries(ModuleOp module, const Args &args) {
  if (args.entry.empty())
    return success();
  std::string missing = keepOnlyFunctions(module, args.entry);
  if (missing.empty())
    return success();
  fail("no function named '" + missing + "'");
  return failure();
}

/// compile --print-plan: every op's kernel for each target, as the
/// lowering will build it ("which kernel did I get"): the strategy, the
/// tile asked for and, for the sm90a wgmma kernels, the whole plan.
LogicalResult printKernelChoices(ModuleOp module,
                                 const moec::CompileOptions &options) {
  for (const std::string &target : options.targets) {
    FailureOr<std::vector<moec::KernelChoice>> choices =
        moec::kernelChoices(module, target, options);
    if (failed(choices))
      return failure();
    llvm::outs() << "kernels for " << target << ":\n";
    for (const moec::KernelChoice &choice : *choices) {
      llvm::outs() << "  @" << choice.function << " " << choice.op << " "
                   << choice.location << "\n    " << choice.strategy
                   << ", tile " << choice.tile << " (" << choice.tileSource
                   << ")\n";
      if (!choice.plan.empty())
        llvm::outs() << "    plan " << choice.plan << "\n";
    }
  }
  return success();
}

int compile(const Args &args) {
  // With --print-plan the bundle is optional.
  if (args.positional.size() != 1 || (args.output.empty() && !args.printPlan))
    return usage();
  MLIRContext context;
  moec::loadCompilerDialects(context);
  OwningOpRef<ModuleOp> module = parseInput(context, args.positional[0]);
  if (!module)
    return 1;
  if (failed(keepEntries(*module, args)))
    return 1;
  moec::CompileOptions options;
  options.targets.clear();
  // Named, not a temporary: the split pieces point into it.
  std::string targetList = args.targets.empty() ? "host" : args.targets;
  for (StringRef t : llvm::split(targetList, ','))
    if (!t.trim().empty())
      options.targets.push_back(t.trim().str());
  options.keepAssembly = !args.emitAsm.empty();
  options.tile.tuningCache = args.tuningCache;
  options.smCount = args.smCount;
  if (args.printPlan && failed(printKernelChoices(*module, options)))
    return fail("kernel selection failed");
  if (args.output.empty())
    return 0;
  moec::CompileResult result;
  if (failed(moec::compileModule(*module, options, result)))
    return fail("compilation failed");
  for (const std::string &note : result.notes)
    llvm::errs() << "moec: note: " << note << "\n";
  if (!args.emitAsm.empty()) {
    llvm::sys::fs::create_directories(args.emitAsm);
    for (auto &[name, text] : result.assembly) {
      std::string file = name;
      std::replace(file.begin(), file.end(), ' ', '.');
      file = args.emitAsm + "/" + file +
             (name.find(" sm_") != std::string::npos ? ".ptx" : ".s");
      std::error_code ec;
      llvm::raw_fd_ostream os(file, ec);
      if (ec)
        return fail("cannot write " + file + ": " + ec.message());
      os << text;
    }
  }
  moec::rt::Status status =
      moec::rt::writeBundleFile(result.bundle, args.output);
  if (!status)
    return fail(status.toString());
  for (const moec::rt::Entry &entry : result.bundle.entries)
    llvm::outs() << "compiled " << entry.name << " for " << entry.target
                 << ": " << entry.steps.size() << " launches, "
                 << entry.binary.size() << " bytes\n";
  llvm::outs() << "wrote " << args.output << "\n";
  return 0;
}

int tune(const Args &args) {
  if (args.positional.size() != 1 || args.output.empty())
    return usage();
  std::string target = args.targets.empty() ? "sm_90a" : args.targets;
  if (target.find(',') != std::string::npos)
    return fail("'tune' takes one target, got '" + target + "'");
  MLIRContext context;
  moec::loadCompilerDialects(context);
  OwningOpRef<ModuleOp> module = parseInput(context, args.positional[0]);
  if (!module)
    return 1;
  progress("building the tuning candidates for " + target);
  FailureOr<moec::TuningCandidates> candidates =
      moec::buildTuningCandidates(*module, target);
  if (failed(candidates))
    return fail("no tuning candidates");
  moec::CompileOptions options;
  options.targets = {target};
  moec::CompileResult result;
  progress("compiling " + llvm::Twine(candidates->numOps) +
           " ops' candidates for " + target);
  if (failed(moec::compileModule(*candidates->module, options, result)))
    return fail("compilation of the candidates failed");
  progress("compiled " + llvm::Twine(result.bundle.entries.size()) +
           " candidate kernels");
  for (const std::string &note : result.notes)
    llvm::errs() << "moec: note: " << note << "\n";
  if (moec::rt::Status status =
          moec::rt::writeBundleFile(result.bundle, args.output);
      !status)
    return fail(status.toString());
  std::string manifestPath = args.output + ".json";
  std::error_code ec;
  llvm::raw_fd_ostream manifest(manifestPath, ec);
  if (ec)
    return fail("cannot write " + manifestPath + ": " + ec.message());
  manifest << llvm::formatv(
      "{0:2}", llvm::json::Value(std::move(candidates->manifest)));
  manifest << "\n";
  llvm::outs() << "tuning " << candidates->numOps << " ops with "
               << result.bundle.entries.size() << " candidate kernels for "
               << target << ": wrote " << args.output << " and "
               << manifestPath << "\n";
  return 0;
}

/// One line per kernel parameter of a launch, as the runtime passes it.
void printParams(const moec::rt::LaunchStep &step) {
  using Kind = moec::rt::ParamDesc::Kind;
  for (auto [i, p] : llvm::enumerate(step.params)) {
    llvm::outs() << "      " << i << ": ";
    if (p.kind == Kind::Buffer)
      llvm::outs() << "buffer " << p.buffer << "\n";
    else if (p.kind == Kind::Scalar)
      llvm::outs() << "scalar [" << p.expr << "]\n";
    else
      llvm::outs() << "tensor map of buffer " << p.buffer << ", box ["
                   << llvm::join(llvm::map_range(p.box,
                                                 [](uint32_t extent) {
                                                   return std::to_string(
                                                       extent);
                                                 }),
                                 ", ")
                   << "]\n";
  }
}

int inspect(const Args &args) {
  if (args.positional.size() != 1)
    return usage();
  moec::rt::Bundle bundle;
  moec::rt::Status status =
      moec::rt::readBundleFile(args.positional[0], bundle);
  if (!status)
    return fail(status.toString());
  llvm::outs() << "bundle version " << bundle.version << ", produced by "
               << bundle.producer << ", " << bundle.entries.size()
               << " entries\n";
  for (const moec::rt::Entry &entry : bundle.entries) {
    llvm::outs() << "\nentry " << entry.name << " [" << entry.target << "] "
                 << moec::rt::binaryKindName(entry.binaryKind) << ", "
                 << entry.binary.size() << " bytes\n  symbols:";
    for (auto [i, s] : llvm::enumerate(entry.symbols))
      llvm::outs() << " s" << i << "=" << s.name << " (buffer " << s.buffer
                   << " dim " << s.dim << ")";
    llvm::outs() << "\n  buffers:\n";
    for (auto [i, b] : llvm::enumerate(entry.buffers)) {
      llvm::outs() << "    " << i << " " << b.name << " "
                   << moec::rt::bufferRoleName(b.role) << " "
                   << moec::rt::elemTypeName(b.elem) << " ["
                   << llvm::join(b.dims, ", ") << "]";
      if (b.role == moec::rt::BufferRole::View)
        llvm::outs() << " of buffer " << b.source;
      llvm::outs() << "\n";
    }
    llvm::outs() << "  launches:\n";
    for (const moec::rt::LaunchStep &step : entry.steps) {
      llvm::outs() << "    " << step.kernel << " grid [" << step.grid
                   << "] x " << step.blockSize << " threads, "
                   << (step.clusterBlocks > 1
                           ? "clusters of " +
                                 std::to_string(step.clusterBlocks) + ", "
                           : std::string())
                   << step.params.size() << " params, smem "
                   << step.dynamicSharedBytes << " " << step.tile << "\n";
      if (args.params)
        printParams(step);
    }
    llvm::outs() << "  reference ops:\n";
    for (const moec::rt::RefOp &op : entry.refOps) {
      // name=buffer for each ODS group (-1: absent), with --params.
      auto groups = [&](const std::vector<std::string> &names,
                        const std::vector<int32_t> &buffers) {
        for (size_t k = 0; k < buffers.size(); ++k) {
          llvm::outs() << (k ? ", " : "");
          if (args.params && k < names.size())
            llvm::outs() << names[k] << "=";
          llvm::outs() << buffers[k];
        }
      };
      llvm::outs() << "    " << op.name << " (";
      groups(op.operandNames, op.operands);
      llvm::outs() << ") -> (";
      groups(op.resultNames, op.results);
      llvm::outs() << ")";
      for (auto &[k, v] : op.attrs)
        llvm::outs() << " " << k << "=" << v;
      llvm::outs() << "\n";
    }
    if (args.source)
      llvm::outs() << entry.source << "\n";
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// run (host backend)
//===----------------------------------------------------------------------===//

/// Whether `path` starts with a bundle's magic (moec run takes both).
bool isBundleFile(const std::string &path) {
  char magic[8] = {};
  std::FILE *file = std::fopen(path.c_str(), "rb");
  if (!file)
    return false;
  size_t read = std::fread(magic, 1, sizeof(magic), file);
  std::fclose(file);
  return read == sizeof(magic) && std::memcmp(magic, "MOECBNDL", 8) == 0;
}

/// `run` on a bundle: its host entries' object, loaded (HostProgram::load).
std::unique_ptr<moec::HostProgram> loadBundleForHost(const std::string &path) {
  moec::rt::Bundle bundle;
  if (moec::rt::Status status = moec::rt::readBundleFile(path, bundle);
      !status) {
    fail(status.toString());
    return nullptr;
  }
  std::vector<moec::rt::Entry> hostEntries;
  std::vector<std::string> targets;
  for (moec::rt::Entry &entry : bundle.entries) {
    if (entry.target == "host")
      hostEntries.push_back(std::move(entry));
    else if (!llvm::is_contained(targets, entry.target))
      targets.push_back(entry.target);
  }
  if (hostEntries.empty()) {
    fail(path + " has no host entries (its targets: " +
         llvm::join(targets, ", ") +
         "): `moec run` executes host entries; run GPU entries with "
         "moec-runner on the GPU, or compile with --target host");
    return nullptr;
  }
  progress("loading the host object of " + path);
  std::string error;
  std::unique_ptr<moec::HostProgram> program =
      moec::HostProgram::load(std::move(hostEntries), error);
  if (!program)
    fail(error);
  return program;
}

int run(const Args &args) {
  if (args.positional.size() != 1)
    return usage();
  if (args.entry.find(',') != std::string::npos)
    return fail("'run' checks one function: give one name to '--entry'");
  const std::string &input = args.positional[0];
  std::unique_ptr<moec::HostProgram> program;
  if (isBundleFile(input)) {
    program = loadBundleForHost(input);
    if (!program)
      return 1;
  } else {
    MLIRContext context;
    moec::loadCompilerDialects(context);
    OwningOpRef<ModuleOp> module = parseInput(context, input);
    if (!module)
      return 1;
    if (failed(keepEntries(*module, args)))
      return 1;
    std::string what = args.entry.empty() ? input : "@" + args.entry;
    progress("compiling " + what + " for the host");
    auto created = moec::HostProgram::create(*module);
    if (failed(created))
      return fail("lowering for the host failed");
    program = std::move(*created);
  }
  const std::vector<moec::rt::Entry> &entries = program->entries();
  const moec::rt::Entry *entry = nullptr;
  for (const moec::rt::Entry &e : entries)
    if (args.entry.empty() ? entries.size() == 1 : e.name == args.entry)
      entry = &e;
  if (!entry)
    return fail(args.entry.empty()
                    ? "the module has several functions: pick one with "
                      "--entry"
                    : "no function named '" + args.entry + "'");

  // Symbols from --sym, by name.
  std::vector<int64_t> symbols(entry->symbols.size(), -1);
  for (auto &[name, value] : args.symbols) {
    bool found = false;
    for (auto [i, s] : llvm::enumerate(entry->symbols))
      if (s.name == name) {
        symbols[i] = value;
        found = true;
      }
    if (!found)
      return fail("'" + entry->name + "' has no size named '" + name + "'");
  }
  for (auto [i, s] : llvm::enumerate(entry->symbols))
    if (symbols[i] < 0)
      return fail("give the size '" + s.name + "' with --sym " + s.name +
                  "=N");

  progress("making random inputs");
  moec::check::InputOptions inputOptions;
  inputOptions.seed = args.seed;
  if (!moec::check::parseRouting(args.routing, inputOptions.routing))
    return fail("'--routing' must be uniform, one-expert or half-experts");
  std::vector<moec::check::HostArray> inputs, buffers;
  moec::rt::Status status =
      moec::check::makeInputs(*entry, symbols, inputOptions, inputs);
  if (status)
    status = moec::check::allocateBuffers(*entry, symbols, inputs, buffers);
  if (!status)
    return fail(status.toString());
  std::vector<moec::rt::ArrayRef> arrays;
  for (moec::check::HostArray &b : buffers)
    arrays.push_back({b.bytes.data(), b.elem, b.shape});

  moec::HostProgram &launcher = *program;
  progress("running @" + entry->name + ", " +
           llvm::Twine(args.iters) + " timed runs");
  std::vector<double> ms;
  for (int i = 0; i < args.iters; ++i) {
    auto start = std::chrono::steady_clock::now();
    status = moec::rt::runEntryWithAllBuffers(*entry, arrays, launcher);
    auto stop = std::chrono::steady_clock::now();
    if (!status)
      return fail(status.toString());
    ms.push_back(std::chrono::duration<double, std::milli>(stop - start)
                     .count());
  }
  moec::check::CheckReport report;
  progress("checking every op against the float64 reference");
  status = moec::check::checkEntry(*entry, symbols, buffers, report);
  if (!status)
    return fail(status.toString());
  std::sort(ms.begin(), ms.end());
  llvm::outs() << entry->name << " on the host backend (";
  for (auto [i, s] : llvm::enumerate(entry->symbols))
    llvm::outs() << (i ? ", " : "") << s.name << "=" << symbols[i];
  llvm::outs() << ", routing " << args.routing << ", seed " << args.seed
               << ")\n"
               << report.summary();
  llvm::outs() << llvm::format("time: median %.3f ms over %d runs\n",
                               ms[ms.size() / 2], args.iters);
  llvm::outs() << (report.pass ? "PASS" : "FAIL") << "\n";
  return report.pass ? 0 : 1;
}


int dispatch(int argc, char **argv) {
  commandStart = std::chrono::steady_clock::now();
  if (argc < 2)
    return usage();
  std::string command = argv[1];
  Args args;
  std::string error;
  if (command == "-h" || command == "--help") {
    usage(llvm::outs());
    return 0;
  }
  const Command *known = findCommand(command);
  if (!known) {
    llvm::errs() << "moec: error: unknown command '" << command << "'\n";
    return usage();
  }
  if (command == "cache")
    return fail("'moec cache' is the Python package's command (the cache is "
                "moec.compile's): run the pip-installed moec, or "
                "PYTHONPATH=build/python_packages python3 -m moec cache");
  if (!parseArgs(argc, argv, args, error))
    return fail(error);
  if (args.help)
    return commandHelp(*known);
  for (const std::string &option : args.given)
    if (!llvm::any_of(known->options,
                      [&](const auto &o) { return o.first == option; }))
      return fail("'" + command + "' takes no option '" + option +
                  "' (its options: " +
                  llvm::join(llvm::make_first_range(known->options), " ") +
                  ")");
  if (command == "compile")
    return compile(args);
  if (command == "tune")
    return tune(args);
  if (command == "inspect")
    return inspect(args);
  return run(args);
}

} // namespace

int moec::cliMain(int argc, char **argv) {
  int code = dispatch(argc, argv);
  llvm::outs().flush();
  llvm::errs().flush();
  return code;
}
