"""FP8 copies of expert weights, kept while the weights stay as they are.

A block compiled with `fp8` takes its weights' FP8 copies as arguments
(moe-fp8-recipe weights=arguments); the entry `<name>_fp8_weights` makes
them. Fp8WeightCache keeps the copies of frozen weights (requires_grad
False: LoRA's base, a model frozen for inference) and, with
`keep_fp8_weights=True`, of weights that train, so such a weight is
quantized once per change, not on every call. Without it, weights that
train are quantized on every call: their copies would stay allocated
between steps (half the bf16 bytes per layout, for every layer), and a
model with one micro-batch per optimizer step would gain nothing.

Each copy follows a key tensor: the weight itself, or under autocast the
parameter it was cast from (a new cast every call would never be found).
A weight's copies are made again when its key's storage, its view of it
or its version counter changes (every in-place write that autograd sees:
optimizers, `copy_` under no_grad). Writes through `.data` are not seen:
call moec.torch.clear_fp8_weights() after them. Copies of weights that
train are also dropped before every torch.optim optimizer step (a global
step pre-hook, registered when the first is kept): they live from the
first micro-batch after an update to the next update, also where an
update reaches the weights without their version counter seeing it (a
wrapper that gathers updated shards into the same storage), and their
memory is free for the optimizer's step. While a CUDA graph is being
captured the copies are made inside the graph (its replays quantize the
weights as they then are), and keys without a version counter
(inference-mode tensors) are quantized on every call.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.optim.optimizer import register_optimizer_step_pre_hook

_CACHES = weakref.WeakSet()  # every Fp8WeightCache, for the step hook
_STEP_HOOK = None


def _drop_training_copies(optimizer, args, kwargs) -> None:
    """The optimizer step pre-hook: the weights that train are about to
    change, so their kept copies go (and their memory with them)."""
    for cache in list(_CACHES):
        cache.drop_training()


def _watch_optimizer_steps() -> None:
    global _STEP_HOOK
    if _STEP_HOOK is None:
        _STEP_HOOK = register_optimizer_step_pre_hook(_drop_training_copies)


def keepable(weights: Sequence[tuple], keep_training: bool) -> bool:
    """Whether copies of `weights` ((weight, key) pairs) may be kept: their
    keys have version counters, no CUDA graph is being captured, and they
    are frozen or `keep_training` (keep_fp8_weights) is set."""
    if not keep_training and any(w.requires_grad or k.requires_grad
                                 for w, k in weights):
        return False
    if weights[0][0].is_cuda and torch.cuda.is_current_stream_capturing():
        return False
    try:
        for _, k in weights:
            k._version
    except RuntimeError:  # an inference tensor: no version counter
        return False
    return True


class _Kept(NamedTuple):
    """One entry of Fp8WeightCache."""
    refs: tuple      # a weak reference to each key's storage
    versions: tuple  # each key's version when the copies were made
    copies: tuple
    trains: bool     # a weight that trains (keep_fp8_weights): dropped at
                     # the next optimizer step


class Fp8WeightCache:
    """{(quantizer, the keys' storages and views): the FP8 copies}, each
    valid while every key's storage lives and keeps its version. Keyed by
    storage, not by tensor object, so that views and detach()es of a weight
    (which share its version counter) find it; a weak reference to each
    storage keeps its address from being reused while the entry exists."""

    def __init__(self):
        self._copies: dict = {}
        _CACHES.add(self)

    @staticmethod
    def _key(quantizer, weights: Sequence[tuple]) -> tuple:
        return (quantizer.name, quantizer.target, tuple(
            (k.untyped_storage()._cdata, k.storage_offset(), tuple(k.shape),
             k.stride(), k.dtype, w.dtype) for w, k in weights))

    def find(self, quantizer, weights: Sequence[tuple]):
        """The kept copies `quantizer` made of `weights` ((weight, key)
        pairs, keepable) while their keys still are as they were, else
        None (stale copies are freed here, before new ones are made)."""
        key = self._key(quantizer, weights)
        found = self._copies.pop(key, None)
        if found is None:
            return None
        if (found.versions == tuple(k._version for _, k in weights)
                and not any(r.expired() for r in found.refs)):
            self._copies[key] = found
            return found.copies
        return None

    def store(self, quantizer, weights: Sequence[tuple], copies: tuple
              ) -> None:
        """Keeps `copies`, made by `quantizer` from `weights` as they are
        now."""
        self._drop_expired()
        refs = tuple(StorageWeakRef(k.untyped_storage()) for _, k in weights)
        trains = any(w.requires_grad or k.requires_grad for w, k in weights)
        self._copies[self._key(quantizer, weights)] = _Kept(
            refs, tuple(k._version for _, k in weights), copies, trains)
        if trains:
            _watch_optimizer_steps()

    def drop_training(self) -> None:
        """Frees the copies of weights that train (keep_fp8_weights)."""
        for key in [k for k, kept in self._copies.items() if kept.trains]:
            del self._copies[key]

    def _drop_expired(self) -> None:
        """Frees the copies of weights whose storage is gone."""
        for key in [k for k, kept in self._copies.items()
                    if any(r.expired() for r in kept.refs)]:
            del self._copies[key]

    def clear(self) -> None:
        self._copies.clear()

    def __len__(self) -> int:
        self._drop_expired()
        return len(self._copies)
