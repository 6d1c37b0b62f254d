//===- MoeAttrs.td - Attributes of the moe dialect ---------*- tablegen -*-===//
//
// Part of moec. Enumerations that select between variants of one op where the
// math is shared (attributes rather than new ops).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOEATTRS_TD
#define MOEC_DIALECT_MOE_IR_MOEATTRS_TD

include "moec/Dialect/Moe/IR/MoeDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

class Moe_EnumAttr<EnumAttrInfo enumInfo, string name>
    : EnumAttr<Moe_Dialect, enumInfo, name> {
  let assemblyFormat = "`<` $value `>`";
}

def Moe_Scoring : I32EnumAttr<"Scoring",
    "how router logits become expert scores", [
      I32EnumAttrCase<"softmax", 0>,
      I32EnumAttrCase<"sigmoid", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_ScoringAttr : Moe_EnumAttr<Moe_Scoring, "scoring">;

def Moe_TopKOrder : I32EnumAttr<"TopKOrder",
    "whether softmax runs over all experts or over the selected k", [
      I32EnumAttrCase<"softmax_then_topk", 0>,
      I32EnumAttrCase<"topk_then_softmax", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_TopKOrderAttr : Moe_EnumAttr<Moe_TopKOrder, "order">;

def Moe_MatmulMode : I32EnumAttr<"MatmulMode",
    "what a grouped matmul computes", [
      I32EnumAttrCase<"forward", 0>,
      I32EnumAttrCase<"weight_grad", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_MatmulModeAttr : Moe_EnumAttr<Moe_MatmulMode, "mode">;

def Moe_Activation : I32EnumAttr<"Activation",
    "activation applied in a grouped matmul's epilogue", [
      I32EnumAttrCase<"none", 0>,
      I32EnumAttrCase<"swiglu", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_ActivationAttr : Moe_EnumAttr<Moe_Activation, "activation">;

def Moe_GateUpLayout : I32EnumAttr<"GateUpLayout",
    "where the gate and up values sit in a [.., 2I] row", [
      // Columns [0, I) are gate, [I, 2I) are up.
      I32EnumAttrCase<"halves", 0>,
      // Even columns are gate, odd columns are up.
      I32EnumAttrCase<"interleaved", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_GateUpLayoutAttr : Moe_EnumAttr<Moe_GateUpLayout, "layout">;

def Moe_QuantAxis : I32EnumAttr<"QuantAxis",
    "which way a quantization group runs", [
      // A group is `group_size` consecutive columns of one row.
      I32EnumAttrCase<"rowwise", 0>,
      // A group is `group_size` consecutive rows of one column, inside one
      // expert group.
      I32EnumAttrCase<"colwise", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_QuantAxisAttr : Moe_EnumAttr<Moe_QuantAxis, "axis">;

#endif // MOEC_DIALECT_MOE_IR_MOEATTRS_TD
