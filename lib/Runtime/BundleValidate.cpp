//===- BundleValidate.cpp - What a bundle must satisfy to be run ---------===//
//
// Part of moec. validateBundle: every index, count, size expression and name
// a bundle holds is checked here once, so that the executor can run a bundle
// that passed without further checks. Messages quote names from untrusted
// bytes escaped.
//
//===----------------------------------------------------------------------===//

#include "BundleInternal.h"
#include "moec/Runtime/Expr.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace moec::rt {

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

namespace {

/// Names in messages come from untrusted bytes: escape what is not printable
/// ASCII and cut long ones short.
std::string escape(const std::string &text) {
  constexpr size_t kMax = 64;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > kMax)
    out += "...";
  return out;
}

std::string quote(const std::string &text) { return "'" + escape(text) + "'"; }

} // namespace

std::string entryLabel(size_t index, const Entry &entry) {
  return "entry " + std::to_string(index) + " (" + quote(entry.name) + ", " +
         escape(entry.target) + ")";
}

namespace {

bool startsWith(const std::string &s, const char *prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

/// Which binary kinds a target accepts; empty message when consistent.
std::string checkTarget(const std::string &target, BinaryKind kind) {
  if (target.empty())
    return "target is empty";
  for (char c : target)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return "target " + quote(target) + " has a character outside [a-z0-9_]";
  if (static_cast<uint8_t>(kind) > kMaxBinaryKind)
    return "binary kind " + std::to_string(static_cast<int>(kind)) +
           " out of range";
  bool ok;
  if (startsWith(target, "sm_") && target.size() > 3)
    ok = kind == BinaryKind::Cubin || kind == BinaryKind::Ptx;
  else if (startsWith(target, "gfx") && target.size() > 3)
    ok = kind == BinaryKind::Hsaco;
  else if (target == "host")
    ok = kind == BinaryKind::HostObject;
  else
    return "unknown target " + quote(target) +
           " (expected sm_<arch>, gfx<arch> or host)";
  if (!ok)
    return std::string("binary kind ") + binaryKindName(kind) +
           " does not match target " + target;
  return "";
}

std::string checkString(const std::string &s, const char *field,
                        uint64_t cap = kBundleMaxStringBytes) {
  if (s.size() > cap)
    return std::string(field) + ": " + std::to_string(s.size()) +
           " bytes, more than the limit of " + std::to_string(cap);
  return "";
}

std::string checkCount(size_t n, const char *what) {
  if (n > kBundleMaxCount)
    return std::to_string(n) + " " + what + ", more than the limit of " +
           std::to_string(kBundleMaxCount);
  return "";
}

std::string bufferIndexError(int64_t index, size_t numBuffers) {
  return "buffer index " + std::to_string(index) + " out of range (" +
         std::to_string(numBuffers) + " buffers)";
}

/// The problem with `entry`, prefixed by where it is; empty when none.
std::string validateEntry(const Entry &e) {
  std::string err;
#define MOEC_CHECK(expr)                                                       \
  do {                                                                         \
    err = (expr);                                                              \
    if (!err.empty())                                                          \
      return err;                                                              \
  } while (false)

  if (e.name.empty())
    return "name is empty";
  MOEC_CHECK(checkString(e.name, "name"));
  MOEC_CHECK(checkString(e.target, "target"));
  MOEC_CHECK(checkTarget(e.target, e.binaryKind));
  if (e.binary.size() > kBundleMaxBinaryBytes)
    return "binary: " + std::to_string(e.binary.size()) +
           " bytes, more than the limit of " +
           std::to_string(kBundleMaxBinaryBytes);
  MOEC_CHECK(checkString(e.source, "source", kBundleMaxSourceBytes));
  MOEC_CHECK(checkCount(e.symbols.size(), "symbols"));
  MOEC_CHECK(checkCount(e.buffers.size(), "buffers"));
  MOEC_CHECK(checkCount(e.steps.size(), "steps"));
  MOEC_CHECK(checkCount(e.refOps.size(), "ref ops"));

  size_t numSymbols = e.symbols.size();
  size_t numBuffers = e.buffers.size();

  // Buffers: inputs first, unique non-empty names, well-formed dimensions.
  std::set<std::string> names;
  bool seenNonInput = false;
  for (size_t i = 0; i < numBuffers; ++i) {
    const BufferDesc &b = e.buffers[i];
    std::string where =
        "buffer " + std::to_string(i) + " (" + quote(b.name) + "): ";
    if (b.name.empty())
      return "buffer " + std::to_string(i) + ": name is empty";
    if ((err = checkString(b.name, "name")).size())
      return where + err;
    if (!names.insert(b.name).second)
      return where + "duplicate buffer name";
    if (static_cast<uint8_t>(b.role) > kMaxBufferRole)
      return where + "role " + std::to_string(static_cast<int>(b.role)) +
             " out of range";
    if (static_cast<uint8_t>(b.elem) > kMaxElemType)
      return where + "element type " +
             std::to_string(static_cast<int>(b.elem)) + " out of range";
    if (b.role == BufferRole::Input && seenNonInput)
      return where + "input after a non-input buffer (inputs come first)";
    seenNonInput |= b.role != BufferRole::Input;
    if ((err = checkCount(b.dims.size(), "dims")).size())
      return where + err;
    for (size_t d = 0; d < b.dims.size(); ++d) {
      if ((err = checkString(b.dims[d], "expression")).size())
        return where + "dim " + std::to_string(d) + ": " + err;
      Status s = validateExpr(b.dims[d], numSymbols);
      if (!s)
        return where + "dim " + std::to_string(d) + ": " + s.message();
    }
    // A view's bytes are its source's (the executor checks at run time
    // that both sizes agree).
    if (b.role == BufferRole::View) {
      if (b.source >= numBuffers || b.source == i)
        return where + "view of buffer " + std::to_string(b.source) +
               ", not another buffer of the " + std::to_string(numBuffers);
      const BufferDesc &source = e.buffers[b.source];
      if (source.role == BufferRole::View)
        return where + "view of buffer " + std::to_string(b.source) +
               ", itself a view";
      if (source.elem != b.elem)
        return where + "view of buffer " + std::to_string(b.source) +
               " with another element type";
    }
  }

  // Symbols: a dimension of an input.
  for (size_t i = 0; i < numSymbols; ++i) {
    const SymbolDesc &sym = e.symbols[i];
    std::string where =
        "symbol " + std::to_string(i) + " (" + quote(sym.name) + "): ";
    if ((err = checkString(sym.name, "name")).size())
      return where + err;
    if (sym.buffer >= numBuffers)
      return where + bufferIndexError(sym.buffer, numBuffers);
    const BufferDesc &b = e.buffers[sym.buffer];
    if (b.role != BufferRole::Input)
      return where + "buffer " + std::to_string(sym.buffer) + " (" +
             quote(b.name) + ") is not an input";
    if (sym.dim >= b.dims.size())
      return where + "dim " + std::to_string(sym.dim) +
             " out of range (buffer " + std::to_string(sym.buffer) + " (" +
             quote(b.name) + ") has rank " + std::to_string(b.dims.size()) +
             ")";
  }

  // Steps.
  for (size_t i = 0; i < e.steps.size(); ++i) {
    const LaunchStep &step = e.steps[i];
    std::string where = "step " + std::to_string(i) + ": ";
    if (step.kernel.empty())
      return where + "kernel name is empty";
    if ((err = checkString(step.kernel, "kernel")).size() ||
        (err = checkString(step.grid, "grid")).size() ||
        (err = checkString(step.tile, "tile")).size() ||
        (err = checkCount(step.params.size(), "params")).size())
      return where + err;
    Status s = validateExpr(step.grid, numSymbols);
    if (!s)
      return where + "grid: " + s.message();
    if (step.blockSize < 1 || step.blockSize > 1024)
      return where + "block size " + std::to_string(step.blockSize) +
             " out of range [1, 1024]";
    if (step.clusterBlocks < 1 || step.clusterBlocks > kBundleMaxClusterBlocks)
      return where + "cluster of " + std::to_string(step.clusterBlocks) +
             " blocks out of range [1, " +
             std::to_string(kBundleMaxClusterBlocks) + "]";
    for (size_t p = 0; p < step.params.size(); ++p) {
      const ParamDesc &param = step.params[p];
      std::string pwhere = where + "param " + std::to_string(p) + ": ";
      switch (param.kind) {
      case ParamDesc::Kind::Buffer:
        if (param.buffer >= numBuffers)
          return pwhere + bufferIndexError(param.buffer, numBuffers);
        break;
      case ParamDesc::Kind::Scalar:
        if ((err = checkString(param.expr, "expression")).size())
          return pwhere + err;
        s = validateExpr(param.expr, numSymbols);
        if (!s)
          return pwhere + s.message();
        break;
      case ParamDesc::Kind::TensorMap: {
        if (param.buffer >= numBuffers)
          return pwhere + bufferIndexError(param.buffer, numBuffers);
        const BufferDesc &b = e.buffers[param.buffer];
        if (b.elem != ElemType::BF16 && b.elem != ElemType::F16 &&
            b.elem != ElemType::F8E4M3FN && b.elem != ElemType::F8E5M2)
          return pwhere + "tensor map of a " + elemTypeName(b.elem) +
                 " buffer (only bf16, f16 and FP8)";
        if (b.dims.empty() || b.dims.size() > 5 ||
            param.box.size() != b.dims.size())
          return pwhere + "tensor map box has " +
                 std::to_string(param.box.size()) +
                 " dimensions for a buffer of rank " +
                 std::to_string(b.dims.size()) + " (rank 1 to 5)";
        if (param.box[0] * elemSize(b.elem) != 128)
          return pwhere + "tensor map box is " +
                 std::to_string(param.box[0] * elemSize(b.elem)) +
                 " bytes wide; the 128-byte swizzle needs 128";
        for (uint32_t extent : param.box)
          if (extent < 1 || extent > 256)
            return pwhere + "tensor map box extent " +
                   std::to_string(extent) + " out of range [1, 256]";
        break;
      }
      default:
        return pwhere + "kind " + std::to_string(static_cast<int>(param.kind)) +
               " out of range";
      }
    }
  }

  // Reference ops.
  for (size_t i = 0; i < e.refOps.size(); ++i) {
    const RefOp &op = e.refOps[i];
    std::string where =
        "ref op " + std::to_string(i) + " (" + quote(op.name) + "): ";
    if (op.name.empty())
      return "ref op " + std::to_string(i) + ": name is empty";
    if ((err = checkString(op.name, "name")).size() ||
        (err = checkCount(op.attrs.size(), "attributes")).size() ||
        (err = checkCount(op.operands.size(), "operands")).size() ||
        (err = checkCount(op.results.size(), "results")).size())
      return where + err;
    for (const auto &attr : op.attrs)
      if ((err = checkString(attr.first, "attribute name")).size() ||
          (err = checkString(attr.second, "attribute value")).size())
        return where + err;
    auto checkIndices = [&](const std::vector<int32_t> &indices,
                            const char *what) -> std::string {
      for (size_t k = 0; k < indices.size(); ++k)
        if (indices[k] < -1 ||
            (indices[k] >= 0 && static_cast<size_t>(indices[k]) >= numBuffers))
          return where + what + " " + std::to_string(k) + ": " +
                 bufferIndexError(indices[k], numBuffers);
      return "";
    };
    MOEC_CHECK(checkIndices(op.operands, "operand"));
    MOEC_CHECK(checkIndices(op.results, "result"));
    // Each operand and result has a name, non-empty and unique (the
    // checker looks them up by name).
    auto checkNames = [&](const std::vector<std::string> &names,
                          size_t count, const char *what) -> std::string {
      if (names.size() != count)
        return where + std::to_string(names.size()) + " " + what +
               " names for " + std::to_string(count) + " " + what + "s";
      for (size_t k = 0; k < names.size(); ++k) {
        if (names[k].empty())
          return where + what + " " + std::to_string(k) + ": name is empty";
        if (std::string e = checkString(names[k], "name"); !e.empty())
          return where + what + " " + std::to_string(k) + ": " + e;
        for (size_t j = 0; j < k; ++j)
          if (names[j] == names[k])
            return where + what + "s " + std::to_string(j) + " and " +
                   std::to_string(k) + " are both named " + quote(names[k]);
      }
      return "";
    };
    MOEC_CHECK(checkNames(op.operandNames, op.operands.size(), "operand"));
    MOEC_CHECK(checkNames(op.resultNames, op.results.size(), "result"));
  }
#undef MOEC_CHECK
  return "";
}

} // namespace

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", v);
  return text;
}

/// Older bundles cannot be read (the format has no optional parts); they
/// are rebuilt from their source.
std::string versionError(uint32_t version) {
  std::string v = std::to_string(version),
              ours = std::to_string(kBundleVersion);
  if (version < kBundleVersion)
    return "bundle version " + v + " is older than this runtime's (" + ours +
           "): rebuild it with this moec (moec compile, or clear the JIT "
           "cache)";
  return "bundle version " + v + " is newer than this runtime's (" + ours +
         "): use the moec that wrote it, or rebuild it with this one";
}

Status validateBundle(const Bundle &bundle) {
  if (bundle.version != kBundleVersion)
    return Status(ErrorCode::Unsupported, versionError(bundle.version));
  if (bundle.producer.size() > kBundleMaxStringBytes)
    return Status(ErrorCode::InvalidBundle, "producer: too long");
  if (bundle.entries.size() > kBundleMaxCount)
    return Status(ErrorCode::InvalidBundle,
                  checkCount(bundle.entries.size(), "entries"));
  std::map<std::pair<std::string, std::string>, size_t> seen;
  for (size_t i = 0; i < bundle.entries.size(); ++i) {
    const Entry &entry = bundle.entries[i];
    std::string err = validateEntry(entry);
    if (!err.empty())
      return Status(ErrorCode::InvalidBundle,
                    entryLabel(i, entry) + ": " + err);
    auto inserted = seen.emplace(std::make_pair(entry.name, entry.target), i);
    if (!inserted.second)
      return Status(ErrorCode::InvalidBundle,
                    entryLabel(i, entry) + ": same name and target as entry " +
                        std::to_string(inserted.first->second));
  }
  return Status::ok();
}

} // namespace moec::rt
