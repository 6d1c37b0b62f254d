"""FP8 copies of expert weights, made once per weight version.

A block compiled with `fp8` takes its weights' FP8 copies as arguments
(moe-fp8-recipe weights=arguments); the entry `<name>_fp8_weights` makes
them. Fp8WeightCache keeps them while the weights stay as they are, so a
weight is quantized once per update (an optimizer step, load_state_dict),
not on every call: eval and inference, frozen weights, and gradient
accumulation's later micro-batches reuse them.

A weight's copies are made again when its storage or its version counter
changes (every in-place write that autograd sees: optimizers, `copy_`
under no_grad). Writes through `.data` are not seen: call
moec.torch.clear_fp8_weights() after them. While a CUDA graph is being
captured the copies are made inside the graph (its replays quantize the
weights as they then are), and weights without a version counter
(inference-mode tensors) are quantized on every call.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import torch


class Fp8WeightCache:
    """{(quantizer, the weight tensors): their FP8 copies}, each dropped
    when one of its weights is freed or changes."""

    def __init__(self):
        self._copies: dict = {}

    def copies(self, quantizer, weights: Sequence[torch.Tensor]) -> tuple:
        """`quantizer(*weights)` (a tuple), from the cache while every
        weight is the same tensor with the same storage and version."""
        if weights[0].is_cuda and torch.cuda.is_current_stream_capturing():
            return _as_tuple(quantizer(*weights))
        try:
            stamp = tuple((w.data_ptr(), w._version) for w in weights)
        except RuntimeError:  # an inference tensor: no version counter
            return _as_tuple(quantizer(*weights))
        key = (quantizer.name, quantizer.target,
               tuple(id(w) for w in weights))
        found = self._copies.pop(key, None)
        if found is not None:
            refs, seen, copies = found
            if seen == stamp and all(r() is w for r, w in zip(refs, weights)):
                self._copies[key] = found
                return copies
            del found, copies  # stale: freed before the new copies are made
        copies = _as_tuple(quantizer(*weights))
        drop = (lambda _, key=key, copies=self._copies:
                copies.pop(key, None))
        refs = tuple(weakref.ref(w, drop) for w in weights)
        self._copies[key] = (refs, stamp, copies)
        return copies

    def clear(self) -> None:
        self._copies.clear()

    def __len__(self) -> int:
        return len(self._copies)


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)
