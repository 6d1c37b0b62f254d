"""Bundles in Python: load, save, and launch entries on arrays."""

from __future__ import annotations

import os
from typing import Optional, Sequence

from ..language import _dtypes
from . import _args, _native


class MoecError(RuntimeError):
    """A failure of the runtime or the device (not an argument error)."""


def _reraise(error: Exception):
    """Native StatusErrors become MoecError; ValueError/KeyError pass."""
    if type(error).__name__ == "StatusError":
        raise MoecError(str(error)) from error
    raise error


def _infix(rpn: str, symbols: Sequence[str]) -> str:
    """A bundle size expression ("s0 8 *") written for people ("T*8")."""
    stack: list = []
    for token in rpn.split():
        if token.startswith("s") and token[1:].isdigit():
            stack.append(symbols[int(token[1:])])
        elif token.lstrip("-").isdigit() or len(stack) < 2:
            stack.append(token)
        else:
            b, a = stack.pop(), stack.pop()
            stack.append(f"({a}{token}{b})" if len(token) == 1
                         else f"{token}({a}, {b})")
    text = stack[-1] if len(stack) == 1 else rpn
    depth = 0
    for i, char in enumerate(text):  # drop parentheses around the whole
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1] if text.startswith("(") else text


class BufferInfo:
    """One input or output of an entry: its name, element type and sizes
    (ints, or expressions over the symbols such as "T*8")."""

    def __init__(self, name: str, dtype: str, dims: Sequence[str],
                 symbols: Sequence[str] = ()):
        self.name = name
        self.dtype = dtype
        self.dims = tuple(_infix(d, symbols) for d in dims)

    def __repr__(self) -> str:
        return f"{self.name}: [{', '.join(self.dims)}] {self.dtype}"


class Entry:
    """One compiled function for one target; call it on arrays.

    `entry(*inputs, out=None, stream=None, check_values=True)` validates every
    argument (the error names it), allocates the outputs unless `out` gives
    them (a list with one array per output; None lets moec allocate that
    one), launches, and returns the output (or a tuple of them). CUDA
    launches are asynchronous on `stream` (default: torch's current stream
    for torch tensors, else the default stream).
    """

    def __init__(self, bundle: "Bundle", index: int, info: dict,
                 arg_names: Optional[Sequence[str]] = None):
        self._bundle = bundle
        self._index = index
        self.name: str = info["name"]
        self.target: str = info["target"]
        self.binary_kind: str = info["binary_kind"]
        self.symbols = [s[0] for s in info["symbols"]]
        self._symbol_bindings = info["symbols"]
        self.ref_ops = info["ref_ops"]
        self.steps = info["steps"]
        #: The function's MLIR after fusion and tiling (its signature keeps
        #: moe-autodiff's attributes, e.g. moe.saved_results).
        self.source: str = info.get("source", "")
        buffers = info["buffers"]
        self.inputs = [BufferInfo(b["name"], b["dtype"], b["dims"],
                                  self.symbols)
                       for b in buffers if b["role"] == "input"]
        self.outputs = [BufferInfo(b["name"], b["dtype"], b["dims"],
                                   self.symbols)
                        for b in buffers if b["role"] == "output"]
        if arg_names and len(arg_names) == len(self.inputs):
            for buffer, name in zip(self.inputs, arg_names):
                buffer.name = name
        self._input_index = [i for i, b in enumerate(buffers)
                             if b["role"] == "input"]
        self._output_index = [i for i, b in enumerate(buffers)
                              if b["role"] == "output"]
        # Input layouts (device, dtype, shape, strides) that passed the
        # checks, with the shapes they gave: a repeated call re-checks only
        # the addresses (what the layout does not decide).
        self._checked: dict = {}

    @property
    def device(self) -> str:
        return "cpu" if self.target == "host" else "cuda"

    def __repr__(self) -> str:
        ins = ", ".join(map(repr, self.inputs))
        outs = ", ".join(map(repr, self.outputs))
        return (f"<moec entry {self.name} [{self.target}] ({ins}) -> "
                f"({outs}), {len(self.steps)} launches>")

    # -- shapes ------------------------------------------------------------

    def _bind(self, infos) -> list:
        """Symbol values from the input shapes; ranks checked first."""
        for info, buffer in zip(infos, self.inputs):
            if len(info.shape) != len(buffer.dims):
                raise ValueError(
                    f"'{buffer.name}': expected rank {len(buffer.dims)} "
                    f"(sizes [{', '.join(buffer.dims)}]), got shape "
                    f"{list(info.shape)}")
        values = []
        for name, buffer_index, dim in self._symbol_bindings:
            position = self._input_index.index(buffer_index)
            values.append(int(infos[position].shape[dim]))
        return values

    @property
    def bundle(self) -> "Bundle":
        """The bundle this entry is one of."""
        return self._bundle

    def shapes(self, symbols: Sequence[int]) -> list:
        """Shapes of (inputs + outputs) for the given symbol values."""
        all_shapes = self._bundle._native.buffer_shapes(self._index,
                                                        list(symbols))
        return [tuple(all_shapes[i])
                for i in self._input_index + self._output_index]

    # -- launching ---------------------------------------------------------

    def __call__(self, *inputs, out=None, stream=None, check_values=True):
        if len(inputs) != len(self.inputs):
            names = ", ".join(b.name for b in self.inputs)
            raise TypeError(f"{self.name} takes {len(self.inputs)} inputs "
                            f"({names}), got {len(inputs)}")
        infos = [_args.describe(x, b.name) for x, b in zip(inputs, self.inputs)]
        shapes = self._checked_shapes(infos)
        if check_values:
            _check_values(self, infos, shapes)
        out_shapes = shapes[len(self.inputs):]
        outputs = self._outputs(out, infos, out_shapes)
        spec = lambda info: (info.address, info.dtype, list(info.shape))
        in_specs = [spec(i) for i in infos]
        if out is None and outputs and infos[0].is_torch:
            # Allocated just above in the entry's layout: only the
            # addresses are new.
            out_specs = [(o.data_ptr(), b.dtype, list(shape)) for o, b, shape
                         in zip(outputs, self.outputs, out_shapes)]
        else:
            out_infos = [_args.describe(o, b.name)
                         for o, b in zip(outputs, self.outputs)]
            for info, buffer, shape in zip(out_infos, self.outputs,
                                           out_shapes):
                _args.validate(info, f"out[{buffer.name}]", buffer.dtype,
                               shape, self.device)
            out_specs = [spec(i) for i in out_infos]
        try:
            if self.device == "cuda":
                self._launch_cuda(infos, in_specs, out_specs, stream)
            else:
                self._bundle._host_module(self).run(self.name, in_specs,
                                                    out_specs)
        except Exception as error:  # noqa: BLE001 - re-raised as typed
            _reraise(error)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _checked_shapes(self, infos) -> list:
        """The shapes of (inputs + outputs) for these inputs, after the
        checks that name a bad argument: all of them for a layout not seen
        before, only the addresses for one seen (cached per entry)."""
        layout = tuple((i.device, i.device_index, i.dtype, i.shape, i.strides)
                       for i in infos)
        shapes = self._checked.get(layout)
        if shapes is not None:
            for info, buffer, shape in zip(infos, self.inputs, shapes):
                _args.check_address(info, buffer.name, shape, self.device)
            return shapes
        shapes = self.shapes(self._bind(infos))
        for info, buffer, shape in zip(infos, self.inputs, shapes):
            _args.validate(info, buffer.name, buffer.dtype, shape, self.device)
        if self.device == "cuda":
            devices = {i.device_index for i in infos}
            if len(devices) > 1:
                raise ValueError(f"{self.name}: inputs are on different CUDA "
                                 f"devices {sorted(devices)}")
        if len(self._checked) < 256:  # bounded: token counts vary
            self._checked[layout] = shapes
        return shapes

    def _outputs(self, out, infos, shapes) -> list:
        """The output arrays: `out`'s (a None in it: allocated), else all
        allocated."""
        if out is None:
            out = [None] * len(self.outputs)
        outputs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outputs) != len(self.outputs):
            raise ValueError(f"'out': {self.name} has {len(self.outputs)} "
                             f"outputs, got {len(outputs)}")
        torch_arg = next((i for i in infos if i.is_torch), None)
        for index, (buffer, shape) in enumerate(zip(self.outputs, shapes)):
            if outputs[index] is not None:
                continue
            if torch_arg is not None:
                import torch
                outputs[index] = torch.empty(
                    shape, dtype=_dtypes.to_torch(buffer.dtype),
                    device=torch_arg.obj.device)
            elif self.device == "cpu":
                import numpy as np
                outputs[index] = np.empty(
                    shape, dtype=_dtypes.to_numpy(buffer.dtype))
            else:
                raise ValueError(
                    f"'out': give the output arrays of {self.name} (moec "
                    f"allocates outputs itself only for torch tensors and "
                    f"numpy arrays)")
        return outputs

    def _launch_cuda(self, infos, in_specs, out_specs, stream) -> None:
        program = self._bundle._cuda_program()
        torch_arg = next((i for i in infos if i.is_torch), None)
        handle = _stream_handle(stream, torch_arg)
        if torch_arg is not None:
            import torch
            device = torch_arg.obj.device
            if device.index in (None, torch.cuda.current_device()):
                # Already current: the context manager's two device
                # switches cost ~8 us a call.
                program.run(self._index, in_specs, out_specs, handle)
                return
            with torch.cuda.device(device):
                program.run(self._index, in_specs, out_specs, handle)
        else:
            program.run(self._index, in_specs, out_specs, handle)


def _stream_handle(stream, torch_arg) -> int:
    if stream is None:
        if torch_arg is None:
            return 0
        import torch
        return int(torch.cuda.current_stream(torch_arg.obj.device).cuda_stream)
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    raise TypeError(f"'stream': expected an int (CUstream), a torch.cuda."
                    f"Stream or a cupy stream, got {type(stream).__name__}")


def _values(info: _args.ArrayInfo):
    """A host numpy copy of a small integer array, for value checks."""
    if info.is_torch:
        return info.obj.detach().cpu().numpy()
    import numpy as np
    if info.device == "cpu":
        return np.asarray(info.obj)
    raise LookupError  # no portable way to read other device arrays


def _check_values(entry: Entry, infos, shapes) -> None:
    """Expert ids in range and offsets non-decreasing, for the inputs the
    reference op list says hold them."""
    position = {buffer: i for i, buffer in enumerate(entry._input_index)}

    def check_ids(buffer: int, experts: int, what: str):
        if buffer not in position:
            return
        i = position[buffer]
        try:
            values = _values(infos[i])
        except LookupError:
            return
        if values.size and (values.min() < 0 or values.max() >= experts):
            raise ValueError(
                f"'{entry.inputs[i].name}': {what} must be in [0, {experts}), "
                f"got values in [{values.min()}, {values.max()}]")

    for op in entry.ref_ops:
        # The buffer of each ODS operand group by name (-1: absent).
        operands = dict(zip(op["operand_names"], op["operands"]))
        if op["name"] == "moe.sort_by_expert":
            check_ids(operands["ids"], int(op["attrs"]["num_experts"]),
                      "expert ids")
        elif (op["name"] == "moe.dequantize" and
              operands.get("experts", -1) >= 0):
            data = operands["data"]
            experts = (shapes[position[data]][0] if data in position else None)
            if experts is not None:
                check_ids(operands["experts"], experts, "expert indices")
        if op["name"] in ("moe.permute", "moe.permute_probs", "moe.unpermute",
                          "moe.permute_grad", "moe.unpermute_grad",
                          "moe.grouped_matmul") and \
                operands["offsets"] in position:
            i = position[operands["offsets"]]
            try:
                offsets = _values(infos[i])
            except LookupError:
                continue
            import numpy as np
            if offsets.size and (offsets.min() < 0 or
                                 np.any(np.diff(offsets) < 0)):
                raise ValueError(
                    f"'{entry.inputs[i].name}': group offsets must be "
                    f"non-negative and non-decreasing")


class Bundle:
    """Compiled entries (one per function and target), loadable anywhere the
    runtime is. `bundle.save(path)`; `moec.load(path)`; `bundle[name]` or
    `bundle.entry(name, target)` gives an Entry; calling the bundle runs its
    only function on the target matching the arrays' device."""

    def __init__(self, native, module_text: Optional[str] = None,
                 tile: Optional[dict] = None,
                 arg_names: Optional[dict] = None,
                 notes: Sequence[str] = (), assembly: Sequence = ()):
        self._native = native
        self._module_text = module_text
        self._tile = dict(tile or {})
        self.notes = list(notes)
        #: {"<entry> <target>": assembly text} when compiled with
        #: keep_assembly=True.
        self.assembly = dict(assembly)
        self._cuda = None
        self._hosts: dict = {}
        arg_names = arg_names or {}
        infos = [native.entry(i) for i in range(native.num_entries)]
        self.entries = [Entry(self, i, info, arg_names.get(info["name"]))
                        for i, info in enumerate(infos)]

    @classmethod
    def from_bytes(cls, data: bytes, **kwargs) -> "Bundle":
        try:
            native = _native.runtime().Bundle.from_bytes(data)
        except Exception as error:  # noqa: BLE001
            _reraise(error)
        return cls(native, **kwargs)

    def to_bytes(self) -> bytes:
        return self._native.to_bytes()

    def save(self, path) -> None:
        try:
            self._native.save(os.fspath(path))
        except Exception as error:  # noqa: BLE001
            _reraise(error)

    @property
    def producer(self) -> str:
        return self._native.producer

    @property
    def targets(self) -> list:
        return sorted({e.target for e in self.entries})

    def entry(self, name: Optional[str] = None,
              target: Optional[str] = None) -> Entry:
        found = [e for e in self.entries
                 if (name is None or e.name == name) and
                 (target is None or e.target == target)]
        names = sorted({e.name for e in found})
        if name is None and len(names) > 1:
            raise KeyError(f"the bundle has several functions ({', '.join(names)}):"
                           f" name one")
        if not found:
            have = ", ".join(f"{e.name} [{e.target}]" for e in self.entries)
            raise KeyError(f"no entry {name or ''} for target "
                           f"{target or 'any'} (the bundle has: {have})")
        if len(found) > 1:
            raise KeyError(f"{names[0]} is compiled for several targets "
                           f"({', '.join(e.target for e in found)}): name one")
        return found[0]

    def __getitem__(self, name: str) -> Entry:
        return self.entry(name)

    def __call__(self, *inputs, **kwargs):
        device = "cpu"
        for x in inputs:
            try:
                device = _args.describe(x, "input").device
                break
            except TypeError:
                continue
        candidates = [e for e in self.entries
                      if (e.target == "host") == (device == "cpu")
                      and e.binary_kind != "hsaco"]
        names = sorted({e.name for e in candidates})
        have = ", ".join(f"{e.name} [{e.target}]" for e in self.entries)
        if not names:
            wanted = ("'host'" if device == "cpu"
                      else "moec.target_for('cuda')")
            raise ValueError(
                f"no entry runs on {device} arrays (the bundle has: {have}): "
                f"compile for the arrays' device, "
                f"moec.compile(kernel, target={wanted}), or give arrays on "
                f"the device the bundle was compiled for")
        if len(names) > 1:
            e = candidates[0]
            raise ValueError(
                f"several functions run on {device} arrays (the bundle has: "
                f"{have}): name one, e.g. "
                f"bundle.entry({e.name!r}, {e.target!r})(...)")
        return candidates[0](*inputs, **kwargs)

    def __repr__(self) -> str:
        return (f"<moec bundle: "
                f"{', '.join(f'{e.name} [{e.target}]' for e in self.entries)}>")

    # -- launchers -----------------------------------------------------------

    def _cuda_program(self):
        if self._cuda is None:
            cuda = _native.cuda()
            try:
                cuda.init()
                self._cuda = cuda.Program(self.to_bytes())
            except Exception as error:  # noqa: BLE001
                _reraise(error)
        return self._cuda

    def _host_module(self, entry: Entry):
        # The bundle's host object, loaded (a saved bundle or a cache hit
        # compiles nothing again); the module JIT-compiled only where the
        # bundle has no object. Both need the full package's _compiler
        # (LLVM's JIT).
        if "module" not in self._hosts:
            try:
                compiler = _native.compiler()
            except ImportError as error:
                raise MoecError(
                    f"{entry.name} [host]: host entries run through the "
                    f"full package's compiler module (LLVM's JIT), and this "
                    f"is the runtime-only package: install the full wheel, "
                    f"or run a GPU entry ({error})") from None
            if entry.binary_kind == "host-object" or self._module_text is None:
                self._hosts["module"] = compiler.HostModule.from_bundle(
                    self.to_bytes())
            else:
                self._hosts["module"] = compiler.HostModule(
                    self._module_text, self._tile)
        return self._hosts["module"]


def load(path) -> Bundle:
    """Reads a .moecb bundle (AOT: compiled elsewhere). A bundle is code:
    launching its entries runs the machine code inside it, so load only
    bundles from sources you trust (docs/bundle.md)."""
    with open(os.fspath(path), "rb") as file:
        return Bundle.from_bytes(file.read())
