"""Fitting an attention map for one model (`ascp fit-probe`): contexts, exact LOO, a ridge fit, a band.

Contexts are built from a data file's training positions (by default HotpotQA 0-199; the fit
never sees ASQA, whose pools the fast-probe benchmark uses): per item a width k drawn from
`FIT_WIDTHS` among those its pool allows, k passages drawn from the pool in random order, and the
model's own sampled response. Each context is read twice: one attention pass (the features) and
exact deletion `loo` (the labels, nats per response token). The attention pass (with its knockout
passes) leaves the full prompt in the prefix store, so `loo` feeds the prompt once.

The map is a ridge regression with an intercept, alpha chosen by cross-validation: LOO scores are
signed (a passage can lower the response's likelihood), the (layer, head) features are many and
strongly collinear for a few hundred contexts, and ridge's closed form fits in a second; a
non-negative least squares would force every head to count positively. The knockout score is one
more column, left unpenalised in effect (it is on `loo`'s own scale, so its standardised weight is
large next to any single head's). The gated estimator's band is then the smallest margin (nats per
response token) whose gate, replayed on the development split with its exact scores, agrees with
`loo`'s `used` on at least `TARGET_AGREEMENT` of the passage decisions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ascp.attribution.attention import attention_model
from ascp.attribution.attention_map import AttentionMap, model_digest
from ascp.attribution.base import ProbeInput
from ascp.attribution.gated import gate
from ascp.attribution.loo import LeaveOneOut
from ascp.errors import AscpError
from ascp.fitprobe.readings import FitReadings, ReadContext, context_key
from ascp.reading import normalize, used_cut, used_mask
from ascp.types import Case, Passage

if TYPE_CHECKING:
    from ascp.lm.encoded import EncodedPrompt
    from ascp.lm.protocol import LanguageModel
    from ascp.lm.sampling import SamplingConfig

FIT_WIDTHS = (3, 5, 10, 24)
TARGET_AGREEMENT = 0.99
BAND_GRID = tuple(float(b) for b in np.round(np.arange(0.0, 0.5 + 1e-9, 0.0025), 4))
"""The bands `size_band` tries, in nats per response token (none reaching the target: an infinite band)."""


def draw_contexts(cases: Sequence[tuple[int, Case]], seed: int,
                  widths: Sequence[int] = FIT_WIDTHS) -> list[tuple[int, Case, tuple[Passage, ...]]]:
    """Per (position, case): a width among `widths` that its pool allows and that many passages of
    its pool in random order (reproducible from `seed` and the case id); cases whose pool is smaller
    than every width are left out."""
    from ascp.lm.sampling import derive_seed

    out = []
    for position, case in cases:
        allowed = [w for w in widths if w <= len(case.pool)]
        if not allowed:
            continue
        rng = np.random.default_rng(derive_seed(seed, f"fit-context:{case.id}"))
        k = int(rng.choice(allowed))
        picked = rng.choice(len(case.pool), size=k, replace=False)
        out.append((position, case, tuple(case.pool[int(i)] for i in picked)))
    return out


def read_contexts(lm: LanguageModel, drawn: Sequence[tuple[int, Case, tuple[Passage, ...]]],
                  sampling: SamplingConfig, seed: int, batch_size: int = 8,
                  progress: Callable[[str], None] | None = None,
                  readings: FitReadings | None = None) -> tuple[list[ReadContext], dict[str, int]]:
    """Sample each context's response, then read its attention features and exact LOO. Contexts
    whose prompt and response do not fit the window, or whose response is empty, are left out
    (counted in the second value).

    With `readings`, contexts the file holds are taken from it and each new one is appended as soon
    as it is read. Responses are sampled in batches of `batch_size` aligned to the item positions
    (position // batch_size), the same batches however the positions are split between runs, so a
    resumed or divided fit reads what one uninterrupted run reads."""
    from ascp.attribution.probe import sample_responses
    from ascp.lm.sampling import derive_seed

    skipped = {"too_long": 0, "empty_response": 0}
    known = readings.load() if readings is not None else {}
    batches: dict[int, list[tuple[tuple[int, Case, tuple[Passage, ...]], EncodedPrompt]]] = {}
    for entry in drawn:
        prompt = lm.encode_prompt(entry[1].question, entry[2])
        try:
            lm.check_fits(f"case {entry[1].id!r}", prompt.num_tokens, sampling.max_new_tokens)
        except AscpError:
            skipped["too_long"] += 1
            continue
        batches.setdefault(entry[0] // batch_size, []).append((entry, prompt))
    total = sum(len(b) for b in batches.values())
    out: list[ReadContext] = []
    for batch in batches.values():
        keys = [context_key(entry[1].id, (p.id for p in entry[2])) for entry, _ in batch]
        if all(key in known and known[key].knockout is not None for key in keys):
            out.extend(known[key] for key in keys)
            continue
        seeds = [derive_seed(seed, f"fit-response:{entry[1].id}") for entry, _ in batch]
        responses = sample_responses(lm, [prompt for _, prompt in batch], sampling, seeds, batch_size)
        for ((position, case, passages), prompt), (text, ids), key in zip(batch, responses, keys, strict=True):
            earlier = known.get(key)
            if earlier is not None and earlier.knockout is not None:
                out.append(earlier)
                continue
            if not ids:
                skipped["empty_response"] += 1
                continue
            start = time.perf_counter()
            read = attention_model(lm, "attention").read_attention(prompt, ids)
            middle = time.perf_counter()
            if earlier is not None:  # read before knockout scores existed: add them, keep its exact loo
                check_same_reading(earlier, read.features, ids)
                context = replace(earlier, knockout=read.knockout, response_ids=tuple(ids),
                                  attention_seconds=middle - start, attention_tokens=read.tokens_processed)
            else:
                exact = LeaveOneOut().score(lm, ProbeInput(case.question, passages, prompt, text, ids))
                context = ReadContext(case.id, position, tuple(p.id for p in passages), read.features,
                                      np.asarray(exact.values, dtype=np.float64), len(ids), prompt.num_tokens,
                                      middle - start, time.perf_counter() - middle, read.tokens_processed,
                                      exact.tokens_processed, read.spans, tuple(ids), read.knockout)
            end = time.perf_counter()
            if readings is not None:
                readings.append(context)
            out.append(context)
            if progress is not None:
                progress(f"{len(out)}/{total} contexts read (case {case.id}, k={len(passages)}, "
                         f"{end - start:.0f} s)")
    out.sort(key=lambda c: c.position)
    return out, skipped


def check_same_reading(earlier: ReadContext, features: np.ndarray, response: Sequence[int]) -> None:
    """One sentence unless a context read again is the one read before: the same response (its ids
    where the reading kept them, else its length) and the same attention features."""
    same_response = (tuple(response) == earlier.response_ids if earlier.response_ids
                     else len(response) == earlier.response_tokens)
    if not same_response or not np.allclose(features, earlier.features, rtol=1e-4, atol=1e-6):
        raise AscpError(f"case {earlier.case_id!r}: the response sampled again differs from the one in the readings "
                        "file, so its knockout scores cannot join that reading's exact loo; read it anew with "
                        "another --readings file.")


def fit_weights(contexts: Sequence[ReadContext]) -> tuple[np.ndarray, float, float, float]:
    """Exact LOO on the knockout score by least squares, then the residual on the flattened attention
    features by ridge regression (standardised, alpha by 5-fold CV). Returns (weights of shape
    (layers, heads) on the raw features, knockout weight, intercept, alpha)."""
    from sklearn.linear_model import RidgeCV

    if not contexts:
        raise AscpError("no context could be read for the fit; give more training positions.")
    missing = [c.case_id for c in contexts if c.knockout is None]
    if missing:
        raise AscpError(f"{len(missing)} readings (case {missing[0]!r} first) have no knockout scores; read them "
                        "with ascp fit-probe --readings FILE, which adds them.")
    shape = contexts[0].features.shape[1:]
    x = np.concatenate([c.features.reshape(c.k, -1) for c in contexts])
    knockout = np.concatenate([np.asarray(c.knockout) for c in contexts])
    y = np.concatenate([c.loo for c in contexts])
    slope, offset = np.polyfit(knockout, y, 1) if np.ptp(knockout) > 0 else (0.0, float(y.mean()))
    residual = y - slope * knockout - offset
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    ridge = RidgeCV(alphas=np.logspace(-3, 4, 22), cv=min(5, len(y))).fit((x - mean) / scale, residual)
    weights = ridge.coef_ / scale
    intercept = float(offset + ridge.intercept_ - (mean / scale) @ ridge.coef_)
    return weights.reshape(shape), float(slope), intercept, float(ridge.alpha_)


def gated_reading(fitted: AttentionMap, context: ReadContext, band: float,
                  threshold: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The gate replayed on a read context under the probe's threshold rule (None: tau(k)); its exact
    scores stand in for the exact passes."""
    return gate(context.predicted(fitted), used_cut(context.k, threshold), band,
                lambda indices: context.loo[indices])


def agreement(fitted: AttentionMap, contexts: Sequence[ReadContext], band: float | None,
              threshold: float | None = None) -> tuple[float, float]:
    """(share of passage decisions whose `used` equals `loo`'s under the threshold rule (None: tau(k);
    a number: that fixed threshold), share of passages verified exactly) under the gate with `band`
    (None: the attention prediction alone)."""
    same = verified = total = 0
    for c in contexts:
        cut = used_cut(c.k, threshold)
        if band is None:
            raw, exact = c.predicted(fitted), np.zeros(c.k, dtype=bool)
        else:
            raw, exact = gated_reading(fitted, c, band, threshold)
        same += int((used_mask(normalize(raw), cut) == used_mask(normalize(c.loo), cut)).sum())
        verified += int(exact.sum())
        total += c.k
    return same / max(total, 1), verified / max(total, 1)


def size_band(fitted: AttentionMap, dev: Sequence[ReadContext], target: float = TARGET_AGREEMENT) -> float:
    """The smallest band of `BAND_GRID` whose gate agrees with `loo` on >= `target` of the dev decisions
    (none: an infinite band, which verifies every passage)."""
    for band in BAND_GRID:
        if agreement(fitted, dev, band)[0] >= target:
            return band
    return float("inf")


def spearman(fitted: AttentionMap | None, contexts: Sequence[ReadContext], band: float | None = None) -> float:
    """Spearman correlation of the (gated, or attention-only) scores with exact LOO, pooled over passages."""
    from scipy.stats import spearmanr

    if fitted is None or not contexts:
        return float("nan")
    predicted = [gated_reading(fitted, c, band)[0] if band is not None else c.predicted(fitted)
                 for c in contexts]
    rho = spearmanr(np.concatenate(predicted), np.concatenate([c.loo for c in contexts]))[0]
    return float(rho)


def describe_split(fitted: AttentionMap, contexts: Sequence[ReadContext], band: float) -> dict[str, Any]:
    """What the fit file reports for a split."""
    attention_agree, _ = agreement(fitted, contexts, None)
    gated_agree, verified = agreement(fitted, contexts, band)
    loo_tokens = sum(c.loo_tokens for c in contexts)
    return {
        "contexts": len(contexts), "passages": int(sum(c.k for c in contexts)),
        "widths": sorted({c.k for c in contexts}),
        "spearman_attention": round(spearman(fitted, contexts), 4),
        "spearman_gated": round(spearman(fitted, contexts, band), 4),
        "used_agreement_attention": round(attention_agree, 4),
        "used_agreement_gated": round(gated_agree, 4),
        "verified_share": round(verified, 4),
        "attention_tokens_per_probe": round(sum(c.attention_tokens for c in contexts) / max(len(contexts), 1), 1),
        "loo_tokens_per_probe": round(loo_tokens / max(len(contexts), 1), 1),
    }


def fit_map(lm: LanguageModel, train: Sequence[ReadContext], dev: Sequence[ReadContext],
            provenance: dict[str, Any], target: float = TARGET_AGREEMENT) -> AttentionMap:
    """Fit the weights on `train`, size the band on `dev`, and record both splits' quality."""
    if not dev:
        raise AscpError("no development context could be read, so the gated band cannot be sized; give more "
                        "development positions.")
    weights, knockout, intercept, alpha = fit_weights(train)
    fingerprint = getattr(lm, "fingerprint", None) or ""
    fitted = AttentionMap(weights, knockout, intercept, float("inf"), str(getattr(lm, "name", "?")), fingerprint,
                          model_digest(lm))
    band = size_band(fitted, dev, target)
    fit = {**provenance, "ridge_alpha": alpha, "target_agreement": target,
           "train": describe_split(fitted, train, band), "dev": describe_split(fitted, dev, band)}
    return fitted.with_band(band, fit)


__all__ = ["BAND_GRID", "FIT_WIDTHS", "TARGET_AGREEMENT", "ReadContext", "agreement", "check_same_reading",
           "describe_split",
           "draw_contexts", "fit_map", "fit_weights", "gated_reading", "read_contexts", "size_band", "spearman"]
