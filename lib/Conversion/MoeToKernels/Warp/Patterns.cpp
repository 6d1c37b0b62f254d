//===- Patterns.cpp - The `warp` strategy's patterns ----------------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "WarpKernels.h"

using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::warp;

void kernels::populateWarpKernelPatterns(KernelPatternSet &patterns,
                                         const TargetInfo &target) {
  if (!target.hasWarpShuffles())
    return;
  constexpr auto warp = moe::KernelStrategy::warp;
  patterns.add<moe::RouterTopKOp>(warp, emitRouterTopK, matchRouterTopK);
  patterns.add<moe::SortByExpertOp>(warp, emitSortByExpert, matchSortByExpert);
  patterns.add<moe::QuantizeOp>(warp, emitQuantize, matchQuantize);
}
