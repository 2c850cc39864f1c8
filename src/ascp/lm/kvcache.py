"""Key/value caches built from rows' own keys and values: what transformers' sampling prefill
(`ascp.lm.hf`) and the batched probe (`ascp.lm.batched`) both stack.

`stacked_cache` left-pads each row's keys and values into one cache with room to decode in place
(`roomy_layer_class`: a `DynamicLayer` that appends into preallocated room).
"""

from __future__ import annotations

import functools
from typing import Any


def stacked_cache(torch, lm, prompts, kv, room: int):
    """One left-padded cache (zeros where a row has no token, masked) from each row's own keys and
    values (per layer, [1, heads, len, dim]), with `room` free positions per row so decoding writes
    in place: (cache, attention mask, last positions)."""
    from transformers import DynamicCache

    device = lm.device
    width = max(len(p) for p in prompts)
    cache = DynamicCache()
    cache.layers = []
    for layer in range(len(kv[0])):
        buffers = []
        for part in (0, 1):  # keys, values: [rows, heads, width + room, dim], left-padded with zeros
            first = kv[0][layer][part]
            buffer = first.new_zeros((len(prompts), first.shape[1], width + room, first.shape[-1]))
            for row, ids in enumerate(prompts):
                buffer[row, :, width - len(ids) : width] = kv[row][layer][part][0]
            buffers.append(buffer)
        cache.layers.append(roomy_layer_class()(*buffers, width))
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, ids in enumerate(prompts):
        mask[row, width - len(ids) :] = 1
    last_pos = torch.tensor([[len(ids) - 1] for ids in prompts], dtype=torch.long, device=device)
    return cache, mask, last_pos


@functools.cache
def roomy_layer_class() -> Any:
    """Built on first use: transformers is imported lazily."""
    from transformers.cache_utils import DynamicLayer

    class RoomyLayer(DynamicLayer):
        """A `DynamicLayer` that appends into preallocated room instead of `torch.cat` each step.

        `keys`/`values` are views of the first `length` positions of the buffers, so every
        attention call sees exactly the tensors a `DynamicLayer` would hold (same values, same
        length); only the per-step copy of the whole cache is gone. Grows by doubling if full.
        """

        def __init__(self, keys, values, length: int) -> None:
            super().__init__()
            self.lazy_initialization(keys, values)
            self._k, self._v, self._length = keys, values, length
            self._views()

        @staticmethod
        def _grow(tensor, capacity: int):
            buffer = tensor.new_zeros((*tensor.shape[:2], capacity, tensor.shape[-1]))
            buffer[:, :, : tensor.shape[-2]] = tensor
            return buffer

        def _views(self) -> None:
            self.keys = self._k[:, :, : self._length]
            self.values = self._v[:, :, : self._length]

        def update(self, key_states, value_states, *args, **kwargs):
            end = self._length + key_states.shape[-2]
            if end > self._k.shape[-2]:
                self._k = self._grow(self.keys, 2 * end)
                self._v = self._grow(self.values, 2 * end)
            self._k[:, :, self._length : end] = key_states
            self._v[:, :, self._length : end] = value_states
            self._length = end
            self._views()
            return self.keys, self.values

    return RoomyLayer
