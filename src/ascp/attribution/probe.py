"""The probe step, written once: (prompt, fixed response, estimator) -> a reading.

`probe_response` is the one step every caller runs: `ascp attribute` and `ascp.Probe`
(`attribute_one`), the closed loop (`ascp.loop.portfolios`), `ascp validate-probe`
(`ascp.validation.experiment`), the experiments and the evaluation-framework metrics (through
`ascp.Probe`). Callers only choose what to probe; `ProbeSettings` (estimator, its options, the used
threshold) is the one settings object of the probe, held by `ProbeConfig`, the loop's `LoopConfig`,
the experiment plans and the validation's estimator list.

Protocols of `ascp attribute`: fixed target: the request carries the response; it is tokenised and
scored as given. Free protocol: `response` is None; the model first samples it (batched across
requests, one seed per request derived from the run seed and the request id), then the response
text it decoded is scored as `tokenizer(text)` (canonical, like every prompt; almost always the
sampled ids themselves, without the end-of-turn token).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ascp.attribution import (
    DEFAULT_ESTIMATOR,
    ESTIMATORS,
    estimator_facts,
    estimator_names,
    estimator_params,
    facts_of,
    make_estimator,
)
from ascp.attribution.base import Estimator, ProbeInput
from ascp.attribution.sources import check_sources, sentence_sources
from ascp.attribution.spans import check_spans, read_sentences
from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.prompts import PromptTemplate
from ascp.lm.sampling import SamplingConfig, derive_seed
from ascp.params import canonical_name, validate
from ascp.reading import Reading, check_threshold, read_scores
from ascp.types import AttributionRequest, AttributionResult, SpanScorer, TokenLogprobs

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel


@dataclass(frozen=True)
class ProbeSettings:
    """How a fixed response is probed: the estimator with its options, and the threshold rule.

    Every edge (the command line's `--estimator`/`--threshold`, a spec, the Python API) builds this
    once and everything below takes it. `estimator` is a name or a spec in the schedulers' syntax,
    `contextcite(num_ablations=64)`; options written there join `options` (the same key in both is
    refused). threshold: None: the free-generation threshold tau(k) = 0.555 k^-0.633 on normalised
    scores; a number in [0, 1]: a fixed threshold. The name, the options and the threshold are
    checked here (one `AscpError` naming the field), so a bad setting fails before any model loads;
    afterwards `estimator` is the bare name and `options` the validated options.
    """

    estimator: str = DEFAULT_ESTIMATOR
    options: Mapping[str, Any] = field(default_factory=dict)
    threshold: float | None = None
    spans: str | None = None  # "sentences": a reading per response sentence too (`ascp.attribution.spans`)
    sources: str = "passages"  # "sentences": each passage's sentences are the sources (`ascp.attribution.sources`)

    def __post_init__(self) -> None:
        if not isinstance(self.estimator, str):
            raise AscpError(f"estimator must be a name such as loo or bm25 (see `ascp estimators`), got a "
                            f"{type(self.estimator).__name__}.")
        if not isinstance(self.options, Mapping):
            raise AscpError(f"estimator options must be a mapping of option names to values, got a "
                            f"{type(self.options).__name__}.")
        name, written = ESTIMATORS.parse(self.estimator)
        both = sorted(set(written) & set(self.options))
        if both:
            raise AscpError(f"estimator {self.estimator!r}: option {both[0]} is given twice (in the name and as an "
                            "option); give it once.")
        check_threshold(self.threshold)
        check_sources(self.sources)
        options = validate(f"estimator {name!r}", estimator_params(name), {**written, **self.options})
        object.__setattr__(self, "estimator", name)
        object.__setattr__(self, "options", options)
        if check_spans(self.spans) is not None and not estimator_facts(name).token_readings:
            readers = [n for n in estimator_names() if estimator_facts(n).token_readings]
            raise AscpError(f"estimator {name!r} cannot read a part of the response, so spans={self.spans!r} "
                            f"cannot read the response's sentences; use {' or '.join(readers)}.")
        if self.threshold is not None:
            object.__setattr__(self, "threshold", float(self.threshold))

    @property
    def key(self) -> tuple[Any, ...]:
        """What tells two settings apart, hashable (every field, the options in the canonical spec): the key of
        anything that caches or batches by settings."""
        return self.spec, self.threshold, self.spans, self.sources

    @property
    def spec(self) -> str:
        """The estimator with its options as `ProbeSettings` reads it back: `contextcite(num_ablations=64)`."""
        return canonical_name(self.estimator, self.options)

    def build(self, seed: int | None = None) -> Estimator:
        """The estimator; `seed` becomes the `seed` option of a seeded estimator (`needs_seed`, ContextCite's
        masks) unless the options give one."""
        options = dict(self.options)
        if seed is not None and estimator_facts(self.estimator).needs_seed:
            options.setdefault("seed", seed)
        return make_estimator(self.estimator, **options)

    def estimator_for(self, seed: int, request: object) -> Estimator:
        """THE seed rule of every caller (`ascp.Probe`, the loop, the validation): an estimator that draws
        random numbers gets a stream of its own per request, seeded by derive_seed(seed, request,
        estimator name) unless its options fix a seed; any other is built once and shared."""
        if estimator_facts(self.estimator).needs_seed:
            return self.build(derive_seed(seed, request, self.estimator))
        return self._shared

    @functools.cached_property
    def _shared(self) -> Estimator:
        return self.build()


def probe_settings(estimator: str | ProbeSettings | None = None, threshold: float | None = None,
                   options: Mapping[str, Any] | None = None, spans: str | None = None,
                   sources: str | None = None) -> ProbeSettings:
    """The probe's settings from what an edge received: an estimator name or spec (None: the default
    estimator) with a threshold, options, spans and sources (None: passages), or ready `ProbeSettings`
    (then with none beside it)."""
    if isinstance(estimator, ProbeSettings):
        if threshold is not None or options or spans is not None or sources is not None:
            raise AscpError("give the threshold, the spans, the sources and the estimator options inside the "
                            "ProbeSettings, not beside it.")
        return estimator
    return ProbeSettings(DEFAULT_ESTIMATOR if estimator is None else estimator, dict(options or {}), threshold,
                         spans, "passages" if sources is None else sources)


@dataclass(frozen=True)
class ProbeConfig:
    """`ascp attribute` / `ascp.Probe`: how missing responses are generated, and the probe's settings."""

    template: PromptTemplate = PromptTemplate()
    sampling: SamplingConfig = SamplingConfig()
    seed: int = 0
    batch_size: int = 8
    probe: ProbeSettings = field(default_factory=ProbeSettings)


@dataclass(frozen=True)
class ProbeReading:
    """What one probe step returns: the reading by passage id (raw -> normalised -> used), the raw
    scores in context order, the wall time and the tokens the estimator fed the model, and, for
    single-passage ablation estimators on a backend that gives token spans, the per-token
    log-probabilities behind the reading (`AttributionResult.for_span`)."""

    reading: Reading
    raw: np.ndarray
    seconds: float
    tokens_processed: int
    token_logprobs: TokenLogprobs | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # the estimator's `Scores.extra`
    span_scores: Callable[[Sequence[int]], np.ndarray] | None = field(default=None, compare=False, repr=False)
    token_spans: tuple[tuple[int, int], ...] | None = None  # each response token's characters (the backend's)


def probe_response(lm: LanguageModel, estimator: Estimator, item: ProbeInput,
                   threshold: float | None = None) -> ProbeReading:
    """THE probe step: score every passage of `item` for its fixed response and read the scores
    under `threshold` (None: tau(k)), which the estimator sees as `item.threshold`.

    An empty response relies on nothing: every score is 0 and the model is not called."""
    item = replace(item, threshold=threshold)
    ids = [p.id for p in item.passages]
    start = time.perf_counter()
    extra: Mapping[str, Any] = {}
    token_logprobs, scorer, token_spans = None, None, None
    if not item.response_ids:
        raw, tokens = np.zeros(len(ids)), 0
    else:
        scored = estimator.score(lm, item)
        raw, tokens, extra = np.asarray(scored.values, dtype=np.float64), scored.tokens_processed, scored.extra
        scorer = scored.scorer()
        spans = lm.response_token_spans(item.response_text) if scorer is not None else None
        token_spans = tuple(spans) if spans is not None else None
        if token_spans is not None and scored.full_logprobs is not None and scored.ablated_logprobs is not None:
            token_logprobs = TokenLogprobs(scored.full_logprobs, scored.ablated_logprobs, token_spans)
    seconds = time.perf_counter() - start
    return ProbeReading(read_scores(ids, raw, threshold), raw, seconds, tokens, token_logprobs, dict(extra), scorer,
                        token_spans)


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
    """Encode prompts (cut into sentence sources when the settings ask), check lengths, and generate the
    missing responses (free protocol)."""
    prompts = [lm.encode_prompt(r.question, r.passages, config.template) for r in requests]
    sources = [r.passages for r in requests]
    if config.probe.sources == "sentences":  # cut before any generation: a passage may refuse
        cuts = [sentence_sources(p, r.passages, config.template, f"request {r.id!r}")
                for r, p in zip(requests, prompts, strict=True)]
        prompts, sources = [c[0] for c in cuts], [c[1] for c in cuts]
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
    for r, p, s, resp in zip(requests, prompts, sources, responses, strict=True):
        assert resp is not None  # every missing response was generated above
        out.append(ProbeInput(r.question, s, p, resp[0], resp[1]))
    return out


def attribute_one(lm: LanguageModel, estimator: Estimator, request: AttributionRequest, item: ProbeInput,
                  config: ProbeConfig) -> AttributionResult:
    """Probe one prepared request and package the result."""
    probed = probe_response(lm, estimator, item, config.probe.threshold)
    reading = probed.reading
    spans = (read_sentences([p.id for p in item.passages], probed, item.response_text,
                            reading.threshold, f"request {request.id!r}", getattr(lm, "name", "?"))
             if config.probe.spans == "sentences" and item.response_text.strip() else ())
    return AttributionResult(
        id=request.id,
        estimator=estimator.name,
        response=item.response_text,
        response_tokens=len(item.response_ids),
        reading=reading,
        prompt=item.prompt.text,
        passage_spans=item.prompt.passage_char_spans(),
        seconds=probed.seconds,
        token_logprobs=probed.token_logprobs,
        unit=facts_of(estimator).unit,
        extra=dict(probed.extra),
        tokens_processed=probed.tokens_processed,
        spans=spans,
        sources=config.probe.sources,
        scorer=(SpanScorer(probed.span_scores, probed.token_spans)
                if probed.span_scores is not None and probed.token_spans is not None else None),
    )
