"""Attribution-steered contrastive decoding (Sec. 6.3, Eq. 5) with the adaptive plausibility constraint.

From round 2 on, the passages the probe flagged as used in earlier rounds form the over-used
set O, and a round whose O is not empty samples each token from

    l' = l(.|q, C) + alpha * [ l(.|q, C \\ O) - l(.|q, O) ]                          (Eq. 5)

restricted to the tokens with p(w|q,C) >= eta * max_w p(w|q,C) (APC, Li et al. 2023), then
tempered and top-p filtered exactly like ordinary sampling. The three conditioned streams
(q,C), (q,C\\O) and (q,O) run as rows of one batch with their own KV caches
(`ascp.lm.hf.generate_streams`); every stream continues with the sampled token.
Frozen setting: alpha = 0.5, eta = 0.1. See docs/decoding.md for the definition of O and the
edge cases.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.prompts import PromptTemplate
from ascp.lm.protocol import LanguageModel, model_name, steers
from ascp.lm.sampling import Generation, LogitMix, SamplingConfig
from ascp.types import Passage

DEFAULT_ALPHA = 0.5  # the frozen setting (Appendix C): every default of the steering strength reads it
DEFAULT_ETA = 0.1  # and of the plausibility cutoff


@dataclass(frozen=True)
class SteerConfig:
    """The steered decoder: strength `alpha`, APC cutoff `eta`, and the two switches of Table 12.

    `contrast=False` drops the alpha term (APC only); `apc=False` drops the plausibility mask
    (contrast only); both off is ordinary sampling.
    """

    alpha: float = DEFAULT_ALPHA
    eta: float = DEFAULT_ETA
    contrast: bool = True
    apc: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise AscpError(f"the steering strength alpha must be a finite number >= 0, got {self.alpha}.")
        if not 0 <= self.eta < 1:  # also rejects NaN
            raise AscpError(f"the plausibility cutoff eta must be in [0, 1), got {self.eta}.")

    @property
    def runs_contrast(self) -> bool:
        """Whether the contrast term has weight, so the (q,C\\O) and (q,O) streams must run."""
        return self.contrast and self.alpha > 0

    @property
    def runs_apc(self) -> bool:
        return self.apc and self.eta > 0

    @property
    def is_identity(self) -> bool:
        """True when l' equals the ordinary logits (alpha = 0 or contrast off, and eta = 0 or APC off)."""
        return not self.runs_contrast and not self.runs_apc

    def to_json(self) -> dict[str, object]:
        return {"alpha": self.alpha, "eta": self.eta, "contrast": self.contrast, "apc": self.apc}


# ----- the over-used set and the three prompts --------------------------------------------------

def overused_set(used_by_round: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """O_t: every passage flagged `used` in any earlier round, in order of first flagging.

    `used_by_round` is the `used` tuple of rounds 1..t-1 (the probe's tau(k) decision on
    normalised scores, or the loop's fixed threshold). O_1 is empty.
    """
    seen: dict[str, None] = {}
    for used in used_by_round:
        for pid in used:
            seen.setdefault(pid, None)
    return tuple(seen)


@dataclass(frozen=True)
class SteerStreams:
    """The three prompts of one steered generation; they differ only in their passage blocks."""

    full: EncodedPrompt  # (q, C): the prompt the response answers and the probe scores
    without: EncodedPrompt  # (q, C \ O), context order; no passages when O covers C
    only: EncodedPrompt  # (q, O): O's passages in C in context order, then the rest of O
    overused: tuple[str, ...]  # O (passage ids, first flagged first), including passages outside C


def steer_prompts(
    lm: LanguageModel,
    question: str,
    context: Sequence[Passage],
    overused: Sequence[Passage],
    template: PromptTemplate | None = None,
    earlier_outputs: Sequence[str] = (),
) -> SteerStreams:
    """Encode (q,C), (q,C\\O) and (q,O) with the same instruction and question tail.

    (q,O) lists the over-used passages that are in C first, in context order (the order the
    model sees them in), then those outside C in the order of O; so when C starts with
    over-used passages the (q,O) prompt shares that prefix with (q,C) and the decoder reuses its
    keys and values.
    """
    if not overused:
        raise ValueError("steering needs a non-empty over-used set")
    out = {p.id for p in overused}
    in_context = {p.id for p in context}
    encode = lambda passages: lm.encode_prompt(question, passages, template, earlier_outputs)  # noqa: E731
    return SteerStreams(
        full=encode(context),
        without=encode([p for p in context if p.id not in out]),
        only=encode([p for p in context if p.id in out] + [p for p in overused if p.id not in in_context]),
        overused=tuple(p.id for p in overused),
    )


# ----- one decoding step ----------------------------------------------------------------------

def apc_keep(full_logits, eta: float):
    """APC: True for tokens with p(w|q,C) >= eta * max_w p(w|q,C), computed as z_w - max z >= log eta.

    The most probable token is always kept (eta < 1); eta = 0 keeps every token.
    """
    import torch

    if eta == 0:
        return torch.ones_like(full_logits, dtype=torch.bool)
    return full_logits - full_logits.max(dim=-1, keepdim=True).values >= math.log(eta)


def steer_logits(full, without, only, config: SteerConfig):
    """The logits one steered step samples from (before temperature and top-p), fp32, per row.

    `full`, `without`, `only`: next-token logits under (q,C), (q,C\\O), (q,O). The contrast
    term uses log-probabilities, alpha * [log_softmax(without) - log_softmax(only)]; the
    full-context term enters as its raw logits, which differ from l(.|q,C) by a per-row
    constant (its log-normaliser) that softmax, argmax, top-k, top-p and APC all ignore. So
    alpha = 0 and eta = 0 return `full` unchanged, bit for bit. APC masks with the full stream
    alone, after the contrast (-inf outside the plausible set).
    """
    import torch

    out = full
    if config.runs_contrast:
        if without is None or only is None:
            raise ValueError("the contrast needs the (q,C\\O) and (q,O) logits")
        out = full + config.alpha * (torch.log_softmax(without, dim=-1) - torch.log_softmax(only, dim=-1))
    if config.runs_apc:
        out = out.masked_fill(~apc_keep(full, config.eta), float("-inf"))
    return out


def _steer_mix(config: SteerConfig, steered: Sequence[bool], streams: bool) -> LogitMix:
    """Rows -> one logits row per item: the full stream, steered where the item is steered."""

    def mix(logits, rows, items):
        out = logits[[r[0] for r in rows]]
        pick = [i for i, item in enumerate(items) if steered[item]]
        if pick:
            without = logits[[rows[i][1] for i in pick]] if streams else None
            only = logits[[rows[i][2] for i in pick]] if streams else None
            out[pick] = steer_logits(out[pick], without, only, config)
        return out

    return mix


def generate_steered(
    lm: LanguageModel,
    items: Sequence[EncodedPrompt | SteerStreams],
    sampling: SamplingConfig,
    seeds: Sequence[int],
    steer: SteerConfig,
    batch_size: int = 8,
    on_batch: Callable[[int], None] | None = None,
    force_streams: bool = False,
) -> list[Generation]:
    """One sample per item: `EncodedPrompt` items decode ordinarily, `SteerStreams` items steered.

    All items are batched together (`batch_size` items, up to three rows each), each with its
    own random stream, drawn exactly as ordinary sampling draws it. Streams whose weight is
    zero are not run: with contrast off (or alpha = 0) a steered item is one row with APC only,
    and when `steer.is_identity` every item takes the ordinary path, so alpha = 0, eta = 0
    reproduces ordinary sampling token for token by construction. `force_streams` runs the
    (q,C\\O) and (q,O) rows even then (for parity checks of the three-stream path).
    """
    steered = [isinstance(item, SteerStreams) for item in items]
    full = [item.full.ids if isinstance(item, SteerStreams) else item.ids for item in items]
    if not any(steered) or (steer.is_identity and not force_streams):
        return lm.generate(full, sampling, seeds, batch_size, on_batch)
    streams = steer.runs_contrast or force_streams
    rows = [
        (item.full.ids, item.without.ids, item.only.ids) if streams and isinstance(item, SteerStreams) else (ids,)
        for item, ids in zip(items, full, strict=True)
    ]
    if not steers(lm):
        raise AscpError(
            f"model {model_name(lm)!r} cannot steer: its backend decodes no lockstep streams (generate_streams); "
            "run without --steer or use a transformers model."
        )
    return lm.generate_streams(rows, sampling, seeds, batch_size, on_batch, _steer_mix(steer, steered, streams))
