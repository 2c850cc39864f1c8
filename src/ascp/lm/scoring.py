"""Teacher-forced log-likelihood of a fixed response under a prompt and under edited prompts.

This is the one scoring path every causal estimator uses (deletion and replacement LOO,
hierarchical LOO, the ContextCite surrogate). An *edit* maps segment indices of an
`EncodedPrompt` to replacement token ids; an empty replacement deletes the segment.

Exact prefix sharing. The full prompt + response is scored once while filling a KV cache.
For each edit, in order of its first edited segment from last to first, the cache is cropped
to that segment's start and only what follows (edited segments, later segments, tail,
response) is run. Tokens before the first edit are identical to the full prompt at identical
positions, so reusing their keys and values is exact, not an approximation.

Position convention (contiguous re-indexing). After a deletion, later tokens move up and take
positions start, start+1, ... exactly as if the ablated prompt had been written from scratch;
the ablated prompt is therefore scored as the prompt a user would have sent without that
passage. In-place replacement (`replace`) keeps every later position unchanged.

Only the logits at response positions are computed (`logits_to_keep`), and the last
response token is never fed (nothing is predicted from it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ascp.lm.encoded import EncodedPrompt
from ascp.lm.hf import HFLanguageModel

Edit = Mapping[int, Sequence[int]]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class AblationScorer:
    """Per-token log-probabilities of `response` under the full prompt and under edits of it.

    `reuse_prefix=False` scores every variant from scratch (the naive reference, k+1 full passes
    for LOO); `True` shares the unchanged prefix through a cropped KV cache and gives the same
    numbers up to floating-point reassociation. `tokens_processed` counts tokens fed to the model.
    """

    def __init__(
        self,
        lm: HFLanguageModel,
        prompt: EncodedPrompt,
        response: Sequence[int],
        reuse_prefix: bool = True,
    ) -> None:
        if not response:
            raise ValueError("the response must have at least one token")
        self.lm = lm
        self.segments = [list(s) for s in prompt.segments]
        self.starts = prompt.token_starts
        self.prompt_ids = prompt.ids
        self.response = list(response)
        self.reuse_prefix = reuse_prefix and lm.supports_prefix_cache
        self.tokens_processed = 0
        self._cache = None
        self._cache_len = 0
        self._valid = 0  # the cache's first `_valid` entries equal the full prompt's
        self.full_logprobs = self._score_from(0, self.prompt_ids)

    @property
    def full_logprob(self) -> float:
        return float(self.full_logprobs.sum())

    def score(self, edits: Sequence[Edit]) -> list[np.ndarray]:
        """Per-token response log-probabilities for each edit, in the order given."""
        results: list[np.ndarray | None] = [None] * len(edits)
        order = sorted(range(len(edits)), key=lambda i: min(edits[i], default=len(self.segments)), reverse=True)
        for i in order:
            edit = edits[i]
            if not edit:
                results[i] = self.full_logprobs.copy()
                continue
            first = min(edit)
            suffix: list[int] = []
            for s in range(first, len(self.segments)):
                suffix.extend(edit.get(s, self.segments[s]))
            results[i] = self._score_from(self.starts[first], suffix)
        return [r for r in results if r is not None]

    # ----- internals -------------------------------------------------------------------------
    def _score_from(self, start: int, prompt_suffix: Sequence[int]) -> np.ndarray:
        """Score the response after full_prompt[:start] + prompt_suffix."""
        import torch

        if self.reuse_prefix and start > 0 and not prompt_suffix:
            # Everything from `start` on is deleted: the first response token is predicted from
            # the last kept prompt token, so re-feed that token (same id, same position: exact).
            start -= 1
            prompt_suffix = self.prompt_ids[start : start + 1]
        fed_suffix = [*prompt_suffix, *self.response][:-1]
        if not self.reuse_prefix:
            ids = [*self.prompt_ids[:start], *fed_suffix]
            return self._forward(torch, ids, cache=None)
        if self._cache is None or start == 0:
            self._cache, self._cache_len, self._valid = self.lm.new_cache(), 0, 0
        if start > self._valid:  # extend the shared prefix up to `start`
            self._cache_len = self._valid
            self._crop_to(self._valid)
            self._forward(torch, self.prompt_ids[self._valid : start], cache=self._cache, keep=1)
            self._cache_len = self._valid = start
        else:
            self._crop_to(start)
            self._cache_len = start
        out = self._forward(torch, fed_suffix, cache=self._cache)
        self._cache_len = start + len(fed_suffix)
        same = _common_prefix(fed_suffix, self.prompt_ids[start:])
        self._valid = min(start + same, self._cache_len)
        return out

    def _crop_to(self, length: int) -> None:
        current = self._cache.get_seq_length()
        if current > length:
            self._cache.crop(-(current - length))

    def _forward(self, torch, ids: Sequence[int], cache, keep: int | None = None) -> np.ndarray:
        n_resp = len(self.response)
        keep = n_resp if keep is None else keep
        self.tokens_processed += len(ids)
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.lm.device)
        with torch.inference_mode():
            out = self.lm.model(
                input_ids=input_ids, cache=cache, use_cache=cache is not None, logits_to_keep=keep
            )
        if keep != n_resp:
            return np.empty(0)
        logits = out.logits[0].to(torch.float64)
        logprobs = torch.log_softmax(logits, dim=-1)
        target = torch.tensor(self.response, dtype=torch.long, device=logprobs.device)
        return logprobs.gather(-1, target[:, None])[:, 0].cpu().numpy()


def exact_loo_floor_tokens(prompt: EncodedPrompt, response_tokens: int) -> int:
    """Tokens an exact LOO must feed: one full pass plus, per passage, everything after it.

    Counted like `AblationScorer.tokens_processed` (the last response token is never fed).
    """
    total = prompt.num_tokens + response_tokens - 1
    starts = prompt.token_starts
    ends = [s + len(seg) for s, seg in zip(starts, prompt.segments, strict=True)]
    for i in range(1, len(prompt.segments) - 1):
        total += prompt.num_tokens - ends[i] + response_tokens - 1
    return total
