"""The library front door: load a model, attribute a response, run a portfolio.

    import ascp
    model = ascp.load_model("default")
    att = ascp.attribute(question, passages, model=model)          # which passages were used
    pf = ascp.run_portfolio(question, pool, policy="ascp", k=5, T=5, model=model)

`ascp attribute` and `ascp run` are thin clients of these functions: the same inputs give the
same numbers. Passages may be dicts `{"id", "title"?, "text"}`, `ascp.Passage`s or plain strings
(ids "1".."n"); their order is the context order (attribution) or the ranking (a pool), and is
never changed. Any object with the model seam's methods (`ascp.lm.protocol.LanguageModel`) can
stand in for the model.

Every input a user can get wrong is checked here (or in `ascp.attribution.requests`, the parser
`ascp attribute` shares) before any model is loaded or run, and refused with one `AscpError`
sentence: wrong types, empty or invalid-Unicode text, k, T, seeds and thresholds out of range.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascp.attribution import DEFAULT_ESTIMATOR
from ascp.errors import AscpError
from ascp.lm.prompts import prompt_template
from ascp.params import is_whole
from ascp.types import AnswerUnit, AttributionRequest, AttributionResult, Case, Passage, Portfolio

if TYPE_CHECKING:
    from ascp.attribution.probe import ProbeSettings
    from ascp.lm.prompts import PromptTemplate
    from ascp.lm.protocol import LanguageModel
    from ascp.lm.sampling import SamplingConfig
    from ascp.lm.steering import SteerConfig
    from ascp.metrics.answers import Matcher
    from ascp.metrics.citations import CitedResponse
    from ascp.schedulers.base import EmbedFn

PassageLike = Passage | Mapping[str, Any] | str


def _shown(value: object, limit: int = 60) -> str:
    """`repr(value)`, cut to `limit` characters so a huge wrong value keeps the sentence short."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return f"a {type(value).__name__} too large to print"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: object) -> str:
    """'None', 'a list', 'an int': what a wrong value is, for a sentence."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def _whole(name: str, value: object, low: int | None = None) -> int:
    """`value` as an int when it is a whole number (not a bool) of at least `low`."""
    if not is_whole(value) or (low is not None and value < low):
        bound = f" of at least {low}" if low is not None else ""
        raise AscpError(f"{name} must be a whole number{bound}, got {_shown(value)}.")
    return int(value)


def _string(name: str, value: object) -> str:
    """`value` when it is a string of valid Unicode."""
    from ascp.attribution.requests import check_unicode

    if not isinstance(value, str):
        raise AscpError(f"{name} must be a string, got {type(value).__name__}.")
    return check_unicode(name, value)


def _prompt_options(instruction: object, template: object, system: object) -> None:
    """The types of the prompt options (their values are checked by `prompt_template`)."""
    from ascp.lm.prompts import PromptTemplate

    if not isinstance(instruction, str):
        raise AscpError(f"instruction must be a string such as commit or integrate, got {type(instruction).__name__}.")
    if template is not None and not isinstance(template, PromptTemplate):
        _string("template", template)
    _string("system", system)


def load_model(spec: str = "default", device: str = "auto", dtype: str = "auto",
               backend: str = "auto", request_cache: str | Path | None = None,
               prefix_cache_mb: float | None = None) -> LanguageModel:
    """A model by the spec the CLI's `--model` accepts: `default` (the embedded SmolLM2-135M), a
    transformers model folder, a `.gguf` file or a cached hub id. Never downloads.

    `backend`: `auto` runs the embedded `default` model with transformers (measured faster on the
    shipped workloads, docs/backends.md), another GGUF file on the CPU with llama.cpp where the
    `llamacpp` extra is installed, and everything else with transformers; `hf` always uses transformers (the exactness
    reference, and the GPU path); `llamacpp` insists on llama.cpp.

    `request_cache`: a SQLite file (or `"default"`, `$ASCP_HOME/requests.sqlite`) remembering every
    generation and scored prompt across runs (`ascp.lm.request_cache`); None computes everything.
    `prefix_cache_mb`: the megabytes of prompt keys and values kept for reuse within the process
    (`ascp.lm.prefixes`; 0: none; None: `$ASCP_PREFIX_CACHE_MB`, default 2048)."""
    from ascp.lm.resolve import assemble_model

    return assemble_model(spec, device, dtype, backend, request_cache, prefix_cache_mb)


@functools.lru_cache(maxsize=1)
def default_model() -> LanguageModel:
    """The embedded default model, loaded once per process (what `model=None` means)."""
    return load_model("default")


def as_passages(items: Iterable[PassageLike], what: str = "passages") -> tuple[Passage, ...]:
    """Passages from dicts, `Passage`s or strings, in the given order; ids must be unique."""
    from ascp.attribution.requests import parse_passages

    if isinstance(items, (str, Mapping, Passage)):
        raise AscpError(f"{what} must be a list of passages (dicts, ascp.Passage or strings), not a single "
                        f"{type(items).__name__}; wrap it in a list.")
    if not isinstance(items, Iterable):
        raise AscpError(f"{what} must be a list of passages (dicts, ascp.Passage or strings), not "
                        f"{_kind(items)}.")
    raw: list[Any] = []
    for i, item in enumerate(items, start=1):
        if isinstance(item, Passage):
            raw.append({"id": item.id, "title": item.title, "text": item.text})
        elif isinstance(item, str):
            raw.append({"id": str(i), "text": item})
        elif isinstance(item, Mapping):
            raw.append(dict(item))
        else:
            raise AscpError(f"{what}: item {i} is a {type(item).__name__}; give a dict, an ascp.Passage or a string.")
    return parse_passages(what, raw)


class Probe:
    """The causal probe bound to one model and estimator: reuse it for many requests.

    estimator: a registered estimator name (`loo`, the default, and the others `ascp estimators`
        lists), a spec with its options (`contextcite(num_ablations=64)`), or `ascp.ProbeSettings`;
        `estimator_options` are its parameters; an estimator that draws random numbers
        (`needs_seed`, ContextCite's masks) draws a stream of its own per request, seeded from `seed`
        and the request id, unless its options give a seed (`ProbeSettings.estimator_for`).
    threshold: the used threshold on normalised scores (None: tau(k) = 0.555 k^-0.633).
    spans: "sentences" adds a reading per response sentence (`AttributionResult.spans`), read from the
        passes the estimator already ran (every estimator declaring `token_readings`); None: the whole
        response only. Any other character spans: `AttributionResult.read_spans`.
    sources: "passages" (the default) or "sentences": each passage's sentences are the sources (ids
        `<passage id>#<n>`), the prompt unchanged (`ascp.attribution.sources`).
    instruction: `commit` or `integrate`; template: your own prompt instead (a format string with
        `{passages}` then `{question}`, see `PromptTemplate.from_format`, or a `PromptTemplate`);
    system: a system message; sampling: how missing responses are generated.
    """

    def __init__(self, model: LanguageModel | None, estimator: str | ProbeSettings = DEFAULT_ESTIMATOR, *,
                 seed: int = 0, threshold: float | None = None, instruction: str = "commit",
                 sampling: SamplingConfig | None = None, batch_size: int = 8,
                 template: PromptTemplate | str | None = None, system: str = "", spans: str | None = None,
                 sources: str | None = None, **estimator_options: Any) -> None:
        from ascp.attribution.probe import ProbeConfig, probe_settings
        from ascp.lm.sampling import SamplingConfig

        _whole("seed", seed)
        _whole("batch_size", batch_size, 1)
        _prompt_options(instruction, template, system)
        if sampling is not None and not isinstance(sampling, SamplingConfig):
            raise AscpError(f"sampling must be an ascp.SamplingConfig or None, got {type(sampling).__name__}.")
        settings = probe_settings(estimator, threshold, estimator_options, spans, sources)
        self.estimator = settings.build(seed)  # the estimator as named and configured (its name, its facts)
        self.model = model
        self.config = ProbeConfig(template=prompt_template(instruction, template, system),
                                  sampling=sampling or SamplingConfig(), seed=seed, batch_size=batch_size,
                                  probe=settings)

    def attribute(self, question: str, passages: Iterable[PassageLike], response: str | None = None,
                  id: str = "request") -> AttributionResult:
        """Which passages `response` relied on (None: generate the response first)."""
        return self.attribute_many([{"id": id, "question": question, "passages": list(as_passages(passages)),
                                     "response": response}])[0]

    def attribute_many(
        self, requests: Iterable[AttributionRequest | Mapping[str, Any]],
        on_generated: Callable[[int], None] | None = None, on_scored: Callable[[int], None] | None = None,
    ) -> list[AttributionResult]:
        """Attribute many requests; missing responses are generated in batches first."""
        from ascp.attribution.probe import attribute_one, prepare_inputs

        if self.model is None:
            raise AscpError("this Probe has no model; create it with ascp.Probe(model, ...).")
        if isinstance(requests, (str, Mapping)) or not isinstance(requests, Iterable):
            raise AscpError(f"requests must be a list of request dicts or ascp.AttributionRequest, not "
                            f"{_kind(requests)}.")
        parsed = [_as_request(i, r) for i, r in enumerate(requests)]  # every request checked before the model
        from ascp.lm.prefixes import fresh_prefixes
        from ascp.lm.protocol import as_language_model

        model = as_language_model(self.model)  # a model of one's own gets the seam's declared defaults

        fresh_prefixes(model)  # requests of one context share its prompts within this call only
        items = prepare_inputs(model, parsed, self.config, progress=on_generated)
        results = []
        for request, item in zip(parsed, items, strict=True):
            estimator = self.config.probe.estimator_for(self.config.seed, request.id)
            results.append(attribute_one(model, estimator, request, item, self.config))
            if on_scored:
                on_scored(1)
        return results


def _as_request(index: int, request: AttributionRequest | Mapping[str, Any]) -> AttributionRequest:
    from ascp.attribution.requests import parse_request

    if isinstance(request, AttributionRequest):
        return request
    if not isinstance(request, Mapping):
        raise AscpError(f"request {index} is {_kind(request)}; give a dict with question, passages and "
                        "response, or an ascp.AttributionRequest.")
    obj = dict(request)
    obj.setdefault("id", str(index))
    where = f"request {_shown(obj['id'])}"
    raw = obj.get("passages")
    passages = as_passages([] if raw is None else raw, where)
    obj["passages"] = [{"id": p.id, "title": p.title, "text": p.text} for p in passages]
    return parse_request(where, obj)


def attribute(question: str, passages: Iterable[PassageLike], response: str | None = None, *,
              model: LanguageModel | None = None,
              estimator: str | ProbeSettings = DEFAULT_ESTIMATOR, seed: int = 0, threshold: float | None = None,
              spans: str | None = None, sources: str | None = None, **options: Any) -> AttributionResult:
    """Score how much `response` (None: a response the model generates) relied on each passage (each
    sentence of the passages with `sources="sentences"`).

    One call of `Probe(model, estimator, seed=seed, threshold=threshold, spans=spans, sources=sources,
    **options).attribute`; `model=None` uses the embedded default, loaded once per process (after the
    inputs are checked).
    """
    probe = Probe(None, estimator, seed=seed, threshold=threshold, spans=spans, sources=sources, **options)
    request = _as_request(0, {"id": "request", "question": question, "passages": list(as_passages(passages)),
                              "response": response})
    probe.model = model if model is not None else default_model()
    return probe.attribute_many([request])[0]


def cite(question: str, passages: Iterable[PassageLike], response: str | None = None, *,
         model: LanguageModel | None = None, estimator: str | ProbeSettings = DEFAULT_ESTIMATOR, seed: int = 0,
         threshold: float | None = None, markers: str = "positions", sources: str | None = None,
         **options: Any) -> CitedResponse:
    """`response` (None: one the model generates) with causal citations: after each sentence, a marker
    for every passage that sentence used, strongest first (`[2]`: context position; `markers="ids"`:
    `[doc-7]`), read from its per-sentence reading (`spans="sentences"`); a sentence that used no
    passage is marked unsupported (`CitedResponse.unsupported`). `sources="sentences"` cites the
    passages' sentences (`[doc-7#2]`)."""
    from dataclasses import replace

    from ascp.attribution.probe import ProbeSettings
    from ascp.metrics.citations import MARKERS, cite_response

    if markers not in MARKERS:
        raise AscpError(f"markers must be positions or ids, got {_shown(markers)}.")
    if isinstance(estimator, ProbeSettings):  # the settings as given, read per sentence
        result = attribute(question, passages, response, model=model, seed=seed, threshold=threshold,
                           estimator=replace(estimator, spans="sentences"), sources=sources, **options)
    else:
        result = attribute(question, passages, response, model=model, estimator=estimator, seed=seed,
                           threshold=threshold, spans="sentences", sources=sources, **options)
    return cite_response(result, markers)


def make_case(question: str, pool: Iterable[PassageLike], answers: Iterable[Iterable[str] | str] | None = None,
              id: str = "question") -> Case:
    """A `Case` from a question, a ranked pool and optional gold answers: a list of units, each an
    alias list or a string (a bare string is one unit)."""
    from ascp.attribution.requests import check_unicode, parse_id
    from ascp.params import check_id

    if not isinstance(question, str):
        raise AscpError(f"the question must be a string, got {type(question).__name__}.")
    if not question.strip():
        raise AscpError("the question is empty; give a question.")
    check_unicode("the question", question)
    case_id = parse_id(id)
    if case_id is None:
        raise AscpError(f"the case id must be a non-empty string, got {_shown(id)}.")
    check_id("the case id", case_id)
    if isinstance(answers, str):  # one answer, not one unit per character
        answers = [answers]
    if answers is not None and (isinstance(answers, Mapping) or not isinstance(answers, Iterable)):
        raise AscpError(f"answers must be a list of answers (each a string or a list of aliases) or None, got "
                        f"{type(answers).__name__}.")
    units = []
    for j, answer in enumerate(answers or ()):
        bad = f"answer {j + 1} must be a non-empty string or list of non-empty strings."
        if isinstance(answer, Mapping) or not isinstance(answer, (str, Iterable)):
            raise AscpError(bad)
        aliases = (answer,) if isinstance(answer, str) else tuple(answer)
        if not aliases or not all(isinstance(a, str) and a.strip() for a in aliases):
            raise AscpError(bad)
        for a in aliases:
            check_unicode(f"answer {j + 1}", a)
        units.append(AnswerUnit(id=str(j + 1), aliases=aliases))
    return Case(id=case_id, question=question, pool=as_passages(pool, "pool"), units=tuple(units))


def run_portfolios(cases: Sequence[Case], *, policy: str = "ascp", k: int = 5, T: int = 5,
                   model: LanguageModel | None = None, estimator: str | ProbeSettings = DEFAULT_ESTIMATOR,
                   seed: int = 0, max_new_tokens: int = 64, steer: SteerConfig | None = None,
                   threshold: float | None = None, embed_fn: EmbedFn | None = None,
                   template: PromptTemplate | str | None = None, system: str = "", instruction: str = "commit",
                   progress: Callable[[int], None] | None = None,
                   nli_model: str | Matcher | None = None, spans: str | None = None) -> list[Portfolio]:
    """T rounds of `policy` on every case, each portfolio with its metrics (what `ascp run` does).

    steer: a `SteerConfig` (Eq. 5 + APC from round 2 on) or None; embed_fn: texts -> unit
    embeddings (default: the embedded MiniLM). nli_model: how claim units (ELI5) are recalled
    (ALCE claim recall, Sec. 7.1): a local NLI model folder, `"lexical"` (an approximation, not
    ALCE's metric) or a ready matcher `(unit, response) -> bool` (`ascp.metrics.nli`); cases with claim
    units and no nli_model fail before any generation. estimator: a name, a spec with options
    (`contextcite(num_ablations=64)`) or `ascp.ProbeSettings`; threshold: the used threshold on normalised
    scores (None: tau(k)); spans: "sentences" adds each round's reading per response sentence
    (`Round.spans`, as `ascp.attribute`'s).
    """
    from ascp.attribution.probe import probe_settings
    from ascp.embed.embedders import embed
    from ascp.lm.sampling import SamplingConfig
    from ascp.lm.steering import SteerConfig
    from ascp.loop.portfolios import LoopConfig, check_pools
    from ascp.loop.runner import run_policy
    from ascp.metrics.nli import require_matcher, resolve_matcher

    if isinstance(cases, (str, Mapping, Case)) or not isinstance(cases, Iterable):
        raise AscpError(f"cases must be a list of ascp.Case (see ascp.make_case), not "
                        f"{_kind(cases)}.")
    cases = list(cases)
    for i, case in enumerate(cases):
        if not isinstance(case, Case):
            raise AscpError(f"case {i} is {_kind(case)}; build each case with ascp.make_case.")
    if not isinstance(policy, str):
        raise AscpError(f"policy must be a scheduler name such as ascp or rotate, got {type(policy).__name__}.")
    k, T = _whole("k", k, 1), _whole("T", T, 1)
    _whole("seed", seed)
    _whole("max_new_tokens", max_new_tokens, 1)
    _prompt_options(instruction, template, system)
    if steer is not None and not isinstance(steer, SteerConfig):
        raise AscpError(f"steer must be an ascp.SteerConfig or None, got {type(steer).__name__}.")
    for name, fn in (("embed_fn", embed_fn), ("progress", progress)):
        if fn is not None and not callable(fn):
            raise AscpError(f"{name} must be a function or None, got {type(fn).__name__}.")
    if nli_model is not None and not isinstance(nli_model, str) and not callable(nli_model):
        raise AscpError(f"nli_model must be a model folder, 'lexical' or a matcher function, got "
                        f"{type(nli_model).__name__}.")
    # Building the config checks the policy, k, T, the estimator and the threshold.
    config = LoopConfig(policy=policy, k=k, T=T, probe=probe_settings(estimator, threshold, spans=spans),
                        seed=seed, template=prompt_template(instruction, template, system),
                        sampling=SamplingConfig(max_new_tokens=max_new_tokens), steer=steer)
    check_pools(cases, k)
    require_matcher(cases, nli_model is not None)  # before the default model loads
    matcher = resolve_matcher(nli_model)
    from ascp.lm.protocol import as_language_model

    lm = as_language_model(model) if model is not None else default_model()
    return run_policy(lm, cases, config, embed_fn or embed, progress=progress, matcher=matcher)


def run_portfolio(question: str, pool: Iterable[PassageLike], *, policy: str = "ascp", k: int = 5, T: int = 5,
                  model: LanguageModel | None = None, seed: int = 0,
                  answers: Iterable[Iterable[str] | str] | None = None, **options: Any) -> Portfolio:
    """T rounds of `policy` over one ranked pool: contexts, responses, per-round attributions and
    metrics (PR@T needs `answers`; without them it is nan). Options: see `run_portfolios`."""
    case = make_case(question, pool, answers)
    return run_portfolios([case], policy=policy, k=k, T=T, model=model, seed=seed, **options)[0]
