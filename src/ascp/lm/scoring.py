"""Teacher-forced log-likelihood of a fixed response under several prompts, with exact prefix reuse.

`score_with_runner` gives per-token log-probabilities of one response after each prompt over any
backend's `PrefixRunner` (transformers here: `score_prompts` is `HFLanguageModel.score`; llama.cpp
in `ascp.lm.llamacpp`). Every prompt is token ids (`tokenizer(text)` of its whole text, see
`ascp.lm.encoded`), so the probe's variants (a passage block cut out or replaced) arrive here as
ordinary prompts.

Exact prefix sharing. `prompts[0]` (the full prompt, for the probe) is scored first while filling
a KV cache; the others follow in order of decreasing common token prefix with it (the last
passage's deletion first). Before each, the cache is cropped to the longest common token prefix
of the ids it holds and the prompt's ids, and only the rest + the response is run. Tokens in a
common prefix are identical at identical positions, so reusing their keys and values is exact
by construction, whatever the tokenizer does at a passage boundary. Each prompt is then fed at
most `len(ids) - LCP(prompts[0], ids)` prompt tokens: the exact floor (`exact_floor_tokens`).

Across calls. With a `PrefixStore` (`ascp.lm.prefixes`; the in-process backends hold one), each
prompt's prompt-side keys and values are kept after its pass, and a later call scoring another
response against the same prompt (the same context probed in another round, policy or condition,
or the prompt generation has just prefilled) starts from them: each variant's prompt is fed once
per process, then each response on top of it. A runner that can do this has `capture(n)` and
`load(entry)`.

Only the logits at response positions are computed (`logits_to_keep`), and the last response
token is never fed (nothing is predicted from it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ascp.lm.encoded import common_prefix
from ascp.lm.prefixes import PrefixEntry, PrefixStore
from ascp.lm.protocol import ScoredPrompts, tokens_fed


class PrefixRunner(Protocol):
    """A backend's forward passes over one sequence whose KV cache can be cut back to a prefix.

    `min_feed`: the fewest tokens one pass should feed (a backend whose kernels change with the
    number of rows keeps every pass on one kernel this way; 1 elsewhere).
    """

    min_feed: int

    def reset(self) -> None:
        """Empty the cache."""
        ...

    def truncate(self, keep: int) -> None:
        """Keep the keys and values of the first `keep` positions only."""
        ...

    def run(self, ids: Sequence[int], start: int, targets: Sequence[int], cached: bool) -> np.ndarray:
        """Feed `ids` at positions `start`.. (after the cached prefix when `cached`, else in a fresh,
        uncached pass from position 0); return log p(targets[j]) at the last len(targets)
        positions, float64."""
        ...


def score_prompts(lm, prompts: Sequence[Sequence[int]], response: Sequence[int],
                  reuse_prefix: bool = True) -> ScoredPrompts:
    """`HFLanguageModel.score`: `score_with_runner` over transformers forward passes."""
    return score_with_runner(_TorchRunner(lm), prompts, response, reuse_prefix, lm.prefixes)


def score_with_runner(runner: PrefixRunner, prompts: Sequence[Sequence[int]], response: Sequence[int],
                      reuse_prefix: bool = True, store: PrefixStore | None = None) -> ScoredPrompts:
    """Per-token log-probabilities of `response` after each prompt (see the module docstring).

    `reuse_prefix=False` scores every prompt from scratch (the naive reference); `True` shares
    common prefixes through a cropped KV cache (and, with a `store`, across calls) and gives the
    same numbers up to floating-point reassociation. Identical prompts are scored once.
    """
    if not response:
        raise ValueError("the response must have at least one token")
    response = list(response)
    unique: dict[tuple[int, ...], int] = {}
    for ids in prompts:
        unique.setdefault(tuple(ids), len(unique))
    variants = list(unique)
    if not variants:
        return ScoredPrompts((), 0)
    first = variants[0]
    order = [0, *sorted(range(1, len(variants)), key=lambda i: (-common_prefix(first, variants[i]), variants[i]))]
    pass_ = _Passes(runner, response, reuse_prefix, store if hasattr(runner, "capture") else None)
    results: list[np.ndarray] = [np.empty(0)] * len(variants)
    for i in order:
        results[i] = pass_.score(variants[i])
    return ScoredPrompts(tuple(results[unique[tuple(ids)]].copy() for ids in prompts), pass_.tokens_processed)


class _Passes:
    """Forward passes for one response, remembering which ids the runner's cache holds."""

    def __init__(self, runner: PrefixRunner, response: list[int], reuse_prefix: bool,
                 store: PrefixStore | None = None) -> None:
        self.runner = runner
        self.response = response
        self.reuse_prefix = reuse_prefix
        self.store = store
        self.tokens_processed = 0
        self._cached: list[int] | None = None  # the ids whose keys and values the cache holds

    def score(self, ids: Sequence[int]) -> np.ndarray:
        sequence = [*ids, *self.response[:-1]]  # the last response token is never fed (`tokens_fed`)
        if not self.reuse_prefix:
            self.tokens_processed += tokens_fed(len(ids), len(self.response))
            return self.runner.run(sequence, 0, self.response, cached=False)
        # Keep the longest cached prefix, but re-run the last prompt token: the logits that
        # predict the response must be computed in this pass.
        limit = min(len(ids) - 1, len(sequence) - self.runner.min_feed)
        keep = 0 if self._cached is None else min(common_prefix(self._cached, sequence), limit)
        key = tuple(ids)
        if self.store is not None and limit > max(keep, 0):  # a stored prompt side gives more than the cache
            entry = self.store.get(key, saves=limit - max(keep, 0))
            if entry is not None:
                self.runner.load(entry)  # type: ignore[attr-defined]
                keep = limit
        if keep <= 0:
            self.runner.reset()
            keep = 0
        else:
            self.runner.truncate(keep)
        self.tokens_processed += tokens_fed(len(ids), len(self.response)) - keep
        out = self.runner.run(sequence[keep:], keep, self.response, cached=True)
        self._cached = sequence
        if self.store is not None and key not in self.store and len(ids) > 1:
            self.runner.truncate(len(ids))  # the prompt side only (no later variant shares the response)
            self._cached = list(ids)
            self.store.put(key, self.runner.capture(len(ids)))  # type: ignore[attr-defined]
        return out


class _TorchRunner:
    """`PrefixRunner` over a transformers model and its `DynamicCache`."""

    min_feed = 1

    def __init__(self, lm) -> None:
        self.lm = lm
        self._cache: Any = None

    def reset(self) -> None:
        self._cache = self.lm.new_cache()

    def truncate(self, keep: int) -> None:
        current = self._cache.get_seq_length()
        if current > keep:
            self._cache.crop(-(current - keep))

    def capture(self, n: int) -> PrefixEntry:
        return self.lm.snapshot_cache(self._cache, n)

    def load(self, entry: PrefixEntry) -> None:
        self._cache = self.lm.cache_from(entry)

    def run(self, ids: Sequence[int], start: int, targets: Sequence[int], cached: bool) -> np.ndarray:
        import torch

        cache = self._cache if cached else None
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.lm.device)
        with torch.inference_mode():
            out = self.lm.model(input_ids=input_ids, cache=cache, use_cache=cached, logits_to_keep=len(targets))
        logits = out.logits[0].to(torch.float64)
        logprobs = torch.log_softmax(logits, dim=-1)
        target = torch.tensor(list(targets), dtype=torch.long, device=logprobs.device)
        return logprobs.gather(-1, target[:, None])[:, 0].cpu().numpy()


def exact_floor_tokens(full: Sequence[int], variants: Sequence[Sequence[int]], response_tokens: int) -> int:
    """Tokens an exact scorer must feed: the full prompt, then each variant after its common prefix.

    Each variant reuses at most its longest common token prefix with the full prompt (minus the
    last prompt token, whose logits predict the response). Counted like `tokens_processed`
    (`tokens_fed`).
    """
    total = tokens_fed(len(full), response_tokens)
    for ids in variants:
        reused = min(common_prefix(full, ids), len(ids) - 1)
        total += tokens_fed(len(ids), response_tokens) - reused
    return total


def exact_loo_floor_tokens(lm, prompt, response_tokens: int) -> int:
    """`exact_floor_tokens` for the k single-passage deletions of leave-one-out."""
    k = len(prompt.passage_ids)
    variants = [lm.encode(prompt.edited_text(prompt.deletion([i]))) for i in range(k)]
    return exact_floor_tokens(prompt.ids, variants, response_tokens)
