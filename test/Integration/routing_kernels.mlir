// Routing at the shapes of the warp kernels (Warp/: E a
// multiple of 32 up to 512 for router_topk, any E up to 512 for
// sort_by_expert). The host runs the scalar kernels on these entries, so the
// checks below pin the reference semantics; scripts/gpu-correctness.sh runs
// the same entries through the warp kernels on the H200, at token counts
// that span several 2048-slot sort chunks. Edge cases: T=1 (most experts
// empty), one expert taking every token's first choice, half the experts
// without tokens, alignment padding, single-expert groups, E = 512, and
// group-limited routing whose kept experts the warp kernel spreads over the
// lanes (route_grouped_bias: 4 of 8 groups of 32; route_kept_groups_*: 4 of
// 8 groups of 16, 4 of 16 groups of 32).
// RUN: moec run %s --entry route_bf16_aligned --sym T=1 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_bf16_aligned --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_bf16_aligned --sym T=45 --routing one-expert --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_grouped_bias --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_grouped_bias --sym T=45 --routing half-experts --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_topk_then_softmax --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_single_expert_groups --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_512 --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_kept_groups_128 --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry route_kept_groups_512 --sym T=9 --iters 1 | FileCheck %s --check-prefix=PASS
// RUN: moec run %s --entry sort_odd_experts --sym T=45 --iters 1 | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}

// Qwen3-style: softmax, top-8 of 128, renormalized; groups padded to 16.
func.func @route_bf16_aligned(%logits: tensor<?x128xbf16>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<128xi32>) {
  %w, %ids = moe.router_topk %logits k = 8 {renormalize}
      : tensor<?x128xbf16> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 128 align = 16
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<128xi32>
  return %w, %ids, %sorted, %slots, %offsets
      : tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<128xi32>
}

// DeepSeek-V3-style: sigmoid, selection bias, 8 groups of 32 (4 lanes
// each), 4 groups kept, scaling.
func.func @route_grouped_bias(%logits: tensor<?x256xf32>, %bias: tensor<256xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<256xi32>) {
  %w, %ids = moe.router_topk %logits bias(%bias : tensor<256xf32>) k = 8
      {scoring = #moe.scoring<sigmoid>, renormalize, num_groups = 8,
       topk_groups = 4, scaling_factor = 2.5 : f32}
      : tensor<?x256xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 256
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<256xi32>
  return %w, %ids, %sorted, %slots, %offsets
      : tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<256xi32>
}

// Mixtral-style order (softmax of the picked logits), f16, E = 64, k = 2.
func.func @route_topk_then_softmax(%logits: tensor<?x64xf16>)
    -> (tensor<?x2xf32>, tensor<?x2xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<64xi32>) {
  %w, %ids = moe.router_topk %logits k = 2 {order = #moe.order<topk_then_softmax>}
      : tensor<?x64xf16> -> tensor<?x2xf32>, tensor<?x2xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 64 align = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<64xi32>
  return %w, %ids, %sorted, %slots, %offsets
      : tensor<?x2xf32>, tensor<?x2xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<64xi32>
}

// Groups of one expert (a group's score is its single value), k = 5 of the
// 8 groups kept.
func.func @route_single_expert_groups(%logits: tensor<?x32xf32>, %bias: tensor<32xf32>)
    -> (tensor<?x5xf32>, tensor<?x5xi32>) {
  %w, %ids = moe.router_topk %logits bias(%bias : tensor<32xf32>) k = 5
      {num_groups = 32, topk_groups = 8}
      : tensor<?x32xf32> -> tensor<?x5xf32>, tensor<?x5xi32>
  return %w, %ids : tensor<?x5xf32>, tensor<?x5xi32>
}

// The largest expert count of the warp kernels: 16 experts per lane, four
// words of byte counters per lane in the sort.
func.func @route_512(%logits: tensor<?x512xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<512xi32>) {
  %w, %ids = moe.router_topk %logits k = 8 {renormalize}
      : tensor<?x512xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 512 align = 4
      : tensor<?x8xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<512xi32>
  return %w, %ids, %sorted, %slots, %offsets
      : tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>,
        tensor<512xi32>
}

// Sort alone, E = 96 (3 experts per lane, a partial counter word), k = 6.
func.func @sort_odd_experts(%ids: tensor<?x6xi32>)
    -> (tensor<?xi32>, tensor<?xi32>, tensor<96xi32>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 96 align = 8
      : tensor<?x6xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<96xi32>
  return %sorted, %slots, %offsets : tensor<?xi32>, tensor<?xi32>, tensor<96xi32>
}

// Group-limited routing, kept experts spread 2 per lane (4 of 8 groups of
// 16 experts, each group's score the sum of its two best).
func.func @route_kept_groups_128(%logits: tensor<?x128xf32>, %bias: tensor<128xf32>)
    -> (tensor<?x6xf32>, tensor<?x6xi32>) {
  %w, %ids = moe.router_topk %logits bias(%bias : tensor<128xf32>) k = 6
      {scoring = #moe.scoring<sigmoid>, renormalize, num_groups = 8,
       topk_groups = 4}
      : tensor<?x128xf32> -> tensor<?x6xf32>, tensor<?x6xi32>
  return %w, %ids : tensor<?x6xf32>, tensor<?x6xi32>
}

// 4 per lane of 16 (4 of 16 groups of 32 experts), softmax scores.
func.func @route_kept_groups_512(%logits: tensor<?x512xf32>, %bias: tensor<512xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>) {
  %w, %ids = moe.router_topk %logits bias(%bias : tensor<512xf32>) k = 8
      {num_groups = 16, topk_groups = 4}
      : tensor<?x512xf32> -> tensor<?x8xf32>, tensor<?x8xi32>
  return %w, %ids : tensor<?x8xf32>, tensor<?x8xi32>
}
