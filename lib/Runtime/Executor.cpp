//===- Executor.cpp - Run one bundle entry through a launcher -------------===//
//
// Part of moec. Everything here runs on the host before each launch, so it
// checks every index it uses even though readBundle already validated the
// entry: entries built in memory (the JIT path) may not have been.
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/Executor.h"
#include "moec/Runtime/Expr.h"

#include <algorithm>

namespace moec::rt {

namespace {

std::string quoted(const std::string &name) { return "'" + name + "'"; }

/// "input 2 ('arg2')".
std::string describe(const char *kind, size_t index, const BufferDesc &b) {
  return std::string(kind) + " " + std::to_string(index) + " (" +
         quoted(b.name) + ")";
}

Status invalidArg(const std::string &message) {
  return Status(ErrorCode::InvalidArgument, message);
}

size_t countRole(const Entry &entry, BufferRole role) {
  size_t n = 0;
  for (const BufferDesc &b : entry.buffers)
    n += b.role == role;
  return n;
}

/// Checks `array` against the expected element type and shape; `bytes` is
/// its size. `what` names it in messages.
Status checkArray(const std::string &what, const ArrayRef &array, ElemType elem,
                  const std::vector<int64_t> &shape, size_t &bytes) {
  if (array.elem != elem || array.shape != shape)
    return invalidArg(what + ": expected shape " + formatShape(shape) + " (" +
                      elemTypeName(elem) + "), got " +
                      formatShape(array.shape) + " (" +
                      elemTypeName(array.elem) + ")");
  if (Status s = arrayBytes(elem, shape, bytes); !s)
    return invalidArg(what + ": " + s.message());
  if (!array.data && bytes != 0)
    return invalidArg(what + ": null data pointer for " +
                      std::to_string(bytes) + " bytes");
  return Status::ok();
}

/// Evaluates the grids and parameters of every step and launches them in
/// order. `addresses[i]` is buffer i in the launcher's memory space.
Status runSteps(const Entry &entry, const std::vector<int64_t> &symbols,
                const std::vector<std::vector<int64_t>> &shapes,
                const std::vector<void *> &addresses,
                KernelLauncher &launcher) {
  // One slot per parameter; the launcher reads them through `pointers`, so
  // they must stay put until launch() returns.
  union Slot {
    void *address;
    int64_t scalar;
  };
  std::vector<Slot> slots;
  std::vector<void *> pointers;
  // TMA descriptors, by value: 128 bytes each, 64-byte aligned.
  struct alignas(64) TensorMap {
    unsigned char bytes[128];
  };
  std::vector<TensorMap> maps;
  for (size_t i = 0; i < entry.steps.size(); ++i) {
    const LaunchStep &step = entry.steps[i];
    std::string where =
        "step " + std::to_string(i) + " (" + quoted(step.kernel) + "): ";
    int64_t grid;
    if (Status s = evalExpr(step.grid, symbols, grid); !s)
      return Status(s.code(), where + "grid: " + s.message());
    if (grid == 0)
      continue; // e.g. no token routed to this kernel's experts

    slots.assign(step.params.size(), Slot{nullptr});
    pointers.assign(step.params.size(), nullptr);
    // Room for maps only in steps that pass one (most launches do not).
    bool passesMaps = std::any_of(
        step.params.begin(), step.params.end(), [](const ParamDesc &param) {
          return param.kind == ParamDesc::Kind::TensorMap;
        });
    maps.assign(passesMaps ? step.params.size() : 0, TensorMap{});
    for (size_t p = 0; p < step.params.size(); ++p) {
      const ParamDesc &param = step.params[p];
      if (param.kind != ParamDesc::Kind::Scalar &&
          param.buffer >= addresses.size())
        return invalidArg(where + "param " + std::to_string(p) +
                          ": buffer index " + std::to_string(param.buffer) +
                          " out of range");
      if (param.kind == ParamDesc::Kind::Buffer) {
        slots[p].address = addresses[param.buffer];
      } else if (param.kind == ParamDesc::Kind::TensorMap) {
        const BufferDesc &b = entry.buffers[param.buffer];
        pointers[p] = maps[p].bytes;
        // An empty array (no tokens) has nothing a kernel could load: its
        // map stays zeros rather than failing to encode.
        const std::vector<int64_t> &shape = shapes[param.buffer];
        if (std::find(shape.begin(), shape.end(), 0) != shape.end())
          continue;
        if (Status s = launcher.encodeTensorMap(
                addresses[param.buffer], b.elem, shapes[param.buffer],
                param.box, maps[p].bytes);
            !s)
          return Status(s.code(), where + "param " + std::to_string(p) +
                                      " (tensor map of " + quoted(b.name) +
                                      "): " + s.message());
        continue;
      } else {
        int64_t value;
        if (Status s = evalExpr(param.expr, symbols, value); !s)
          return Status(s.code(), where + "param " + std::to_string(p) + ": " +
                                      s.message());
        slots[p].scalar = value;
      }
      pointers[p] = &slots[p];
    }
    Status s = launcher.launch(entry, step, static_cast<uint64_t>(grid),
                               pointers.data());
    if (!s)
      return Status(s.code(), where + s.message());
  }
  return Status::ok();
}

/// Releases the scratch buffers it holds, whatever path leaves runEntry.
class TempGuard {
public:
  explicit TempGuard(KernelLauncher &launcher) : launcher_(launcher) {}
  TempGuard(const TempGuard &) = delete;
  TempGuard &operator=(const TempGuard &) = delete;
  ~TempGuard() {
    for (auto it = held_.rbegin(); it != held_.rend(); ++it)
      launcher_.release(*it);
  }
  void hold(void *ptr) { held_.push_back(ptr); }

private:
  KernelLauncher &launcher_;
  std::vector<void *> held_;
};

} // namespace

Status arrayBytes(ElemType elem, const std::vector<int64_t> &shape,
                  size_t &bytes) {
  uint64_t total = elemSize(elem);
  for (int64_t extent : shape) {
    if (extent < 0)
      return invalidArg("negative extent in shape " + formatShape(shape));
    if (__builtin_mul_overflow(total, static_cast<uint64_t>(extent), &total) ||
        total > SIZE_MAX)
      return invalidArg("shape " + formatShape(shape) + " (" +
                        elemTypeName(elem) + ") overflows the address space");
  }
  bytes = static_cast<size_t>(total);
  return Status::ok();
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Status bindSymbols(const Entry &entry, const std::vector<ArrayRef> &inputs,
                   std::vector<int64_t> &symbols) {
  symbols.clear();
  size_t numInputs = countRole(entry, BufferRole::Input);
  if (inputs.size() != numInputs)
    return invalidArg("entry " + quoted(entry.name) + " takes " +
                      std::to_string(numInputs) + " inputs, got " +
                      std::to_string(inputs.size()));
  // Inputs come first among the buffers (validateBundle), so input i is
  // buffer i.
  for (size_t i = 0; i < numInputs; ++i) {
    const BufferDesc &b = entry.buffers[i];
    if (b.role != BufferRole::Input)
      return invalidArg("entry " + quoted(entry.name) +
                        ": inputs are not the first buffers");
    if (inputs[i].shape.size() != b.dims.size())
      return invalidArg(describe("input", i, b) + ": expected rank " +
                        std::to_string(b.dims.size()) + ", got rank " +
                        std::to_string(inputs[i].shape.size()) + " (shape " +
                        formatShape(inputs[i].shape) + ")");
    for (int64_t extent : inputs[i].shape)
      if (extent < 0)
        return invalidArg(describe("input", i, b) +
                          ": negative extent in shape " +
                          formatShape(inputs[i].shape));
  }
  symbols.resize(entry.symbols.size());
  for (size_t i = 0; i < entry.symbols.size(); ++i) {
    const SymbolDesc &sym = entry.symbols[i];
    if (sym.buffer >= numInputs || sym.dim >= inputs[sym.buffer].shape.size()) {
      symbols.clear();
      return invalidArg("entry " + quoted(entry.name) + ": symbol " +
                        std::to_string(i) + " (" + quoted(sym.name) +
                        ") refers to a dimension of no input");
    }
    symbols[i] = inputs[sym.buffer].shape[sym.dim];
  }
  return Status::ok();
}

Status bufferShapes(const Entry &entry, const std::vector<int64_t> &symbols,
                    std::vector<std::vector<int64_t>> &shapes) {
  shapes.assign(entry.buffers.size(), {});
  for (size_t i = 0; i < entry.buffers.size(); ++i) {
    const BufferDesc &b = entry.buffers[i];
    shapes[i].resize(b.dims.size());
    for (size_t d = 0; d < b.dims.size(); ++d) {
      Status s = evalExpr(b.dims[d], symbols, shapes[i][d]);
      if (!s) {
        shapes.clear();
        return Status(s.code(), describe("buffer", i, b) + ": dim " +
                                    std::to_string(d) + ": " + s.message());
      }
    }
  }
  return Status::ok();
}

/// Each view's address: its source's, whose byte count must be the view's.
static Status bindViews(const Entry &entry,
                        const std::vector<std::vector<int64_t>> &shapes,
                        std::vector<void *> &addresses) {
  for (size_t i = 0; i < entry.buffers.size(); ++i) {
    const BufferDesc &b = entry.buffers[i];
    if (b.role != BufferRole::View)
      continue;
    // validateBundle refuses these; an unvalidated entry must not crash.
    if (b.source >= entry.buffers.size() ||
        entry.buffers[b.source].role == BufferRole::View)
      return invalidArg(describe("buffer", i, b) + ": view of buffer " +
                        std::to_string(b.source) +
                        ", not a buffer that has bytes of its own");
    size_t bytes = 0, sourceBytes = 0;
    if (Status s = arrayBytes(b.elem, shapes[i], bytes); !s)
      return invalidArg(describe("buffer", i, b) + ": " + s.message());
    if (Status s = arrayBytes(b.elem, shapes[b.source], sourceBytes); !s)
      return invalidArg(describe("buffer", b.source,
                                 entry.buffers[b.source]) +
                        ": " + s.message());
    if (bytes != sourceBytes)
      return invalidArg(describe("buffer", i, b) + ": a view of " +
                        std::to_string(sourceBytes) + " bytes as " +
                        formatShape(shapes[i]) + " (" + std::to_string(bytes) +
                        " bytes)");
    addresses[i] = addresses[b.source];
  }
  return Status::ok();
}

Status planScratch(const Entry &entry,
                   const std::vector<std::vector<int64_t>> &shapes,
                   ScratchPlan &plan) {
  constexpr size_t kAlign = 256;
  const size_t n = entry.buffers.size();
  if (shapes.size() != n)
    return invalidArg("entry " + quoted(entry.name) + " has " +
                      std::to_string(n) + " buffers, got " +
                      std::to_string(shapes.size()) + " shapes");
  // Live range [first, last] step of each buffer with bytes of its own (a
  // view's uses count for its source); never used: first > last.
  std::vector<size_t> first(n, SIZE_MAX), last(n, 0);
  for (size_t step = 0; step < entry.steps.size(); ++step)
    for (const ParamDesc &p : entry.steps[step].params) {
      if (p.kind == ParamDesc::Kind::Scalar || p.buffer >= n)
        continue;
      size_t b = p.buffer;
      if (entry.buffers[b].role == BufferRole::View &&
          entry.buffers[b].source < n)
        b = entry.buffers[b].source;
      first[b] = std::min(first[b], step);
      last[b] = std::max(last[b], step);
    }
  struct Temp {
    size_t index, bytes;
  };
  std::vector<Temp> temps;
  for (size_t i = 0; i < n; ++i) {
    if (entry.buffers[i].role != BufferRole::Temp)
      continue;
    size_t bytes = 0;
    if (Status s = arrayBytes(entry.buffers[i].elem, shapes[i], bytes); !s)
      return invalidArg(describe("buffer", i, entry.buffers[i]) + ": " +
                        s.message());
    if (bytes > SIZE_MAX - kAlign)
      return invalidArg(describe("buffer", i, entry.buffers[i]) + ": " +
                        std::to_string(bytes) + " bytes");
    temps.push_back({i, (bytes + kAlign - 1) / kAlign * kAlign});
  }
  std::stable_sort(temps.begin(), temps.end(), [](const Temp &a,
                                                  const Temp &b) {
    return a.bytes > b.bytes;
  });
  auto live = [&](size_t a, size_t b) {
    return first[a] <= last[a] && first[b] <= last[b] &&
           first[a] <= last[b] && first[b] <= last[a];
  };
  plan.offsets.assign(n, 0);
  plan.bytes = 0;
  std::vector<std::pair<size_t, size_t>> taken; // [begin, end) live with it
  for (size_t t = 0; t < temps.size(); ++t) {
    const Temp &temp = temps[t];
    taken.clear();
    for (size_t u = 0; u < t; ++u)
      if (live(temp.index, temps[u].index)) {
        size_t begin = plan.offsets[temps[u].index];
        taken.emplace_back(begin, begin + temps[u].bytes);
      }
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto &[begin, end] : taken) {
      if (offset + temp.bytes <= begin)
        break;
      offset = std::max(offset, end);
    }
    if (offset > SIZE_MAX - temp.bytes)
      return invalidArg("entry " + quoted(entry.name) +
                        ": scratch exceeds the address space");
    plan.offsets[temp.index] = offset;
    plan.bytes = std::max(plan.bytes, offset + temp.bytes);
  }
  return Status::ok();
}

Status runEntry(const Entry &entry, const std::vector<ArrayRef> &inputs,
                const std::vector<ArrayRef> &outputs,
                KernelLauncher &launcher) {
  std::vector<int64_t> symbols;
  std::vector<std::vector<int64_t>> shapes;
  if (Status s = bindSymbols(entry, inputs, symbols); !s)
    return s;
  if (Status s = bufferShapes(entry, symbols, shapes); !s)
    return s;

  size_t numOutputs = countRole(entry, BufferRole::Output);
  if (outputs.size() != numOutputs)
    return invalidArg("entry " + quoted(entry.name) + " has " +
                      std::to_string(numOutputs) + " outputs, got " +
                      std::to_string(outputs.size()));

  // Bind the caller's arrays; the scratch buffers go where planScratch
  // puts them.
  std::vector<void *> addresses(entry.buffers.size(), nullptr);
  size_t nextInput = 0, nextOutput = 0;
  for (size_t i = 0; i < entry.buffers.size(); ++i) {
    const BufferDesc &b = entry.buffers[i];
    size_t bytes = 0;
    switch (b.role) {
    case BufferRole::Input: {
      size_t k = nextInput++;
      if (Status s = checkArray(describe("input", k, b), inputs[k], b.elem,
                                shapes[i], bytes);
          !s)
        return s;
      addresses[i] = inputs[k].data;
      break;
    }
    case BufferRole::Output: {
      size_t k = nextOutput++;
      if (Status s = checkArray(describe("output", k, b), outputs[k], b.elem,
                                shapes[i], bytes);
          !s)
        return s;
      addresses[i] = outputs[k].data;
      break;
    }
    case BufferRole::Temp: // placed below
    case BufferRole::View: // bound below, once every source has an address
      break;
    }
  }

  if (Status s = launcher.prepare(entry); !s)
    return s;

  // Scratch is not cleared: every kernel writes the scratch it reads before
  // reading it (moec run and moec-runner check each entry with its temps
  // filled with 0xFF bytes). Clearing was a memset of every temp per call
  // (90 us for the Qwen3 layer's 370 MB of grouped rows at T=8192).
  ScratchPlan plan;
  if (Status s = planScratch(entry, shapes, plan); !s)
    return s;
  TempGuard guard(launcher);
  if (plan.bytes != 0) {
    void *arena = nullptr;
    Status s = launcher.allocate(plan.bytes, &arena);
    if (!s)
      return Status(s.code(), "entry " + quoted(entry.name) +
                                  ": allocating its scratch (" +
                                  std::to_string(plan.bytes) +
                                  " bytes): " + s.message());
    guard.hold(arena);
    for (size_t i = 0; i < entry.buffers.size(); ++i)
      if (entry.buffers[i].role == BufferRole::Temp)
        addresses[i] = static_cast<char *>(arena) + plan.offsets[i];
  }
  if (Status s = bindViews(entry, shapes, addresses); !s)
    return s;
  return runSteps(entry, symbols, shapes, addresses, launcher);
}

Status runEntryWithAllBuffers(const Entry &entry,
                              const std::vector<ArrayRef> &buffers,
                              KernelLauncher &launcher) {
  if (buffers.size() != entry.buffers.size())
    return invalidArg("entry " + quoted(entry.name) + " has " +
                      std::to_string(entry.buffers.size()) + " buffers, got " +
                      std::to_string(buffers.size()));
  size_t numInputs = countRole(entry, BufferRole::Input);
  std::vector<ArrayRef> inputs(buffers.begin(),
                               buffers.begin() + static_cast<long>(numInputs));
  std::vector<int64_t> symbols;
  std::vector<std::vector<int64_t>> shapes;
  if (Status s = bindSymbols(entry, inputs, symbols); !s)
    return s;
  if (Status s = bufferShapes(entry, symbols, shapes); !s)
    return s;

  std::vector<void *> addresses(entry.buffers.size(), nullptr);
  for (size_t i = 0; i < entry.buffers.size(); ++i) {
    size_t bytes;
    if (Status s =
            checkArray(describe("buffer", i, entry.buffers[i]), buffers[i],
                       entry.buffers[i].elem, shapes[i], bytes);
        !s)
      return s;
    addresses[i] = buffers[i].data;
  }
  // A view's own array is not used: it reads and writes its source's.
  if (Status s = bindViews(entry, shapes, addresses); !s)
    return s;
  if (Status s = launcher.prepare(entry); !s)
    return s;
  return runSteps(entry, symbols, shapes, addresses, launcher);
}

} // namespace moec::rt
