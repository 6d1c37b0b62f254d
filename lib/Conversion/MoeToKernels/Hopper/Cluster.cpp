//===- Cluster.cpp - Block clusters of the sm_90a matmul ------------------===//
//
// Part of moec. The blocks of a cluster of 2 share one unit of the schedule
// (m-tiles 2j and 2j+1 of one expert and n-tile), multicast halves of the
// weight tile into each other's stages, and free each other's stages with
// remote mbarrier arrivals.
//
//===----------------------------------------------------------------------===//

#include "HopperKernel.h"

using namespace mlir;
using namespace moec;
using namespace moec::kernels;
using namespace moec::kernels::hopper;

void ClusterPart::place() {
  KernelBuilder &b = env.b;
  rank = b.rem(env.block, b.idx(env.plan.cluster));
  firstUnit = b.div(env.block, b.idx(env.plan.cluster));
}

// Visible to the other block of the cluster before its multicasts and
// arrivals reach them.
void ClusterPart::fenceBarrierInit() {
  NVVM::FenceMbarrierInitOp::create(env.b);
}

void ClusterPart::sync() {
  NVVM::ClusterArriveOp::create(env.b, UnitAttr());
  NVVM::ClusterWaitOp::create(env.b, UnitAttr());
}

Value ClusterPart::multicastMask() {
  KernelBuilder &b = env.b;
  return arith::ConstantOp::create(b, b.getI16IntegerAttr(3));
}

Value ClusterPart::partnerRank() {
  KernelBuilder &b = env.b;
  return toI32(b, b.sub(b.idx(env.plan.cluster - 1), rank));
}

void ClusterPart::arriveRemote(Value local, Value partner) {
  KernelBuilder &b = env.b;
  Value remote = NVVM::MapaOp::create(
      b, LLVM::LLVMPointerType::get(b.getContext(), 7), local, partner);
  // CTA scope, as CUTLASS's cluster barriers: the reads it orders have
  // retired already. With cluster scope every arrival waited on a memory
  // barrier (ncu, H200: 43 % of the warps' stall cycles, the kernel 1.3x
  // slower).
  NVVM::MBarrierArriveOp::create(b, Type(), remote, Value(),
                                 NVVM::MemScopeKind::CTA, false);
}
