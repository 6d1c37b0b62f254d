//===- moec.cpp - The moec command -----------------------------------------===/
//
// Part of moec. The commands themselves are in lib/Cli (moec/Cli/Cli.h).
//
//===----------------------------------------------------------------------===//

#include "moec/Cli/Cli.h"

#include "llvm/Support/InitLLVM.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  return moec::cliMain(argc, argv);
}
