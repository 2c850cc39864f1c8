"""Attention mass from a response to each passage block, per (layer, head), in one forward pass.

AT2's feature (MadryLab/AT2): for passage block d, layer l and head h, the softmax attention weight
from the response rows to the block's tokens, averaged over the response rows and summed over the
block's tokens. The response rows are the positions whose logits predict the response tokens (the
last prompt token and every response token but the last): the very pass that teacher-forces the
response under the full prompt, so the same pass yields the full prompt's per-token
log-probabilities too.

No T x T matrix is kept: a function registered with transformers' `AttentionInterface` computes
each layer's real output with SDPA and, beside it, the softmax rows of the response queries only
(R x T per head, R the response length), pooled into (heads, k) at once. It repeats grouped-query
keys (`repeat_kv`), applies the layer's `scaling`, the causal rule and any mask the model passes,
in float32. The first token's attention sink lies in the prompt's head segment, never in a block,
so it is left in the softmax's denominator (as AT2 leaves it) and counted in no passage.

The same call then reads each passage's **knockout**: the response rows fed again over the full
prompt's cached keys and values with the passage's keys hidden from them (an additive mask), so the
response can no longer read the passage while every prompt token keeps what it read. The drop in
mean log-probability per response token is an intervention on the same scale as exact `loo` (nats
per response token) that misses only the passage's influence through the later prompt tokens; it
costs k passes of the response's length over the stored prompt, not k passes over the prompt.

This is a capability of the transformers backend (`HFLanguageModel.read_attention`, declared by
`ascp.lm.protocol.AttentionModel`), as steering is: only an in-process transformers model gives a
pass whose attention can be intercepted. llama.cpp and the served engines (vLLM, SGLang) expose
neither hidden states nor attention, so the attention estimators refuse them with one sentence
(`ascp.lm.protocol.reads_attention`). The estimators (`ascp.attribution.attention`, `gated`) turn
these features into scores and run no forward pass themselves.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.protocol import AttentionPass, tokens_fed
from ascp.types import token_anchor

POOLED_ATTENTION = "ascp_pooled_sdpa"
"""The name the pooling attention function is registered under in transformers' `AttentionInterface`."""
_ROW_CHUNK = 256  # response rows whose softmax is held at once (R x T floats per head)


def passage_token_spans(holder: Any, prompt: EncodedPrompt) -> list[tuple[int, int]]:
    """Token span [start, end) of each source (a passage block, or a sentence of one) in `prompt.ids`: the
    tokens whose `token_anchor` (first non-space character) lies in the source's characters, so a
    sentence's first word (" Since") is its own, not the sentence before it's. A source none of whose
    characters anchors a token (a word merged across the boundary) gets an empty span at its place: no
    attention reaches it and hiding it hides nothing."""
    import bisect

    enc = holder.tokenizer(prompt.text, add_special_tokens=False, return_offsets_mapping=True)
    if tuple(enc["input_ids"]) != tuple(prompt.ids):
        raise AscpError(f"model {holder.name!r}: the prompt's ids are not tokenizer(text) of its text, "
                        "so its passages cannot be located; encode the prompt with this model.")
    anchors = [token_anchor(prompt.text, int(a), int(b)) for a, b in enc["offset_mapping"]]
    spans = []
    for lo, hi in prompt.passage_char_spans().values():
        a = bisect.bisect_left(anchors, lo)
        spans.append((a, max(a, bisect.bisect_left(anchors, hi))))
    return spans


class _Pooling:
    """The per-call accumulator the registered attention function writes into."""

    def __init__(self, layers: int, heads: int, blocks: np.ndarray, rows: int) -> None:
        import torch

        self.rows = rows
        self.out = np.zeros((blocks.shape[1], layers, heads))
        self.per_row = np.zeros((rows, blocks.shape[1], layers, heads), dtype=np.float32)  # each row's masses
        self.blocks = torch.from_numpy(blocks)  # (T, k) block indicator
        self.seen: set[int] = set()
        self.peak_bytes = 0

    def pool(self, torch: Any, module: Any, query: Any, key: Any, attention_mask: Any, scaling: float | None) -> None:
        from transformers.integrations.sdpa_attention import repeat_kv

        layer = int(module.layer_idx)
        q_len, kv_len = query.shape[2], key.shape[2]
        groups = int(getattr(module, "num_key_value_groups", 1) or 1)
        keys = repeat_kv(key, groups)[0].to(torch.float32)  # (H, T, D)
        scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
        blocks = self.blocks.to(device=keys.device, dtype=torch.float32)[:kv_len]
        total = torch.zeros(keys.shape[0], blocks.shape[1], dtype=torch.float32, device=keys.device)
        first = q_len - self.rows
        for lo in range(first, q_len, _ROW_CHUNK):
            hi = min(q_len, lo + _ROW_CHUNK)
            q = query[0, :, lo:hi].to(torch.float32)  # (H, r, D)
            logits = torch.matmul(q, keys.transpose(1, 2)) * scale  # (H, r, T)
            position = torch.arange(lo, hi, device=keys.device) + (kv_len - q_len)
            allowed = torch.arange(kv_len, device=keys.device)[None, :] <= position[:, None]  # causal
            if attention_mask is not None:
                mask = attention_mask[0, :, lo:hi, :kv_len]
                if mask.dtype == torch.bool:
                    allowed = allowed & mask
                else:
                    logits = logits + mask.to(torch.float32)
            logits = logits.masked_fill(~allowed, float("-inf"))
            weights = torch.softmax(logits, dim=-1)
            self.peak_bytes = max(self.peak_bytes, 2 * weights.nbytes + allowed.nbytes)
            masses = torch.matmul(weights, blocks)  # (H, r, k)
            self.per_row[lo - first:hi - first, :, layer, :] = masses.permute(1, 2, 0).cpu().numpy()
            total += masses.sum(dim=1)  # (H, k)
        self.out[:, layer, :] = (total / self.rows).T.double().cpu().numpy()
        self.seen.add(layer)


_ACTIVE: contextvars.ContextVar[_Pooling | None] = contextvars.ContextVar("ascp_attention_pooling", default=None)


def _pooled_sdpa(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                 scaling: float | None = None, **kwargs: Any) -> Any:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    output = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                    **kwargs)
    pooling = _ACTIVE.get()
    if pooling is not None:
        pooling.pool(torch, module, query, key, attention_mask, scaling)
    return output


def _register() -> None:
    # The mask too: transformers builds no mask at all for an attention name it has no mask
    # function for, and SDPA's own causal flag is wrong for queries after a cached prefix.
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if POOLED_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(POOLED_ATTENTION, _pooled_sdpa)
    if POOLED_ATTENTION not in AttentionMaskInterface._global_mapping:
        AttentionMaskInterface.register(POOLED_ATTENTION, sdpa_mask)


def _truncate(cache: Any, keep: int) -> None:
    """Keep the keys and values of the first `keep` positions."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)


def knockout_scores(holder: Any, cache: Any, ids: Sequence[int], response: Sequence[int],
                    spans: Sequence[tuple[int, int]], full: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Per passage span, mean(full) minus the mean log-probability of `response` when its rows
    cannot attend to the span's keys; `cache` holds at least the prompt's first len(ids) - 1
    positions and is left holding exactly those. Returns (scores, tokens fed, the per-token
    log-probabilities behind each score, shape (spans, R))."""
    import torch

    model = holder.model
    keep, n = len(ids) - 1, len(response)
    dtype = next(model.parameters()).dtype
    blocked = torch.finfo(dtype).min
    feed = torch.tensor([[ids[-1], *response[:-1]]], dtype=torch.long, device=holder.device)
    positions = torch.arange(keep, keep + n, device=holder.device)[None]
    base = torch.zeros(1, 1, n, keep + n, dtype=dtype, device=holder.device)
    base[0, 0, :, keep:] = torch.full((n, n), blocked, dtype=dtype, device=holder.device).triu(1)
    target = torch.tensor(list(response), dtype=torch.long, device=holder.device)[:, None]
    out = np.empty(len(spans))
    tokens = np.empty((len(spans), n))
    fed = 0
    for j, (a, b) in enumerate(spans):
        if a == b:  # a source with no token of its own: hiding it changes nothing, so no pass is needed
            out[j], tokens[j] = 0.0, full
            continue
        _truncate(cache, keep)
        fed += n
        mask = base.clone()
        mask[0, 0, :, a:b] = blocked
        with torch.inference_mode():
            logits = model(input_ids=feed, cache=cache, use_cache=True, attention_mask=mask, position_ids=positions,
                           logits_to_keep=n).logits
        hidden = torch.log_softmax(logits[0].to(torch.float64), dim=-1).gather(-1, target)[:, 0]
        out[j] = float(full.mean()) - float(hidden.mean())
        tokens[j] = hidden.cpu().numpy()
    _truncate(cache, keep)
    return out, fed, tokens


def read_attention(holder: Any, prompt: EncodedPrompt, response: Sequence[int],
                   knockout_of: Sequence[int] | None = None, what: str = "the attention pass") -> AttentionPass:
    """Pooled attention features, knockout scores and the full prompt's log-probabilities of
    `response`, from one pass over prompt + response and k response-length passes (only the
    passages in `knockout_of` when given; the others' knockout scores are NaN).

    With the model's prefix store, a stored prompt side is reused (only the last prompt token and
    the response are fed) and a new one is stored, so a later exact pass over the same prompt
    (`Ablations`, the gated estimator) feeds only the response."""
    import torch

    if not response:
        raise AscpError(f"{what}: the response has no tokens, so there is no attention to read.")
    holder.check_fits(what, prompt.num_tokens, len(response))
    model = holder.model
    spans = passage_token_spans(holder, prompt)
    ids = list(prompt.ids)
    sequence = [*ids, *response[:-1]]
    blocks = np.zeros((len(sequence), len(spans)), dtype=np.float32)
    for j, (a, b) in enumerate(spans):
        blocks[a:b, j] = 1.0
    config = model.config
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    store = holder.prefixes if holder.supports_prefix_cache else None
    keep, cache = 0, holder.new_cache()
    if store is not None and len(ids) > 1:
        entry = store.get(tuple(ids), saves=len(ids) - 1)
        if entry is not None:
            cache = holder.cache_from(entry)
            keep = len(ids) - 1
            _truncate(cache, keep)
    pooling = _Pooling(layers, heads, blocks, len(response))
    _register()
    previous = config._attn_implementation
    token = _ACTIVE.set(pooling)
    try:
        if previous != POOLED_ATTENTION:
            model.set_attn_implementation(POOLED_ATTENTION)
        input_ids = torch.tensor([sequence[keep:]], dtype=torch.long, device=holder.device)
        with torch.inference_mode():
            out = model(input_ids=input_ids, cache=cache, use_cache=True, logits_to_keep=len(response))
    finally:
        _ACTIVE.reset(token)
        if previous != POOLED_ATTENTION:
            model.set_attn_implementation(previous)
    if len(pooling.seen) != layers:
        missing = layers - len(pooling.seen)
        raise AscpError(f"model {holder.name!r}: {missing} of its {layers} layers do not "
                        "run through transformers' attention interface, so their attention cannot be read; use "
                        "--estimator loo.")
    logprobs = torch.log_softmax(out.logits[0].to(torch.float64), dim=-1)
    target = torch.tensor(list(response), dtype=torch.long, device=logprobs.device)
    full = logprobs.gather(-1, target[:, None])[:, 0].cpu().numpy()
    if store is not None and len(ids) > 1 and tuple(ids) not in store:
        _truncate(cache, len(ids))
        store.put(tuple(ids), holder.snapshot_cache(cache, len(ids)))
    knocked = np.full(len(spans), np.nan)
    knocked_tokens = np.full((len(spans), len(response)), np.nan)
    chosen = list(range(len(spans)) if knockout_of is None else sorted(set(knockout_of)))
    knocked[chosen], knockout_tokens, knocked_tokens[chosen] = knockout_scores(
        holder, cache, ids, response, [spans[i] for i in chosen], full)
    return AttentionPass(pooling.out, knocked, full, tokens_fed(len(ids), len(response)) - keep + knockout_tokens,
                         pooling.peak_bytes, tuple(spans), pooling.per_row, knocked_tokens)


__all__ = ["POOLED_ATTENTION", "knockout_scores", "passage_token_spans", "read_attention"]
