"""The one NLI matcher: claim recall for ELI5 (Sec. 7.1) and claim attestation (docs/metrics.md)

The paper scores ELI5 against ALCE's claim sentences "via NLI cross-encoder entailment rather
than brittle string containment". ALCE's `compute_claims` (princeton-nlp/ALCE, eval.py) counts a
claim as recalled when its NLI model (TRUE, t5_xxl_true_nli_mixture) decides entailment with
premise = the response (`remove_citations` applied) and hypothesis = the claim. We follow that
convention with a model the user brings (`--nli-model PATH`; nothing ships or downloads).

Every command that decides entailment uses this matcher and its one rule: `ascp run`, experiments
and `run_portfolios` (claim recall, the evidence ceiling), `ascp density` (claim attestation by a
passage, `ascp.metrics.attestation`) and `ascp calibrate --nli-model` (pairwise entailment between
pool passages, `ascp.validation.calibration.redundancy`). So one `--nli-model` folder decides a
(premise, hypothesis) pair the same way in every command.

- `NLIClaimMatcher(PATH)` (also importable as `ascp.metrics.attestation.NLIMatcher`): any local
  transformers sequence-classification folder (a sentence-transformers CrossEncoder folder is
  one), or the name of a model already in the local Hugging Face cache, loaded with
  `local_files_only=True`. The decision rule:
  * premise: ALCE's `remove_citations` applied (citation markers "[n", "]" and " |" dropped);
    the hypothesis is used as given;
  * the entailment label is found in `config.id2label` (the one label containing "entail" that is
    not negated, e.g. not "not_entailment"; none or several is an error), and a pair is entailed
    when the **argmax** label is that label (no probability threshold);
  * a one-logit model (TRUE-style / CrossEncoder num_labels=1) entails when sigmoid(logit) > 0.5,
    i.e. logit > 0.
  `entails(pairs)` decides (premise, hypothesis) pairs in batches, cached per pair so each pair is
  scored once per process; `matcher(unit, text)` is `entails([(text, unit.claim)])[0]`, the
  `Matcher` interface of `ascp.metrics`.
- `LexicalClaimMatcher` (`--nli-model lexical`): a claim is recalled when at least `share` (0.5)
  of its distinct content tokens occur in the response. A cheap stand-in for smoke runs, NOT
  ALCE's metric; it is used only when asked for by that name.

`load_nli_matcher(spec)` is the one loader (`lexical` or a model); a case with claim units and no
matcher fails before any generation (`require_matcher`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ascp.caching.lru import LRU
from ascp.errors import AscpError
from ascp.metrics.answers import STOPWORDS, Matcher, normalize_answer
from ascp.types import AnswerUnit, Case

FLAG = "--nli-model"
LEXICAL = "lexical"
LEXICAL_SHARE = 0.5
_NEGATED = re.compile(r"(not|non|no)[\s_-]*entail")
_HOW = (f"pass {FLAG} PATH (a local NLI sequence-classification folder, e.g. a CrossEncoder; nli_model= in the "
        f"API, nli_model: in an experiment spec), or {FLAG} {LEXICAL} for a lexical approximation that is not "
        "ALCE's metric")


def remove_citations(text: str) -> str:
    """ALCE's `remove_citations`, exactly: drop "[n" citation openers and every "]" and " |"."""
    return re.sub(r"\[\d+", "", re.sub(r" \[\d+", "", text)).replace(" |", "").replace("]", "")


def is_claim_unit(unit: AnswerUnit) -> bool:
    """A unit decided by a matcher: a claim without aliases (ELI5)."""
    return not unit.aliases and unit.claim is not None


def claim_case(cases: Iterable[Case]) -> Case | None:
    """The first case holding a claim unit, or None."""
    return next((c for c in cases if any(is_claim_unit(u) for u in c.units)), None)


def require_matcher(cases: Iterable[Case], has_matcher: bool, prefix: str = "") -> None:
    """Fail before any work when a case has claim units and no matcher was given."""
    if has_matcher:
        return
    case = claim_case(cases)
    if case is not None:
        raise AscpError(f"{prefix}case {case.id!r} has claim units (ELI5: recall is ALCE claim recall by NLI "
                        f"entailment, Sec. 7.1) and no NLI model was given; {_HOW}.")


# ------------------------------------------------------------------------------------------ the model


def entailment_index(id2label: dict[Any, Any], num_labels: int, where: str = FLAG) -> int | None:
    """The position of the entailment label; None for a one-logit model (sigmoid rule)."""
    if num_labels == 1:
        return None
    hits = [int(i) for i, label in id2label.items()
            if "entail" in str(label).lower() and not _NEGATED.search(str(label).lower())]
    if len(hits) != 1:
        raise AscpError(f"{where}: the model's config id2label {dict(id2label)} has no single entailment label; "
                        "give an NLI model whose labels name entailment (or a one-logit model).")
    return hits[0]


def _cached_snapshot(spec: str) -> Path | None:
    """The local Hugging Face cache folder of the model named `spec` (e.g. cross-encoder/nli-deberta-v3-base),
    or None when it is not cached (nothing is downloaded)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec, local_files_only=True))
    except (ImportError, OSError, ValueError):  # not cached, or not a valid model name
        return None


def check_nli_model(spec: str, where: str = FLAG) -> str:
    """Cheap check (no weights loaded) that `spec` is `lexical` or an NLI model folder (or the name of a model
    in the local Hugging Face cache); its resolved form (`lexical` or the folder's absolute path)."""
    if spec == LEXICAL:
        return spec
    path = Path(spec).expanduser()
    head = f"{where} {spec}"
    if not path.is_dir():
        cached = None if path.exists() else _cached_snapshot(spec)
        if cached is None:
            raise AscpError(f"{head} is not a folder; give a local NLI model folder (a CrossEncoder or any "
                            "sequence-classification model with an entailment label), the name of one in the local "
                            f"Hugging Face cache, or {LEXICAL}.")
        path = cached
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise AscpError(f"{head} holds no readable config.json, so it is not a transformers model folder; give "
                        "a local NLI sequence-classification folder.") from None
    labels = config.get("id2label") or {}
    entailment_index(labels, int(config.get("num_labels", len(labels) or 2)), head)
    return str(path.resolve())


class NLIClaimMatcher:
    """The one NLI matcher (rule in the module docstring): `entails(pairs)` for (premise, hypothesis)
    pairs, `matcher(unit, text)` for "does `text` entail `unit.claim`?".

    `model`: a local NLI sequence-classification folder or the name of a model in the local Hugging
    Face cache (never downloaded). `device`: cpu, cuda[:n], mps or auto. `max_length`: tokens of
    premise + hypothesis (truncated longest-first); None: the tokenizer's limit, else
    min(max_position_embeddings, 512). `where`: the flag or field named in errors."""

    def __init__(self, model: str | Path, device: str = "cpu", batch_size: int = 16, max_length: int | None = None,
                 where: str = FLAG, cache_size: int = 1 << 16) -> None:
        spec = str(model)
        resolved = check_nli_model(spec, where)
        if resolved == LEXICAL:
            raise AscpError(f"{where} {LEXICAL} names the lexical approximation, not an NLI model; load it with "
                            f"load_nli_matcher({LEXICAL!r}).")
        if batch_size < 1:
            raise AscpError(f"the NLI batch size must be at least 1, got {batch_size}.")
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from ascp.lm.resolve import resolve_device

        try:
            tokenizer = AutoTokenizer.from_pretrained(resolved, local_files_only=True)
            classifier = AutoModelForSequenceClassification.from_pretrained(resolved, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise AscpError(f"{where} {spec} cannot be loaded as a sequence-classification model with its "
                            f"tokenizer ({type(exc).__name__}); give a local NLI model folder.") from None
        config = classifier.config
        self.entail = entailment_index(config.id2label, config.num_labels, f"{where} {spec}")
        classifier.to(resolve_device(device)).eval()
        if max_length is None:
            limit = int(getattr(tokenizer, "model_max_length", 0) or 0)
            max_length = limit if 0 < limit <= 100_000 else min(getattr(config, "max_position_embeddings", 512), 512)
        self.model, self.tokenizer, self.name = classifier, tokenizer, resolved
        self.batch_size, self.max_length, self.cache_size = batch_size, max_length, cache_size
        self._cache: LRU[tuple[str, str], bool] = LRU(max_items=cache_size)
        self.pairs_scored = 0  # pairs sent to the model (cache misses), for tests and logs

    @property
    def entailment_index(self) -> int | None:
        """The entailment label's position in the logits; None for a one-logit model (sigmoid rule)."""
        return self.entail

    def entails(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """One decision per (premise, hypothesis) pair; uncached pairs are scored in batches."""
        keys = [(remove_citations(p), h) for p, h in pairs]
        todo = list(dict.fromkeys(k for k in keys if k not in self._cache))
        todo.sort(key=lambda k: len(k[0]) + len(k[1]))  # similar lengths share a batch: less padding
        fresh: dict[tuple[str, str], bool] = {}
        for lo in range(0, len(todo), self.batch_size):
            batch = todo[lo : lo + self.batch_size]
            fresh.update(zip(batch, self._decide(batch), strict=True))
        out = [fresh[key] if key in fresh else self._cache[key] for key in keys]
        for key, decision in zip(keys, out, strict=True):  # in call order: the last pair is the most recent
            self._cache.put(key, decision)
        return out

    def _decide(self, batch: Sequence[tuple[str, str]]) -> list[bool]:
        import torch

        enc = self.tokenizer([p for p, _ in batch], [h for _, h in batch], padding=True, truncation=True,
                             max_length=self.max_length, return_tensors="pt")
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            logits = self.model(**{k: v.to(device) for k, v in enc.items()}).logits.float()
        self.pairs_scored += len(batch)
        if self.entail is None:  # one logit: sigmoid(logit) > 0.5
            return (logits[:, 0] > 0).tolist()
        return (logits.argmax(dim=-1) == self.entail).tolist()

    def __call__(self, unit: AnswerUnit, response: str) -> bool:
        if unit.claim is None:
            raise ValueError(f"answer unit {unit.id!r} has no claim for NLI matching")
        return self.entails([(response, unit.claim)])[0]


class LexicalClaimMatcher:
    """`--nli-model lexical`: at least `share` of the claim's distinct content tokens (normalised,
    stopwords removed; all tokens when every one is a stopword) occur in the response. Not ALCE's metric."""

    def __init__(self, share: float = LEXICAL_SHARE) -> None:
        if not 0.0 < share <= 1.0:
            raise AscpError(f"the lexical claim share must lie in (0, 1], got {share}.")
        self.share = share
        self.name = f"{LEXICAL}(share={share})"

    @staticmethod
    def _tokens(text: str) -> tuple[set[str], set[str]]:
        words = set(normalize_answer(text).split())
        return words - STOPWORDS, words

    def entails(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        out = []
        for premise, claim in pairs:
            _, seen = self._tokens(premise)
            content, every = self._tokens(claim)
            wanted = content or every
            out.append(bool(wanted) and len(wanted & seen) >= self.share * len(wanted))
        return out

    def __call__(self, unit: AnswerUnit, response: str) -> bool:
        if unit.claim is None:
            raise ValueError(f"answer unit {unit.id!r} has no claim to match")
        return self.entails([(response, unit.claim)])[0]


def load_nli_matcher(spec: str, device: str = "cpu", batch_size: int = 16, max_length: int | None = None,
                     where: str = FLAG) -> NLIClaimMatcher | LexicalClaimMatcher:
    """The one loader of the matcher named by `spec`, for every command: `lexical`, or a local NLI model
    folder (or a model in the local Hugging Face cache; never downloaded) as `NLIClaimMatcher`.

    `device`: cpu, cuda[:n], mps or auto. `max_length`: tokens of premise + hypothesis (truncated
    longest-first); None: the tokenizer's limit, else min(max_position_embeddings, 512)."""
    if check_nli_model(spec, where) == LEXICAL:
        return LexicalClaimMatcher()
    return NLIClaimMatcher(spec, device=device, batch_size=batch_size, max_length=max_length, where=where)


def resolve_matcher(nli_model: str | Matcher | None, device: str = "auto") -> Matcher | None:
    """A matcher from a spec string (`load_nli_matcher`), a ready matcher, or None."""
    if nli_model is None or callable(nli_model):
        return nli_model
    return load_nli_matcher(nli_model, device=device)


def matcher_name(matcher: Matcher | None) -> str | None:
    """What scored the claims, for run configs: the model folder, `lexical(share=...)`, or the callable's name."""
    if matcher is None:
        return None
    return str(getattr(matcher, "name", None) or getattr(matcher, "__qualname__", None) or type(matcher).__name__)


def prefetch(matcher: Matcher | None, units: Sequence[AnswerUnit], texts: Sequence[str]) -> None:
    """Score every (text, claim) pair in batches ahead of the per-pair metric calls, which then hit
    the matcher's cache (a no-op for matchers without `entails`)."""
    batch = getattr(matcher, "entails", None)
    claims = [u.claim for u in units if is_claim_unit(u) and u.claim]
    if batch is not None and claims and texts:
        batch([(t, c) for t in texts for c in claims])
