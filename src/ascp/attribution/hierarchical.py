"""Hierarchical (coarse-to-fine) leave-one-out.

Passages are split into contiguous groups in context order. Each group is deleted as a whole
(one pass per group); inside the `refine_top` groups with the largest positive drop every
passage is deleted on its own (one pass per passage). A passage in a group that is not refined
gets the group's drop shared equally among its members. With groups of one passage every
group score is a single-passage deletion, so the result equals `loo` exactly. Per sentence
(`spans="sentences"`), the same deletions are read over the sentence's tokens.

Default group size: ceil(sqrt(k)), which balances coarse passes (k/g) against refinement (g
per refined group); default `refine_top`: 2 groups.

Over sentence sources (`sources="sentences"`) the groups are the passages (AttriBoT's
passage-then-sentence order): each passage is deleted whole, and only inside the `refine_top`
passages with the largest positive drop is each sentence deleted on its own; the sentences of a
passage that is not refined share its drop. `Scores.extra["deletions"]` counts the deletions run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import groupby
from typing import TYPE_CHECKING

import numpy as np

from ascp.attribution.ablation import REUSE_PREFIX, Ablations
from ascp.attribution.base import Estimator, ProbeInput, Scores
from ascp.params import Param

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


class HierarchicalLOO(Estimator):
    name = "hierarchical"
    causal = True
    token_readings = True  # any part of the response: the same deletions read over its tokens
    nats_per_token = True  # refined passages exactly as `loo`; the rest a group's drop per passage
    params = (
        Param("group_size", int, None, "passages per group (none: ceil(sqrt(k)))", optional=True),
        Param("refine_top", int, 2, "groups with the largest positive drop refined passage by passage"),
        REUSE_PREFIX,
    )

    def __init__(self, group_size: int | None = None, refine_top: int = 2, reuse_prefix: bool = True) -> None:
        if group_size is not None and group_size < 1:
            raise ValueError("group_size must be >= 1")
        self.group_size = group_size
        self.refine_top = refine_top
        self.reuse_prefix = reuse_prefix

    def groups(self, k: int) -> list[list[int]]:
        size = self.group_size or max(1, math.ceil(math.sqrt(k)))
        return [list(range(lo, min(k, lo + size))) for lo in range(0, k, size)]

    def groups_of(self, item: ProbeInput) -> list[list[int]]:
        """The groups of one input: its passages when the sources are sentences (unless `group_size` is
        set), else `groups(k)`."""
        if item.prompt.source_passages and self.group_size is None:
            runs = groupby(range(len(item.passages)), key=lambda i: item.prompt.source_passages[i])
            return [list(run) for _, run in runs]
        return self.groups(len(item.passages))

    def score(self, lm: LanguageModel, item: ProbeInput) -> Scores:
        k = len(item.passages)
        groups = self.groups_of(item)
        scorer = Ablations(lm, item.prompt, item.response_ids, reuse_prefix=self.reuse_prefix)
        coarse = scorer.score([item.prompt.deletion(g) for g in groups])
        full_tokens = np.asarray(scorer.full_logprobs)
        full = full_tokens.mean()
        group_drop = np.array([full - c.mean() for c in coarse])
        ranked = [j for j in np.argsort(-group_drop, kind="stable") if group_drop[j] > 0 and len(groups[j]) > 1]
        refine = [i for j in ranked[: self.refine_top] for i in groups[j]]
        fine = scorer.score([item.prompt.deletion([i]) for i in refine]) if refine else []
        # each passage's deletion, read over any response tokens: its own (refined) or its group's, shared
        deleted: list[tuple[np.ndarray, int]] = [(np.zeros(0), 1)] * k
        for g, c in zip(groups, coarse, strict=True):
            for i in g:
                deleted[i] = (np.asarray(c), len(g))
        for i, f in zip(refine, fine, strict=True):
            deleted[i] = (np.asarray(f), 1)

        def span_scores(tokens: Sequence[int]) -> np.ndarray:
            rows = list(tokens)
            return np.array([(full_tokens[rows].mean() - ablated[rows].mean()) / share for ablated, share in deleted])

        return Scores(values=span_scores(range(len(full_tokens))), tokens_processed=scorer.tokens_processed,
                      span_scores=span_scores, extra={"deletions": len(groups) + len(refine)})
