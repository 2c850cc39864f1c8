"""Does a passage attest a gold answer unit?

String units (aliases): the passage attests the unit when some alias, after `normalize_answer`,
is a contiguous token subsequence of the normalised `title: text` of the passage: exactly the
rule `ascp.metrics.answers.unit_recovered` applies to responses (one shared implementation).

Claim units (ELI5): NLI entailment, premise = the passage's `title: text`, hypothesis = the claim,
scored by a sentence-transformers `CrossEncoder` (`NLIMatcher`). The entailment label is found
in the model config's `id2label` (a label containing "entail"); the unit is attested when the
softmax probability of that label is >= `threshold` (0.5). The model is loaded offline
(`local_files_only=True`) from a folder or a name already in the local Hugging Face cache; the
tokenizer truncates premise + hypothesis at the model's maximum length (`max_length`).

`lexically_attestable(unit)`: a string unit whose aliases are not all bare "yes"/"no" (HotpotQA
comparison answers). Passages do not state yes/no answers, so such units are left out of
rank-level attestation statistics (`ascp.metrics.density`), as are claim units without a matcher.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ascp.errors import AscpError
from ascp.metrics.answers import Matcher, normalize_answer, recovered_per_response, unit_recovered
from ascp.types import AnswerUnit, Passage

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
    when it has an `entails(pairs)` method (as `NLIMatcher` does)."""
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


class NLIMatcher:
    """Claim matcher: `matcher(unit, text)` is True when `text` entails `unit.claim`.

    `model`: a CrossEncoder folder or a model name already in the local cache (e.g.
    cross-encoder/nli-deberta-v3-base, downloaded beforehand). Nothing is downloaded.
    """

    def __init__(self, model: str, threshold: float = 0.5, device: str = "cpu", batch_size: int = 16,
                 max_length: int | None = None) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise AscpError(f"the NLI threshold must lie in [0, 1], got {threshold}.")
        self.model_name, self.threshold, self.batch_size = model, threshold, batch_size
        self.model = _load_cross_encoder(model, device, max_length)
        self.entailment_index = _entailment_index(self.model, model)

    def probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Entailment probability of each (premise, hypothesis) pair."""
        if not pairs:
            return np.zeros(0)
        logits = np.asarray(self.model.predict(list(pairs), batch_size=self.batch_size, show_progress_bar=False,
                                               apply_softmax=False), dtype=np.float64).reshape(len(pairs), -1)
        logits = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        return probs[:, self.entailment_index]

    def entails(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self.probabilities(pairs) >= self.threshold

    def __call__(self, unit: AnswerUnit, text: str) -> bool:
        if unit.claim is None:
            raise ValueError(f"answer unit {unit.id!r} has no claim for NLI matching")
        return bool(self.entails([(text, unit.claim)])[0])


@lru_cache(maxsize=2)
def _load_cross_encoder(model: str, device: str, max_length: int | None):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import CrossEncoder

    try:
        return CrossEncoder(model, device=device, local_files_only=True, max_length=max_length)
    except (OSError, ValueError) as exc:
        raise AscpError(
            f"cannot load the NLI cross-encoder {model!r} offline: pass a CrossEncoder folder or a model "
            "name already in the local Hugging Face cache (see docs/data.md)."
        ) from exc


def _entailment_index(encoder, name: str) -> int:
    config = getattr(encoder, "config", None) or getattr(getattr(encoder, "model", None), "config", None)
    labels = dict(getattr(config, "id2label", None) or {})
    hits = [int(i) for i, label in labels.items() if str(label).lower().startswith("entail")]
    if len(labels) < 2 or len(hits) != 1:
        raise AscpError(
            f"the cross-encoder {name!r} is not an NLI model: its config's id2label {labels} has no single "
            "'entailment' label."
        )
    return hits[0]
