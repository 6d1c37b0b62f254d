//===- BundleFuzzer.cpp - libFuzzer target for the bundle reader ---------===//
//
// Part of moec. Feeds bytes to readBundle twice: as given (most mutations
// stop at the checksum, as they should) and with the checksum recomputed, so
// that the parser and the validator behind it see the mutation too. A bundle
// that reads is then walked through every accessor `moec inspect` and the
// executor use (names of enums, find, every size, grid and scalar
// expression evaluated for a few symbol values) and written back, which
// must give the bytes it was read from.
//
// Crashes, sanitizer reports and a broken round trip (__builtin_trap) are
// findings. See fuzz/README.md.
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/Bundle.h"
#include "moec/Runtime/Expr.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using namespace moec::rt;

namespace {

/// Keeps the optimizer from dropping what the accessors return.
volatile size_t sink;

void use(const char *text) { sink = sink + (text ? std::strlen(text) : 0); }
void use(const std::string &text) { sink = sink + text.size(); }

/// Evaluates `rpn` for a few symbol values; errors are fine, UB is not.
void evaluate(const std::string &rpn, size_t numSymbols) {
  static const int64_t kValues[] = {0, 1, 7, 1 << 20, INT64_MAX / 3};
  for (int64_t value : kValues) {
    std::vector<int64_t> symbols(numSymbols, value);
    int64_t result = 0;
    Status s = evalExpr(rpn, symbols, result);
    use(s.message());
    // A value is never negative (Expr.h's contract).
    if (s.isOk() && result < 0)
      __builtin_trap();
  }
}

void inspect(const Bundle &bundle) {
  use(bundle.producer);
  for (const Entry &entry : bundle.entries) {
    use(entry.name);
    use(entry.target);
    use(binaryKindName(entry.binaryKind));
    // Validation makes (name, target) unique.
    if (bundle.find(entry.name, entry.target) != &entry)
      __builtin_trap();
    size_t numSymbols = entry.symbols.size();
    for (const SymbolDesc &symbol : entry.symbols) {
      use(symbol.name);
      if (symbol.buffer >= entry.buffers.size())
        __builtin_trap();
    }
    for (const BufferDesc &buffer : entry.buffers) {
      use(buffer.name);
      use(bufferRoleName(buffer.role));
      use(elemTypeName(buffer.elem));
      sink = sink + elemSize(buffer.elem);
      for (const std::string &dim : buffer.dims)
        evaluate(dim, numSymbols);
    }
    for (const LaunchStep &step : entry.steps) {
      use(step.kernel);
      use(step.tile);
      evaluate(step.grid, numSymbols);
      for (const ParamDesc &param : step.params) {
        if (param.kind == ParamDesc::Kind::Scalar)
          evaluate(param.expr, numSymbols);
        else if (param.buffer >= entry.buffers.size())
          __builtin_trap();
      }
    }
    for (const RefOp &op : entry.refOps) {
      use(op.name);
      for (const auto &[key, value] : op.attrs)
        use(key + value);
      for (int32_t index : op.operands)
        if (index >= static_cast<int64_t>(entry.buffers.size()))
          __builtin_trap();
    }
    use(entry.source);
  }
}

void readOne(const std::vector<uint8_t> &bytes) {
  Bundle bundle;
  Status s = readBundle(bytes.data(), bytes.size(), bundle);
  if (!s) {
    if (s.message().empty() || !bundle.entries.empty())
      __builtin_trap(); // an error names itself and hands out nothing
    return;
  }
  inspect(bundle);
  // What reads writes back to the same bytes.
  std::vector<uint8_t> written;
  if (!writeBundle(bundle, written) || written != bytes)
    __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // Exact-size heap copies, so that a read past the end is one ASan sees.
  std::vector<uint8_t> bytes(data, data + size);
  readOne(bytes);
  if (size >= kBundlePayloadOffset) {
    uint32_t checksum = bundleChecksum(bytes.data() + kBundlePayloadOffset,
                                       size - kBundlePayloadOffset);
    for (int i = 0; i < 4; ++i)
      bytes[kBundlePayloadOffset - 4 + i] =
          static_cast<uint8_t>(checksum >> (8 * i));
    readOne(bytes);
  }
  return 0;
}
