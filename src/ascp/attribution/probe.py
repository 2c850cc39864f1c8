"""Run an estimator over attribution requests: the fixed-target and the free protocol.

Fixed target: the request carries the response; it is tokenised and scored as given.
Free protocol: `response` is None; the model first samples it (batched across requests, one
seed per request derived from the run seed and the request id), then the response text it
decoded is scored as `tokenizer(text)` (canonical, like every prompt; almost always the sampled
ids themselves, without the end-of-turn token).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ascp.attribution.base import Estimator, ProbeInput
from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.prompts import PromptTemplate
from ascp.lm.sampling import SamplingConfig, derive_seed
from ascp.reading import check_threshold, read_scores
from ascp.types import AttributionRequest, AttributionResult, TokenLogprobs

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


@dataclass(frozen=True)
class ProbeConfig:
    template: PromptTemplate = PromptTemplate()
    sampling: SamplingConfig = SamplingConfig()
    seed: int = 0
    # None: the free-generation threshold tau(k) = 0.555 k^-0.633; a number in [0, 1]: a fixed threshold.
    threshold: float | None = None
    batch_size: int = 8

    def __post_init__(self) -> None:
        check_threshold(self.threshold)


def sample_responses(
    lm: LanguageModel, prompts: Sequence[EncodedPrompt], sampling: SamplingConfig, seeds: Sequence[int],
    batch_size: int = 8, progress: Callable[[int], None] | None = None,
) -> list[tuple[str, tuple[int, ...]]]:
    """The free protocol's responses: one sample per prompt (its own seed), as (text, ids) with the
    ids `tokenizer(text)` of the text reported (canonical); ids are empty for an empty response."""
    gens = lm.generate([p.ids for p in prompts], sampling, seeds, batch_size, on_batch=progress)
    return [(g.text, tuple(lm.encode(g.text))) for g in gens]


def prepare_inputs(
    lm: LanguageModel, requests: Sequence[AttributionRequest], config: ProbeConfig,
    progress: Callable[[int], None] | None = None,
) -> list[ProbeInput]:
    """Encode prompts, check lengths, and generate the missing responses (free protocol)."""
    prompts = [lm.encode_prompt(r.question, r.passages, config.template) for r in requests]
    responses: list[tuple[str, tuple[int, ...]] | None] = []
    for r, p in zip(requests, prompts, strict=True):
        if r.response is None:
            lm.check_fits(f"request {r.id!r}", p.num_tokens, config.sampling.max_new_tokens)
            responses.append(None)
            continue
        ids = tuple(lm.encode(r.response))
        if not ids:
            raise AscpError(f"request {r.id!r}: the response tokenises to nothing; give a non-empty response.")
        lm.check_fits(f"request {r.id!r}", p.num_tokens, len(ids))
        responses.append((r.response, ids))
    todo = [i for i, resp in enumerate(responses) if resp is None]
    if todo:
        seeds = [derive_seed(config.seed, requests[i].id) for i in todo]
        sampled = sample_responses(lm, [prompts[i] for i in todo], config.sampling, seeds, config.batch_size, progress)
        for i, (text, ids) in zip(todo, sampled, strict=True):
            if not ids:
                raise AscpError(
                    f"request {requests[i].id!r}: the model generated an empty response; "
                    "try another seed or give the response."
                )
            lm.check_fits(f"request {requests[i].id!r}", prompts[i].num_tokens, len(ids))
            responses[i] = (text, ids)
    out = []
    for r, p, resp in zip(requests, prompts, responses, strict=True):
        assert resp is not None  # every missing response was generated above
        out.append(ProbeInput(r.question, r.passages, p, resp[0], resp[1]))
    return out


def attribute_one(lm: LanguageModel, estimator: Estimator, request: AttributionRequest, item: ProbeInput,
                  config: ProbeConfig) -> AttributionResult:
    """Score one prepared request and package the result."""
    start = time.perf_counter()
    scored = estimator.score(lm, item)
    seconds = time.perf_counter() - start
    reading = read_scores([p.id for p in request.passages], scored.values, config.threshold)
    token_logprobs = None
    spans = getattr(lm, "response_token_spans", None)
    if scored.full_logprobs is not None and scored.ablated_logprobs is not None and callable(spans):
        token_logprobs = TokenLogprobs(scored.full_logprobs, scored.ablated_logprobs, tuple(spans(item.response_text)))
    return AttributionResult(
        id=request.id,
        estimator=estimator.name,
        response=item.response_text,
        response_tokens=len(item.response_ids),
        scores=reading.scores,
        normalized=reading.normalized,
        used=reading.used,
        prompt=item.prompt.text,
        passage_spans=item.prompt.passage_char_spans(),
        seconds=seconds,
        threshold=reading.threshold,
        token_logprobs=token_logprobs,
    )
