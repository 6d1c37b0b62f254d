//===- KernelBuilder.cpp - Helpers to write naive GPU kernel bodies -------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <cmath>

using namespace mlir;

namespace moec::kernels {

Value KernelBuilder::idx(int64_t v) {
  return arith::ConstantIndexOp::create(*this, v);
}
Value KernelBuilder::f32(double v) {
  return arith::ConstantFloatOp::create(*this, getF32Type(),
                                        llvm::APFloat(static_cast<float>(v)));
}
Value KernelBuilder::i32(int64_t v) {
  return arith::ConstantIntOp::create(*this, getI32Type(), v);
}

Value KernelBuilder::add(Value a, Value b) {
  return arith::AddIOp::create(*this, a, b);
}
Value KernelBuilder::sub(Value a, Value b) {
  return arith::SubIOp::create(*this, a, b);
}
Value KernelBuilder::mul(Value a, Value b) {
  return arith::MulIOp::create(*this, a, b);
}
Value KernelBuilder::div(Value a, Value b) {
  return arith::DivUIOp::create(*this, a, b);
}
Value KernelBuilder::rem(Value a, Value b) {
  return arith::RemUIOp::create(*this, a, b);
}
Value KernelBuilder::ceilDiv(Value a, Value b) {
  return arith::CeilDivUIOp::create(*this, a, b);
}
Value KernelBuilder::minIdx(Value a, Value b) {
  return arith::MinUIOp::create(*this, a, b);
}
Value KernelBuilder::ult(Value a, Value b) {
  return arith::CmpIOp::create(*this, arith::CmpIPredicate::ult, a, b);
}
Value KernelBuilder::ule(Value a, Value b) {
  return arith::CmpIOp::create(*this, arith::CmpIPredicate::ule, a, b);
}
Value KernelBuilder::eq(Value a, Value b) {
  return arith::CmpIOp::create(*this, arith::CmpIPredicate::eq, a, b);
}
Value KernelBuilder::land(Value a, Value b) {
  return arith::AndIOp::create(*this, a, b);
}
Value KernelBuilder::select(Value c, Value a, Value b) {
  return arith::SelectOp::create(*this, c, a, b);
}

Value KernelBuilder::fadd(Value a, Value b) {
  return arith::AddFOp::create(*this, a, b);
}
Value KernelBuilder::fsub(Value a, Value b) {
  return arith::SubFOp::create(*this, a, b);
}
Value KernelBuilder::fmul(Value a, Value b) {
  return arith::MulFOp::create(*this, a, b);
}
Value KernelBuilder::fdiv(Value a, Value b) {
  return arith::DivFOp::create(*this, a, b);
}
Value KernelBuilder::fmax(Value a, Value b) {
  return arith::MaximumFOp::create(*this, a, b);
}
Value KernelBuilder::fabs(Value x) {
  Value bits = arith::BitcastOp::create(*this, getI32Type(), x);
  Value magnitude = arith::AndIOp::create(*this, bits, i32(0x7FFFFFFF));
  return arith::BitcastOp::create(*this, getF32Type(), magnitude);
}
Value KernelBuilder::fgt(Value a, Value b) {
  return arith::CmpFOp::create(*this, arith::CmpFPredicate::OGT, a, b);
}
Value KernelBuilder::exp(Value x) {
  // The generic llvm.exp2 intrinsic, not math.exp2: the GPU conversions map
  // math.exp2 to vendor library calls (__nv_exp2f, __ocml_exp2_f32), which
  // need libdevice or the ROCm device libraries at link time. NVPTX and
  // AMDGPU select llvm.exp2.f32 to one instruction; the host calls libm.
  Value scaled = fmul(x, f32(M_LOG2E));
  return LLVM::CallIntrinsicOp::create(*this, getF32Type(),
                                       getStringAttr("llvm.exp2.f32"),
                                       ValueRange{scaled})
      .getResult(0);
}
Value KernelBuilder::sigmoid(Value x) {
  // The division may be approximate (NVPTX: div.approx, 2 ulp; the exp
  // above is approximate already): the IEEE one is a dozen instructions,
  // which the DeepSeek-V3 router pays 256 times per token.
  Value one = f32(1.0);
  return arith::DivFOp::create(
      *this, one, fadd(one, exp(arith::NegFOp::create(*this, x))),
      arith::FastMathFlags::afn);
}

Value KernelBuilder::swiglu(Value gate, Value up) {
  Value s = sigmoid(gate);
  return fmul(fmul(gate, s), up);
}

std::pair<Value, Value> KernelBuilder::swigluGrad(Value dy, Value gate,
                                                  Value up) {
  // d/dg silu(g)·u = u·s·(1 + g·(1 − s)); d/du = g·s.
  Value s = sigmoid(gate), one = f32(1.0);
  Value dGate =
      fmul(fmul(dy, fmul(up, s)), fadd(one, fmul(gate, fsub(one, s))));
  return {dGate, fmul(dy, fmul(gate, s))};
}

namespace {
struct FP8Format {
  int mantissaBits, bias, minExponent;
  double max;
};
FP8Format fp8Format(Type type) {
  if (isa<Float8E4M3FNType>(type))
    return {3, 7, -6, 448.0};
  return {2, 15, -14, 57344.0};
}
} // namespace

Value KernelBuilder::encodeFP8(Value value, Type fp8Type) {
  FP8Format f = fp8Format(fp8Type);
  Type i32t = getI32Type();
  auto c32 = [&](int64_t v) { return i32(v); };
  auto pow2 = [&](Value exponent) { // 2^exponent as f32, exponent an i32
    Value biased = arith::AddIOp::create(*this, exponent, c32(127));
    return arith::BitcastOp::create(
        *this, getF32Type(), arith::ShLIOp::create(*this, biased, c32(23)));
  };
  Value bits = arith::BitcastOp::create(*this, i32t, value);
  Value sign = arith::AndIOp::create(
      *this, arith::ShRUIOp::create(*this, bits, c32(24)), c32(0x80));
  Value magnitude = fabs(value);
  Value magBits = arith::BitcastOp::create(*this, i32t, magnitude);
  Value exponent = arith::SubIOp::create(
      *this, arith::ShRUIOp::create(*this, magBits, c32(23)), c32(127));
  // Quantum of the binade (subnormals share the smallest normal's).
  Value quantumExp = arith::SubIOp::create(
      *this, arith::MaxSIOp::create(*this, exponent, c32(f.minExponent)),
      c32(f.mantissaBits));
  Value quantum = pow2(quantumExp);
  // magnitude / quantum < 2^(mantissa+1): adding and subtracting 2^23 rounds
  // it to an integer, ties to even, in f32.
  Value magic = f32(8388608.0);
  Value steps = fdiv(magnitude, quantum);
  Value rounded = fmul(fsub(fadd(steps, magic), magic), quantum);
  rounded = arith::MinimumFOp::create(*this, rounded, f32(f.max));
  // Encode the rounded value.
  Value rBits = arith::BitcastOp::create(*this, i32t, rounded);
  Value rExp = arith::SubIOp::create(
      *this, arith::ShRUIOp::create(*this, rBits, c32(23)), c32(127));
  Value normal = arith::OrIOp::create(
      *this,
      arith::ShLIOp::create(*this,
                            arith::AddIOp::create(*this, rExp, c32(f.bias)),
                            c32(f.mantissaBits)),
      arith::AndIOp::create(
          *this, arith::ShRUIOp::create(*this, rBits, c32(23 - f.mantissaBits)),
          c32((1 << f.mantissaBits) - 1)));
  Value subnormal = arith::FPToUIOp::create(
      *this, i32t,
      fdiv(rounded, f32(std::ldexp(1.0, f.minExponent - f.mantissaBits))));
  Value isNormal = arith::CmpFOp::create(*this, arith::CmpFPredicate::OGE,
                                         rounded,
                                         f32(std::ldexp(1.0, f.minExponent)));
  Value code = arith::OrIOp::create(*this, select(isNormal, normal, subnormal),
                                    sign);
  return arith::TruncIOp::create(*this, getI8Type(), code);
}

Value KernelBuilder::decodeFP8(Value bits, Type fp8Type) {
  FP8Format f = fp8Format(fp8Type);
  Type i32t = getI32Type();
  auto c32 = [&](int64_t v) { return i32(v); };
  Value code = arith::ExtUIOp::create(*this, i32t, bits);
  Value sign = arith::ShLIOp::create(
      *this, arith::ShRUIOp::create(*this, code, c32(7)), c32(31));
  Value field = arith::AndIOp::create(
      *this, arith::ShRUIOp::create(*this, code, c32(f.mantissaBits)),
      c32((0x7f >> f.mantissaBits)));
  Value mantissa =
      arith::AndIOp::create(*this, code, c32((1 << f.mantissaBits) - 1));
  Value normalBits = arith::OrIOp::create(
      *this,
      arith::ShLIOp::create(
          *this, arith::AddIOp::create(*this, field, c32(127 - f.bias)),
          c32(23)),
      arith::ShLIOp::create(*this, mantissa, c32(23 - f.mantissaBits)));
  Value normal = arith::BitcastOp::create(
      *this, getF32Type(), arith::OrIOp::create(*this, normalBits, sign));
  Value subMagnitude =
      fmul(arith::UIToFPOp::create(*this, getF32Type(), mantissa),
           f32(std::ldexp(1.0, f.minExponent - f.mantissaBits)));
  Value subnormal = select(
      arith::CmpIOp::create(*this, arith::CmpIPredicate::ne, sign, c32(0)),
      arith::NegFOp::create(*this, subMagnitude), subMagnitude);
  return select(
      arith::CmpIOp::create(*this, arith::CmpIPredicate::eq, field, c32(0)),
      subnormal, normal);
}

static bool isFP8(Type type) {
  return isa<Float8E4M3FNType, Float8E5M2Type>(type);
}

Value KernelBuilder::loadF(Value memref, ValueRange indices) {
  Value v = memref::LoadOp::create(*this, memref, indices);
  if (isFP8(v.getType()))
    return decodeFP8(arith::BitcastOp::create(*this, getI8Type(), v),
                     v.getType());
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(*this, getF32Type(), v);
}
void KernelBuilder::storeF(Value value, Value memref, ValueRange indices) {
  Type elem = cast<MemRefType>(memref.getType()).getElementType();
  if (isFP8(elem))
    value = arith::BitcastOp::create(*this, elem, encodeFP8(value, elem));
  else if (elem != value.getType())
    value = arith::TruncFOp::create(*this, elem, value);
  memref::StoreOp::create(*this, value, memref, indices);
}
Value KernelBuilder::loadIdx(Value memref, ValueRange indices) {
  Value v = memref::LoadOp::create(*this, memref, indices);
  return arith::IndexCastOp::create(*this, getIndexType(), v);
}
std::pair<Value, Value> KernelBuilder::loadSigned(Value memref,
                                                  ValueRange indices) {
  Value v = memref::LoadOp::create(*this, memref, indices);
  Value nonNegative =
      arith::CmpIOp::create(*this, arith::CmpIPredicate::sge, v, i32(0));
  return {arith::IndexCastOp::create(*this, getIndexType(), v), nonNegative};
}
void KernelBuilder::storeI32(Value indexValue, Value memref,
                             ValueRange indices) {
  Value v = arith::IndexCastOp::create(*this, getI32Type(), indexValue);
  memref::StoreOp::create(*this, v, memref, indices);
}
void KernelBuilder::storeI32Const(int64_t v, Value memref,
                                  ValueRange indices) {
  memref::StoreOp::create(*this, i32(v), memref, indices);
}
Value KernelBuilder::dim(Value memref, int64_t d) {
  return memref::DimOp::create(*this, memref, d);
}

int64_t KernelBuilder::vectorWidth(Type elem) {
  if (isFP8(elem) || elem.isInteger(8) ||
      elem.isUnsignedInteger(8))
    return 16;
  if (elem.isBF16() || elem.isF16())
    return 8;
  if (elem.isF32() || elem.isInteger(32))
    return 4;
  return 0;
}

/// The alignment a vector access of `n` elements of `elem` may claim.
static unsigned vectorAlignment(Type elem, int64_t n) {
  int64_t bytes = n * std::max<int64_t>(1, elem.getIntOrFloatBitWidth() / 8);
  return std::min<int64_t>(16, llvm::PowerOf2Ceil(bytes));
}

Value KernelBuilder::loadVec(Value memref, ValueRange indices, int64_t n) {
  Type elem = cast<MemRefType>(memref.getType()).getElementType();
  auto type = VectorType::get({n}, elem);
  return vector::LoadOp::create(*this, type, memref, indices,
                                /*nontemporal=*/false,
                                llvm::Align(vectorAlignment(elem, n)));
}
void KernelBuilder::storeVec(Value vec, Value memref, ValueRange indices) {
  auto type = cast<VectorType>(vec.getType());
  vector::StoreOp::create(
      *this, vec, memref, indices, /*nontemporal=*/false,
      llvm::Align(vectorAlignment(type.getElementType(), type.getNumElements())));
}

/// Whether `type` is a global row-major buffer of whole bytes, which the
/// address-based NVVM accesses below (elementAddress) can reach.
static bool isPlainGlobal(MemRefType type) {
  return type.getLayout().isIdentity() && !type.getMemorySpace() &&
         type.getElementType().getIntOrFloatBitWidth() % 8 == 0;
}

Value KernelBuilder::elementAddress(Value memref, ValueRange indices) {
  // Row-major offset of the element, in bytes, from the aligned pointer
  // (an identity-layout buffer has offset 0).
  Value linear = idx(0);
  for (auto [d, index] : llvm::enumerate(indices))
    linear = add(mul(linear, memref::DimOp::create(*this, memref, d)), index);
  Type elem = cast<MemRefType>(memref.getType()).getElementType();
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(*this, memref);
  return add(base, mul(linear, idx(elem.getIntOrFloatBitWidth() / 8)));
}

void KernelBuilder::prefetchL2(Value memref, ValueRange indices,
                               int64_t bytes) {
  if (!target().hasBulkL2Prefetch() ||
      !isPlainGlobal(cast<MemRefType>(memref.getType())))
    return;
  assert(bytes > 0 && bytes % 16 == 0 && bytes <= INT32_MAX &&
         "a bulk prefetch moves whole 16-byte pieces");
  Value address = arith::IndexCastOp::create(*this, getI64Type(),
                                             elementAddress(memref, indices));
  Value pointer = LLVM::IntToPtrOp::create(
      *this, LLVM::LLVMPointerType::get(getContext(), 1), address);
  // The evict-last hint is worth 1 - 1.6 points of permute's bandwidth on
  // the H200 over the bare bulk prefetch. No NVVM op builds the policy; it
  // is one instruction.
  Value policy =
      LLVM::InlineAsmOp::create(
          *this, getI64Type(), ValueRange{},
          "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;", "=l",
          /*has_side_effects=*/false, /*is_align_stack=*/false,
          LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
          ArrayAttr())
          .getResult(0);
  NVVM::CpAsyncBulkPrefetchOp::create(
      *this, pointer, arith::ConstantIntOp::create(*this, getI32Type(), bytes),
      policy);
}

void KernelBuilder::storeVecStreaming(Value vec, Value memref,
                                      ValueRange indices) {
  auto memrefType = cast<MemRefType>(memref.getType());
  auto type = cast<VectorType>(vec.getType());
  Type elem = type.getElementType();
  int64_t bytes = type.getNumElements() *
                  std::max<int64_t>(1, elem.getIntOrFloatBitWidth() / 8);
  if (!target().hasStreamingStores() || bytes != 16 ||
      !isPlainGlobal(memrefType)) {
    storeVec(vec, memref, indices);
    return;
  }
  Value address = arith::IndexCastOp::create(*this, getI64Type(),
                                             elementAddress(memref, indices));
  auto words = VectorType::get({4}, getI32Type());
  Value bits = vector::BitCastOp::create(*this, words, vec);
  SmallVector<Value> operands = {address};
  for (int64_t i = 0; i < 4; ++i)
    operands.push_back(vector::ExtractOp::create(*this, bits, i));
  // No NVVM op stores with a cache operator; the instruction is one line.
  LLVM::InlineAsmOp::create(
      *this, TypeRange{}, operands,
      "st.global.cs.v4.b32 [$0], {$1, $2, $3, $4};", "l,r,r,r,r",
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
      ArrayAttr());
}

Value KernelBuilder::loadVecInPlace(Value memref, ValueRange indices,
                                    int64_t n) {
  auto memrefType = cast<MemRefType>(memref.getType());
  Type elem = memrefType.getElementType();
  int64_t bytes = n * std::max<int64_t>(1, elem.getIntOrFloatBitWidth() / 8);
  // NVVM: the targets with PTX's cache operators (storeVecStreaming's).
  if (!target().hasStreamingStores() || !isPlainGlobal(memrefType) ||
      (bytes != 4 && bytes != 8 && bytes != 16))
    return loadVec(memref, indices, n);
  Value address = arith::IndexCastOp::create(*this, getI64Type(),
                                             elementAddress(memref, indices));
  int64_t words = bytes / 4;
  std::string asmText = "ld.global.ca";
  std::string constraints;
  if (words > 1)
    asmText += ".v" + std::to_string(words);
  asmText += ".b32 ";
  asmText += words > 1 ? "{" : "";
  for (int64_t i = 0; i < words; ++i) {
    asmText += (i ? ", $" : "$") + std::to_string(i);
    constraints += "=r,";
  }
  asmText += words > 1 ? "}" : "";
  asmText += ", [$" + std::to_string(words) + "];";
  constraints += "l";
  Type i32 = getI32Type();
  Type resultType = words > 1
                        ? Type(LLVM::LLVMStructType::getLiteral(
                              getContext(), SmallVector<Type>(words, i32)))
                        : i32;
  // With side effects, so that neither LLVM nor ptxas reorders it against
  // the other memory accesses (Epilogue::pairStores says why).
  Value result =
      LLVM::InlineAsmOp::create(
          *this, resultType, ValueRange{address}, asmText, constraints,
          /*has_side_effects=*/true, /*is_align_stack=*/false,
          LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
          ArrayAttr())
          .getResult(0);
  SmallVector<Value> parts;
  for (int64_t i = 0; i < words; ++i)
    parts.push_back(words > 1 ? LLVM::ExtractValueOp::create(
                                    *this, result, ArrayRef<int64_t>{i})
                                    .getResult()
                              : result);
  Value packed = vector::FromElementsOp::create(
      *this, VectorType::get({words}, i32), parts);
  return vector::BitCastOp::create(*this, VectorType::get({n}, elem), packed);
}

Value KernelBuilder::loadVecF32(Value memref, ValueRange indices, int64_t n) {
  Value vec = loadVec(memref, indices, n);
  Type elem = cast<VectorType>(vec.getType()).getElementType();
  auto f32x = VectorType::get({n}, getF32Type());
  if (elem.isF32())
    return vec;
  if (!isFP8(elem))
    return arith::ExtFOp::create(*this, f32x, vec);
  // FP8 has no LLVM type: decode the bit patterns, in pairs with NVVM's
  // conversion to f16 (exact), else one by one with integer ops.
  auto i8x = VectorType::get({n}, getI8Type());
  Value bits = arith::BitcastOp::create(*this, i8x, vec);
  // (Pairs and lanes travel as extract/from_elements: the NVVM lowering
  // has no patterns for strided slices.)
  if (target().hasPackedFP8Conversions() && n % 2 == 0) {
    auto i8x2 = VectorType::get({2}, getI8Type());
    auto f16x2 = VectorType::get({2}, getF16Type());
    SmallVector<Value> values;
    for (int64_t i = 0; i < n; i += 2) {
      Value two = vector::FromElementsOp::create(
          *this, i8x2,
          ValueRange{vector::ExtractOp::create(*this, bits, i),
                     vector::ExtractOp::create(*this, bits, i + 1)});
      Value halves = NVVM::ConvertF8x2ToF16x2Op::create(
          *this, f16x2, two, getBoolAttr(false), TypeAttr::get(elem));
      for (int64_t j = 0; j < 2; ++j)
        values.push_back(arith::ExtFOp::create(
            *this, getF32Type(),
            Value(vector::ExtractOp::create(*this, halves, j))));
    }
    return vector::FromElementsOp::create(*this, f32x, values);
  }
  SmallVector<Value> values;
  for (int64_t i = 0; i < n; ++i)
    values.push_back(
        decodeFP8(vector::ExtractOp::create(*this, bits, i), elem));
  return vector::FromElementsOp::create(*this, f32x, values);
}
void KernelBuilder::storeVecF32(Value vec, Value memref, ValueRange indices) {
  Type elem = cast<MemRefType>(memref.getType()).getElementType();
  int64_t n = cast<VectorType>(vec.getType()).getNumElements();
  if (isFP8(elem) && target().hasPackedFP8Conversions() && n % 2 == 0) {
    // NVVM: round to nearest even, saturating to the largest finite value,
    // two at a time; the pair's element 0 is the second operand.
    auto i8x2 = VectorType::get({2}, getI8Type());
    SmallVector<Value> bits;
    for (int64_t i = 0; i < n; i += 2) {
      Value lo = vector::ExtractOp::create(*this, vec, i);
      Value hi = vector::ExtractOp::create(*this, vec, i + 1);
      Value two = NVVM::ConvertF32x2ToF8x2Op::create(
          *this, i8x2, hi, lo, NVVM::FPRoundingMode::RN,
          NVVM::SaturationMode::SATFINITE, /*relu=*/false, elem);
      bits.push_back(vector::ExtractOp::create(*this, two, 0));
      bits.push_back(vector::ExtractOp::create(*this, two, 1));
    }
    Value bytes = vector::FromElementsOp::create(
        *this, VectorType::get({n}, getI8Type()), bits);
    vec = arith::BitcastOp::create(*this, VectorType::get({n}, elem), bytes);
  } else if (isFP8(elem)) {
    SmallVector<Value> bits;
    for (int64_t i = 0; i < n; ++i)
      bits.push_back(
          encodeFP8(vector::ExtractOp::create(*this, vec, i), elem));
    vec = vector::FromElementsOp::create(
        *this, VectorType::get({n}, getI8Type()), bits);
    vec = arith::BitcastOp::create(*this, VectorType::get({n}, elem), vec);
  } else if (!elem.isF32()) {
    vec = arith::TruncFOp::create(*this, VectorType::get({n}, elem), vec);
  }
  storeVec(vec, memref, indices);
}
Value KernelBuilder::zeroVec(VectorType type) {
  Type elem = type.getElementType();
  if (!isFP8(elem))
    return arith::ConstantOp::create(*this, type, getZeroAttr(type));
  auto bytes = VectorType::get(type.getShape(), getI8Type());
  return arith::BitcastOp::create(
      *this, type, arith::ConstantOp::create(*this, bytes, getZeroAttr(bytes)));
}
SmallVector<Value> KernelBuilder::loadVecF(Value memref, ValueRange indices,
                                           int64_t n) {
  Value vec = loadVecF32(memref, indices, n);
  SmallVector<Value> values;
  for (int64_t i = 0; i < n; ++i)
    values.push_back(vector::ExtractOp::create(*this, vec, i));
  return values;
}
void KernelBuilder::storeVecF(ArrayRef<Value> values, Value memref,
                              ValueRange indices) {
  auto type = VectorType::get({static_cast<int64_t>(values.size())},
                              getF32Type());
  storeVecF32(vector::FromElementsOp::create(*this, type, values), memref,
              indices);
}

Value KernelBuilder::alloca(MemRefType type) {
  Operation *func = getInsertionBlock()->getParentOp();
  while (func && !func->hasTrait<OpTrait::IsIsolatedFromAbove>())
    func = func->getParentOp();
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPointToStart(&func->getRegion(0).front());
  // Private memory: AMDGPU needs its stack slots in address space 5.
  auto privateType = MemRefType::get(
      type.getShape(), type.getElementType(), MemRefLayoutAttrInterface(),
      gpu::AddressSpaceAttr::get(getContext(), gpu::AddressSpace::Private));
  return memref::AllocaOp::create(*this, privateType);
}

SmallVector<Value> KernelBuilder::loop(Value lb, Value ub, ValueRange inits,
                                       const LoopBody &body, Value step) {
  auto forOp =
      scf::ForOp::create(*this, lb, ub, step ? step : idx(1), inits);
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPointToStart(forOp.getBody());
  SmallVector<Value> yielded =
      body(forOp.getInductionVar(), forOp.getRegionIterArgs());
  // scf::ForOp::create adds an empty yield only without iter_args.
  if (!inits.empty())
    scf::YieldOp::create(*this, yielded);
  return SmallVector<Value>(forOp.getResults());
}
void KernelBuilder::loop(Value lb, Value ub,
                         const std::function<void(Value)> &body) {
  auto forOp = scf::ForOp::create(*this, lb, ub, idx(1));
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPoint(forOp.getBody()->getTerminator());
  body(forOp.getInductionVar());
}
void KernelBuilder::ifThen(Value cond, const std::function<void()> &then) {
  auto ifOp = scf::IfOp::create(*this, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPoint(ifOp.thenBlock()->getTerminator());
  then();
}
Value KernelBuilder::ifElse(Value cond, Type type,
                            const std::function<Value()> &then,
                            const std::function<Value()> &otherwise) {
  auto ifOp = scf::IfOp::create(*this, TypeRange{type}, cond,
                                /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(*this);
  setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(*this, then());
  setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(*this, otherwise());
  return ifOp.getResult(0);
}

} // namespace moec::kernels
