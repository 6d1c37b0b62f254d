//===- AutodiffAttrs.h - The attributes moe-autodiff's functions carry ----===//
//
// Part of moec. Names of the attributes by which moe-autodiff describes the
// functions it derives (Autodiff.cpp), read again by passes that rewrite a
// forward and backward pair (moe-fp8-recipe) and by the runtimes.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_DIALECT_MOE_TRANSFORMS_AUTODIFFATTRS_H
#define MOEC_LIB_DIALECT_MOE_TRANSFORMS_AUTODIFFATTRS_H

#include "llvm/ADT/StringRef.h"

namespace moec::moe::autodiff {

/// @f_grad: the arguments of @f whose gradients it returns.
constexpr llvm::StringLiteral kWrtAttr = "moe.wrt";
/// @f_grad: the function it differentiates (@f).
constexpr llvm::StringLiteral kGradOfAttr = "moe.grad_of";
/// @f_grad: for each saved argument, the index of the @f_fwd result.
constexpr llvm::StringLiteral kSavedResultsAttr = "moe.saved_results";
/// @f_grad: the arguments whose gradients it adds to given main gradients.
constexpr llvm::StringLiteral kAccumulatedAttr = "moe.accumulated";
/// An argument's row-count symbol (its dynamic leading dimension).
constexpr llvm::StringLiteral kSymAttr = "moe.sym";
/// An argument's name (entry inputs, messages).
constexpr llvm::StringLiteral kNameAttr = "moe.name";

} // namespace moec::moe::autodiff

#endif // MOEC_LIB_DIALECT_MOE_TRANSFORMS_AUTODIFFATTRS_H
