#!/usr/bin/env python3
"""Host time of one moec entry call from Python (no sync in between), split
into the native launcher, the output allocation and the rest (the Python
argument checks): how long the GPU waits for the host when a step starts
after a sync, as in an expert-parallel layer's route step.

    python3 bench/entry_overhead.py BUNDLE.moecb --entry ep_dispatch \\
        --sym T=16384 [--calls 200] [--repeats 3]

Inputs are made from the entry's signature: floats N(0, 1), integers zero
(valid expert ids and offsets). Each figure is the mean over --calls calls
between two synchronizations, printed --repeats times.
"""
import argparse

from common import host_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("--entry", required=True)
    parser.add_argument("--sym", action="append", default=[],
                        help="NAME=VALUE for a symbolic size (repeatable)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    import moec
    from moec.language import _dtypes
    from moec.runtime import _args
    symbols = {k: int(v) for k, v in (s.split("=") for s in args.sym)}
    entry = moec.load(args.bundle).entry(args.entry, "sm_90a")
    missing = [s for s in entry.symbols if s not in symbols]
    if missing:
        parser.error(f"give --sym for {', '.join(missing)}")
    shapes = entry.shapes([symbols[s] for s in entry.symbols])
    inputs = []
    for buffer, shape in zip(entry.inputs, shapes):
        dtype = _dtypes.to_torch(buffer.dtype)
        inputs.append(torch.randn(shape, device="cuda").to(dtype)
                      if dtype.is_floating_point else
                      torch.zeros(shape, dtype=dtype, device="cuda"))

    def call():
        return entry(*inputs, check_values=False)

    def host_us(fn):
        torch.cuda.synchronize()
        seconds = host_seconds(fn, args.calls)
        torch.cuda.synchronize()
        return seconds * 1e6

    for _ in range(5):
        call()
    infos = [_args.describe(x, b.name) for x, b in zip(inputs, entry.inputs)]
    out_shapes = shapes[len(entry.inputs):]
    outputs = entry._outputs(None, infos, out_shapes)
    in_specs = [(i.address, i.dtype, list(i.shape)) for i in infos]
    out_specs = [(o.data_ptr(), b.dtype, list(s)) for o, b, s in
                 zip(outputs, entry.outputs, out_shapes)]
    program = entry._bundle._cuda_program()
    stream = torch.cuda.current_stream().cuda_stream
    print(f"{entry.name}: {len(entry.steps)} launches, "
          f"{torch.cuda.get_device_name()}")
    for _ in range(args.repeats):
        whole = host_us(call)
        native = host_us(lambda: program.run(entry._index, in_specs,
                                             out_specs, stream))
        alloc = host_us(lambda: entry._outputs(None, infos, out_shapes))
        print(f"whole call {whole:.1f} us: native launcher {native:.1f}, "
              f"output allocation {alloc:.1f}, Python checks "
              f"{whole - native - alloc:.1f}")


if __name__ == "__main__":
    main()
