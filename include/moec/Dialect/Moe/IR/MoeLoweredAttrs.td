//===- MoeLoweredAttrs.td - What the lowering tells the bundle writer -*- tablegen -*-===//
//
// Part of moec. convert-moe-to-kernels rewrites a function on tensors into a
// host function on buffers that launches kernels; the bundle writer
// (lib/Target/EntryBuilder.cpp) turns that function into a runtime entry.
// These attributes are the interface between the two: size expressions over
// the entry's symbols, launches, buffers and the float64 reference's op
// list, typed and verified (MoeDialect::verifyOperationAttribute).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOELOWEREDATTRS_TD
#define MOEC_DIALECT_MOE_IR_MOELOWEREDATTRS_TD

include "moec/Dialect/Moe/IR/MoeDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Moe_SizeKind : I32EnumAttr<"SizeKind",
    "what one node of a size expression computes", [
      I32EnumAttrCase<"constant", 0>,
      I32EnumAttrCase<"symbol", 1>,
      I32EnumAttrCase<"add", 2>,
      I32EnumAttrCase<"sub", 3>,
      I32EnumAttrCase<"mul", 4>,
      I32EnumAttrCase<"floordiv", 5>,
      I32EnumAttrCase<"ceildiv", 6>,
      I32EnumAttrCase<"min", 7>,
      I32EnumAttrCase<"max", 8>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}

def Moe_SizeAttr : AttrDef<Moe_Dialect, "Size"> {
  let mnemonic = "size";
  let summary = "A size as an expression of the entry's symbols";
  let description = [{
    A buffer dimension, a kernel scalar or a grid size that the runtime
    computes at launch from the entry's symbols (its inputs' dynamic
    dimensions, `s0`, `s1`, ... in the order of the function's
    `moe.symbols`). Each node is a non-negative constant, a symbol, or one
    of `+ - * floordiv ceildiv` (infix; `*` and the divisions bind tighter)
    or `min(a, b)` / `max(a, b)` of two sub-expressions. The runtime
    evaluates it in int64 and rejects a negative intermediate value, an
    overflow or a division by zero.

    Example: `#moe.size<(s0 * 2 floordiv 16 + 9) * (24 ceildiv 16)>`.
  }];
  let parameters = (ins
    EnumParameter<Moe_SizeKind>:$kind,
    // The constant, or the symbol's index; 0 for an operation.
    "int64_t":$value,
    // Two for an operation, none for a constant or a symbol.
    ArrayRefParameter<"::moec::moe::SizeAttr", "operands">:$operands
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    static SizeAttr constant(::mlir::MLIRContext *context, int64_t value);
    static SizeAttr symbol(::mlir::MLIRContext *context, int64_t index);
    static SizeAttr binary(SizeKind kind, SizeAttr lhs, SizeAttr rhs);
    /// The expression in the runtime's reverse Polish form (Runtime/Expr.h).
    std::string toReversePolish() const;
    /// The highest symbol index it reads, or -1 when it reads none.
    int64_t maxSymbol() const;
  }];
}

def Moe_LaunchAttr : AttrDef<Moe_Dialect, "Launch"> {
  let mnemonic = "launch";
  let summary = "What the runtime computes for one kernel launch";
  let description = [{
    On each `gpu.launch_func` of a lowered function, as `moe.launch`: the
    number of blocks, and the value of each of the kernel's integer or index
    operands, in operand order (its buffers and TMA descriptors are
    described by the buffers themselves).

    Example: `#moe.launch<grid = <s0 * 4 ceildiv 256>, scalars = []>`.
  }];
  let parameters = (ins
    "SizeAttr":$grid,
    OptionalArrayRefParameter<"::moec::moe::SizeAttr">:$scalars
  );
  let assemblyFormat = "`<` `grid` `=` $grid `,` `scalars` `=` `[` (`]`) : ($scalars^ `]`)? `>`";
}

def Moe_DimSymbolAttr : AttrDef<Moe_Dialect, "DimSymbol"> {
  let mnemonic = "dim_symbol";
  let summary = "A symbol of a lowered function: an input's dynamic dimension";
  let description = [{
    The entries of a lowered function's `moe.symbols`: symbol `s<i>` is the
    size of dimension `dim` of input `arg` when the entry is called. Inputs
    that share the symbol's name must agree (the runtime checks).

    Example: `#moe.dim_symbol<name = "T", arg = 0, dim = 0>`.
  }];
  let parameters = (ins StringRefParameter<"symbol name">:$name,
                        "int64_t":$arg, "int64_t":$dim);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Moe_RefOpAttr : AttrDef<Moe_Dialect, "RefOp"> {
  let mnemonic = "ref_op";
  let summary = "One op of a lowered function, for the float64 reference";
  let description = [{
    The entries of a lowered function's `moe.ref_ops`, in program order: the
    op's name, its semantic attributes as text (every ODS attribute,
    default-valued ones included, an absent unit attribute as "false";
    lowering choices such as `moe.tile` left out), and the buffer index of
    each ODS operand and result group (-1 for an absent optional one) with
    the group's ODS name (`operand_names`, `result_names`; for moe ops
    generated from MoeOps.td, MoeOpNames.inc). `moec check` re-runs the
    function with these in float64, reading operands and attributes by name.

    Example: `#moe.ref_op<name = "moe.swiglu", attrs = {layout = "halves"},
    operands = [0], operand_names = ["input"], results = [1],
    result_names = ["output"]>`.
  }];
  let parameters = (ins StringRefParameter<"op name">:$name,
                        "::mlir::DictionaryAttr":$attrs,
                        "::mlir::DenseI32ArrayAttr":$operands,
                        "::mlir::ArrayAttr":$operand_names,
                        "::mlir::DenseI32ArrayAttr":$results,
                        "::mlir::ArrayAttr":$result_names);
  let genVerifyDecl = 1;
  let assemblyFormat = "`<` struct(params) `>`";
}

#endif // MOEC_DIALECT_MOE_IR_MOELOWEREDATTRS_TD
