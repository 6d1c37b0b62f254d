//===- Check.cpp - Check a bundle entry against the float64 reference -----===//
//
// Part of moec. Walks Entry::refOps twice at once: per op, on the buffers
// the kernels produced (the verdict), and end to end, chaining the
// reference's own values from the inputs (reported only: a near-tie in
// routing legitimately sends a token elsewhere and changes everything after).
//
//===----------------------------------------------------------------------===//

#include "CheckInternal.h"
#include "moec/Check/Check.h"
#include "moec/Runtime/Executor.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace moec::check {

using namespace detail;
using ref::DTensor;

namespace {

DTensor toTensor(const HostArray &a) {
  DTensor t;
  t.shape = a.shape;
  t.data.resize(a.numElements());
  for (int64_t i = 0, n = a.numElements(); i < n; ++i)
    t.data[i] = a.get(i);
  return t;
}

bool isLowPrecision(rt::ElemType elem) {
  return elem == rt::ElemType::BF16 || elem == rt::ElemType::F16 ||
         isFP8Type(elem);
}

/// Distance between neighbouring FP8 values around magnitude `x`.
double fp8Ulp(double x, rt::ElemType elem) {
  const int mantBits = elem == rt::ElemType::F8E4M3FN ? 3 : 2;
  const int minExponent = elem == rt::ElemType::F8E4M3FN ? -6 : -14;
  int exponent = minExponent + 1;
  if (x > 0)
    std::frexp(x, &exponent);
  return std::ldexp(1.0, std::max(exponent - 1, minExponent) - mantBits);
}

/// The rule for result `slot` of `op`: see OpReport.
OpReport makeRule(const rt::Entry &entry, const rt::RefOp &op, int32_t result) {
  OpReport r;
  r.op = op.name;
  const rt::BufferDesc &desc = entry.buffers[result];
  r.result = desc.name;
  r.elem = rt::elemTypeName(desc.elem);
  r.integer = !isFloatType(desc.elem);
  r.fp8 = isFP8Type(desc.elem);
  // Operands in bf16/f16/FP8, or a bf16/f16 result: the kernel rounds (or
  // its inputs were rounded) at about 2^-8; f32 throughout: accumulation
  // order and f32 transcendental functions only.
  bool low = isLowPrecision(desc.elem);
  for (int32_t b : op.operands)
    if (b >= 0 && isLowPrecision(entry.buffers[b].elem))
      low = true;
  r.tolerance = r.integer ? 0 : r.fp8 ? 1 : low ? 1e-2 : 1e-5;
  return r;
}

/// Fills the error fields of `r` comparing `out` (what the kernels wrote,
/// decoded) with `ref`.
void compare(const DTensor &out, const DTensor &ref, rt::ElemType elem,
             OpReport &r) {
  if (out.shape != ref.shape) {
    r.pass = false;
    r.mismatches = out.numElements();
    r.relError = NAN;
    r.note = "buffer shape " + shapeString(out.shape) +
             " differs from the reference's " + shapeString(ref.shape);
    return;
  }
  if (r.integer) {
    for (size_t i = 0; i < ref.data.size(); ++i)
      r.mismatches += out.data[i] != ref.data[i];
    r.pass = r.mismatches == 0;
    return;
  }
  r.relError = ref::relativeError(out, ref);
  if (r.fp8) {
    // Scales computed in f32 move x/scale across a rounding boundary now and
    // then: one FP8 step is allowed, more is an error.
    for (size_t i = 0; i < ref.data.size(); ++i) {
      double a = out.data[i], b = ref.data[i];
      double ulp = fp8Ulp(std::min(std::fabs(a), std::fabs(b)), elem);
      if (!(std::fabs(a - b) <= ulp))
        ++r.mismatches;
    }
    r.pass = r.mismatches == 0;
    return;
  }
  r.pass = r.relError <= r.tolerance; // false for NaN
}

bool sameTensor(const DTensor &a, const DTensor &b) {
  return a.shape == b.shape && a.data == b.data;
}

/// Checks the buffers against the entry and the op list's indices.
rt::Status validate(const rt::Entry &entry,
                    const std::vector<std::vector<int64_t>> &shapes,
                    const std::vector<HostArray> &buffers) {
  if (buffers.size() != entry.buffers.size())
    return {rt::ErrorCode::InvalidArgument,
            "entry '" + entry.name + "' has " +
                std::to_string(entry.buffers.size()) + " buffers, " +
                std::to_string(buffers.size()) + " given"};
  for (size_t b = 0; b < buffers.size(); ++b) {
    const HostArray &a = buffers[b];
    if (a.elem != entry.buffers[b].elem || a.shape != shapes[b] ||
        a.bytes.size() !=
            static_cast<size_t>(a.numElements()) * rt::elemSize(a.elem))
      return {rt::ErrorCode::InvalidArgument,
              "buffer '" + entry.buffers[b].name + "' is " +
                  rt::elemTypeName(a.elem) + " " + shapeString(a.shape) +
                  ", the entry expects " +
                  rt::elemTypeName(entry.buffers[b].elem) + " " +
                  shapeString(shapes[b])};
  }
  const int64_t count = static_cast<int64_t>(entry.buffers.size());
  std::vector<int> writes(entry.buffers.size(), 0);
  for (size_t n = 0; n < entry.refOps.size(); ++n) {
    const rt::RefOp &op = entry.refOps[n];
    for (int32_t b : op.operands)
      if (b < -1 || b >= count)
        return {rt::ErrorCode::InvalidArgument,
                "op #" + std::to_string(n) + " (" + op.name +
                    ") reads buffer " + std::to_string(b) + ", out of range"};
    for (int32_t b : op.results) {
      if (b < -1 || b >= count)
        return {rt::ErrorCode::InvalidArgument,
                "op #" + std::to_string(n) + " (" + op.name +
                    ") writes buffer " + std::to_string(b) + ", out of range"};
      if (b >= 0 && entry.buffers[b].role == rt::BufferRole::Input)
        return {rt::ErrorCode::Unsupported,
                "op #" + std::to_string(n) + " (" + op.name +
                    ") writes input buffer '" + entry.buffers[b].name + "'"};
      // Reading intermediates back needs each to survive the run.
      if (b >= 0 && ++writes[b] > 1)
        return {rt::ErrorCode::Unsupported,
                "buffer '" + entry.buffers[b].name +
                    "' is written by more than one op; the checker needs "
                    "one buffer per value"};
    }
  }
  return rt::Status::ok();
}

std::string opLabel(size_t n, const rt::RefOp &op) {
  return "op #" + std::to_string(n) + " (" + op.name + ")";
}

} // namespace

rt::Status checkEntry(const rt::Entry &entry,
                      const std::vector<int64_t> &symbols,
                      const std::vector<HostArray> &buffers,
                      CheckReport &report) {
  return checkEntry(entry, symbols, buffers, CheckOptions(), report);
}

rt::Status checkEntry(const rt::Entry &entry,
                      const std::vector<int64_t> &symbols,
                      const std::vector<HostArray> &buffers,
                      const CheckOptions &options, CheckReport &report) {
  report = CheckReport();
  std::vector<std::vector<int64_t>> shapes;
  if (rt::Status s = rt::bufferShapes(entry, symbols, shapes); !s)
    return s;
  if (rt::Status s = validate(entry, shapes, buffers); !s)
    return s;

  const size_t count = entry.buffers.size();
  // What the kernels wrote, decoded on first use.
  std::vector<std::optional<DTensor>> actual(count);
  auto actualOf = [&](int32_t b) -> const DTensor & {
    if (actual[b])
      return *actual[b];
    const rt::BufferDesc &desc = entry.buffers[b];
    if (desc.role != rt::BufferRole::View) {
      actual[b] = toTensor(buffers[b]);
      return *actual[b];
    }
    // The kernels wrote a view's values into its source's array.
    HostArray viewed = buffers[desc.source];
    viewed.shape = buffers[b].shape;
    actual[b] = toTensor(viewed);
    return *actual[b];
  };
  // The reference's own values, chained from the inputs.
  std::vector<std::optional<DTensor>> chained(count);
  std::vector<int32_t> producer(count, -1);
  // Whether a buffer's value went through a bf16/f16/FP8 buffer on its way
  // from the inputs: its end-to-end error then carries that rounding.
  std::vector<bool> lowChain(count);
  for (size_t b = 0; b < count; ++b)
    lowChain[b] = isLowPrecision(entry.buffers[b].elem);
  if (options.endToEnd)
    for (size_t b = 0; b < count; ++b)
      if (entry.buffers[b].role == rt::BufferRole::Input)
        chained[b] = actualOf(static_cast<int32_t>(b));

  for (size_t n = 0; n < entry.refOps.size(); ++n) {
    const rt::RefOp &op = entry.refOps[n];
    OpInputs in{&entry, &op, &shapes, {}};

    // End to end.
    OpResults chainedResults;
    if (options.endToEnd) {
      for (size_t i = 0; i < op.operands.size(); ++i) {
        int32_t b = op.operands[i];
        if (b >= 0 && !chained[b])
          return {rt::ErrorCode::InvalidArgument,
                  opLabel(n, op) + " reads '" + entry.buffers[b].name +
                      "' before any op computes it"};
        in.operands.push_back(b >= 0 ? &*chained[b] : nullptr);
      }
      try {
        chainedResults = evaluate(in);
      } catch (const UnsupportedError &e) {
        return {rt::ErrorCode::Unsupported, opLabel(n, op) + ": " + e.what()};
      } catch (const std::invalid_argument &e) {
        return {rt::ErrorCode::InvalidArgument,
                opLabel(n, op) + " on the entry's inputs: " + e.what()};
      }
    }

    // Per op, on the kernels' values.
    bool allInputs = true, sameOperands = options.endToEnd;
    std::vector<const DTensor *> ownOperands = in.operands;
    in.operands.clear();
    for (size_t i = 0; i < op.operands.size(); ++i) {
      int32_t b = op.operands[i];
      if (b < 0) {
        in.operands.push_back(nullptr);
        continue;
      }
      allInputs &= entry.buffers[b].role == rt::BufferRole::Input;
      in.operands.push_back(&actualOf(b));
      if (sameOperands)
        sameOperands = sameTensor(*in.operands.back(), *ownOperands[i]);
    }
    OpResults results;
    std::string failure;
    if (sameOperands) {
      results = chainedResults; // same operands, same reference values
    } else {
      try {
        results = evaluate(in);
      } catch (const UnsupportedError &e) {
        return {rt::ErrorCode::Unsupported, opLabel(n, op) + ": " + e.what()};
      } catch (const std::invalid_argument &e) {
        if (allInputs)
          return {rt::ErrorCode::InvalidArgument,
                  opLabel(n, op) + " on the entry's inputs: " + e.what()};
        failure = std::string("the reference rejects the kernels' operands: ") +
                  e.what();
      }
    }

    // Router ids may legitimately differ at near-ties (f32 vs float64).
    std::string tieNote;
    if (failure.empty() && op.name == "moe.router_topk") {
      const std::optional<size_t> weightsSlot = resultSlot(op, "weights"),
                                  idsSlot = resultSlot(op, "ids"),
                                  logits = operandSlot(op, "logits"),
                                  bias = operandSlot(op, "selection_bias");
      const int32_t ids = resultNamed(op, "ids");
      if (weightsSlot && idsSlot && logits && resultNamed(op, "weights") >= 0 &&
          ids >= 0 && results[*weightsSlot] && results[*idsSlot] &&
          in.operands[*logits]) {
        try {
          int64_t excused = excuseRouterTies(
              op, *in.operands[*logits], bias ? in.operands[*bias] : nullptr,
              actualOf(ids), options.routerTieTolerance,
              *results[*weightsSlot], *results[*idsSlot]);
          if (excused)
            tieNote = std::to_string(excused) +
                      " token(s) with near-tied experts checked with the "
                      "kernel's choice";
        } catch (const std::invalid_argument &) {
          // The reference accepted these operands above; nothing to excuse.
        }
      }
    }

    bool lowOperands = false;
    for (int32_t b : op.operands)
      lowOperands |= b >= 0 && lowChain[b];
    for (size_t slot = 0; slot < op.results.size(); ++slot) {
      int32_t b = op.results[slot];
      if (b < 0)
        continue;
      producer[b] = static_cast<int32_t>(n);
      lowChain[b] = lowChain[b] || lowOperands;
      if (options.endToEnd && slot < chainedResults.size() &&
          chainedResults[slot])
        chained[b] = std::move(chainedResults[slot]);
      if (failure.empty() && (slot >= results.size() || !results[slot]))
        continue; // an optional result the op did not produce
      OpReport r = makeRule(entry, op, b);
      if (!failure.empty()) {
        r.pass = false;
        r.relError = NAN;
        r.note = failure;
      } else {
        compare(actualOf(b), *results[slot], entry.buffers[b].elem, r);
        if (!tieNote.empty())
          r.note += (r.note.empty() ? "" : "; ") + tieNote;
      }
      report.perOp.push_back(std::move(r));
    }
  }

  if (options.endToEnd) {
    for (size_t b = 0; b < count; ++b) {
      if (entry.buffers[b].role != rt::BufferRole::Output)
        continue;
      if (producer[b] < 0 || !chained[b]) {
        OpReport r;
        r.op = "(none)";
        r.result = entry.buffers[b].name;
        r.elem = rt::elemTypeName(entry.buffers[b].elem);
        r.note = "no op of the list computes this output";
        report.endToEnd.push_back(std::move(r));
        continue;
      }
      OpReport r = makeRule(entry, entry.refOps[producer[b]],
                            static_cast<int32_t>(b));
      // An f32 result of f32 ops that read rounded intermediates (e.g. the
      // bf16 u of a decomposed moe.lora_grad) is as exact as those.
      if (!r.integer && !r.fp8 && lowChain[b])
        r.tolerance = std::max(r.tolerance, 1e-2);
      compare(actualOf(static_cast<int32_t>(b)), *chained[b],
              entry.buffers[b].elem, r);
      report.endToEnd.push_back(std::move(r));
    }
  }

  report.pass = true;
  for (const OpReport &r : report.perOp)
    report.pass &= r.pass;
  return rt::Status::ok();
}

rt::Status computeReference(const rt::Entry &entry,
                            const std::vector<int64_t> &symbols,
                            std::vector<HostArray> &buffers) {
  std::vector<std::vector<int64_t>> shapes;
  if (rt::Status s = rt::bufferShapes(entry, symbols, shapes); !s)
    return s;
  if (rt::Status s = validate(entry, shapes, buffers); !s)
    return s;
  std::vector<std::optional<DTensor>> values(entry.buffers.size());
  for (size_t b = 0; b < entry.buffers.size(); ++b)
    if (entry.buffers[b].role == rt::BufferRole::Input)
      values[b] = toTensor(buffers[b]);
  for (size_t n = 0; n < entry.refOps.size(); ++n) {
    const rt::RefOp &op = entry.refOps[n];
    OpInputs in{&entry, &op, &shapes, {}};
    for (int32_t b : op.operands) {
      if (b >= 0 && !values[b])
        return {rt::ErrorCode::InvalidArgument,
                opLabel(n, op) + " reads '" + entry.buffers[b].name +
                    "' before any op computes it"};
      in.operands.push_back(b >= 0 ? &*values[b] : nullptr);
    }
    OpResults results;
    try {
      results = evaluate(in);
    } catch (const UnsupportedError &e) {
      return {rt::ErrorCode::Unsupported, opLabel(n, op) + ": " + e.what()};
    } catch (const std::invalid_argument &e) {
      return {rt::ErrorCode::InvalidArgument, opLabel(n, op) + ": " + e.what()};
    }
    for (size_t slot = 0; slot < op.results.size(); ++slot) {
      int32_t b = op.results[slot];
      if (b < 0 || slot >= results.size() || !results[slot])
        continue;
      HostArray &out = buffers[b];
      if (results[slot]->shape != out.shape)
        return {rt::ErrorCode::InvalidArgument,
                opLabel(n, op) + ": the reference's result " +
                    shapeString(results[slot]->shape) + " does not fit '" +
                    entry.buffers[b].name + "' " + shapeString(out.shape)};
      for (int64_t i = 0, e = out.numElements(); i < e; ++i)
        out.set(i, results[slot]->data[i]);
      values[b] = std::move(results[slot]);
    }
  }
  return rt::Status::ok();
}

namespace {

std::string row(const OpReport &r) {
  char error[64], tol[16];
  if (r.integer) {
    std::snprintf(error, sizeof error, "%" PRId64 " differ", r.mismatches);
    std::snprintf(tol, sizeof tol, "exact");
  } else if (r.fp8) {
    std::snprintf(error, sizeof error, "%.2e %" PRId64 ">ulp", r.relError,
                  r.mismatches);
    std::snprintf(tol, sizeof tol, "1 ulp");
  } else {
    std::snprintf(error, sizeof error, "%.3e", r.relError);
    std::snprintf(tol, sizeof tol, "%.0e", r.tolerance);
  }
  std::string result = r.result + ":" + r.elem;
  char line[256];
  std::snprintf(line, sizeof line, "%-20s %-22s %-16s %-6s %s\n",
                r.op.c_str(), result.c_str(), error, tol,
                r.pass ? "PASS" : "FAIL");
  std::string s = line;
  if (!r.note.empty())
    s += "    note: " + r.note + "\n";
  return s;
}

} // namespace

std::string CheckReport::summary() const {
  char header[256];
  std::snprintf(header, sizeof header, "%-20s %-22s %-16s %-6s %s\n", "op",
                "result", "error", "tol", "status");
  std::string s = header;
  size_t failed = 0;
  for (const OpReport &r : perOp) {
    s += row(r);
    failed += !r.pass;
  }
  if (!endToEnd.empty()) {
    s += "end to end, from the inputs alone (informational):\n";
    for (const OpReport &r : endToEnd)
      s += row(r);
  }
  if (pass)
    s += "PASS (" + std::to_string(perOp.size()) + " results)\n";
  else
    s += "FAIL (" + std::to_string(failed) + " of " +
         std::to_string(perOp.size()) + " results)\n";
  return s;
}

} // namespace moec::check
