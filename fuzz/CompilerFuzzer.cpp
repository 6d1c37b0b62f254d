//===- CompilerFuzzer.cpp - libFuzzer target for the compiler ------------===//
//
// Part of moec. Treats the input as MLIR text and runs what `moec compile
// --target host,sm_90a` runs: parse (which verifies), then compileModule
// (fusion, tiling, convert-moe-to-kernels, the host and NVVM pipelines, LLVM
// code generation), then writes the bundle and reads it back. Any input may
// fail with diagnostics; none may crash, trip a sanitizer, exceed the
// memory limit (-rss_limit_mb) or the time limit (-timeout).
//
// ptxas is not run (CompileOptions::assemble): a child process per input
// would cost more than the rest, and it is not our code. See fuzz/README.md.
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/Bundle.h"
#include "moec/Target/Target.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdint>
#include <vector>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A fresh context per input: uniqued types and attributes live as long as
  // their context, so a shared one would grow with every input.
  MLIRContext context(MLIRContext::Threading::DISABLED);
  moec::loadCompilerDialects(context);
  // Diagnostics are the expected outcome of most inputs: keep them quiet.
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) {});

  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "fuzz-input"),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 0;

  moec::CompileOptions options;
  options.targets = {"host", "sm_90a"};
  options.assemble = false;
  moec::CompileResult result;
  if (failed(moec::compileModule(*module, options, result)))
    return 0;

  // What the compiler writes, the runtime reads back (the writer may refuse
  // a bundle over its limits: an error, as in `moec compile`).
  std::vector<uint8_t> bytes;
  moec::rt::Bundle back;
  if (moec::rt::writeBundle(result.bundle, bytes) &&
      !moec::rt::readBundle(bytes.data(), bytes.size(), back))
    __builtin_trap();
  return 0;
}
