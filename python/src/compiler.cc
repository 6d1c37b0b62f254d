//===- compiler.cc - moec._compiler: moe IR to bundles, from Python -------===//
//
// Part of moec. Carries MLIR and LLVM, linked statically (the wheel needs
// no system LLVM), and the moec command line (cli_main). Parses and verifies
// moe-dialect modules the Python tracer writes, prints them at each pipeline
// stage, compiles them to bundle bytes, and runs host entries through the
// JIT (HostProgram). Every MLIR diagnostic is collected and raised as
// CompileError with its source location; the generic-form dump of the
// failing op that MLIR attaches to each ("see current operation: ...") only
// with MOEC_DEBUG=1.
//
//===----------------------------------------------------------------------===//

#include "PyStatus.h"
#include "moec/Cli/Cli.h"

#include "moec/Dialect/Moe/Transforms/Passes.h"
#include "moec/Runtime/Executor.h"
#include "moec/Target/HostJit.h"
#include "moec/Target/Target.h"
#include "moec/Version.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace py = pybind11;
using namespace mlir;

namespace {

/// Raised for IR that does not parse, verify or lower; the message holds
/// every diagnostic with its location.
class CompileError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Whether MOEC_DEBUG is set (to anything but "" or "0"): diagnostics then
/// keep MLIR's dump of the op they are about.
bool debugDiagnostics() {
  const char *value = std::getenv("MOEC_DEBUG");
  return value && *value && std::strcmp(value, "0") != 0;
}

/// A context with every dialect the pipelines use, a parsed module, and the
/// diagnostics emitted while working on it.
struct Session {
  MLIRContext context;
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream{diagnostics};
  std::unique_ptr<SourceMgrDiagnosticHandler> handler;
  OwningOpRef<ModuleOp> module;

  Session(const std::string &text, const std::string &bufferName) {
    moec::loadCompilerDialects(context);
    context.printOpOnDiagnostic(debugDiagnostics());
    handler = std::make_unique<SourceMgrDiagnosticHandler>(
        sourceMgr, &context, diagnosticStream);
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, bufferName), SMLoc());
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
    if (!module)
      fail("the module does not parse or verify");
  }

  [[noreturn]] void fail(const std::string &what) {
    throw CompileError(what + (diagnostics.empty() ? "" : ":\n") +
                       diagnostics);
  }

  /// Runs `pass` on the module without the GIL; a failure raises, naming
  /// the pass.
  void run(std::unique_ptr<Pass> pass) {
    std::string name = pass->getArgument().str();
    PassManager pm(&context);
    pm.addPass(std::move(pass));
    bool ok;
    {
      py::gil_scoped_release release;
      ok = succeeded(pm.run(*module));
    }
    if (!ok)
      fail(name + " failed");
  }
};

moec::TileOverride toTile(const py::dict &tile) {
  moec::TileOverride out;
  for (auto [key, value] : tile) {
    std::string name = py::str(key);
    int64_t v = py::cast<int64_t>(value);
    if (name == "m")
      out.m = v;
    else if (name == "n")
      out.n = v;
    else if (name == "k")
      out.k = v;
    else if (name == "threads")
      out.threads = v;
    else
      throw py::value_error("tile: unknown field '" + name +
                            "' (expected m, n, k, threads)");
  }
  return out;
}

std::string print(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

/// A module JIT-compiled for the host CPU; runs entries on host memory.
class HostModule {
public:
  HostModule(const std::string &text, const py::dict &tile)
      : session_(std::make_unique<Session>(text, "<moec host module>")) {
    moec::TileOverride override = toTile(tile);
    {
      py::gil_scoped_release release;
      auto program = moec::HostProgram::create(*session_->module, override);
      if (succeeded(program))
        program_ = std::move(*program);
    }
    if (!program_)
      session_->fail("lowering for the host failed");
  }

  /// The host entries of a saved bundle, from their object (no MLIR).
  static HostModule fromBundle(const py::bytes &bytes) {
    std::string_view data = bytes;
    moec::rt::Bundle bundle;
    moec::throwIfError(moec::rt::readBundle(
        reinterpret_cast<const uint8_t *>(data.data()), data.size(), bundle));
    std::vector<moec::rt::Entry> hostEntries;
    for (moec::rt::Entry &entry : bundle.entries)
      if (entry.target == "host")
        hostEntries.push_back(std::move(entry));
    std::string error;
    std::unique_ptr<moec::HostProgram> program;
    {
      py::gil_scoped_release release;
      program = moec::HostProgram::load(std::move(hostEntries), error);
    }
    if (!program)
      throw CompileError(error);
    return HostModule(std::move(program));
  }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const moec::rt::Entry &entry : program_->entries())
      names.push_back(entry.name);
    return names;
  }

  void run(const std::string &name,
           const std::vector<moec::ArraySpec> &inputs,
           const std::vector<moec::ArraySpec> &outputs) {
    const moec::rt::Entry *entry = program_->find(name);
    if (!entry)
      throw py::key_error("no function named '" + name + "'");
    std::vector<moec::rt::ArrayRef> in = moec::toArrays(inputs, "input");
    std::vector<moec::rt::ArrayRef> out = moec::toArrays(outputs, "output");
    py::gil_scoped_release release;
    moec::throwIfError(moec::rt::runEntry(*entry, in, out, *program_));
  }

private:
  explicit HostModule(std::unique_ptr<moec::HostProgram> program)
      : program_(std::move(program)) {}

  std::unique_ptr<Session> session_; ///< null for a bundle's object
  std::unique_ptr<moec::HostProgram> program_;
};

} // namespace

PYBIND11_MODULE(_compiler, m) {
  m.doc() = "moec's compiler (MLIR): verify, lower, compile, run on the host";
  moec::registerStatusExceptions(m);
  py::register_local_exception<CompileError>(m, "CompileError",
                                             PyExc_ValueError);

  m.def("version", [] { return std::string(MOEC_PRODUCER); });
  m.def("stages", [] { return moec::loweringStages(); });
  m.def("find_ptxas", &moec::findPtxas,
        "The ptxas the sm_* targets assemble with, or '' (then they ship "
        "PTX): $MOEC_PTXAS, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin.");
  m.def(
      "verify",
      [](const std::string &text) {
        Session session(text, "<moec module>");
        return print(*session.module);
      },
      py::arg("text"),
      "Parses and verifies a module; returns it printed (canonical form).");
  m.def(
      "lower",
      [](const std::string &text, const std::string &stage,
         const py::dict &tile) {
        Session session(text, "<moec module>");
        moec::TileOverride override = toTile(tile);
        FailureOr<OwningOpRef<ModuleOp>> lowered = failure();
        {
          py::gil_scoped_release release;
          lowered = moec::lowerToStage(*session.module, stage, override);
        }
        if (failed(lowered))
          session.fail("lowering to '" + stage + "' failed");
        return print(**lowered);
      },
      py::arg("text"), py::arg("stage"), py::arg("tile") = py::dict(),
      "The module lowered to `stage` (see stages()), printed.");
  m.def(
      "autodiff",
      [](const std::string &text, const std::string &func,
         const std::vector<int64_t> &wrt, const std::string &save,
         const std::vector<int64_t> &accumulate) {
        Session session(text, "<moec module>");
        moec::moe::MoeAutodiffPassOptions options;
        options.funcName = func;
        options.wrt.assign(wrt.begin(), wrt.end());
        options.save = save;
        options.accumulate.assign(accumulate.begin(), accumulate.end());
        session.run(moec::moe::createMoeAutodiffPass(options));
        return print(*session.module);
      },
      py::arg("text"), py::arg("func"), py::arg("wrt"), py::arg("save"),
      py::arg("accumulate") = std::vector<int64_t>(),
      "Runs moe-autodiff: the module with `func`_fwd and `func`_grad added "
      "(`accumulate`: the arguments whose gradients add to given f32 main "
      "gradients).");
  m.def(
      "fp8_recipe",
      [](const std::string &text, const std::string &recipe,
         const std::string &weights) {
        Session session(text, "<moec module>");
        moec::moe::MoeFp8RecipePassOptions options;
        options.recipe = recipe;
        options.weights = weights;
        session.run(moec::moe::createMoeFp8RecipePass(options));
        // On success the diagnostics are the pass's remarks: the ops it
        // left in their precision, and why.
        return py::make_tuple(print(*session.module), session.diagnostics);
      },
      py::arg("text"), py::arg("recipe"), py::arg("weights") = "inline",
      "Runs moe-fp8-recipe: (the module with its expert matmuls in FP8, "
      "the remarks on the ops left in their precision). `weights`: inline "
      "or arguments (the pass's option).");
  m.def(
      "compile",
      [](const std::string &text, const std::vector<std::string> &targets,
         const py::dict &tile, bool keepAssembly, int64_t smCount) {
        Session session(text, "<moec module>");
        moec::CompileOptions options;
        options.targets = targets;
        options.tile = toTile(tile);
        options.keepAssembly = keepAssembly;
        options.smCount = smCount;
        moec::CompileResult result;
        bool ok;
        {
          py::gil_scoped_release release;
          ok = succeeded(moec::compileModule(*session.module, options, result));
        }
        if (!ok)
          session.fail("compilation failed");
        std::vector<uint8_t> bytes;
        moec::throwIfError(moec::rt::writeBundle(result.bundle, bytes));
        return py::make_tuple(
            py::bytes(reinterpret_cast<const char *>(bytes.data()),
                      bytes.size()),
            result.notes, result.assembly);
      },
      py::arg("text"), py::arg("targets"), py::arg("tile") = py::dict(),
      py::arg("keep_assembly") = false, py::arg("sm_count") = 0,
      "Compiles every function for every target: (bundle bytes, notes, "
      "[(entry and target, assembly)]). `sm_count` > 0: the SMs the GPU "
      "targets' persistent kernels fill.");

  m.def(
      "cli_main",
      [](std::vector<std::string> argv) {
        std::vector<char *> pointers;
        for (std::string &arg : argv)
          pointers.push_back(arg.data());
        pointers.push_back(nullptr);
        py::gil_scoped_release release;
        return moec::cliMain(static_cast<int>(argv.size()), pointers.data());
      },
      py::arg("argv"),
      "Runs the moec command line (argv[0] is the program's name) and "
      "returns its exit code; the package's `moec` command.");

  py::class_<HostModule>(m, "HostModule")
      .def(py::init<const std::string &, const py::dict &>(), py::arg("text"),
           py::arg("tile") = py::dict())
      .def_static("from_bundle", &HostModule::fromBundle, py::arg("data"),
                  "The host entries of bundle bytes, from their object.")
      .def_property_readonly("entries", &HostModule::entries)
      .def("run", &HostModule::run, py::arg("name"), py::arg("inputs"),
           py::arg("outputs"),
           "Runs function `name` on host arrays (address, dtype, shape).");
}
