"""Batched sampling generation with one random stream per prompt.

Each prompt draws from its own `torch.Generator`, seeded by the caller, so a prompt's sample
does not depend on which other prompts share its batch (up to last-bit differences of batched
arithmetic). Sampling follows the paper's setting by default: temperature 0.7, top-p 1,
top-k off, repetition penalty 1. Temperature 0 decodes greedily.

`generate_streams` is the general loop: an item may be conditioned on several prompts
("streams", e.g. the three of steered decoding in `ascp.decoding`) decoded in lockstep as rows
of one batch; a `mix` turns each item's rows into the logits it samples from. Ordinary
sampling (`generate`) is the one-stream case and runs exactly the code it always ran.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ascp.errors import AscpError
from ascp.lm.hf import HFLanguageModel


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k filtering
    repetition_penalty: float = 1.0
    max_new_tokens: int = 128

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise AscpError(f"temperature must be >= 0, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise AscpError(f"top-p must be in (0, 1], got {self.top_p}.")
        if self.top_k < 0 or self.max_new_tokens < 1 or self.repetition_penalty <= 0:
            raise AscpError("top-k must be >= 0, max new tokens >= 1 and repetition penalty > 0.")


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]  # without the end-of-turn token
    text: str
    finished: bool  # True when the model emitted an end token before the limit


def derive_seed(seed: int, *keys: object) -> int:
    """A stable 63-bit seed for one item from a run seed and the item's identity."""
    digest = hashlib.blake2b(repr((seed, *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _filter_logits(torch, logits, config: SamplingConfig):
    if config.top_k > 0:
        kth = torch.topk(logits, min(config.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if config.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= config.top_p  # keep the first token always
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


def generate(
    lm: HFLanguageModel,
    prompts: Sequence[Sequence[int]],
    config: SamplingConfig,
    seeds: Sequence[int],
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
) -> list[Generation]:
    """Sample one continuation per prompt (token ids), batching independent prompts."""
    return generate_streams(lm, [(p,) for p in prompts], config, seeds, batch_size, on_batch)


LogitMix = Callable[[Any, Sequence[tuple[int, ...]], Sequence[int]], Any]
"""`mix(logits, rows, items)`: the fp32 next-token logits of every row of a batch, `[rows, V]`
(repetition penalty applied per row), the row of each stream of each item in the batch, and
the items' indices in the call -> one row of logits per item, `[len(items), V]`, which the
sampler then tempers, filters and samples."""


def generate_streams(
    lm: HFLanguageModel,
    streams: Sequence[Sequence[Sequence[int]]],
    config: SamplingConfig,
    seeds: Sequence[int],
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
    mix: LogitMix | None = None,
) -> list[Generation]:
    """Sample one continuation per item, where an item is one or more prompts decoded in lockstep.

    Every stream of an item is a row of the batch with its own left padding, positions and KV
    cache; each step all rows run in one forward pass, `mix` turns an item's rows into the
    logits it samples from (default: its first stream), the item's own generator draws one
    token (the same draws as ordinary sampling), and every stream of the item continues with
    that token. Identical streams of one item share a row. With one stream per item and no
    `mix` this is ordinary sampling. `batch_size` counts items, not rows.

    Prefill: one-stream batches run one left-padded pass, as ordinary sampling always did.
    Multi-stream batches prefill row by row without padding, each row reusing the KV cache of
    the longest token prefix it shares with an earlier stream of its item (exact), then decode
    as one left-padded batch; models whose cache cannot be cropped (`supports_prefix_cache`)
    take the padded pass.
    """
    if len(streams) != len(seeds):
        raise ValueError("one seed per prompt is required")
    if any(not item for item in streams):
        raise ValueError("every item needs at least one stream")
    results: list[Generation] = []
    for lo in range(0, len(streams), batch_size):
        items = range(lo, min(lo + batch_size, len(streams)))
        results.extend(_generate_batch(lm, [streams[i] for i in items], config, [seeds[i] for i in items], items, mix))
        if on_batch:
            on_batch(len(items))
    return results


def _generate_batch(lm, streams, config: SamplingConfig, seeds, items, mix) -> list[Generation]:
    import torch

    device = lm.device
    prompts: list[tuple[int, ...]] = []  # one per row
    row_item: list[int] = []  # the item (batch-local) each row belongs to
    item_rows: list[tuple[int, ...]] = []  # the row of each stream of each item
    for local, item in enumerate(streams):
        own: dict[tuple[int, ...], int] = {}
        for ids in item:
            key = tuple(ids)
            if key not in own:
                own[key] = len(prompts)
                prompts.append(key)
                row_item.append(local)
        item_rows.append(tuple(own[tuple(ids)] for ids in item))
    first_rows = [rows[0] for rows in item_rows]
    n = len(streams)
    pad = lm.pad_token_id
    if len(prompts) > n and lm.supports_prefix_cache:
        logits, cache, mask, last_pos = _packed_prefill(torch, lm, prompts, item_rows, config.max_new_tokens)
    else:
        logits, cache, mask, last_pos = _padded_prefill(torch, lm, prompts)
    generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
    eos = lm.eos_token_ids
    seen = None
    if config.repetition_penalty != 1.0:
        width = max(len(p) for p in prompts)
        seen = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long, device=device)
    out_ids: list[list[int]] = [[] for _ in range(n)]
    finished = [False] * n
    with torch.inference_mode():
        for step in range(config.max_new_tokens):
            if seen is not None:
                picked = logits.gather(-1, seen)
                picked = torch.where(picked > 0, picked / config.repetition_penalty, picked * config.repetition_penalty)
                logits = logits.scatter(-1, seen, picked)
            if mix is not None:
                logits = mix(logits, item_rows, items)
            elif len(prompts) != n:
                logits = logits[first_rows]
            if config.temperature == 0:
                sampled = logits.argmax(dim=-1).cpu()
            else:
                probs = torch.softmax(_filter_logits(torch, logits / config.temperature, config), dim=-1).cpu()
                sampled = torch.stack([torch.multinomial(probs[r], 1, generator=generators[r])[0] for r in range(n)])
            for r, token in enumerate(sampled.tolist()):
                if finished[r]:
                    continue
                if token in eos:
                    finished[r] = True
                else:
                    out_ids[r].append(token)
            if all(finished) or step == config.max_new_tokens - 1:
                break
            tokens = sampled.tolist()
            next_ids = torch.tensor([pad if finished[i] else tokens[i] for i in row_item], device=device)[:, None]
            if seen is not None:
                seen = torch.cat([seen, next_ids], dim=-1)
            mask = torch.cat([mask, torch.ones_like(next_ids)], dim=-1)
            last_pos = last_pos + 1
            out = lm.model(
                input_ids=next_ids, attention_mask=mask, position_ids=last_pos,
                cache=cache, use_cache=True, logits_to_keep=1,
            )
            logits = out.logits[:, -1, :].to(torch.float32)
    return [Generation(tuple(ids), lm.decode(ids), done) for ids, done in zip(out_ids, finished, strict=True)]


def _padded_prefill(torch, lm, prompts):
    """All rows in one forward pass, left-padded to the longest: (last logits, cache, mask, last positions)."""
    device = lm.device
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), lm.pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, ids in enumerate(prompts):  # left padding
        input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        mask[row, width - len(ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = lm.new_cache()
    with torch.inference_mode():
        out = lm.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions,
            cache=cache, use_cache=True, logits_to_keep=1,
        )
    return out.logits[:, -1, :].to(torch.float32), cache, mask, positions[:, -1:]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _packed_prefill(torch, lm, prompts, item_rows, room: int):
    """Prefill rows one at a time with no padding, each reusing the longest prefix it shares with an
    earlier row of its item (exact: identical tokens at identical positions have identical keys and
    values), then stack them into one left-padded cache. Several streams of one prompt differ only
    in their passage blocks, so this runs far fewer tokens than one padded pass over every row.
    The stacked cache has `room` free positions per row, so decoding steps write in place
    instead of copying the whole cache every step. Returns what `_padded_prefill` returns."""
    from transformers import DynamicCache

    device = lm.device
    kv: dict[int, list[tuple]] = {}  # row -> per layer (keys, values), each [1, heads, len, dim]
    logits = [None] * len(prompts)
    with torch.inference_mode():
        for rows in item_rows:
            done: list[int] = []
            for row in dict.fromkeys(rows):
                ids = prompts[row]
                shared, source = 0, None
                for other in done:
                    common = min(_common_prefix(ids, prompts[other]), len(ids) - 1)
                    if common > shared:
                        shared, source = common, other
                cache = DynamicCache(ddp_cache_data=[(k[:, :, :shared], v[:, :, :shared]) for k, v in kv[source]]) \
                    if source is not None else lm.new_cache()
                out = lm.model(
                    input_ids=torch.tensor([ids[shared:]], dtype=torch.long, device=device),
                    position_ids=torch.arange(shared, len(ids), device=device)[None],
                    cache=cache, use_cache=True, logits_to_keep=1,
                )
                logits[row] = out.logits[0, -1, :].to(torch.float32)
                kv[row] = [(layer[0], layer[1]) for layer in cache]
                done.append(row)
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
        cache.layers.append(_roomy_layer_class()(*buffers, width))
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, ids in enumerate(prompts):
        mask[row, width - len(ids) :] = 1
    last_pos = torch.tensor([[len(ids) - 1] for ids in prompts], dtype=torch.long, device=device)
    return torch.stack(logits), cache, mask, last_pos


@functools.cache
def _roomy_layer_class():
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
