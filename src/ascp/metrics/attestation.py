"""Does a passage attest a gold answer unit?

String units (aliases): the passage attests the unit when some alias, after `normalize_answer`,
is a contiguous token subsequence of the normalised `title: text` of the passage: exactly the
rule `ascp.metrics.answers.unit_recovered` applies to responses (one shared implementation).

Claim units (ELI5): NLI entailment, premise = the passage's `title: text`, hypothesis = the claim,
decided by the one NLI matcher of `ascp.metrics.nli` (`NLIClaimMatcher`, re-exported here as
`NLIMatcher`): argmax label = the entailment label of the model config's `id2label` (a one-logit
model: sigmoid(logit) > 0.5), citation markers stripped from the premise. It is the rule claim
recall uses in `ascp run`, so a passage attests a claim exactly when a response with the same text
would recover it. `attestation_matrix` sends every (passage, claim) pair through the matcher's
batched `entails(pairs)`.

`lexically_attestable(unit)`: a string unit whose aliases are not all bare "yes"/"no" (HotpotQA
comparison answers). Passages do not state yes/no answers, so such units are left out of
rank-level attestation statistics (`ascp.metrics.density`), as are claim units without a matcher.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ascp.metrics.answers import Matcher, normalize_answer, recovered_per_response, unit_recovered
from ascp.metrics.nli import NLIClaimMatcher as NLIMatcher  # the one NLI matcher, under its former name here
from ascp.types import AnswerUnit, Passage

__all__ = ["NLIMatcher", "attestation_matrix", "attests", "lexically_attestable"]

_YES_NO = frozenset({"yes", "no"})


def lexically_attestable(unit: AnswerUnit) -> bool:
    """True for a string unit with at least one alias other than a bare yes/no."""
    return any(normalize_answer(a) not in _YES_NO | {""} for a in unit.aliases)


def attests(passage: Passage, unit: AnswerUnit, matcher: Matcher | None = None) -> bool:
    """Whether `passage` attests `unit` (aliases: token-subsequence match; claim: `matcher`)."""
    return unit_recovered(unit, passage.full_text, matcher)


def attestation_matrix(
    pool: Sequence[Passage], units: Sequence[AnswerUnit], matcher: Matcher | None = None
) -> np.ndarray:
    """Boolean [passage, unit] matrix of `attests`; claim units go to the matcher in one batch
    when it has an `entails(pairs)` method (as the NLI matchers of `ascp.metrics.nli` do)."""
    out = np.zeros((len(pool), len(units)), dtype=bool)
    claims = [j for j, u in enumerate(units) if not u.aliases]
    strings = [j for j, u in enumerate(units) if u.aliases]
    if strings and pool:  # the batch form of `unit_recovered`: each passage normalised once
        per_passage = recovered_per_response([units[j] for j in strings], [p.full_text for p in pool], None)
        for i, hits in enumerate(per_passage):
            out[i, [strings[h] for h in hits]] = True
    if claims and pool:
        if matcher is not None and hasattr(matcher, "entails"):
            pairs = [(p.full_text, units[j].claim or "") for p in pool for j in claims]
            out[:, claims] = np.asarray(matcher.entails(pairs), dtype=bool).reshape(len(pool), len(claims))
        else:
            for j in claims:
                out[:, j] = [attests(p, units[j], matcher) for p in pool]
    return out

