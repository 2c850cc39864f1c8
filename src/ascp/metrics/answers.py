"""Answer matching: whether a response (or a passage) asserts a gold answer unit.

Aliases are matched as normalised token subsequences (SQuAD-style `normalize_answer`); a claim
unit (no aliases, an NLI-matched task such as ELI5) is decided by a `Matcher`, the one NLI
matcher of `ascp.metrics.nli` in every command. PR@T, the evidence ceiling and attestation all
call `unit_recovered` / `recovered_per_response`, so they share one rule. Definitions:
docs/metrics.md.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Sequence

from ascp.types import AnswerUnit

Matcher = Callable[[AnswerUnit, str], bool]
"""Decides whether a response asserts a unit that has no aliases (e.g. an NLI entailment check)."""

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

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


def recovered_per_response(
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
