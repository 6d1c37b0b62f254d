//===- Bundle.h - The .moecb bundle: data model and (de)serialization -*- C++ -*-===//
//
// Part of moec. A bundle carries compiled kernels from the machine that has
// MLIR to the machine that has the GPU. This header is the in-memory model
// shared by the writer (the compiler) and the reader (the runtime); it has no
// MLIR dependency. The byte format is specified in docs/bundle.md.
//
// A bundle holds entries. An entry is one compiled function for one target:
// its binary (one module with every kernel), the buffers it reads, writes and
// needs as scratch, the sequence of kernel launches that computes it, and the
// op list the float64 reference evaluates to check it.
//
// Sizes that depend on the number of tokens are expressions over symbols (the
// dynamic dimensions of the entry's inputs), written in reverse Polish
// notation: "s0 8 *" is 8·s0. See Expr.h.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_RUNTIME_BUNDLE_H
#define MOEC_RUNTIME_BUNDLE_H

#include "moec/Runtime/Status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moec::rt {

/// Bumped on every incompatible change of the byte format. Version 3 added
/// the payload checksum, version 4 view buffers, version 5 the ODS names of
/// the reference ops' operands and results.
constexpr uint32_t kBundleVersion = 5;

/// Where the payload (everything the checksum covers) starts: after the
/// magic, the version and the checksum.
constexpr size_t kBundlePayloadOffset = 16;

/// Most blocks of a thread-block cluster (the portable limit of sm_90).
constexpr uint32_t kBundleMaxClusterBlocks = 8;

/// Limits the reader enforces (and the writer, so that every bundle written
/// can be read back). See docs/bundle.md.
constexpr uint32_t kBundleMaxCount = 1u << 20;       ///< any list
constexpr uint32_t kBundleMaxStringBytes = 1u << 20; ///< names, expressions
constexpr uint64_t kBundleMaxSourceBytes = 1ull << 28; ///< Entry::source
constexpr uint64_t kBundleMaxBinaryBytes = 1ull << 31; ///< Entry::binary

enum class BinaryKind : uint8_t {
  Cubin = 0,      ///< sm_90a ELF from ptxas
  Ptx = 1,        ///< PTX text (no ptxas where compiled; the driver JITs it)
  Hsaco = 2,      ///< AMDGPU code object
  HostObject = 3, ///< ELF relocatable object for the host CPU
};

/// "cubin", "ptx", "hsaco", "host-object".
const char *binaryKindName(BinaryKind kind);

enum class ElemType : uint8_t {
  F32 = 0,
  F16 = 1,
  BF16 = 2,
  F8E4M3FN = 3,
  F8E5M2 = 4,
  I32 = 5,
  I64 = 6,
  U8 = 7,
};
/// Bytes per element.
size_t elemSize(ElemType type);
/// "f32", "bf16", "f8E4M3FN", "i32", "ui8", ... (MLIR spelling).
const char *elemTypeName(ElemType type);
/// Inverse of elemTypeName; false for an unknown name.
bool parseElemType(const std::string &name, ElemType &type);

/// Inputs and outputs are the caller's arrays, temps the executor's
/// scratch; a view is the bytes of another buffer (its `source`) under a
/// shape of its own: a reshape that moves nothing.
enum class BufferRole : uint8_t { Input = 0, Output = 1, Temp = 2, View = 3 };
/// "input", "output", "temp", "view".
const char *bufferRoleName(BufferRole role);

/// A dense row-major array the entry reads or writes.
struct BufferDesc {
  std::string name; ///< for messages: "arg0", "result1", "tmp3"
  BufferRole role = BufferRole::Temp;
  ElemType elem = ElemType::F32;
  std::vector<std::string> dims; ///< one RPN expression per dimension
  /// A view's source buffer (not a view; same element type and byte size).
  uint32_t source = 0;
};

/// Symbol `s<i>` is dimension `dim` of input buffer `buffer`.
struct SymbolDesc {
  std::string name; ///< e.g. "T"
  uint32_t buffer = 0;
  uint32_t dim = 0;
};

/// One kernel parameter: a buffer's device address, a 64-bit integer
/// computed from the symbols, or the TMA descriptor (CUtensorMap, 128
/// bytes, passed by value) of a buffer.
struct ParamDesc {
  enum class Kind : uint8_t { Buffer = 0, Scalar = 1, TensorMap = 2 };
  Kind kind = Kind::Buffer;
  uint32_t buffer = 0; ///< Kind::Buffer and Kind::TensorMap
  std::string expr;    ///< Kind::Scalar, RPN
  /// Kind::TensorMap: the box one TMA copy moves, in elements, innermost
  /// (last) dimension first, one entry per dimension of the buffer. The map
  /// uses the 128-byte swizzle, so the innermost box is 128 bytes; a 16-bit
  /// buffer (bf16, f16) of rank 1 to 5 whose dimensions are all in it.
  std::vector<uint32_t> box;
};

/// One launch: `grid` blocks of `blockSize` threads (1-D), in order.
struct LaunchStep {
  std::string kernel;       ///< symbol in the entry's binary
  std::string grid;         ///< RPN; a grid of 0 blocks skips the launch
  uint32_t blockSize = 1;
  uint32_t dynamicSharedBytes = 0;
  std::string tile;         ///< the #moe.tile<...> the kernel was built with
  std::vector<ParamDesc> params;
  /// Blocks per thread-block cluster along x (1: no cluster). The grid is
  /// a multiple of it; the kernel walks its work with a grid stride, so a
  /// launcher may run fewer clusters than the grid asks for (as many as
  /// fit on the device at once).
  uint32_t clusterBlocks = 1;
};

/// One op of the function, as the float64 reference evaluates it. Operands
/// are buffer indices, one per ODS operand group (-1 for an absent optional
/// one), each with its ODS name in `operandNames`; likewise the results.
/// Attributes are textual ("8", "softmax", "true", "0.5"): every attribute
/// of the op, default-valued ones included; an absent unit attribute is
/// "false", an absent optional one is left out.
struct RefOp {
  std::string name; ///< "moe.router_topk", "linalg.matmul", ...
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<int32_t> operands;
  std::vector<std::string> operandNames; ///< parallel to operands
  std::vector<int32_t> results;
  std::vector<std::string> resultNames; ///< parallel to results
};

struct Entry {
  std::string name;   ///< the function's name
  std::string target; ///< "sm_90a", "gfx942", "host"
  BinaryKind binaryKind = BinaryKind::Cubin;
  std::vector<uint8_t> binary;
  std::vector<SymbolDesc> symbols;
  std::vector<BufferDesc> buffers; ///< inputs in argument order, then the rest
  std::vector<LaunchStep> steps;
  std::vector<RefOp> refOps;
  std::string source; ///< the entry's MLIR after fusion and tiling, for `inspect`
};

struct Bundle {
  uint32_t version = kBundleVersion;
  std::string producer; ///< "moec <version>"
  std::vector<Entry> entries;

  /// nullptr when absent.
  const Entry *find(const std::string &name, const std::string &target) const;
};

/// The checksum stored in a bundle's header: CRC-32 (the polynomial of zlib
/// and PNG) of `size` payload bytes. It catches damage on disk or in a cache,
/// not tampering: a bundle is code (docs/bundle.md).
uint32_t bundleChecksum(const uint8_t *data, size_t size);

/// Serializes `bundle` (after checking it with validateBundle).
Status writeBundle(const Bundle &bundle, std::vector<uint8_t> &bytes);
Status writeBundleFile(const Bundle &bundle, const std::string &path);
/// Parses and validates. Truncated, oversized or inconsistent input gives an
/// InvalidBundle status naming what is wrong and where; never a crash. A
/// bundle of another format version gives Unsupported; one whose payload
/// does not match its checksum, InvalidBundle.
Status readBundle(const uint8_t *data, size_t size, Bundle &bundle);
Status readBundleFile(const std::string &path, Bundle &bundle);
/// Every index in range, every expression well formed over the entry's
/// symbols, names unique, inputs first.
Status validateBundle(const Bundle &bundle);

} // namespace moec::rt

#endif // MOEC_RUNTIME_BUNDLE_H
