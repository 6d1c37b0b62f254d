//===- BundleInternal.h - Shared by the bundle reader and validator -*- C++ -*-===//
//
// Part of moec. Message helpers that Bundle.cpp (reading, writing) and
// BundleValidate.cpp (validateBundle) both use; not part of the runtime's
// interface.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_RUNTIME_BUNDLEINTERNAL_H
#define MOEC_LIB_RUNTIME_BUNDLEINTERNAL_H

#include "moec/Runtime/Bundle.h"

#include <cstdint>
#include <string>

namespace moec::rt {

/// The highest value of each enum the format stores as a byte.
inline constexpr uint8_t kMaxElemType = static_cast<uint8_t>(ElemType::U8);
inline constexpr uint8_t kMaxBinaryKind =
    static_cast<uint8_t>(BinaryKind::HostObject);
inline constexpr uint8_t kMaxBufferRole =
    static_cast<uint8_t>(BufferRole::View);
inline constexpr uint8_t kMaxParamKind =
    static_cast<uint8_t>(ParamDesc::Kind::TensorMap);

/// "entry I ('name', target)", the name escaped (it comes from the bytes).
std::string entryLabel(size_t index, const Entry &entry);
/// `v` as 0x%08x.
std::string hex32(uint32_t v);
/// Why a bundle of format `version` cannot be read, and what to do.
std::string versionError(uint32_t version);

} // namespace moec::rt

#endif // MOEC_LIB_RUNTIME_BUNDLEINTERNAL_H
