//===- BundleTest.cpp - The .moecb bundle: format, validation, hardening --===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/Bundle.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <unistd.h>

using namespace moec::rt;

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

#define EXPECT_CONTAINS(text, part)                                            \
  EXPECT_TRUE(contains((text), (part))) << "in: " << (text)

/// A two-entry bundle shaped like a small MoE layer: entry 0 has 7 buffers
/// and 3 steps (the validation tests below poke at it).
Bundle makeBundle() {
  Bundle b;
  b.producer = "moec test";
  Entry e;
  e.name = "qwen3";
  e.target = "sm_90a";
  e.binaryKind = BinaryKind::Cubin;
  e.binary = {0x7f, 'E', 'L', 'F', 0, 1, 2, 3, 0xff};
  e.symbols = {{"T", 0, 0}};
  auto buffer = [](const char *name, BufferRole role, ElemType elem,
                   std::vector<std::string> dims) {
    BufferDesc d;
    d.name = name;
    d.role = role;
    d.elem = elem;
    d.dims = std::move(dims);
    return d;
  };
  e.buffers = {
      buffer("arg0", BufferRole::Input, ElemType::BF16, {"s0", "2048"}),
      buffer("arg1", BufferRole::Input, ElemType::F32, {"s0", "128"}),
      buffer("result0", BufferRole::Output, ElemType::BF16, {"s0", "2048"}),
      buffer("tmp0", BufferRole::Temp, ElemType::I32, {"s0", "8"}),
      buffer("tmp1", BufferRole::Temp, ElemType::F32, {"s0", "8"}),
      buffer("tmp2", BufferRole::Temp, ElemType::I64, {"129"}),
      buffer("tmp3", BufferRole::Temp, ElemType::F8E4M3FN,
             {"s0 8 * 128 cdiv 128 *", "2048"}),
  };
  auto param = [](uint32_t bufferIndex) {
    ParamDesc p;
    p.kind = ParamDesc::Kind::Buffer;
    p.buffer = bufferIndex;
    return p;
  };
  auto scalar = [](const char *expr) {
    ParamDesc p;
    p.kind = ParamDesc::Kind::Scalar;
    p.expr = expr;
    return p;
  };
  auto tensorMap = [](uint32_t bufferIndex, std::vector<uint32_t> box) {
    ParamDesc p;
    p.kind = ParamDesc::Kind::TensorMap;
    p.buffer = bufferIndex;
    p.box = std::move(box);
    return p;
  };
  LaunchStep router{
      "router_topk", "s0 127 + 128 /",
      128,           0,
      "#moe.tile<>", {param(1), param(3), param(4), scalar("s0")}};
  LaunchStep sort{"sort", "1", 1024, 4096, "", {param(3), param(5)}};
  LaunchStep gemm{"gemm",
                  "s0 8 * 128 cdiv 16 *",
                  384,
                  200 * 1024,
                  "#moe.tile<m = 128, n = 128>",
                  {tensorMap(0, {64, 128}), param(0), param(6), param(2),
                   scalar("s0 8 *")}};
  gemm.clusterBlocks = 2;
  e.steps = {router, sort, gemm};
  RefOp op;
  op.name = "moe.router_topk";
  op.attrs = {{"k", "8"}, {"score", "softmax"}};
  op.operands = {1, -1};
  op.operandNames = {"logits", "selection_bias"};
  op.results = {4, 3};
  op.resultNames = {"weights", "ids"};
  e.refOps = {op};
  e.source = "func.func @qwen3() { return }";
  b.entries.push_back(e);

  Entry host = e;
  host.target = "host";
  host.binaryKind = BinaryKind::HostObject;
  host.binary.clear();
  host.source.clear();
  b.entries.push_back(host);
  return b;
}

std::vector<uint8_t> bytesOf(const Bundle &b) {
  std::vector<uint8_t> bytes;
  Status s = writeBundle(b, bytes);
  EXPECT_TRUE(s.isOk()) << s.toString();
  return bytes;
}

/// Field-by-field equality, so a failing round trip says where.
void expectEqual(const Bundle &a, const Bundle &b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.producer, b.producer);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const Entry &x = a.entries[i], &y = b.entries[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.target, y.target);
    EXPECT_EQ(x.binaryKind, y.binaryKind);
    EXPECT_EQ(x.binary, y.binary);
    ASSERT_EQ(x.symbols.size(), y.symbols.size());
    for (size_t k = 0; k < x.symbols.size(); ++k) {
      EXPECT_EQ(x.symbols[k].name, y.symbols[k].name);
      EXPECT_EQ(x.symbols[k].buffer, y.symbols[k].buffer);
      EXPECT_EQ(x.symbols[k].dim, y.symbols[k].dim);
    }
    ASSERT_EQ(x.buffers.size(), y.buffers.size());
    for (size_t k = 0; k < x.buffers.size(); ++k) {
      EXPECT_EQ(x.buffers[k].name, y.buffers[k].name);
      EXPECT_EQ(x.buffers[k].role, y.buffers[k].role);
      EXPECT_EQ(x.buffers[k].elem, y.buffers[k].elem);
      EXPECT_EQ(x.buffers[k].dims, y.buffers[k].dims);
      EXPECT_EQ(x.buffers[k].source, y.buffers[k].source);
    }
    ASSERT_EQ(x.steps.size(), y.steps.size());
    for (size_t k = 0; k < x.steps.size(); ++k) {
      const LaunchStep &p = x.steps[k], &q = y.steps[k];
      EXPECT_EQ(p.kernel, q.kernel);
      EXPECT_EQ(p.grid, q.grid);
      EXPECT_EQ(p.blockSize, q.blockSize);
      EXPECT_EQ(p.dynamicSharedBytes, q.dynamicSharedBytes);
      EXPECT_EQ(p.clusterBlocks, q.clusterBlocks);
      EXPECT_EQ(p.tile, q.tile);
      ASSERT_EQ(p.params.size(), q.params.size());
      for (size_t j = 0; j < p.params.size(); ++j) {
        EXPECT_EQ(p.params[j].kind, q.params[j].kind);
        if (p.params[j].kind == ParamDesc::Kind::Scalar) {
          EXPECT_EQ(p.params[j].expr, q.params[j].expr);
        } else {
          EXPECT_EQ(p.params[j].buffer, q.params[j].buffer);
          EXPECT_EQ(p.params[j].box, q.params[j].box);
        }
      }
    }
    ASSERT_EQ(x.refOps.size(), y.refOps.size());
    for (size_t k = 0; k < x.refOps.size(); ++k) {
      EXPECT_EQ(x.refOps[k].name, y.refOps[k].name);
      EXPECT_EQ(x.refOps[k].attrs, y.refOps[k].attrs);
      EXPECT_EQ(x.refOps[k].operands, y.refOps[k].operands);
      EXPECT_EQ(x.refOps[k].operandNames, y.refOps[k].operandNames);
      EXPECT_EQ(x.refOps[k].results, y.refOps[k].results);
      EXPECT_EQ(x.refOps[k].resultNames, y.refOps[k].resultNames);
    }
    EXPECT_EQ(x.source, y.source);
  }
}

Status read(const std::vector<uint8_t> &bytes, Bundle &b) {
  return readBundle(bytes.data(), bytes.size(), b);
}

/// The message validateBundle gives after `mutate` (expects a failure).
template <typename F> std::string invalidAfter(F mutate) {
  Bundle b = makeBundle();
  mutate(b);
  Status s = validateBundle(b);
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), ErrorCode::InvalidBundle);
  // The writer refuses what the validator refuses.
  std::vector<uint8_t> bytes;
  EXPECT_FALSE(writeBundle(b, bytes).isOk());
  return s.message();
}

void putU32(std::vector<uint8_t> &bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    bytes[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Offsets in the bytes of makeBundle(): magic, version, checksum, producer,
// count.
constexpr size_t kVersionAt = 8;
constexpr size_t kChecksumAt = 12;

/// Stores the checksum of the (edited) payload, so that a test reaches the
/// parser's checks behind the checksum's.
std::vector<uint8_t> &reseal(std::vector<uint8_t> &bytes) {
  putU32(bytes, kChecksumAt,
         bundleChecksum(bytes.data() + kBundlePayloadOffset,
                        bytes.size() - kBundlePayloadOffset));
  return bytes;
}

constexpr size_t kProducerAt = 16;
const size_t kEntryCountAt = kProducerAt + 4 + std::strlen("moec test");
const size_t kEntry0At = kEntryCountAt + 4;
const size_t kBinaryKindAt = kEntry0At + 4 + 5 + 4 + 6;

//===----------------------------------------------------------------------===//
// Round trips
//===----------------------------------------------------------------------===//

TEST(BundleTest, RoundTrip) {
  Bundle b = makeBundle();
  std::vector<uint8_t> bytes = bytesOf(b);
  ASSERT_GE(bytes.size(), 16u);
  EXPECT_EQ(std::memcmp(bytes.data(), "MOECBNDL", 8), 0);
  EXPECT_EQ(bytes[kVersionAt], kBundleVersion);
  EXPECT_EQ(bytes[kBinaryKindAt], static_cast<uint8_t>(BinaryKind::Cubin));
  Bundle back;
  Status s = read(bytes, back);
  ASSERT_TRUE(s.isOk()) << s.toString();
  expectEqual(b, back);
  // Writing is deterministic.
  EXPECT_EQ(bytesOf(back), bytes);
}

TEST(BundleTest, EmptyBundle) {
  Bundle b;
  std::vector<uint8_t> bytes = bytesOf(b);
  EXPECT_EQ(bytes.size(), 8u + 4 + 4 + 4 + 4);
  Bundle back;
  EXPECT_TRUE(read(bytes, back).isOk());
  EXPECT_TRUE(back.entries.empty());
}

TEST(BundleTest, FileRoundTrip) {
  std::string dir = ::testing::TempDir();
  std::string path =
      dir + "/moec_bundle_test_" + std::to_string(::getpid()) + ".moecb";
  Bundle b = makeBundle();
  Status s = writeBundleFile(b, path);
  ASSERT_TRUE(s.isOk()) << s.toString();
  Bundle back;
  s = readBundleFile(path, back);
  ASSERT_TRUE(s.isOk()) << s.toString();
  expectEqual(b, back);
  std::remove(path.c_str());

  s = readBundleFile(path, back);
  EXPECT_EQ(s.code(), ErrorCode::NotFound);
  EXPECT_CONTAINS(s.message(), path);
  EXPECT_EQ(writeBundleFile(b, dir + "/no/such/dir/x.moecb").code(),
            ErrorCode::IoError);
}

TEST(BundleTest, Find) {
  Bundle b = makeBundle();
  ASSERT_NE(b.find("qwen3", "sm_90a"), nullptr);
  EXPECT_EQ(b.find("qwen3", "sm_90a"), &b.entries[0]);
  EXPECT_EQ(b.find("qwen3", "host"), &b.entries[1]);
  EXPECT_EQ(b.find("qwen3", "gfx942"), nullptr);
  EXPECT_EQ(b.find("olmoe", "sm_90a"), nullptr);
}

TEST(BundleTest, EnumNames) {
  ElemType t;
  for (int i = 0; i <= 7; ++i) {
    ElemType e = static_cast<ElemType>(i);
    ASSERT_TRUE(parseElemType(elemTypeName(e), t)) << i;
    EXPECT_EQ(t, e);
  }
  EXPECT_STREQ(elemTypeName(ElemType::U8), "ui8");
  EXPECT_STREQ(elemTypeName(ElemType::F8E4M3FN), "f8E4M3FN");
  EXPECT_EQ(elemSize(ElemType::BF16), 2u);
  EXPECT_EQ(elemSize(ElemType::I64), 8u);
  EXPECT_EQ(elemSize(ElemType::F8E5M2), 1u);
  EXPECT_FALSE(parseElemType("f64", t));
  EXPECT_STREQ(binaryKindName(BinaryKind::Ptx), "ptx");
  EXPECT_STREQ(bufferRoleName(BufferRole::Temp), "temp");
  EXPECT_STREQ(bufferRoleName(BufferRole::View), "view");
}

/// Entry 0 of makeBundle with buffer 7: tmp0 (i32 [s0, 8]) as [s0 * 8].
Bundle withView() {
  Bundle b = makeBundle();
  BufferDesc view;
  view.name = "view7";
  view.role = BufferRole::View;
  view.elem = ElemType::I32;
  view.dims = {"s0 8 *"};
  view.source = 3;
  b.entries[0].buffers.push_back(view);
  return b;
}

TEST(BundleTest, ViewRoundTrip) {
  Bundle b = withView();
  ASSERT_TRUE(validateBundle(b).isOk()) << validateBundle(b).toString();
  Bundle back;
  Status s = read(bytesOf(b), back);
  ASSERT_TRUE(s.isOk()) << s.toString();
  expectEqual(b, back);
  EXPECT_EQ(back.entries[0].buffers[7].role, BufferRole::View);
  EXPECT_EQ(back.entries[0].buffers[7].source, 3u);
}

//===----------------------------------------------------------------------===//
// Reader errors
//===----------------------------------------------------------------------===//

TEST(BundleTest, BadMagic) {
  std::vector<uint8_t> bytes = bytesOf(makeBundle());
  bytes[3] = 'X';
  Bundle back;
  Status s = read(bytes, back);
  EXPECT_EQ(s.code(), ErrorCode::InvalidBundle);
  EXPECT_CONTAINS(s.message(), "not a moec bundle");
  EXPECT_EQ(readBundle(nullptr, 0, back).code(), ErrorCode::InvalidBundle);
}

TEST(BundleTest, UnsupportedVersion) {
  std::vector<uint8_t> bytes = bytesOf(makeBundle());
  putU32(bytes, kVersionAt, 1);
  Bundle back;
  Status s = read(bytes, back);
  EXPECT_EQ(s.code(), ErrorCode::Unsupported);
  EXPECT_EQ(s.message(), "bundle version 1 is older than this runtime's (5): "
                         "rebuild it with this moec (moec compile, or clear "
                         "the JIT cache)");
  // Versions 2 (before the checksum), 3 (before views) and 4 (before the
  // reference ops' operand names): rebuilt, not misread.
  for (uint32_t old : {2u, 3u, 4u}) {
    putU32(bytes, kVersionAt, old);
    EXPECT_EQ(read(bytes, back).message(),
              "bundle version " + std::to_string(old) +
                  " is older than this runtime's (5): rebuild it with this "
                  "moec (moec compile, or clear the JIT cache)");
  }
  putU32(bytes, kVersionAt, 6);
  EXPECT_CONTAINS(read(bytes, back).message(),
                  "bundle version 6 is newer than this runtime's (5)");
  Bundle b = makeBundle();
  b.version = 0;
  EXPECT_EQ(validateBundle(b).code(), ErrorCode::Unsupported);
}

TEST(BundleTest, TrailingBytes) {
  std::vector<uint8_t> bytes = bytesOf(makeBundle());
  size_t end = bytes.size();
  bytes.push_back(0);
  Bundle back;
  Status s = read(reseal(bytes), back);
  EXPECT_EQ(s.code(), ErrorCode::InvalidBundle);
  EXPECT_EQ(s.message(), "end: 1 trailing bytes after the last entry (at "
                         "byte " +
                             std::to_string(end) + ")");
  EXPECT_TRUE(back.entries.empty()); // nothing half-read is handed out
}

TEST(BundleTest, EnumOutOfRange) {
  std::vector<uint8_t> bytes = bytesOf(makeBundle());
  bytes[kBinaryKindAt] = 9;
  Bundle back;
  Status s = read(reseal(bytes), back);
  EXPECT_EQ(s.message(), "entry 0 ('qwen3', sm_90a): binary kind: value 9 out "
                         "of range [0, 3] (at byte " +
                             std::to_string(kBinaryKindAt) + ")");
}

TEST(BundleTest, AbsurdLengths) {
  std::vector<uint8_t> good = bytesOf(makeBundle());
  Bundle back;

  std::vector<uint8_t> bytes = good;
  putU32(bytes, kEntryCountAt, 0xffffffffu);
  Status s = read(reseal(bytes), back);
  EXPECT_CONTAINS(s.message(), "entry count: count 4294967295 exceeds the "
                               "limit of 1048576");

  bytes = good;
  putU32(bytes, kEntryCountAt, 1000);
  s = read(reseal(bytes), back);
  EXPECT_CONTAINS(s.message(), "entry count: count 1000 needs at least");

  bytes = good;
  putU32(bytes, kProducerAt, 0x7fffffffu);
  s = read(reseal(bytes), back);
  EXPECT_CONTAINS(s.message(), "producer: length 2147483647 exceeds the limit");

  bytes = good;
  putU32(bytes, kProducerAt, 100000);
  s = read(reseal(bytes), back);
  EXPECT_EQ(s.message(), "producer: length 100000 exceeds the " +
                             std::to_string(good.size() - kProducerAt - 4) +
                             " bytes left (at byte 16)");

  // Binary length: u64, just after the kind byte.
  bytes = good;
  for (int i = 0; i < 8; ++i)
    bytes[kBinaryKindAt + 1 + i] = 0xff;
  s = read(reseal(bytes), back);
  EXPECT_CONTAINS(s.message(), "entry 0 ('qwen3', sm_90a): binary: length "
                               "18446744073709551615 exceeds the limit");
}

TEST(BundleTest, EveryTruncationFails) {
  std::vector<uint8_t> bytes = bytesOf(makeBundle());
  for (size_t n = 0; n < bytes.size(); ++n) {
    Bundle back;
    // A copy of exactly n bytes, so that reading past it is an error that
    // sanitizers see.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    Status s = readBundle(prefix.data(), prefix.size(), back);
    EXPECT_FALSE(s.isOk()) << "prefix of " << n << " bytes";
    EXPECT_EQ(s.code(), ErrorCode::InvalidBundle) << s.message();
    // Resealed, the cut reaches the parser's own bounds checks.
    if (n < kBundlePayloadOffset)
      continue;
    s = readBundle(reseal(prefix).data(), prefix.size(), back);
    EXPECT_FALSE(s.isOk()) << "resealed prefix of " << n << " bytes";
    EXPECT_EQ(s.code(), ErrorCode::InvalidBundle) << s.message();
  }
}

TEST(BundleTest, ByteFlipsNeverCrash) {
  std::vector<uint8_t> good = bytesOf(makeBundle());
  const uint8_t kMasks[] = {0x01, 0x02, 0x10, 0x80, 0xff};
  size_t failures = 0, total = 0;
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t mask : kMasks) {
      std::vector<uint8_t> bytes = good;
      bytes[at] ^= mask;
      if (at >= kBundlePayloadOffset)
        reseal(bytes); // past the checksum: the parser's checks
      Bundle back;
      Status s = read(bytes, back);
      ++total;
      if (!s.isOk()) {
        ++failures;
        EXPECT_FALSE(s.message().empty());
        EXPECT_NE(s.code(), ErrorCode::Ok);
        continue;
      }
      // Whatever reads must write back to the same bytes.
      EXPECT_EQ(bytesOf(back), bytes) << "flip at " << at;
    }
  }
  EXPECT_GT(failures, 0u);
  EXPECT_LT(failures, total);
}

TEST(BundleTest, EveryDamagedByteIsRefused) {
  // CRC-32 detects every error confined to 32 consecutive bits.
  std::vector<uint8_t> good = bytesOf(makeBundle());
  for (size_t at = kBundlePayloadOffset; at < good.size(); ++at) {
    std::vector<uint8_t> bytes = good;
    bytes[at] ^= 0x5a;
    Bundle back;
    Status s = read(bytes, back);
    EXPECT_EQ(s.code(), ErrorCode::InvalidBundle) << "byte " << at;
    EXPECT_CONTAINS(s.message(), "checksum mismatch");
    EXPECT_CONTAINS(s.message(), "the bundle is damaged");
    EXPECT_TRUE(back.entries.empty());
  }
  std::vector<uint8_t> bytes = good;
  bytes.pop_back(); // truncated
  Bundle back;
  EXPECT_CONTAINS(read(bytes, back).message(), "checksum mismatch");
}

TEST(BundleTest, ChecksumIsCrc32) {
  // The standard check value of CRC-32 (zlib's crc32("123456789")).
  const char *digits = "123456789";
  EXPECT_EQ(bundleChecksum(reinterpret_cast<const uint8_t *>(digits), 9),
            0xCBF43926u);
  EXPECT_EQ(bundleChecksum(nullptr, 0), 0u);
}

TEST(BundleTest, RandomBytesNeverCrash) {
  std::vector<uint8_t> good = bytesOf(makeBundle());
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> bytes = good;
    // A few random edits: overwrite, insert, erase, or cut.
    int edits = 1 + next() % 4;
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      size_t at = next() % bytes.size();
      switch (next() % 4) {
      case 0:
        bytes[at] = static_cast<uint8_t>(next());
        break;
      case 1:
        bytes.insert(bytes.begin() + at, static_cast<uint8_t>(next()));
        break;
      case 2:
        bytes.erase(bytes.begin() + at);
        break;
      default:
        bytes.resize(at);
        break;
      }
    }
    // Half resealed, to reach the parser behind the checksum.
    if (iter % 2 && bytes.size() >= kBundlePayloadOffset)
      reseal(bytes);
    Bundle back;
    std::vector<uint8_t> exact(bytes); // exact-size heap copy
    (void)readBundle(exact.data(), exact.size(), back);
  }
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

TEST(BundleTest, ValidBundleValidates) {
  Status s = validateBundle(makeBundle());
  EXPECT_TRUE(s.isOk()) << s.toString();
}

TEST(BundleTest, ParamBufferOutOfRange) {
  std::string m = invalidAfter(
      [](Bundle &b) { b.entries[0].steps[2].params[1].buffer = 9; });
  EXPECT_EQ(m, "entry 0 ('qwen3', sm_90a): step 2: param 1: buffer index 9 out "
               "of range (7 buffers)");
}

TEST(BundleTest, ReaderRunsValidation) {
  Bundle b = makeBundle();
  std::vector<uint8_t> bytes = bytesOf(b);
  // Find the u32 of step 2's param 1 (buffer 6) by its neighbours: the
  // encoding is kind 0 then the index.
  b.entries[0].steps[2].params[1].buffer = 5;
  std::vector<uint8_t> other;
  {
    // Same bundle with one index different: the only differing payload byte.
    Bundle c = b;
    ASSERT_TRUE(writeBundle(c, other).isOk());
  }
  ASSERT_EQ(other.size(), bytes.size());
  size_t diff = 0, where = 0;
  // (The checksum differs too: compare the payloads.)
  for (size_t i = kBundlePayloadOffset; i < bytes.size(); ++i)
    if (bytes[i] != other[i]) {
      ++diff;
      where = i;
    }
  ASSERT_EQ(diff, 1u);
  bytes[where] = 9;
  Bundle back;
  Status s = read(reseal(bytes), back);
  EXPECT_EQ(s.toString(), "invalid bundle: entry 0 ('qwen3', sm_90a): step 2: "
                          "param 1: buffer index 9 out of range (7 buffers)");
}

TEST(BundleTest, BufferErrors) {
  EXPECT_EQ(invalidAfter([](Bundle &b) {
              b.entries[0].buffers[3].role = BufferRole::Input;
            }),
            "entry 0 ('qwen3', sm_90a): buffer 3 ('tmp0'): input after a "
            "non-input buffer (inputs come first)");
  EXPECT_EQ(invalidAfter([](Bundle &b) {
              std::swap(b.entries[0].buffers[1], b.entries[0].buffers[2]);
            }),
            "entry 0 ('qwen3', sm_90a): buffer 2 ('arg1'): input after a "
            "non-input buffer (inputs come first)");
  EXPECT_EQ(
      invalidAfter([](Bundle &b) { b.entries[0].buffers[4].name = "tmp0"; }),
      "entry 0 ('qwen3', sm_90a): buffer 4 ('tmp0'): duplicate buffer "
      "name");
  EXPECT_EQ(invalidAfter([](Bundle &b) { b.entries[0].buffers[4].name = ""; }),
            "entry 0 ('qwen3', sm_90a): buffer 4: name is empty");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].buffers[3].dims[1] = "s1 8 *";
                  }),
                  "entry 0 ('qwen3', sm_90a): buffer 3 ('tmp0'): dim 1: "
                  "expression 's1 8 *': token 0 (column 0): symbol s1 out of "
                  "range (1 symbols)");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].buffers[3].elem = static_cast<ElemType>(8);
                  }),
                  "element type 8 out of range");
}

TEST(BundleTest, ViewErrors) {
  auto invalidView = [](auto mutate) {
    Bundle b = withView();
    mutate(b.entries[0].buffers);
    Status s = validateBundle(b);
    EXPECT_EQ(s.code(), ErrorCode::InvalidBundle);
    std::vector<uint8_t> bytes;
    EXPECT_FALSE(writeBundle(b, bytes).isOk());
    return s.message();
  };
  const std::string where = "entry 0 ('qwen3', sm_90a): buffer 7 ('view7'): ";
  EXPECT_EQ(invalidView([](auto &buffers) { buffers[7].source = 8; }),
            where + "view of buffer 8, not another buffer of the 8");
  EXPECT_EQ(invalidView([](auto &buffers) { buffers[7].source = 7; }),
            where + "view of buffer 7, not another buffer of the 8");
  EXPECT_EQ(invalidView([](auto &buffers) {
              buffers[3].role = BufferRole::View;
              buffers[3].source = 4;
              buffers[3].elem = ElemType::F32;
            }),
            where + "view of buffer 3, itself a view");
  EXPECT_EQ(
      invalidView([](auto &buffers) { buffers[7].elem = ElemType::F32; }),
      where + "view of buffer 3 with another element type");
}

TEST(BundleTest, SymbolErrors) {
  EXPECT_EQ(invalidAfter([](Bundle &b) { b.entries[0].symbols[0].buffer = 2; }),
            "entry 0 ('qwen3', sm_90a): symbol 0 ('T'): buffer 2 ('result0') "
            "is not an input");
  EXPECT_EQ(invalidAfter([](Bundle &b) { b.entries[0].symbols[0].buffer = 7; }),
            "entry 0 ('qwen3', sm_90a): symbol 0 ('T'): buffer index 7 out of "
            "range (7 buffers)");
  EXPECT_EQ(invalidAfter([](Bundle &b) { b.entries[0].symbols[0].dim = 2; }),
            "entry 0 ('qwen3', sm_90a): symbol 0 ('T'): dim 2 out of range "
            "(buffer 0 ('arg0') has rank 2)");
}

TEST(BundleTest, StepErrors) {
  EXPECT_EQ(invalidAfter([](Bundle &b) { b.entries[0].steps[1].kernel = ""; }),
            "entry 0 ('qwen3', sm_90a): step 1: kernel name is empty");
  EXPECT_EQ(
      invalidAfter([](Bundle &b) { b.entries[0].steps[1].blockSize = 0; }),
      "entry 0 ('qwen3', sm_90a): step 1: block size 0 out of range [1, "
      "1024]");
  EXPECT_CONTAINS(
      invalidAfter([](Bundle &b) { b.entries[0].steps[1].blockSize = 1025; }),
      "block size 1025 out of range");
  EXPECT_EQ(
      invalidAfter([](Bundle &b) { b.entries[0].steps[2].clusterBlocks = 0; }),
      "entry 0 ('qwen3', sm_90a): step 2: cluster of 0 blocks out of range "
      "[1, 8]");
  EXPECT_CONTAINS(
      invalidAfter([](Bundle &b) { b.entries[0].steps[2].clusterBlocks = 9; }),
      "cluster of 9 blocks out of range [1, 8]");
  EXPECT_CONTAINS(
      invalidAfter([](Bundle &b) { b.entries[0].steps[0].grid = "s0 +"; }),
      "entry 0 ('qwen3', sm_90a): step 0: grid: expression 's0 +'");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].steps[0].params[3].expr = "";
                  }),
                  "step 0: param 3: expression '': empty");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].steps[0].params[3].kind =
                        static_cast<ParamDesc::Kind>(3);
                  }),
                  "step 0: param 3: kind 3 out of range");
  // Tensor maps (step 2, param 0: arg0, bf16 [s0, 2048], box {64, 128}).
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].steps[2].params[0].box = {32, 128};
                  }),
                  "step 2: param 0: tensor map box is 64 bytes wide; the "
                  "128-byte swizzle needs 128");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].steps[2].params[0].box = {64};
                  }),
                  "tensor map box has 1 dimensions for a buffer of rank 2");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].steps[2].params[0].box = {64, 512};
                  }),
                  "tensor map box extent 512 out of range [1, 256]");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].steps[2].params[0].buffer = 3;
                  }),
                  "step 2: param 0: tensor map of a i32 buffer (only bf16, "
                  "f16 and FP8)");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[0].steps[2].params[0].buffer = 99;
                  }),
                  "step 2: param 0: buffer index 99 out of range");
}

TEST(BundleTest, RefOpErrors) {
  EXPECT_EQ(
      invalidAfter([](Bundle &b) { b.entries[0].refOps[0].operands[1] = -2; }),
      "entry 0 ('qwen3', sm_90a): ref op 0 ('moe.router_topk'): operand "
      "1: buffer index -2 out of range (7 buffers)");
  EXPECT_EQ(
      invalidAfter([](Bundle &b) { b.entries[0].refOps[0].results[0] = 7; }),
      "entry 0 ('qwen3', sm_90a): ref op 0 ('moe.router_topk'): result "
      "0: buffer index 7 out of range (7 buffers)");
  EXPECT_EQ(invalidAfter([](Bundle &b) { b.entries[0].refOps[0].name = ""; }),
            "entry 0 ('qwen3', sm_90a): ref op 0: name is empty");
  // Every operand and result has a name, unique in its list.
  EXPECT_EQ(invalidAfter([](Bundle &b) {
              b.entries[0].refOps[0].operandNames.pop_back();
            }),
            "entry 0 ('qwen3', sm_90a): ref op 0 ('moe.router_topk'): 1 "
            "operand names for 2 operands");
  EXPECT_EQ(invalidAfter([](Bundle &b) {
              b.entries[0].refOps[0].resultNames[1] = "weights";
            }),
            "entry 0 ('qwen3', sm_90a): ref op 0 ('moe.router_topk'): "
            "results 0 and 1 are both named 'weights'");
  EXPECT_EQ(invalidAfter([](Bundle &b) {
              b.entries[0].refOps[0].operandNames[0] = "";
            }),
            "entry 0 ('qwen3', sm_90a): ref op 0 ('moe.router_topk'): "
            "operand 0: name is empty");
}

TEST(BundleTest, TargetErrors) {
  EXPECT_EQ(invalidAfter(
                [](Bundle &b) { b.entries[0].binaryKind = BinaryKind::Hsaco; }),
            "entry 0 ('qwen3', sm_90a): binary kind hsaco does not match "
            "target sm_90a");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) {
                    b.entries[1].binaryKind = BinaryKind::Cubin;
                  }),
                  "entry 1 ('qwen3', host): binary kind cubin does not match");
  EXPECT_CONTAINS(
      invalidAfter([](Bundle &b) { b.entries[0].target = "sm_"; }),
      "unknown target 'sm_' (expected sm_<arch>, gfx<arch> or host)");
  EXPECT_CONTAINS(
      invalidAfter([](Bundle &b) { b.entries[0].target = "SM_90"; }),
      "has a character outside [a-z0-9_]");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) { b.entries[0].target = ""; }),
                  "target is empty");
  EXPECT_CONTAINS(invalidAfter([](Bundle &b) { b.entries[0].name = ""; }),
                  "name is empty");
  EXPECT_EQ(invalidAfter([](Bundle &b) {
              b.entries[1].target = "sm_90a";
              b.entries[1].binaryKind = BinaryKind::Ptx;
            }),
            "entry 1 ('qwen3', sm_90a): same name and target as entry 0");

  // gfx and other sm_ targets are fine.
  Bundle b = makeBundle();
  b.entries[0].target = "gfx942";
  b.entries[0].binaryKind = BinaryKind::Hsaco;
  b.entries[1].target = "sm_100a";
  b.entries[1].binaryKind = BinaryKind::Ptx;
  EXPECT_TRUE(validateBundle(b).isOk());
}

TEST(BundleTest, NamesAreEscapedInMessages) {
  std::string m = invalidAfter([](Bundle &b) {
    b.entries[0].name = std::string("a'\n\x01z", 5);
    b.entries[0].steps[0].kernel = "";
  });
  EXPECT_EQ(m, "entry 0 ('a\\x27\\x0a\\x01z', sm_90a): step 0: kernel name is "
               "empty");
}

} // namespace
