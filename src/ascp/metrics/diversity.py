"""Portfolio diversity and lexical groundedness (Table 1): Distinct-n, Self-BLEU, semantic
diversity, and the share of a response's content words found in its context. Pure functions;
sacrebleu loads only inside `self_bleu`. Definitions: docs/metrics.md.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ascp.metrics.answers import STOPWORDS, normalize_answer
from ascp.types import Passage

_WORD_OR_PUNCT = re.compile(r"\w+|[^\w\s]")


def _content_tokens(text: str) -> list[str]:
    return [w for w in normalize_answer(text).split() if w not in STOPWORDS]


def _passage_text(p: Passage | str) -> str:
    return p if isinstance(p, str) else f"{p.title} {p.text}"


def lexical_groundedness(responses: Sequence[str], passages_per_round: Sequence[Sequence[Passage | str]]) -> float:
    """Mean over rounds of the fraction of the response's content tokens that occur in its context.

    Round t: W_t = content tokens of y_t, i.e. whitespace tokens of `normalize_answer(y_t)` minus
    `STOPWORDS` (a list with repeats: each occurrence counts); V_t = set of tokens of
    `normalize_answer(title + " " + text)` over the passages of C_t (a str is taken as the text);
    g_t = |{w in W_t : w in V_t}| / |W_t|. Groundedness = mean of g_t over rounds with W_t
    non-empty; nan when there is no such round. `responses` and `passages_per_round` align by round."""
    if len(responses) != len(passages_per_round):
        raise ValueError(f"{len(responses)} responses but {len(passages_per_round)} contexts")
    per_round: list[float] = []
    for response, passages in zip(responses, passages_per_round, strict=True):
        words = _content_tokens(response)
        if not words:
            continue
        vocab = {w for p in passages for w in normalize_answer(_passage_text(p)).split()}
        per_round.append(sum(w in vocab for w in words) / len(words))
    return sum(per_round) / len(per_round) if per_round else math.nan


def diversity_tokens(text: str) -> list[str]:
    """Tokens for Distinct-n: lowercased text split into runs of word characters (`\\w+`) and single
    punctuation characters, so "Paris." gives ["paris", "."]."""
    return _WORD_OR_PUNCT.findall(text.lower())


def distinct_n(responses: Sequence[str], n: int) -> float:
    """Distinct-n over the portfolio = |distinct n-grams| / |n-grams|, pooling the n-grams of every
    response (n-grams never cross response boundaries; tokens by `diversity_tokens`). 0.0 when the
    portfolio has no n-gram. n >= 1."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    grams: Counter[tuple[str, ...]] = Counter()
    for r in responses:
        toks = diversity_tokens(r)
        grams.update(tuple(toks[i : i + n]) for i in range(len(toks) - n + 1))
    total = sum(grams.values())
    return len(grams) / total if total else 0.0


def self_bleu(responses: Sequence[str]) -> float:
    """Self-BLEU on a 0..1 scale = (1/T) sum_i BLEU(y_i ; {y_j : j != i}) / 100.

    BLEU is sacrebleu's sentence BLEU with its sentence-level defaults: 13a tokenisation, max
    order 4, effective order (orders with no hypothesis n-gram are dropped), 'exp' smoothing
    (the k-th zero-match order gets precision 1/(2^k * total)), brevity penalty against the
    closest reference length, and lowercase=True (like Distinct-n). A hypothesis with no matching
    unigram scores 0. T < 2: nan (no pair to compare; 0 would read as maximal diversity)."""
    if len(responses) < 2:
        return math.nan
    from sacrebleu.metrics import BLEU

    bleu = BLEU(lowercase=True, tokenize="13a", smooth_method="exp", effective_order=True)
    scores = [
        bleu.sentence_score(y, [r for j, r in enumerate(responses) if j != i]).score for i, y in enumerate(responses)
    ]
    return sum(scores) / len(scores) / 100.0


def semantic_diversity(response_embeddings: np.ndarray | Sequence[Sequence[float]]) -> float:
    """1 - mean_{i<j} cos(e_i, e_j) over the T rows of a (T, dim) array, each row divided by its
    L2 norm first. Range [0, 2]. T < 2: 0.0. A zero or non-finite row: ValueError."""
    e = np.asarray(response_embeddings, dtype=float)
    if e.ndim != 2:
        raise ValueError(f"expected a (T, dim) array, got shape {e.shape}")
    t = e.shape[0]
    if t < 2:
        return 0.0
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    if not np.all(np.isfinite(e)) or np.any(norms == 0):
        raise ValueError("every embedding must be finite and non-zero")
    u = e / norms
    gram = u @ u.T
    mean_cos = (gram.sum() - np.trace(gram)) / (t * (t - 1))
    return float(1.0 - mean_cos)

