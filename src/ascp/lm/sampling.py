"""Sampling shared by every backend: the settings, one seeded random stream per item, one step.

A backend computes next-token logits for its rows; `StepSampler` does the rest, the same way
for every backend: repetition penalty per row, the item's `mix` of its rows (steered decoding),
temperature, top-k and top-p, and one draw from the item's own `torch.Generator`. Sampling
follows the paper's setting by default: temperature 0.7, top-p 1, top-k off, repetition penalty
1. Temperature 0 decodes greedily.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ascp.errors import AscpError


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


LogitMix = Callable[[Any, Sequence[tuple[int, ...]], Sequence[int]], Any]
"""`mix(logits, rows, items)`: the fp32 next-token logits of every row of a batch, `[rows, V]`
(repetition penalty applied per row), the row of each stream of each item in the batch, and
the items' indices in the call -> one row of logits per item, `[len(items), V]`, which the
sampler then tempers, filters and samples."""


def derive_seed(seed: int, *keys: object) -> int:
    """A stable 63-bit seed for one item from a run seed and the item's identity."""
    digest = hashlib.blake2b(repr((seed, *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def filter_logits(torch, logits, config: SamplingConfig):
    """Top-k, then top-p (the first token always kept), as -inf outside the kept set."""
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


@dataclass(frozen=True)
class BatchRows:
    """The rows of one batch of items: identical streams of an item share a row."""

    prompts: tuple[tuple[int, ...], ...]  # one per row
    row_item: tuple[int, ...]  # the item (batch-local) each row belongs to
    item_rows: tuple[tuple[int, ...], ...]  # the row of each stream of each item

    @classmethod
    def of(cls, streams: Sequence[Sequence[Sequence[int]]]) -> BatchRows:
        prompts: list[tuple[int, ...]] = []
        row_item: list[int] = []
        item_rows: list[tuple[int, ...]] = []
        for local, item in enumerate(streams):
            own: dict[tuple[int, ...], int] = {}
            for ids in item:
                key = tuple(ids)
                if key not in own:
                    own[key] = len(prompts)
                    prompts.append(key)
                    row_item.append(local)
            item_rows.append(tuple(own[tuple(ids)] for ids in item))
        return cls(tuple(prompts), tuple(row_item), tuple(item_rows))

    @property
    def n_items(self) -> int:
        return len(self.item_rows)


def run_in_batches(
    streams: Sequence[Sequence[Sequence[int]]], seeds: Sequence[int], batch_size: int,
    on_batch: Callable[[int], None] | None, run_batch: Callable[[list, list, range], list[Generation]],
) -> list[Generation]:
    """Call `run_batch(streams, seeds, items)` on consecutive batches of `batch_size` items."""
    if len(streams) != len(seeds):
        raise ValueError("one seed per prompt is required")
    if any(not item for item in streams):
        raise ValueError("every item needs at least one stream")
    results: list[Generation] = []
    for lo in range(0, len(streams), batch_size):
        items = range(lo, min(lo + batch_size, len(streams)))
        results.extend(run_batch([streams[i] for i in items], [seeds[i] for i in items], items))
        if on_batch:
            on_batch(len(items))
    return results


class StepSampler:
    """Draws one token per item per step from the rows' next-token logits (any backend).

    `step(logits)` takes fp32 logits `[rows, V]` (a torch tensor) and returns the token of every
    item; `row_tokens()` then gives the token each row is fed next (the pad id once its item
    finished). Each item draws from its own generator seeded by the caller, so its sample does
    not depend on which items share its batch.
    """

    def __init__(self, torch, rows: BatchRows, config: SamplingConfig, seeds: Sequence[int], items: Sequence[int],
                 eos: set[int], pad: int, mix: LogitMix | None, device: Any = "cpu") -> None:
        self.torch = torch
        self.rows = rows
        self.config = config
        self.items = items
        self.eos = eos
        self.pad = pad
        self.mix = mix
        self.device = device
        self.generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
        self.seen = None
        if config.repetition_penalty != 1.0:
            width = max(len(p) for p in rows.prompts)
            self.seen = torch.tensor([[pad] * (width - len(p)) + list(p) for p in rows.prompts],
                                     dtype=torch.long, device=device)
        n = rows.n_items
        self.out_ids: list[list[int]] = [[] for _ in range(n)]
        self.finished = [False] * n
        self._tokens: list[int] = [pad] * n

    @property
    def done(self) -> bool:
        return all(self.finished)

    def step(self, logits) -> list[int]:
        torch, config, n = self.torch, self.config, self.rows.n_items
        if self.seen is not None:
            picked = logits.gather(-1, self.seen)
            picked = torch.where(picked > 0, picked / config.repetition_penalty, picked * config.repetition_penalty)
            logits = logits.scatter(-1, self.seen, picked)
        if self.mix is not None:
            logits = self.mix(logits, self.rows.item_rows, self.items)
        elif len(self.rows.prompts) != n:
            logits = logits[[rows[0] for rows in self.rows.item_rows]]
        if config.temperature == 0:
            sampled = logits.argmax(dim=-1).cpu()
        else:
            probs = torch.softmax(filter_logits(torch, logits / config.temperature, config), dim=-1).cpu()
            sampled = torch.stack([torch.multinomial(probs[r], 1, generator=self.generators[r])[0] for r in range(n)])
        tokens = sampled.tolist()
        for r, token in enumerate(tokens):
            if self.finished[r]:
                continue
            if token in self.eos:
                self.finished[r] = True
            else:
                self.out_ids[r].append(token)
        self._tokens = tokens
        return tokens

    def row_tokens(self) -> list[int]:
        """The token each row is fed next; the pad id for rows of finished items."""
        next_ids = [self.pad if self.finished[i] else self._tokens[i] for i in self.rows.row_item]
        if self.seen is not None:
            column = self.torch.tensor(next_ids, device=self.device)[:, None]
            self.seen = self.torch.cat([self.seen, column], dim=-1)
        return next_ids

    def results(self, decode: Callable[[Sequence[int]], str]) -> list[Generation]:
        pairs = zip(self.out_ids, self.finished, strict=True)
        return [Generation(tuple(ids), decode(ids), done) for ids, done in pairs]
