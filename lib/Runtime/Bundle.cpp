//===- Bundle.cpp - The .moecb bundle: (de)serialization ------------------===//
//
// Part of moec. The byte format is specified in docs/bundle.md; keep the two
// in step. The reader treats its input as hostile: every length is checked
// against the bytes left before anything is allocated or copied, every enum
// against its range, and the result goes through validateBundle, so a bundle
// that reads is one the executor can run without further index checks.
//
//===----------------------------------------------------------------------===//

#include "BundleInternal.h"
#include "moec/Runtime/Bundle.h"
#include "moec/Runtime/Expr.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <unistd.h>

namespace moec::rt {

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

size_t elemSize(ElemType type) {
  switch (type) {
  case ElemType::F32:
  case ElemType::I32:
    return 4;
  case ElemType::F16:
  case ElemType::BF16:
    return 2;
  case ElemType::F8E4M3FN:
  case ElemType::F8E5M2:
  case ElemType::U8:
    return 1;
  case ElemType::I64:
    return 8;
  }
  return 0;
}

namespace {
constexpr ElemType kElemTypes[] = {
    ElemType::F32,    ElemType::F16, ElemType::BF16, ElemType::F8E4M3FN,
    ElemType::F8E5M2, ElemType::I32, ElemType::I64,  ElemType::U8};
constexpr char kMagic[8] = {'M', 'O', 'E', 'C', 'B', 'N', 'D', 'L'};
} // namespace

const char *elemTypeName(ElemType type) {
  switch (type) {
  case ElemType::F32:
    return "f32";
  case ElemType::F16:
    return "f16";
  case ElemType::BF16:
    return "bf16";
  case ElemType::F8E4M3FN:
    return "f8E4M3FN";
  case ElemType::F8E5M2:
    return "f8E5M2";
  case ElemType::I32:
    return "i32";
  case ElemType::I64:
    return "i64";
  case ElemType::U8:
    return "ui8";
  }
  return "<invalid>";
}

bool parseElemType(const std::string &name, ElemType &type) {
  for (ElemType t : kElemTypes) {
    if (name == elemTypeName(t)) {
      type = t;
      return true;
    }
  }
  return false;
}

const char *binaryKindName(BinaryKind kind) {
  switch (kind) {
  case BinaryKind::Cubin:
    return "cubin";
  case BinaryKind::Ptx:
    return "ptx";
  case BinaryKind::Hsaco:
    return "hsaco";
  case BinaryKind::HostObject:
    return "host-object";
  }
  return "<invalid>";
}

const char *bufferRoleName(BufferRole role) {
  switch (role) {
  case BufferRole::Input:
    return "input";
  case BufferRole::Output:
    return "output";
  case BufferRole::Temp:
    return "temp";
  case BufferRole::View:
    return "view";
  }
  return "<invalid>";
}

const Entry *Bundle::find(const std::string &name,
                          const std::string &target) const {
  for (const Entry &entry : entries)
    if (entry.name == name && entry.target == target)
      return &entry;
  return nullptr;
}


//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

namespace {

class ByteWriter {
public:
  explicit ByteWriter(std::vector<uint8_t> &out) : out_(out) {}

  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i)
      out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i)
      out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void count(size_t n) { u32(static_cast<uint32_t>(n)); }
  void str(const std::string &s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void blob(const std::vector<uint8_t> &b) {
    u64(b.size());
    out_.insert(out_.end(), b.begin(), b.end());
  }

private:
  std::vector<uint8_t> &out_;
};

void writeEntry(ByteWriter &w, const Entry &e) {
  w.str(e.name);
  w.str(e.target);
  w.u8(static_cast<uint8_t>(e.binaryKind));
  w.blob(e.binary);
  w.count(e.symbols.size());
  for (const SymbolDesc &s : e.symbols) {
    w.str(s.name);
    w.u32(s.buffer);
    w.u32(s.dim);
  }
  w.count(e.buffers.size());
  for (const BufferDesc &b : e.buffers) {
    w.str(b.name);
    w.u8(static_cast<uint8_t>(b.role));
    w.u8(static_cast<uint8_t>(b.elem));
    w.count(b.dims.size());
    for (const std::string &d : b.dims)
      w.str(d);
    if (b.role == BufferRole::View)
      w.u32(b.source);
  }
  w.count(e.steps.size());
  for (const LaunchStep &s : e.steps) {
    w.str(s.kernel);
    w.str(s.grid);
    w.u32(s.blockSize);
    w.u32(s.dynamicSharedBytes);
    w.u32(s.clusterBlocks);
    w.str(s.tile);
    w.count(s.params.size());
    for (const ParamDesc &p : s.params) {
      w.u8(static_cast<uint8_t>(p.kind));
      if (p.kind == ParamDesc::Kind::Scalar) {
        w.str(p.expr);
        continue;
      }
      w.u32(p.buffer);
      if (p.kind == ParamDesc::Kind::TensorMap) {
        w.count(p.box.size());
        for (uint32_t extent : p.box)
          w.u32(extent);
      }
    }
  }
  w.count(e.refOps.size());
  for (const RefOp &op : e.refOps) {
    w.str(op.name);
    w.count(op.attrs.size());
    for (const auto &attr : op.attrs) {
      w.str(attr.first);
      w.str(attr.second);
    }
    w.count(op.operands.size());
    for (size_t k = 0; k < op.operands.size(); ++k) {
      w.str(op.operandNames[k]);
      w.i32(op.operands[k]);
    }
    w.count(op.results.size());
    for (size_t k = 0; k < op.results.size(); ++k) {
      w.str(op.resultNames[k]);
      w.i32(op.results[k]);
    }
  }
  w.str(e.source);
}

} // namespace

uint32_t bundleChecksum(const uint8_t *data, size_t size) {
  // Table-driven CRC-32, reflected polynomial 0xEDB88320.
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int bit = 0; bit < 8; ++bit)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

Status writeBundle(const Bundle &bundle, std::vector<uint8_t> &bytes) {
  Status s = validateBundle(bundle);
  if (!s)
    return s;
  bytes.clear();
  ByteWriter w(bytes);
  for (char c : kMagic)
    w.u8(static_cast<uint8_t>(c));
  w.u32(kBundleVersion);
  w.u32(0); // the checksum, filled in below
  w.str(bundle.producer);
  w.count(bundle.entries.size());
  for (const Entry &e : bundle.entries)
    writeEntry(w, e);
  uint32_t checksum = bundleChecksum(bytes.data() + kBundlePayloadOffset,
                                     bytes.size() - kBundlePayloadOffset);
  for (int i = 0; i < 4; ++i)
    bytes[kBundlePayloadOffset - 4 + i] =
        static_cast<uint8_t>(checksum >> (8 * i));
  return Status::ok();
}

Status writeBundleFile(const Bundle &bundle, const std::string &path) {
  std::vector<uint8_t> bytes;
  Status s = writeBundle(bundle, bytes);
  if (!s)
    return s;
  // Write a sibling and rename it over the target, so that a reader (or a
  // concurrent writer of the JIT cache) never sees half a file.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    return Status(ErrorCode::IoError,
                  "cannot create '" + tmp + "': " + std::strerror(errno));
  size_t written =
      bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  int err = written == bytes.size() ? 0 : errno;
  if (std::fclose(f) != 0 && err == 0)
    err = errno ? errno : EIO;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0)
    err = errno ? errno : EIO;
  if (err != 0) {
    std::remove(tmp.c_str());
    return Status(ErrorCode::IoError,
                  "cannot write '" + path + "': " + std::strerror(err));
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

namespace {

/// A cursor over untrusted bytes. Every read checks the bytes left first;
/// errors name the context (set by the caller), the field and the offset.
class ByteReader {
public:
  ByteReader(const uint8_t *data, size_t size) : data_(data), size_(size) {}

  /// Prefix of every message, e.g. "entry 0 ('f', sm_90a): step 2: ".
  std::string context;

  size_t offset() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  Status fail(const std::string &field, const std::string &what,
              size_t at) const {
    return Status(ErrorCode::InvalidBundle, context + field + ": " + what +
                                                " (at byte " +
                                                std::to_string(at) + ")");
  }

  Status need(const std::string &field, uint64_t n) const {
    if (n > left())
      return fail(field,
                  "truncated: needs " + std::to_string(n) + " bytes, " +
                      std::to_string(left()) + " left",
                  pos_);
    return Status::ok();
  }

  Status u8(const std::string &field, uint8_t &v) {
    if (Status s = need(field, 1); !s)
      return s;
    v = data_[pos_++];
    return Status::ok();
  }

  Status u32(const std::string &field, uint32_t &v) {
    if (Status s = need(field, 4); !s)
      return s;
    v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<uint32_t>(data_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return Status::ok();
  }

  Status u64(const std::string &field, uint64_t &v) {
    if (Status s = need(field, 8); !s)
      return s;
    v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += 8;
    return Status::ok();
  }

  Status i32(const std::string &field, int32_t &v) {
    uint32_t u = 0;
    if (Status s = u32(field, u); !s)
      return s;
    std::memcpy(&v, &u, 4);
    return Status::ok();
  }

  /// A u8 enum in [0, max].
  template <typename E>
  Status enumValue(const std::string &field, uint8_t max, E &v) {
    size_t at = pos_;
    uint8_t raw = 0;
    if (Status s = u8(field, raw); !s)
      return s;
    if (raw > max)
      return fail(field,
                  "value " + std::to_string(raw) + " out of range [0, " +
                      std::to_string(max) + "]",
                  at);
    v = static_cast<E>(raw);
    return Status::ok();
  }

  /// u32 length, then the bytes.
  Status str(const std::string &field, std::string &v,
             uint64_t cap = kBundleMaxStringBytes) {
    size_t at = pos_;
    uint32_t n = 0;
    if (Status s = u32(field, n); !s)
      return s;
    if (n > cap)
      return fail(field,
                  "length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(cap),
                  at);
    if (n > left())
      return fail(field,
                  "length " + std::to_string(n) + " exceeds the " +
                      std::to_string(left()) + " bytes left",
                  at);
    v.assign(reinterpret_cast<const char *>(data_ + pos_), n);
    pos_ += n;
    return Status::ok();
  }

  /// u64 length, then the bytes.
  Status blob(const std::string &field, std::vector<uint8_t> &v, uint64_t cap) {
    size_t at = pos_;
    uint64_t n = 0;
    if (Status s = u64(field, n); !s)
      return s;
    if (n > cap)
      return fail(field,
                  "length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(cap),
                  at);
    if (n > left())
      return fail(field,
                  "length " + std::to_string(n) + " exceeds the " +
                      std::to_string(left()) + " bytes left",
                  at);
    v.assign(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return Status::ok();
  }

  /// A u32 element count; `minBytes` is the smallest encoding of one
  /// element, so absurd counts fail before anything is allocated.
  Status count(const std::string &field, uint32_t &n, size_t minBytes) {
    size_t at = pos_;
    if (Status s = u32(field, n); !s)
      return s;
    if (n > kBundleMaxCount)
      return fail(field,
                  "count " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(kBundleMaxCount),
                  at);
    if (static_cast<uint64_t>(n) * minBytes > left())
      return fail(field,
                  "count " + std::to_string(n) + " needs at least " +
                      std::to_string(static_cast<uint64_t>(n) * minBytes) +
                      " bytes, " + std::to_string(left()) + " left",
                  at);
    return Status::ok();
  }

private:
  const uint8_t *data_;
  size_t size_;
  size_t pos_ = 0;
};

// Smallest encodings, for ByteReader::count.
constexpr size_t kMinString = 4;
constexpr size_t kMinSymbol = kMinString + 4 + 4;
constexpr size_t kMinBuffer = kMinString + 1 + 1 + 4;
// kernel, grid, tile; block size, shared bytes, cluster blocks, param
// count.
constexpr size_t kMinStep = 3 * kMinString + 4 * 4;
constexpr size_t kMinParam = 1 + 4;
constexpr size_t kMinRefOp = kMinString + 3 * 4;
constexpr size_t kMinEntry = 2 * kMinString + 1 + 8 + 4 * 4 + kMinString;

#define MOEC_TRY(expr)                                                         \
  do {                                                                         \
    if (::moec::rt::Status moecStatus_ = (expr); !moecStatus_)                 \
      return moecStatus_;                                                      \
  } while (false)

Status readSymbols(ByteReader &r, Entry &e) {
  uint32_t n = 0;
  MOEC_TRY(r.count("symbol count", n, kMinSymbol));
  e.symbols.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    SymbolDesc &s = e.symbols[i];
    std::string f = "symbol " + std::to_string(i);
    MOEC_TRY(r.str(f + ": name", s.name));
    MOEC_TRY(r.u32(f + ": buffer", s.buffer));
    MOEC_TRY(r.u32(f + ": dim", s.dim));
  }
  return Status::ok();
}

Status readBuffers(ByteReader &r, Entry &e) {
  uint32_t n = 0;
  MOEC_TRY(r.count("buffer count", n, kMinBuffer));
  e.buffers.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    BufferDesc &b = e.buffers[i];
    std::string f = "buffer " + std::to_string(i);
    MOEC_TRY(r.str(f + ": name", b.name));
    MOEC_TRY(r.enumValue(f + ": role", kMaxBufferRole, b.role));
    MOEC_TRY(r.enumValue(f + ": element type", kMaxElemType, b.elem));
    uint32_t rank = 0;
    MOEC_TRY(r.count(f + ": rank", rank, kMinString));
    b.dims.resize(rank);
    for (uint32_t d = 0; d < rank; ++d)
      MOEC_TRY(r.str(f + ": dim " + std::to_string(d), b.dims[d]));
    if (b.role == BufferRole::View)
      MOEC_TRY(r.u32(f + ": source", b.source));
  }
  return Status::ok();
}

Status readSteps(ByteReader &r, Entry &e) {
  uint32_t n = 0;
  MOEC_TRY(r.count("step count", n, kMinStep));
  e.steps.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    LaunchStep &s = e.steps[i];
    std::string f = "step " + std::to_string(i);
    MOEC_TRY(r.str(f + ": kernel", s.kernel));
    MOEC_TRY(r.str(f + ": grid", s.grid));
    MOEC_TRY(r.u32(f + ": block size", s.blockSize));
    MOEC_TRY(r.u32(f + ": dynamic shared bytes", s.dynamicSharedBytes));
    MOEC_TRY(r.u32(f + ": cluster blocks", s.clusterBlocks));
    MOEC_TRY(r.str(f + ": tile", s.tile));
    uint32_t np = 0;
    MOEC_TRY(r.count(f + ": param count", np, kMinParam));
    s.params.resize(np);
    for (uint32_t p = 0; p < np; ++p) {
      ParamDesc &param = s.params[p];
      std::string fp = f + ": param " + std::to_string(p);
      MOEC_TRY(r.enumValue(fp + ": kind", kMaxParamKind, param.kind));
      if (param.kind == ParamDesc::Kind::Scalar) {
        MOEC_TRY(r.str(fp + ": expression", param.expr));
        continue;
      }
      MOEC_TRY(r.u32(fp + ": buffer", param.buffer));
      if (param.kind == ParamDesc::Kind::TensorMap) {
        uint32_t rank = 0;
        MOEC_TRY(r.count(fp + ": box rank", rank, 4));
        param.box.resize(rank);
        for (uint32_t d = 0; d < rank; ++d)
          MOEC_TRY(r.u32(fp + ": box " + std::to_string(d), param.box[d]));
      }
    }
  }
  return Status::ok();
}

/// A list of (name, buffer index) pairs: a reference op's operands or
/// results.
Status readNamedIndices(ByteReader &r, const std::string &f,
                        std::vector<std::string> &names,
                        std::vector<int32_t> &indices) {
  uint32_t n = 0;
  MOEC_TRY(r.count(f + " count", n, kMinString + 4));
  names.resize(n);
  indices.resize(n);
  for (uint32_t k = 0; k < n; ++k) {
    MOEC_TRY(r.str(f + " " + std::to_string(k) + ": name", names[k]));
    MOEC_TRY(r.i32(f + " " + std::to_string(k), indices[k]));
  }
  return Status::ok();
}

Status readRefOps(ByteReader &r, Entry &e) {
  uint32_t n = 0;
  MOEC_TRY(r.count("ref op count", n, kMinRefOp));
  e.refOps.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    RefOp &op = e.refOps[i];
    std::string f = "ref op " + std::to_string(i);
    MOEC_TRY(r.str(f + ": name", op.name));
    uint32_t na = 0;
    MOEC_TRY(r.count(f + ": attribute count", na, 2 * kMinString));
    op.attrs.resize(na);
    for (uint32_t a = 0; a < na; ++a) {
      std::string fa = f + ": attribute " + std::to_string(a);
      MOEC_TRY(r.str(fa + ": name", op.attrs[a].first));
      MOEC_TRY(r.str(fa + ": value", op.attrs[a].second));
    }
    MOEC_TRY(readNamedIndices(r, f + ": operand", op.operandNames,
                              op.operands));
    MOEC_TRY(readNamedIndices(r, f + ": result", op.resultNames,
                              op.results));
  }
  return Status::ok();
}

Status readEntry(ByteReader &r, size_t index, Entry &e) {
  r.context = "entry " + std::to_string(index) + ": ";
  MOEC_TRY(r.str("name", e.name));
  MOEC_TRY(r.str("target", e.target));
  r.context = entryLabel(index, e) + ": ";
  MOEC_TRY(r.enumValue("binary kind", kMaxBinaryKind, e.binaryKind));
  MOEC_TRY(r.blob("binary", e.binary, kBundleMaxBinaryBytes));
  MOEC_TRY(readSymbols(r, e));
  MOEC_TRY(readBuffers(r, e));
  MOEC_TRY(readSteps(r, e));
  MOEC_TRY(readRefOps(r, e));
  MOEC_TRY(r.str("source", e.source, kBundleMaxSourceBytes));
  return Status::ok();
}

/// Parses without validating; `bundle` may be partly filled on error.
Status parseBundle(const uint8_t *data, size_t size, Bundle &bundle) {
  if (!data && size != 0)
    return Status(ErrorCode::InvalidArgument, "null data with nonzero size");
  ByteReader r(data, size);
  if (size < sizeof(kMagic) || std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
    return Status(ErrorCode::InvalidBundle,
                  "not a moec bundle (the file does not start with "
                  "'MOECBNDL')");
  for (size_t i = 0; i < sizeof(kMagic); ++i) {
    uint8_t skip = 0;
    MOEC_TRY(r.u8("magic", skip));
  }
  uint32_t version = 0;
  MOEC_TRY(r.u32("version", version));
  if (version != kBundleVersion)
    return Status(ErrorCode::Unsupported, versionError(version));
  bundle.version = version;
  // The checksum before anything else: a damaged bundle is refused as
  // damaged, not for whatever its damaged bytes happen to say.
  uint32_t stored = 0;
  MOEC_TRY(r.u32("checksum", stored));
  uint32_t computed =
      bundleChecksum(data + kBundlePayloadOffset, size - kBundlePayloadOffset);
  if (stored != computed)
    return Status(ErrorCode::InvalidBundle,
                  "checksum mismatch (stored " + hex32(stored) +
                      ", computed " + hex32(computed) +
                      " over the payload): the bundle is damaged (truncated "
                      "or changed on disk or in a cache); rebuild it with "
                      "moec compile");
  MOEC_TRY(r.str("producer", bundle.producer));
  uint32_t n = 0;
  MOEC_TRY(r.count("entry count", n, kMinEntry));
  bundle.entries.resize(n);
  for (uint32_t i = 0; i < n; ++i)
    MOEC_TRY(readEntry(r, i, bundle.entries[i]));
  r.context.clear();
  if (r.left() != 0)
    return r.fail("end",
                  std::to_string(r.left()) +
                      " trailing bytes after the last entry",
                  r.offset());
  return Status::ok();
}

} // namespace

Status readBundle(const uint8_t *data, size_t size, Bundle &bundle) {
  Bundle parsed;
  Status s = parseBundle(data, size, parsed);
  if (s)
    s = validateBundle(parsed);
  bundle = s ? std::move(parsed) : Bundle();
  return s;
}

#undef MOEC_TRY

Status readBundleFile(const std::string &path, Bundle &bundle) {
  bundle = Bundle();
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return Status(errno == ENOENT ? ErrorCode::NotFound : ErrorCode::IoError,
                  "cannot open '" + path + "': " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  // Size hint only: the loop below also reads pipes and growing files.
  if (std::fseek(f, 0, SEEK_END) == 0) {
    long end = std::ftell(f);
    if (end > 0)
      bytes.reserve(static_cast<size_t>(end));
    std::rewind(f);
  }
  uint8_t chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), f)) > 0)
    bytes.insert(bytes.end(), chunk, chunk + got);
  bool failed = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  if (failed)
    return Status(ErrorCode::IoError,
                  "cannot read '" + path + "': " + std::strerror(err));
  Status s = readBundle(bytes.data(), bytes.size(), bundle);
  if (!s)
    return Status(s.code(), path + ": " + s.message());
  return Status::ok();
}

} // namespace moec::rt
