// RUN: moec-opt %s -moe-share-positions -split-input-file | FileCheck %s

// The sort gains a positions result, shared by a permute and an unpermute
// of its slots; its other results keep their uses.
// CHECK-LABEL: func.func @permute_and_unpermute
// CHECK: %[[SORTED:[a-z_0-9]+]], %[[SLOTS:[a-z_0-9]+]], %[[OFFSETS:[a-z_0-9]+]], %[[POS:[a-z_0-9]+]] = moe.sort_by_expert %{{.*}} experts = 16 : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>, tensor<?xi32>
// CHECK: moe.permute %{{.*}}, %[[SLOTS]], %[[OFFSETS]] k = 2 positions(%[[POS]] : tensor<?xi32>)
// CHECK: moe.unpermute %{{.*}}, %[[SLOTS]], %[[OFFSETS]] k = 2 positions(%[[POS]] : tensor<?xi32>) weights
// CHECK: return %[[SORTED]]
func.func @permute_and_unpermute(%ids: tensor<?x2xi32>, %x: tensor<?x64xbf16>,
                                 %w: tensor<?x2xf32>)
    -> (tensor<?xi32>, tensor<?x64xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  %y = moe.unpermute %rows, %slots, %offsets k = 2 weights(%w : tensor<?x2xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  return %sorted, %y : tensor<?xi32>, tensor<?x64xbf16>
}

// -----

// Static token count: the positions are tensor<T*k>; the backward ops share
// them too, and an aligned sort (padded rows) is fine.
// CHECK-LABEL: func.func @gradients_static
// CHECK: %{{[a-z_0-9]+}}, %[[SLOTS:[a-z_0-9]+]], %[[OFFSETS:[a-z_0-9]+]], %[[POS:[a-z_0-9]+]] = moe.sort_by_expert %{{.*}} experts = 4 align = 8 {kept = "discardable attributes move to the new op"} : tensor<5x2xi32> -> tensor<38xi32>, tensor<38xi32>, tensor<4xi32>, tensor<10xi32>
// CHECK: moe.permute_grad %{{.*}}, %[[SLOTS]], %[[OFFSETS]] k = 2 positions(%[[POS]] : tensor<10xi32>)
// CHECK: moe.unpermute_grad %{{.*}}, %[[SLOTS]], %[[OFFSETS]] k = 2 positions(%[[POS]] : tensor<10xi32>)
func.func @gradients_static(%ids: tensor<5x2xi32>, %drows: tensor<38x32xf32>,
                            %dy: tensor<5x32xf32>)
    -> (tensor<5x32xf32>, tensor<38x32xf32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 4 align = 8
      {kept = "discardable attributes move to the new op"}
      : tensor<5x2xi32> -> tensor<38xi32>, tensor<38xi32>, tensor<4xi32>
  %dx = moe.permute_grad %drows, %slots, %offsets k = 2
      : tensor<38x32xf32>, tensor<38xi32>, tensor<4xi32> -> tensor<5x32xf32>
  %dr = moe.unpermute_grad %dy, %slots, %offsets k = 2
      : tensor<5x32xf32>, tensor<38xi32>, tensor<4xi32> -> tensor<38x32xf32>
  return %dx, %dr : tensor<5x32xf32>, tensor<38x32xf32>
}

// -----

// Left alone: slots from an argument, offsets that are not the sort's, and
// an op that has positions already. No consumer: the sort keeps 3 results.
// CHECK-LABEL: func.func @left_alone
// CHECK: moe.sort_by_expert %{{.*}} experts = 16 : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>{{$}}
// CHECK: moe.permute %{{.*}}, %{{.*}}, %{{.*}} k = 2 :
// CHECK: moe.permute %{{.*}}, %{{.*}}, %{{.*}} k = 2 :
// CHECK: moe.permute %{{.*}}, %{{.*}}, %{{.*}} k = 2 positions(%{{.*}} : tensor<?xi32>) :
func.func @left_alone(%ids: tensor<?x2xi32>, %x: tensor<?x64xbf16>,
                      %slots_arg: tensor<?xi32>, %offsets_arg: tensor<16xi32>,
                      %positions: tensor<?xi32>)
    -> (tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %a = moe.permute %x, %slots_arg, %offsets k = 2
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  %b = moe.permute %x, %slots, %offsets_arg k = 2
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  %c = moe.permute %x, %slots_arg, %offsets_arg k = 2
      positions(%positions : tensor<?xi32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  return %a, %b, %c : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// A grouped matmul's scatter (moe-fuse-combine's unpermute) shares them;
// its gather of the same slots needs no inverse map and is left as is.
// CHECK-LABEL: func.func @grouped_matmul_scatter
// CHECK: %{{[a-z_0-9]+}}, %[[SLOTS:[a-z_0-9]+]], %[[OFFSETS:[a-z_0-9]+]], %[[POS:[a-z_0-9]+]] = moe.sort_by_expert
// CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %[[OFFSETS]] gather(%[[SLOTS]] : tensor<?xi32>) scatter(%[[SLOTS]] : tensor<?xi32>) scatter_weights(%{{.*}} : tensor<?x2xf32>) scatter_positions(%[[POS]] : tensor<?xi32>) {k = 2 : i64}
func.func @grouped_matmul_scatter(%ids: tensor<?x2xi32>, %x: tensor<?x64xbf16>,
                                  %w: tensor<16x64x32xbf16>, %p: tensor<?x2xf32>)
    -> tensor<?x32xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %y = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      scatter(%slots : tensor<?xi32>) scatter_weights(%p : tensor<?x2xf32>)
      {k = 2 : i64}
      : tensor<?x64xbf16>, tensor<16x64x32xbf16>, tensor<16xi32> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}
