"""FP8 copies of expert weights, made once per weight version.

A block compiled with `fp8` takes its weights' FP8 copies as arguments
(moe-fp8-recipe weights=arguments); the entry `<name>_fp8_weights` makes
them. Fp8WeightCache keeps the copies of frozen weights (requires_grad
False: LoRA's base, a model frozen for inference) while they stay as they
are, so such a weight is quantized once per change, not on every call.
Weights that train are quantized on every call: their copies would stay
allocated between steps (half the bf16 bytes per layout, for every layer)
and be stale after each optimizer step anyway.

A weight's copies are made again when its storage, its view of it or its
version counter changes (every in-place write that autograd sees:
optimizers, `copy_` under no_grad). Writes through `.data` are not seen: call
moec.torch.clear_fp8_weights() after them. While a CUDA graph is being
captured the copies are made inside the graph (its replays quantize the
weights as they then are), and weights without a version counter
(inference-mode tensors) are quantized on every call.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef


class Fp8WeightCache:
    """{(quantizer, the weights' storages and views): their FP8 copies},
    each valid while every storage lives and every weight keeps its
    version. Keyed by storage, not by tensor object, so that views and
    detach()es of a weight (which share its version counter) find it;
    a weak reference to each storage keeps its address from being reused
    while the entry exists."""

    def __init__(self):
        self._copies: dict = {}

    def copies(self, quantizer, weights: Sequence[torch.Tensor]) -> tuple:
        """`quantizer(*weights)` (a tuple): for frozen weights from the
        cache while every weight is the same view of the same live storage,
        at the same version."""
        if (any(w.requires_grad for w in weights) or
                (weights[0].is_cuda and
                 torch.cuda.is_current_stream_capturing())):
            return _as_tuple(quantizer(*weights))
        try:
            versions = tuple(w._version for w in weights)
        except RuntimeError:  # an inference tensor: no version counter
            return _as_tuple(quantizer(*weights))
        key = (quantizer.name, quantizer.target, tuple(
            (w.untyped_storage()._cdata, w.storage_offset(), tuple(w.shape),
             w.stride(), w.dtype) for w in weights))
        found = self._copies.pop(key, None)
        if found is not None:
            refs, seen, copies = found
            if seen == versions and not any(r.expired() for r in refs):
                self._copies[key] = found
                return copies
            del found, copies  # stale: freed before the new copies are made
        self._drop_expired()
        copies = _as_tuple(quantizer(*weights))
        refs = tuple(StorageWeakRef(w.untyped_storage()) for w in weights)
        self._copies[key] = (refs, versions, copies)
        return copies

    def _drop_expired(self) -> None:
        """Frees the copies of weights whose storage is gone."""
        for key in [k for k, (refs, _, _) in self._copies.items()
                    if any(r.expired() for r in refs)]:
            del self._copies[key]

    def clear(self) -> None:
        self._copies.clear()

    def __len__(self) -> int:
        self._drop_expired()
        return len(self._copies)


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)
