"""Teacher-forced scoring with a probe's variants as rows of one forward pass (the GPU path).

`score_with_runner` (`ascp.lm.scoring`) feeds the k + 1 prompts of a probe one after another
through one cropped KV cache: exact and minimal in tokens, but k + 1 small passes, which leave a
GPU mostly idle. Here every prompt is a *row*: its cached prefix (the keys and values of the
longest prefix it shares with the full prompt, or its own prompt side from the `PrefixStore`) and
its *tail* (the rest of its prompt + the response) at explicit positions. Rows are stacked into
one batch:

    cache columns  [ pad | prefix of row r ]   [ pad | tail of row r ]
                   <-------- C --------->      <-------- T --------->

the cache left-padded to the longest prefix, the tails left-padded to the longest tail, so every
row's last `len(response)` columns predict the response and only those logits are computed.
Padding is masked and each token carries its true position, so a row computes what the
sequential pass computes for the same tokens (equal up to floating-point reassociation; tested
within 1e-5 on the CPU against `score_with_runner` and a naive pass). Tokens fed (real tokens,
not padding) equal the sequential path's: the full prompt's side is prefilled once, without its
last token, which its row re-runs to predict the response.

With a store, each row's prompt side (its prefix columns + the prompt part of its tail) is kept
after the pass, as the sequential path keeps it, so a later response against the same context
feeds only the response per variant.

`HFLanguageModel.variant_rows` sets the rows per pass (auto: 16 on CUDA, 0 = sequential
elsewhere, where one-row passes already run near the CPU's peak).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ascp.lm.encoded import common_prefix
from ascp.lm.kvcache import stacked_cache
from ascp.lm.prefixes import PrefixEntry, PrefixStore
from ascp.lm.protocol import ScoredPrompts, tokens_fed


@dataclass
class _Row:
    ids: tuple[int, ...]  # the prompt
    base: Any  # per layer (keys, values) [1, heads, >= keep, dim] the row's prefix is cut from
    keep: int  # positions taken from `base`
    tail: list[int]  # fed at positions keep.. : the rest of the prompt + response[:-1]
    logprobs: np.ndarray | None = None


def score_batched(lm, prompts: Sequence[Sequence[int]], response: Sequence[int], rows_per_pass: int) -> ScoredPrompts:
    """Per-token log-probabilities of `response` after each prompt, `rows_per_pass` prompts per
    forward pass (see the module docstring). Identical prompts are scored once."""
    import torch

    if not response:
        raise ValueError("the response must have at least one token")
    response = list(response)
    variants = list(dict.fromkeys(tuple(ids) for ids in prompts))
    if not variants:
        return ScoredPrompts((), 0)
    store: PrefixStore | None = lm.prefixes
    full = variants[0]
    fed = 0
    full_side: Any = None  # keys and values of the full prompt (at least all but its last token)

    def stored(ids: tuple[int, ...], keep: int) -> PrefixEntry | None:
        """The stored prompt side of `ids`: all but its last token, where the pass would keep `keep`
        (the full prompt's own prefix counts as prefilled here: a hit spares that prefill)."""
        if store is None or len(ids) < 2:
            return None
        return store.get(ids, saves=len(ids) - 1 - (0 if ids == full else keep))

    def prefix_of_full() -> Any:
        nonlocal full_side, fed
        if full_side is None:
            cache = lm.new_cache()
            with torch.inference_mode():
                lm.model(input_ids=torch.tensor([list(full[:-1])], dtype=torch.long, device=lm.device),
                         cache=cache, use_cache=True, logits_to_keep=1)
            fed += len(full) - 1
            full_side = [(layer.keys, layer.values) for layer in cache.layers]
        return full_side

    rows: list[_Row] = []
    for ids in variants:
        limit = len(ids) - 1  # the last prompt token is always fed: its logits predict the response
        keep = min(common_prefix(full, ids), limit, len(full) - 1)
        entry = stored(ids, keep)
        if entry is not None:
            if ids == full:
                full_side = entry.state
            rows.append(_Row(ids, entry.state, limit, [*ids[limit:], *response[:-1]]))
            continue
        base = prefix_of_full() if keep > 0 else None
        rows.append(_Row(ids, base, keep, [*ids[keep:], *response[:-1]]))
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i].tail))  # similar tails share a pass
    step = max(1, rows_per_pass)
    for start in range(0, len(order), step):
        chunk = [rows[i] for i in order[start:start + step]]
        _run_rows(torch, lm, chunk, response, store)
        fed += sum(tokens_fed(len(r.ids), len(response)) - r.keep for r in chunk)  # each row's tail
    by_ids = {r.ids: r.logprobs for r in rows}
    return ScoredPrompts(tuple(np.array(by_ids[tuple(ids)]) for ids in prompts), fed)


def _run_rows(torch, lm, rows: list[_Row], response: list[int], store) -> None:
    """One forward pass over `rows`; sets each row's `logprobs` and stores its prompt side."""
    device = lm.device
    tail = max(len(r.tail) for r in rows)
    width = max(r.keep for r in rows)
    if width == 0:  # no row has a cached prefix
        cache = lm.new_cache()
        cache_mask = torch.zeros((len(rows), 0), dtype=torch.long, device=device)
    else:
        reference = next(r.base for r in rows if r.base is not None)
        kv = [[(k[:, :, :r.keep], v[:, :, :r.keep]) for k, v in (r.base if r.base is not None else reference)]
              for r in rows]
        cache, cache_mask, _ = stacked_cache(torch, lm, [[0] * r.keep for r in rows], kv, tail)
    input_ids = torch.full((len(rows), tail), lm.pad_token_id, dtype=torch.long, device=device)
    block_mask = torch.zeros((len(rows), tail), dtype=torch.long, device=device)
    positions = torch.zeros((len(rows), tail), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        pad = tail - len(r.tail)
        input_ids[i, pad:] = torch.tensor(r.tail, dtype=torch.long)
        block_mask[i, pad:] = 1
        positions[i, pad:] = torch.arange(r.keep, r.keep + len(r.tail))
    mask = torch.cat([cache_mask, block_mask], dim=-1)
    with torch.inference_mode():
        out = lm.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                       cache=cache, use_cache=True, logits_to_keep=len(response))
        target = torch.tensor(response, dtype=torch.long, device=device)
        for i, r in enumerate(rows):  # row by row: float64 log-softmax over the vocabulary is large
            logprobs = torch.log_softmax(out.logits[i].to(torch.float64), dim=-1)
            r.logprobs = logprobs.gather(-1, target[:, None])[:, 0].cpu().numpy()
    if store is None:
        return
    for i, r in enumerate(rows):
        if r.ids in store or len(r.ids) < 2:
            continue
        pad = tail - len(r.tail)
        own = len(r.ids) - r.keep  # prompt tokens in the row's tail
        state = []
        for layer in cache.layers:
            parts = []
            for tensor in (layer.keys, layer.values):
                prefix = tensor[i:i + 1, :, width - r.keep:width]
                rest = tensor[i:i + 1, :, width + pad:width + pad + own]
                parts.append(torch.cat([prefix, rest], dim=2).clone())
            state.append((parts[0], parts[1]))
        store.put(r.ids, PrefixEntry(state, len(r.ids), sum(k.nbytes + v.nbytes for k, v in state)))
