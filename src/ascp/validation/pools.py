"""Controlled pools for validating the probe (Sec. 4.2, Appendix C).

A controlled pool of width K for one case holds

- the *necessary set*: the first m answer-bearing passages that attest disjoint answer sets.
  Answer-bearing passages are ordered by answer coverage (number of gold units attested, most
  first; ties in a per-case seeded random order) and taken greedily, each one only if it
  attests no unit an earlier pick attests;
- K - m padding passages of one kind:
  `off-query`  - passages from other questions' pools (up to `OFF_QUERY_SOURCES` other cases,
                 drawn per case) that attest none of this question's units;
  `same-query` - passages of this question's own pool that attest none of its units (hard
                 negatives);
  `duplicates` - passages of this question's own pool that attest only units the necessary
                 set already attests;
  each taken in a per-case seeded random order;
- in an order shuffled by a per-case deterministic seed; passage ids are never changed.

No choice depends on the pool's ranking (which a retriever, hence BM25 or an embedder, made):
ordering negatives or breaking ties by relevance would tilt the comparison for or against the
relevance proxies being validated.

Padding is *nested*: the width-K padding of a case is a prefix of its width-K' padding for
K < K', so widths differ only by the added passages. Passages longer than `max_words` words
are not eligible for any role (a few ASQA passages run to thousands of words). A case that
cannot be built is returned as a `Skip` with the reason, never dropped silently.

Attestation: `attests(passage, unit)` is the one swap point. It uses
`ascp.metrics.attestation.attests` when that module exists, else `ascp.metrics.answers.unit_recovered`
on `title + " " + text` (normalised alias as a contiguous token subsequence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.lm.sampling import derive_seed
from ascp.types import AnswerUnit, Case, Passage

PADDINGS = ("off-query", "same-query", "duplicates")
ROLES = ("necessary", "padding", "duplicate")
OFF_QUERY_SOURCES = 60  # Appendix C: distractors are sampled from up to sixty unrelated queries
DEFAULT_MAX_WORDS = 200


def attests(passage: Passage, unit: AnswerUnit) -> bool:
    """Whether `passage` attests the string unit `unit` (the shared alias matching)."""
    try:
        from ascp.metrics.attestation import attests as shared_attests
    except ImportError:
        from ascp.metrics.answers import unit_recovered

        return unit_recovered(unit, f"{passage.title} {passage.text}")
    return bool(shared_attests(passage, unit))


def attested_units(passage: Passage, units: Sequence[AnswerUnit]) -> tuple[str, ...]:
    """Ids of the units (with aliases) that `passage` attests, in unit order."""
    return tuple(u.id for u in units if u.aliases and attests(passage, u))


@dataclass(frozen=True)
class PoolPassage:
    passage: Passage
    role: str  # necessary | padding | duplicate
    answers: tuple[str, ...]  # unit ids the passage attests

    @property
    def id(self) -> str:
        return self.passage.id


@dataclass(frozen=True)
class ControlledPool:
    """One controlled context: `passages` in prompt order."""

    case_id: str
    question: str
    width: int
    padding: str
    passages: tuple[PoolPassage, ...]
    units: tuple[AnswerUnit, ...]

    @property
    def necessary_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.passages if p.role == "necessary")

    @property
    def designed_units(self) -> frozenset[str]:
        """The designed answer set: the units the necessary passages attest."""
        return frozenset(u for p in self.passages if p.role == "necessary" for u in p.answers)

    def context(self) -> tuple[Passage, ...]:
        return tuple(p.passage for p in self.passages)

    def to_json(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "question": self.question,
            "width": self.width,
            "padding": self.padding,
            "passages": [
                {"id": p.id, "title": p.passage.title, "text": p.passage.text, "role": p.role,
                 "answers": list(p.answers)}
                for p in self.passages
            ],
            "units": [{"id": u.id, "aliases": list(u.aliases)} for u in self.units],
        }


@dataclass(frozen=True)
class Skip:
    """A (case, width, padding) that could not be built, and why (one sentence fragment)."""

    case_id: str
    width: int
    padding: str
    reason: str
    kind: str = ""  # the reason without its numbers, for counting
    protocol: str = ""  # set when only one protocol could not score it (the pool itself was built)

    def to_json(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "width": self.width, "padding": self.padding, "protocol": self.protocol,
                "reason": self.reason}


def check_pool_args(width: int, padding: str, m: int) -> None:
    if m < 1:
        raise AscpError(f"--m must be at least 1, got {m}.")
    if padding not in PADDINGS:
        raise AscpError(f"unknown padding {padding!r}; choose one of {', '.join(PADDINGS)}.")
    if width < m:
        raise AscpError(f"width {width} is smaller than m={m}; a controlled pool holds the {m} necessary passages.")


@dataclass
class _CaseFacts:
    answers: list[tuple[str, ...]]  # per pool passage
    eligible: list[bool]  # not over the word limit
    necessary: list[int] | None  # pool indices, or None when the case has no disjoint necessary set
    off_query: list[tuple[Passage, tuple[str, ...]]] = field(default_factory=list)
    off_query_done: bool = False
    off_query_iter: Any = None


class PoolBuilder:
    """Builds controlled pools for cases; `sources` are all cases off-query padding may come from."""

    def __init__(self, sources: Sequence[Case], m: int = 2, seed: int = 0, max_words: int | None = DEFAULT_MAX_WORDS):
        if m < 1:
            raise AscpError(f"--m must be at least 1, got {m}.")
        self.sources = list(sources)
        self.m = m
        self.seed = seed
        self.max_words = max_words if max_words and max_words > 0 else None
        self._facts: dict[str, _CaseFacts] = {}

    # ----- per-case facts ---------------------------------------------------------------------
    def _short(self, p: Passage) -> bool:
        return self.max_words is None or len(f"{p.title} {p.text}".split()) <= self.max_words

    def facts(self, case: Case) -> _CaseFacts:
        if case.id not in self._facts:
            answers = [attested_units(p, case.units) for p in case.pool]
            eligible = [self._short(p) for p in case.pool]
            bearing = [i for i, a in enumerate(answers) if a and eligible[i]]
            tiebreak = self._order(case, "tiebreak")
            chosen: list[int] = []
            covered: set[str] = set()
            for i in sorted(bearing, key=lambda i: (-len(answers[i]), tiebreak[i])):
                if len(chosen) == self.m:
                    break
                if not covered.intersection(answers[i]):
                    chosen.append(i)
                    covered.update(answers[i])
            self._facts[case.id] = _CaseFacts(answers, eligible, chosen if len(chosen) == self.m else None)
        return self._facts[case.id]

    def _order(self, case: Case, purpose: str) -> list[int]:
        """A per-case seeded rank for every pool position (independent of any retriever or estimator)."""
        perm = np.random.default_rng(derive_seed(self.seed, case.id, purpose)).permutation(len(case.pool))
        rank = [0] * len(case.pool)
        for r, i in enumerate(perm):
            rank[int(i)] = r
        return rank

    def necessary(self, case: Case) -> tuple[PoolPassage, ...]:
        """The case's necessary set in selection order (empty when the case has none)."""
        f = self.facts(case)
        return tuple(PoolPassage(case.pool[i], "necessary", f.answers[i]) for i in f.necessary or ())

    def _off_query_candidates(self, case: Case):
        """Other cases' passages in a per-case random order (lazy: attestation is checked on demand)."""
        rng = np.random.default_rng(derive_seed(self.seed, case.id, "off-query"))
        others = [c for c in self.sources if c.id != case.id]
        picked = [others[i] for i in rng.permutation(len(others))[:OFF_QUERY_SOURCES]]
        own = {p.id for p in case.pool}
        candidates = [p for c in picked for p in c.pool]
        seen: set[str] = set()
        for i in rng.permutation(len(candidates)):
            p = candidates[int(i)]
            if p.id in own or p.id in seen or not self._short(p):
                continue
            seen.add(p.id)
            if not attested_units(p, case.units):
                yield p

    def _off_query(self, case: Case, n: int) -> list[tuple[Passage, tuple[str, ...]]]:
        f = self.facts(case)
        if f.off_query_iter is None:
            f.off_query_iter = self._off_query_candidates(case)
        while len(f.off_query) < n and not f.off_query_done:
            nxt = next(f.off_query_iter, None)
            if nxt is None:
                f.off_query_done = True
            else:
                f.off_query.append((nxt, ()))
        return f.off_query[:n]

    def padding_candidates(self, case: Case, padding: str, n: int) -> list[tuple[Passage, tuple[str, ...]]]:
        """Up to n padding passages (with the units they attest), in the order they are taken."""
        f = self.facts(case)
        if padding == "off-query":
            return self._off_query(case, n)
        assert f.necessary is not None
        designed = {u for i in f.necessary for u in f.answers[i]}
        order = self._order(case, "same-pool")
        out = []
        for i in sorted(range(len(case.pool)), key=order.__getitem__):
            if i in f.necessary or not f.eligible[i]:
                continue
            a = f.answers[i]
            if (padding == "same-query" and not a) or (padding == "duplicates" and a and set(a) <= designed):
                out.append((case.pool[i], a))
        return out[:n]

    # ----- building ---------------------------------------------------------------------------
    def build(self, case: Case, width: int, padding: str) -> ControlledPool | Skip:
        check_pool_args(width, padding, self.m)
        f = self.facts(case)
        if f.necessary is None:
            n_bearing = sum(1 for a, ok in zip(f.answers, f.eligible, strict=True) if a and ok)
            kind = f"fewer than m={self.m} answer-bearing passages with disjoint answer sets"
            return Skip(case.id, width, padding, f"{kind} ({n_bearing} answer-bearing)", kind)
        need = width - self.m
        pads = self.padding_candidates(case, padding, need)
        if len(pads) < need:
            kind = {"off-query": "off-query negatives", "same-query": "same-query negatives",
                    "duplicates": "duplicates"}[padding]
            return Skip(case.id, width, padding, f"only {len(pads)} {kind}, width {width} needs {need}",
                        f"too few {kind}")
        role = "duplicate" if padding == "duplicates" else "padding"
        members = list(self.necessary(case))
        members += [PoolPassage(p, role, a) for p, a in pads]
        order = np.random.default_rng(derive_seed(self.seed, case.id, width, padding, "order")).permutation(width)
        return ControlledPool(case.id, case.question, width, padding,
                              tuple(members[int(i)] for i in order), case.units)


def build_pools(
    cases: Sequence[Case], width: int, padding: str, m: int = 2, seed: int = 0,
    max_words: int | None = DEFAULT_MAX_WORDS, sources: Sequence[Case] | None = None,
) -> tuple[list[ControlledPool], list[Skip]]:
    """Controlled pools of one width and padding for every case that allows one, and the skips."""
    check_pool_args(width, padding, m)
    builder = PoolBuilder(cases if sources is None else sources, m=m, seed=seed, max_words=max_words)
    pools: list[ControlledPool] = []
    skips: list[Skip] = []
    for case in cases:
        built = builder.build(case, width, padding)
        if isinstance(built, ControlledPool):
            pools.append(built)
        else:
            skips.append(built)
    return pools, skips


def skip_summary(skips: Sequence[Skip]) -> dict[str, int]:
    """Skips counted by kind of reason."""
    counts: dict[str, int] = {}
    for s in skips:
        counts[s.kind or s.reason] = counts.get(s.kind or s.reason, 0) + 1
    return counts
