//===- Cli.h - The moec command line as a function --------------*- C++ -*-===//
//
// Part of moec.
//
// The `moec` command: build/bin/moec calls it from main, and the Python
// package's `moec` command through moec._compiler.cli_main, so that the
// wheel carries the compiler once (in _compiler) rather than twice.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CLI_CLI_H
#define MOEC_CLI_CLI_H

namespace moec {

/// Runs `moec argv[1] ...` and returns its exit code: 0 success, 1 a failed
/// command, 2 a bad call. Writes to llvm::outs() / llvm::errs() and flushes
/// both before returning.
int cliMain(int argc, char **argv);

} // namespace moec

#endif // MOEC_CLI_CLI_H
