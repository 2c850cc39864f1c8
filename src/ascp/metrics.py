"""Portfolio metrics of Section 3 and Table 1: recall, evidence coverage, groundedness, diversity.

Every function is pure. Definitions, edge cases and the paper equation each reproduces are in
docs/metrics.md; each docstring states the exact formula. Conventions:

- A *portfolio* is the T responses y_1..y_T of one case; `rounds` is a sequence of `Round`s (e.g.
  `Portfolio.rounds`), whose `normalized` dict holds the probe reading a_t(d) >= 0 of round t.
- Quantities that are undefined on an input (ECR with nothing offered, Self-BLEU with one response,
  ...) are `nan`, never a silent 0, unless the docstring says otherwise.
- Heavy imports (sacrebleu, scipy) happen inside the functions that need them.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ascp.types import AnswerUnit, Case, Passage, Portfolio, Round

Matcher = Callable[[AnswerUnit, str], bool]
"""Decides whether a response asserts a unit that has no aliases (e.g. an NLI entailment check)."""

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WORD_OR_PUNCT = re.compile(r"\w+|[^\w\s]")

# NLTK's English stopword list (179 words). Entries are passed through `normalize_answer` below, so
# "don't" becomes "dont" and the articles disappear, matching the tokens they are compared with.
_NLTK_ENGLISH_STOPWORDS = """
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his himself
she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that that'll
these those am is are was were be been being have has had having do does did doing a an the and but if or because as
until while of at by for with about against between into through during before after above below to from up down in
out on off over under again further then once here there when where why how all any both each few more most other
some such no nor not only own same so than too very s t can will just don don't should should've now d ll m o re ve y
ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn
mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
"""


# --------------------------------------------------------------------------------------------- answers


def normalize_answer(s: str) -> str:
    """ALCE/SQuAD answer normalisation, exactly: lowercase; delete every ASCII punctuation character
    (`string.punctuation`, no space inserted: "U.S." -> "us", "1,850" -> "1850"); replace the whole
    words a/an/the by a space; collapse whitespace runs to one space and strip the ends."""
    text = s.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


STOPWORDS: frozenset[str] = frozenset(normalize_answer(w) for w in _NLTK_ENGLISH_STOPWORDS.split()) - {""}
"""Normalised English stopwords used by `lexical_groundedness`."""


def _padded(normalized: str) -> str:
    # Tokens of a normalised string contain no spaces, so "a contiguous token subsequence of x" is
    # exactly "a substring of ' x ' that starts and ends at a space".
    return f" {normalized} "


def _alias_in(normalized_aliases: Iterable[str], padded_response: str) -> bool:
    return any(a and _padded(a) in padded_response for a in normalized_aliases)


def _check_unit(unit: AnswerUnit, matcher: Matcher | None) -> None:
    if unit.aliases:
        return
    if unit.claim is None:
        raise ValueError(f"answer unit {unit.id!r} has neither aliases nor a claim")
    if matcher is None:
        raise NotImplementedError(
            f"answer unit {unit.id!r} is a claim without aliases (an NLI-matched task); "
            "pass matcher=callable(unit, response) -> bool to decide it"
        )


def unit_recovered(unit: AnswerUnit, response: str, matcher: Matcher | None = None) -> bool:
    """Whether `response` asserts `unit`.

    Unit with aliases: True iff some alias, after `normalize_answer`, is a non-empty contiguous
    subsequence of the whitespace tokens of `normalize_answer(response)` (token boundaries matter:
    "1850" does not match "18501"; an alias normalising to "" never matches). `matcher` is not used.
    Unit with a claim and no aliases: `matcher(unit, response)`; without a matcher this raises
    NotImplementedError (NLI matching is the caller's business). Neither: ValueError."""
    _check_unit(unit, matcher)
    if unit.aliases:
        return _alias_in((normalize_answer(a) for a in unit.aliases), _padded(normalize_answer(response)))
    return _match(matcher, unit, response)


recovered = unit_recovered


def _match(matcher: Matcher | None, unit: AnswerUnit, response: str) -> bool:
    if matcher is None:  # unreachable after _check_unit; kept for the type checker
        raise NotImplementedError(f"answer unit {unit.id!r} needs a matcher")
    return bool(matcher(unit, response))


def _recovered_per_response(
    units: Sequence[AnswerUnit], responses: Sequence[str], matcher: Matcher | None
) -> list[set[int]]:
    """For each response, the positions in `units` of the units it asserts."""
    units = list(units)
    if not units:
        raise ValueError("no gold answer units: recall is undefined")
    for u in units:
        _check_unit(u, matcher)
    aliases = [tuple(normalize_answer(a) for a in u.aliases) for u in units]
    out: list[set[int]] = []
    for response in responses:
        padded = _padded(normalize_answer(response))
        hits = set()
        for i, u in enumerate(units):
            if _alias_in(aliases[i], padded) if u.aliases else _match(matcher, u, response):
                hits.add(i)
        out.append(hits)
    return out


def portfolio_recall(units: Sequence[AnswerUnit], responses: Sequence[str], matcher: Matcher | None = None) -> float:
    """PR@T (Eq. 1) = |{a in A : exists t, a asserted in y_t}| / |A|, with "asserted" = `unit_recovered`.

    Empty `units`: ValueError. Empty `responses`: 0.0. Units are counted by position, so two units
    sharing an id count twice."""
    per = _recovered_per_response(units, responses, matcher)
    return len(set().union(*per)) / len(units)


def evidence_ceiling(units: Sequence[AnswerUnit], passages: Iterable[Passage], matcher: Matcher | None = None) -> float:
    """Share of the gold units attested by at least one of `passages` (the passages offered in any
    round), by the rule PR@T uses on responses (normalised contiguous-token alias match; claims via
    `matcher`). It bounds what the generator could recover from its contexts: PR@T above it means
    answers the passages do not contain. Empty `units`: ValueError."""
    per = _recovered_per_response(units, [p.full_text for p in passages], matcher)
    return len(set().union(*per)) / len(units)


def best_single_recall(units: Sequence[AnswerUnit], responses: Sequence[str], matcher: Matcher | None = None) -> float:
    """max_t |{a in A : a asserted in y_t}| / |A| — the recall of the best single response (Sec. 3.1).

    Empty `units`: ValueError. Empty `responses`: 0.0. Always <= `portfolio_recall`."""
    per = _recovered_per_response(units, responses, matcher)
    return max((len(s) for s in per), default=0) / len(units)


# --------------------------------------------------------------------------------------------- evidence


def _reading(r: Round) -> dict[str, float]:
    """a_t(d) for d in C_t (absent from `normalized`: 0); rejects negative or non-finite values."""
    out: dict[str, float] = {}
    for pid in r.context:
        a = float(r.normalized.get(pid, 0.0))
        if not math.isfinite(a) or a < 0:
            raise ValueError(f"round {r.round}: normalised score of {pid!r} is {a}, expected a finite value >= 0")
        out[pid] = a
    return out


def offered_count(rounds: Sequence[Round]) -> int:
    """|O_T| = |C_1 ∪ ... ∪ C_T|: distinct passage ids shown in any round."""
    return len({pid for r in rounds for pid in r.context})


def used_count(rounds: Sequence[Round]) -> int:
    """|U_1 ∪ ... ∪ U_T|: distinct passage ids in any round's `used` (the probe's thresholded reading)."""
    return len({pid for r in rounds for pid in r.used})


def evidence_coverage_rate(rounds: Sequence[Round], theta: float = 0.1) -> float:
    """ECR@T (Eq. 2) = |{d : exists t, A_td > 0 and A_td >= theta * max_{d' in C_t} A_td'}| / |O_T|.

    A_td is the round's normalised probe score `Round.normalized[d]` for d in C_t (a missing entry
    is 0; entries for ids outside C_t are ignored). A round whose scores are all zero contributes
    no passage; A_td > 0 is required so theta = 0 does not count unattributed passages. Ties at the
    threshold count (compared with relative tolerance 1e-9). Empty O_T (no rounds, or only empty
    contexts): nan. theta must lie in [0, 1]."""
    if not 0.0 <= theta <= 1.0:
        raise ValueError(f"theta must lie in [0, 1], got {theta}")
    offered = offered_count(rounds)
    if offered == 0:
        return math.nan
    covered: set[str] = set()
    for r in rounds:
        reading = _reading(r)
        top = max(reading.values(), default=0.0)
        if top <= 0.0:
            continue
        cut = theta * top
        covered.update(d for d, a in reading.items() if a > 0 and (a >= cut or math.isclose(a, cut, rel_tol=1e-9)))
    return len(covered) / offered


def thresholded_used(rounds: Sequence[Round], threshold: float | None = None) -> set[str]:
    """U_T(tau) = {d : exists t, d in C_t, raw_td > 0 and raw_td >= tau}: the passages whose raw probe
    score (Eq. 3; nats per response token for `loo`) reaches a width-invariant threshold `tau` in some
    round (ties count, relative tolerance 1e-9). None: `ascp.calibration.USED_THRESHOLD`, the
    calibrated default (docs/calibration.md). The raw scale, not the normalised one: normalised
    scores sum to 1 per round, so a constant cut on them caps the used count at 1/tau whatever the
    width. tau must be positive and finite."""
    from ascp.calibration import USED_THRESHOLD

    tau = USED_THRESHOLD if threshold is None else float(threshold)
    if not (tau > 0.0 and math.isfinite(tau)):
        raise ValueError(f"the used threshold must be a positive number, got {tau}")
    used: set[str] = set()
    for r in rounds:
        for pid in r.context:
            raw = float(r.scores.get(pid, 0.0))
            if math.isfinite(raw) and raw > 0 and (raw >= tau or math.isclose(raw, tau, rel_tol=1e-9)):
                used.add(pid)
    return used


def thresholded_coverage(rounds: Sequence[Round], threshold: float | None = None) -> float:
    """ECR as the paper's tables report it ("ECR uses fixed-response threshold", Tables 2, 10, 11,
    15): |U_T(tau)| / |O_T|, the share of offered passages used in some round under one
    width-invariant threshold tau on raw probe scores (`thresholded_used`). Unlike Eq. 2 the cut
    does not move with each round's maximum, so a round that leans on one passage does not count
    its weak neighbours. Empty O_T: nan."""
    offered = offered_count(rounds)
    used = thresholded_used(rounds, threshold)
    return len(used) / offered if offered else math.nan


def utilisation_concentration(rounds: Sequence[Round]) -> float:
    """Normalised Herfindahl–Hirschman index of the attribution mass over the offered passages.

    m_d = sum_t A_td (A_td = 0 when d not in C_t), M = sum_d m_d, p_d = m_d / M over d in O_T,
    n = |O_T|, H = sum_d p_d^2, concentration = (H - 1/n) / (1 - 1/n) in [0, 1]:
    0 = mass spread evenly over every offered passage, 1 = all mass on one passage.
    Each round with a non-zero reading contributes mass 1 (its scores sum to 1), so rounds weigh
    equally. n = 1: 0.0 (nothing to concentrate on relative to). M = 0 (every round all-zero, or
    n = 0): nan — no reading is not an even spread."""
    mass: dict[str, float] = {pid: 0.0 for r in rounds for pid in r.context}
    for r in rounds:
        for pid, a in _reading(r).items():
            mass[pid] += a
    n = len(mass)
    total = sum(mass.values())
    if n == 0 or total <= 0.0:
        return math.nan
    if n == 1:
        return 0.0
    p = np.fromiter(mass.values(), dtype=float) / total
    h = float(np.sum(p * p))
    return float(min(1.0, max(0.0, (h - 1.0 / n) / (1.0 - 1.0 / n))))


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


# --------------------------------------------------------------------------------------------- diversity


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


# --------------------------------------------------------------------------------------------- probe validation


def cover_at_m(
    ranked_ids: Sequence[str],
    answer_bearing: Mapping[str, Collection[str]],
    m: int,
    units: Iterable[str | AnswerUnit],
) -> float:
    """cover@m (Sec. 4.3) = |U ∩ (∪_{d in top-m of ranked_ids} answer_bearing[d])| / |U|.

    U = the distinct unit ids of `units` (ids or `AnswerUnit`s); a document absent from
    `answer_bearing` attests nothing; m larger than the ranking takes all of it. Empty U: ValueError;
    m < 0: ValueError."""
    if m < 0:
        raise ValueError(f"m must be >= 0, got {m}")
    gold = {u.id if isinstance(u, AnswerUnit) else u for u in units}
    if not gold:
        raise ValueError("no gold answer units: cover@m is undefined")
    attested: set[str] = set()
    for d in ranked_ids[:m]:
        attested.update(answer_bearing.get(d, ()))
    return len(attested & gold) / len(gold)


def auc(scores: ArrayLike, labels: ArrayLike) -> float:
    """ROC AUC by Mann–Whitney: mean over (positive, negative) pairs of 1 if s_pos > s_neg, 0.5 if
    equal, 0 otherwise; computed from average ranks as (R_pos - P(P+1)/2) / (P N). Labels are
    0/1 or bool. No positive or no negative: nan. Non-finite score: ValueError."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores {s.shape} and labels {y.shape} must be 1-d of equal length")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0/1 or bool")
    pos = y.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = rankdata(s)  # average ranks: a tie contributes 0.5 per pair
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# --------------------------------------------------------------------------------------------- all at once

METRIC_KEYS: tuple[str, ...] = (
    "pr",
    "best_single",
    "ecr",
    "ecr_thresholded",
    "offered",
    "used",
    "used_thresholded",
    "ceiling",
    "groundedness",
    "distinct_1",
    "distinct_2",
    "distinct_3",
    "self_bleu",
    "semantic_diversity",
    "concentration",
)


def case_metrics(
    case: Case,
    portfolio: Portfolio,
    response_embeddings: np.ndarray | Sequence[Sequence[float]] | None = None,
    theta: float = 0.1,
    matcher: Matcher | None = None,
    used_threshold: float | None = None,
) -> dict[str, float]:
    """Every metric of one portfolio, keyed by `METRIC_KEYS` (in that order; all floats).

    pr/best_single: `portfolio_recall`/`best_single_recall` of `case.units`; ecr:
    `evidence_coverage_rate(theta)` (Eq. 2); ecr_thresholded/used_thresholded: `thresholded_coverage`
    and |`thresholded_used`| at `used_threshold` (None: the calibrated default; the paper's tables'
    ECR); offered/used: `offered_count`/`used_count` (used: the run's own live decisions); ceiling:
    `evidence_ceiling` of the offered passages; groundedness: `lexical_groundedness` against each
    round's context looked up in `case.pool`; distinct_n;
    self_bleu; semantic_diversity: nan when `response_embeddings` (one row per round, round order)
    is None; concentration: `utilisation_concentration`."""
    if portfolio.case_id != case.id:
        raise ValueError(f"portfolio is for case {portfolio.case_id!r}, not {case.id!r}")
    rounds = portfolio.rounds
    responses = [r.response for r in rounds]
    if response_embeddings is None:
        sem = math.nan
    else:
        emb = np.asarray(response_embeddings, dtype=float)
        if emb.ndim != 2 or emb.shape[0] != len(responses):
            raise ValueError(f"expected {len(responses)} embedding rows, got shape {emb.shape}")
        sem = semantic_diversity(emb)
    contexts = [[case.passage(pid) for pid in r.context] for r in rounds]
    gold = bool(case.units)  # without gold units, recall and the ceiling are undefined (nan)
    offered = [case.passage(pid) for pid in portfolio.offered]
    return {
        "pr": portfolio_recall(case.units, responses, matcher) if gold else math.nan,
        "best_single": best_single_recall(case.units, responses, matcher) if gold else math.nan,
        "ecr": evidence_coverage_rate(rounds, theta),
        "ecr_thresholded": thresholded_coverage(rounds, used_threshold),
        "offered": float(offered_count(rounds)),
        "used": float(used_count(rounds)),
        "used_thresholded": float(len(thresholded_used(rounds, used_threshold))),
        "ceiling": evidence_ceiling(case.units, offered, matcher) if gold else math.nan,
        "groundedness": lexical_groundedness(responses, contexts),
        "distinct_1": distinct_n(responses, 1),
        "distinct_2": distinct_n(responses, 2),
        "distinct_3": distinct_n(responses, 3),
        "self_bleu": self_bleu(responses),
        "semantic_diversity": sem,
        "concentration": utilisation_concentration(rounds),
    }
