

func.func @left_alone(%ids: tensor<?x2xi32>, %x: tensor<?x64xbf16>,
                      %slots_arg: tensor<?xi32>, %offsets_arg: tensor<16xi32>,
                      %positions: tensor<?xi32>)
    -> (tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 16
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<16xi32>
  %a = moe.permute %x, %slots_arg, %offsets k = 2147483647
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  %b = moe.permute %x, %slots, %offsets_arg k = 2
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  %c = moe.permute %x, %slots_arg, %offsets_arg k = 2
      positions(%positions : tensor<?xi32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<16xi32> -> tensor<?x64xbf16>
  return %a, %b, %c : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>
}

