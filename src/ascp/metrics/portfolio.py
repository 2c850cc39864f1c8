"""Portfolio metrics of Section 3 and Table 1: recall, best single, the evidence ceiling, evidence
coverage (Eq. 2 and the tables' thresholded ECR), concentration, and `case_metrics` (all at once).

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
from collections.abc import Iterable, Sequence

import numpy as np

from ascp.metrics.answers import Matcher, normalize_answer, recovered_per_response
from ascp.metrics.diversity import distinct_n, lexical_groundedness, self_bleu, semantic_diversity
from ascp.reading import USED_THRESHOLD, check_used_threshold, raw_used
from ascp.types import AnswerUnit, Case, Passage, Portfolio, Round


def portfolio_recall(units: Sequence[AnswerUnit], responses: Sequence[str], matcher: Matcher | None = None) -> float:
    """PR@T (Eq. 1) = |{a in A : exists t, a asserted in y_t}| / |A|, with "asserted" = `unit_recovered`.

    Empty `units`: ValueError. Empty `responses`: 0.0. Units are counted by position, so two units
    sharing an id count twice."""
    per = recovered_per_response(units, responses, matcher)
    return len(set().union(*per)) / len(units)


def substring_recall(units: Sequence[AnswerUnit], responses: Sequence[str]) -> float:
    """PR@T under ALCE's STR-EM rule (`exact_presence` of ALCE's eval.py): a unit counts when some
    alias, after `normalize_answer`, is a plain character substring of a normalised response, token
    boundaries ignored ("6" inside "2016"), so it is never below `portfolio_recall`. A sensitivity
    reading of the same portfolios; units without aliases (claims) are refused."""
    units = list(units)
    if not units:
        raise ValueError("no gold answer units: recall is undefined")
    if any(not u.aliases for u in units):
        raise ValueError("substring recall needs aliases on every unit; claim units are decided by NLI")
    texts = [normalize_answer(r) for r in responses]
    hit = [any(normalize_answer(a) and normalize_answer(a) in t for a in u.aliases for t in texts) for u in units]
    return sum(hit) / len(units)


YES_NO = ("yes", "no")


def yes_no_answer(units: Sequence[AnswerUnit]) -> str | None:
    """"yes" or "no" when the question's gold answer is exactly one unit whose aliases all normalise
    to that word (HotpotQA's comparison questions), else None."""
    if len(units) != 1 or not units[0].aliases:
        return None
    words = {normalize_answer(a) for a in units[0].aliases}
    return words.pop() if len(words) == 1 and words <= set(YES_NO) else None


def strict_yes_no_recall(units: Sequence[AnswerUnit], responses: Sequence[str],
                         matcher: Matcher | None = None) -> float:
    """PR@T with one more rule for a yes/no question (`yes_no_answer`): no credit when the portfolio asserts
    both answers (the words "yes" and "no" each appear, as normalised tokens, in some response), since a
    portfolio that says both has not answered. Every other question: `portfolio_recall`."""
    if yes_no_answer(units) is not None and responses:
        words = [AnswerUnit(word, (word,)) for word in YES_NO]
        if set().union(*recovered_per_response(words, responses, None)) == {0, 1}:  # both said somewhere
            return 0.0
    return portfolio_recall(units, responses, matcher)


def evidence_ceiling(units: Sequence[AnswerUnit], passages: Iterable[Passage], matcher: Matcher | None = None) -> float:
    """Share of the gold units attested by at least one of `passages` (the passages offered in any
    round), by the rule PR@T uses on responses (normalised contiguous-token alias match; claims via
    `matcher`). It bounds what the generator could recover from its contexts: PR@T above it means
    answers the passages do not contain. Empty `units`: ValueError."""
    per = recovered_per_response(units, [p.full_text for p in passages], matcher)
    return len(set().union(*per)) / len(units)


def best_single_recall(units: Sequence[AnswerUnit], responses: Sequence[str], matcher: Matcher | None = None) -> float:
    """max_t |{a in A : a asserted in y_t}| / |A| — the recall of the best single response (Sec. 3.1).

    Empty `units`: ValueError. Empty `responses`: 0.0. Always <= `portfolio_recall`."""
    per = recovered_per_response(units, responses, matcher)
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
    round (ties count, relative tolerance 1e-9). None: `ascp.reading.USED_THRESHOLD`, the
    calibrated default (docs/calibration.md). The raw scale, not the normalised one: normalised
    scores sum to 1 per round, so a constant cut on them caps the used count at 1/tau whatever the
    width. tau must be positive and finite."""
    tau = check_used_threshold(USED_THRESHOLD if threshold is None else threshold)
    return {pid for r in rounds for pid in r.context if raw_used(r.scores.get(pid, 0.0), tau)}


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
