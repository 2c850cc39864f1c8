"""What the service computes, apart from HTTP: request bodies checked into jobs, and the jobs run on
the worker's model exactly as `ascp attribute`, `ascp cite` and `ascp.run_portfolio` run them.

A body is checked whole before it is queued (`parse_attribute`, `parse_portfolio`): the same
parser and sentences as `ascp attribute`'s input lines, the service's limits (`ServeLimits`), the
probe settings (`probe_settings`). What needs the tokenizer (the token limit, the model's window) is
checked on the worker, per job, before the batch runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ascp.attribution.probe import ProbeSettings, probe_settings
from ascp.errors import AscpError
from ascp.lm.sampling import SamplingConfig
from ascp.loop.portfolios import LoopConfig
from ascp.serve.jobs import Job, Worker
from ascp.types import AttributionRequest, Case

REQUEST_FIELDS = ("id", "question", "passages", "response")
ATTRIBUTE_OPTIONS = ("estimator", "threshold", "spans", "sources", "seed")
CITE_OPTIONS = ("estimator", "threshold", "sources", "seed", "markers")
PORTFOLIO_FIELDS = ("id", "question", "pool", "answers", "policy", "k", "T", "estimator", "threshold", "spans",
                    "seed", "max_new_tokens")


class TooLarge(AscpError):
    """A request over one of the service's limits (HTTP 413)."""


@dataclass(frozen=True)
class ServeLimits:
    """What one request may hold: body bytes, passages (or pool size), prompt plus response tokens
    (None: the model's context window), and the waiting jobs and batch size of the worker."""

    max_body_bytes: int = 1_000_000
    max_passages: int = 100
    max_tokens: int | None = None
    max_queue: int = 64
    max_batch: int = 8

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_passages", "max_queue", "max_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AscpError(f"--{name.replace('_', '-')} must be a positive whole number, got {value!r}.")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise AscpError(f"--max-tokens must be a positive whole number, got {self.max_tokens!r}.")


@dataclass(frozen=True)
class ServeDefaults:
    """The settings a request does not choose (`ascp attribute`'s options with its defaults), and the
    defaults of those it may choose (estimator, threshold, seed)."""

    estimator: str | None = None
    threshold: float | None = None
    seed: int = 0
    instruction: str = "commit"
    template: str | None = None
    system: str = ""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        probe_settings(self.estimator, self.threshold)  # a bad default fails at start, not per request


@dataclass(frozen=True)
class AttributeJob:
    """A checked /v1/attribute or /v1/cite body: the request, how it is probed, and for cite the markers."""

    request: AttributionRequest
    settings: ProbeSettings
    seed: int
    markers: str | None = None


def _check_fields(where: str, body: Mapping[str, Any], allowed: Sequence[str]) -> None:
    unknown = [key for key in body if key not in allowed]
    if unknown:
        raise AscpError(f"{where}: unknown field {unknown[0]!r}; a request takes {', '.join(allowed)}.")


def _seed(where: str, body: Mapping[str, Any], default: int) -> int:
    seed = body.get("seed", default)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise AscpError(f"{where}: 'seed' must be a whole number >= 0, got {seed!r}.")
    return seed


def _threshold(body: Mapping[str, Any], defaults: ServeDefaults) -> float | None:
    return body.get("threshold", defaults.threshold)  # an explicit null is tau(k), whatever the default


def parse_attribute(body: Any, defaults: ServeDefaults, limits: ServeLimits,
                    markers: str | None = None) -> AttributeJob:
    """A /v1/attribute (or, with `markers`, /v1/cite) body as one checked job; one sentence on error."""
    from ascp.attribution.requests import parse_request

    where = "the request" if markers is None else "the cite request"
    if not isinstance(body, dict):
        raise AscpError(f"{where} must be a JSON object with id, question, passages and response, not "
                        f"{type(body).__name__}.")
    _check_fields(where, body, (*REQUEST_FIELDS, *(ATTRIBUTE_OPTIONS if markers is None else CITE_OPTIONS)))
    passages = body.get("passages")
    if isinstance(passages, list) and len(passages) > limits.max_passages:
        raise TooLarge(f"{where} holds {len(passages)} passages, over this service's limit of "
                       f"{limits.max_passages}; send fewer or start it with a larger --max-passages.")
    request = parse_request(where, body)
    if markers is not None:
        from ascp.metrics.citations import MARKERS

        markers = body.get("markers", markers)
        if markers not in MARKERS:
            raise AscpError(f"{where}: 'markers' must be positions or ids, got {markers!r}.")
    spans = "sentences" if markers is not None else body.get("spans")
    settings = probe_settings(body.get("estimator", defaults.estimator), _threshold(body, defaults), spans=spans,
                              sources=body.get("sources"))
    return AttributeJob(request, settings, _seed(where, body, defaults.seed), markers)


@dataclass(frozen=True)
class PortfolioJob:
    """A checked /v1/portfolio body: one case and the loop's settings, built once (`LoopConfig`)."""

    case: Case
    config: LoopConfig


def parse_portfolio(body: Any, defaults: ServeDefaults, limits: ServeLimits) -> PortfolioJob:
    """A /v1/portfolio body as one checked case and loop settings (what `ascp.run_portfolios` builds from
    the same keywords); one sentence on error."""
    from ascp.api import make_case
    from ascp.lm.prompts import prompt_template
    from ascp.loop.portfolios import check_pools
    from ascp.params import is_whole

    where = "the portfolio request"
    if not isinstance(body, dict):
        raise AscpError(f"{where} must be a JSON object with question and pool, not {type(body).__name__}.")
    _check_fields(where, body, PORTFOLIO_FIELDS)
    for key in ("question", "pool"):
        if key not in body:
            raise AscpError(f"{where}: the field {key!r} is missing.")
    pool = body["pool"]
    if not isinstance(pool, list) or not pool:
        raise AscpError(f"{where}: 'pool' must be a non-empty list of passages (objects with id and text).")
    if len(pool) > limits.max_passages:
        raise TooLarge(f"{where}'s pool holds {len(pool)} passages, over this service's limit of "
                       f"{limits.max_passages}; send fewer or start it with a larger --max-passages.")
    case = make_case(body["question"], pool, body.get("answers"), id=body.get("id", "question"))
    max_new_tokens = body.get("max_new_tokens", defaults.sampling.max_new_tokens)
    if not is_whole(max_new_tokens):
        raise AscpError(f"{where}: 'max_new_tokens' must be a whole number >= 1, got {max_new_tokens!r}.")
    # building the config checks the policy, k, T, the estimator and the threshold
    config = LoopConfig(policy=body.get("policy", "ascp"), k=body.get("k", 5), T=body.get("T", 5),
                        probe=probe_settings(body.get("estimator", defaults.estimator), _threshold(body, defaults),
                                             spans=body.get("spans")),
                        seed=_seed(where, body, defaults.seed),
                        template=prompt_template(defaults.instruction, defaults.template, defaults.system),
                        sampling=SamplingConfig(max_new_tokens=max_new_tokens))
    check_pools([case], config.k)
    return PortfolioJob(case, config)


class Service:
    """The model, the defaults and limits, and the worker that runs every job on the model."""

    def __init__(self, model: Any, defaults: ServeDefaults, limits: ServeLimits) -> None:
        from ascp.lm.prompts import prompt_template

        self.model = model
        self.defaults = defaults
        self.limits = limits
        self.template = prompt_template(defaults.instruction, defaults.template, defaults.system)
        self.worker = Worker(limits.max_queue, limits.max_batch)
        self._probes: dict[tuple, Any] = {}

    # -- jobs ---------------------------------------------------------------------------------------
    def attribute_job(self, parsed: AttributeJob) -> Job:
        key = ("attribute", *parsed.settings.key, parsed.seed)
        return Job(key, parsed, self._run_attribute)

    def portfolio_job(self, parsed: PortfolioJob) -> Job:
        return Job(None, parsed, self._run_portfolio)

    def _probe(self, parsed: AttributeJob) -> Any:
        from ascp.api import Probe

        key = (*parsed.settings.key, parsed.seed)
        if key not in self._probes:
            d = self.defaults
            self._probes[key] = Probe(self.model, parsed.settings, seed=parsed.seed, instruction=d.instruction,
                                      sampling=d.sampling, template=d.template, system=d.system)
        return self._probes[key]

    def _check_tokens(self, request: AttributionRequest) -> None:
        """The service's token limit, before any pass. The model's window is the probe's own check
        (`prepare_inputs`); a batch it refuses is rerun a job at a time, so the request fails alone."""
        limit = self.limits.max_tokens
        if limit is None:
            return
        prompt = self.model.encode_prompt(request.question, request.passages, self.template).num_tokens
        response = (self.defaults.sampling.max_new_tokens if request.response is None
                    else len(self.model.encode(request.response)))
        if prompt + response > limit:
            raise TooLarge(f"request {request.id!r} holds {prompt} prompt and {response} response tokens, over this "
                           f"service's limit of {limit} tokens per request; send fewer or shorter passages.")

    def _run_attribute(self, batch: Sequence[Job]) -> list[Any]:
        outcomes: list[Any] = [None] * len(batch)
        ready: list[int] = []
        for i, job in enumerate(batch):
            try:
                self._check_tokens(job.payload.request)
                ready.append(i)
            except AscpError as exc:
                outcomes[i] = exc
        if ready:
            probe = self._probe(batch[ready[0]].payload)
            results = probe.attribute_many([batch[i].payload.request for i in ready])
            for i, result in zip(ready, results, strict=True):
                markers = batch[i].payload.markers
                if markers is None:
                    outcomes[i] = result.to_json()
                else:
                    from ascp.metrics.citations import cite_response

                    outcomes[i] = cite_response(result, markers).to_json()
        return outcomes

    def _run_portfolio(self, batch: Sequence[Job]) -> list[Any]:
        from ascp.embed.embedders import embed
        from ascp.loop.runner import run_policy

        (job,) = batch
        parsed: PortfolioJob = job.payload
        return [run_policy(self.model, [parsed.case], parsed.config, embed)[0].to_json()]
