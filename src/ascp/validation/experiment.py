"""The validation experiment (Sec. 4.2-4.4, Fig. 3): every estimator over controlled pools.

For each selected case, each width K and padding kind, the controlled pool of `pools.py` is
the context; each protocol gives it a response and every estimator scores every passage.

Protocols (the response y that the estimators explain):

- `fixed`: ONE target per case, sampled once from the question and the case's m necessary
  passages alone (in necessary-set order; seed `derive_seed(seed, case_id, "fixed-target")`).
  The same token ids are then scored in every width and padding. No padding passage was in
  the prompt that produced y, so credit given to padding is a false positive (Fig. 3e), and
  widths differ only by the added padding, never by the target (the Sec. 4.4 "target held
  constant" protocol).
- `free`: y is sampled from the controlled context itself, as `ascp.attribution.probe.
  prepare_inputs` does with `response=None`: request id `"<case>|k<K>|<padding>"`, seed
  `derive_seed(seed, request id)`, the generated token ids are scored. Padding may legitimately
  shape such a response.

Model outputs are computed once per (case, width, padding, protocol) and shared by every
estimator (the response, its token ids and the encoded prompt); each estimator reads them through
the one probe step (`ascp.attribution.probe.probe_response`). An estimator that draws random numbers
(`needs_seed`: ContextCite) gets the seed `derive_seed(seed, request id, its name)` per request and,
when it declares a `num_ablations` option, `contextcite_ablations` of them; one that embeds text
(`needs_embedder`) gets `embedder`.
A condition whose prompt plus response exceeds the model's window, or whose sampled response
is empty, is skipped and reported, like a pool that cannot be built.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ascp.attribution import VALIDATION_ESTIMATORS, estimator_facts, estimator_names, estimator_params
from ascp.attribution.base import Estimator, ProbeInput
from ascp.attribution.probe import ProbeSettings, probe_response, sample_responses
from ascp.errors import AscpError
from ascp.lm.prompts import PromptTemplate
from ascp.lm.sampling import SamplingConfig, derive_seed
from ascp.types import Case
from ascp.validation.pools import DEFAULT_MAX_WORDS, PADDINGS, ControlledPool, PoolBuilder, Skip, check_pool_args

PROTOCOLS = ("fixed", "free")


def parse_list(text: str, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    """A comma-separated list of names, each one of `allowed` (order kept, duplicates dropped)."""
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise AscpError(f"no {what} given; choose from {', '.join(allowed)}.")
    for n in names:
        if n not in allowed:
            raise AscpError(f"unknown {what} {n!r}; choose from {', '.join(allowed)}.")
    return names


def parse_widths(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(sorted({int(t) for t in text.split(",") if t.strip()}))
    except ValueError:
        raise AscpError(f"--widths must be comma-separated integers such as 3,6,12, got {text!r}.") from None
    if not widths:
        raise AscpError("--widths is empty; give widths such as 3,6,12.")
    return widths


@dataclass(frozen=True)
class ValidationConfig:
    widths: tuple[int, ...] = (3, 6, 12)
    paddings: tuple[str, ...] = ("off-query", "same-query")
    estimators: tuple[str, ...] = VALIDATION_ESTIMATORS
    protocols: tuple[str, ...] = ("fixed",)
    m: int = 2
    seed: int = 0
    limit: int | None = None
    contextcite_ablations: int = 32
    sampling: SamplingConfig = SamplingConfig(max_new_tokens=64)
    instruction: str = "commit"
    template: str | None = None  # the user's own prompt ({passages} then {question}); None: the instruction
    system: str = ""  # a system message
    max_minutes: float | None = None
    max_words: int | None = DEFAULT_MAX_WORDS
    batch_size: int = 8
    embedder: str = "default"  # of the estimators that embed text (`needs_embedder`; `--embedder`)

    def check(self) -> None:
        """Raise a one-sentence `AscpError` for any bad setting (before anything is loaded)."""
        for p in self.paddings:
            check_pool_args(max(self.widths), p, self.m)
        bad = [w for w in self.widths if w <= self.m]
        if bad:
            raise AscpError(f"width {bad[0]} leaves no padding beside the m={self.m} necessary passages; "
                            f"every width must exceed m.")
        parse_list(",".join(self.paddings), PADDINGS, "padding")
        parse_list(",".join(self.estimators), estimator_names(), "estimator")
        parse_list(",".join(self.protocols), PROTOCOLS, "protocol")
        if self.limit is not None and self.limit < 1:
            raise AscpError(f"--limit must be at least 1, got {self.limit}.")
        if self.contextcite_ablations < 2:
            raise AscpError(f"--contextcite-ablations must be at least 2, got {self.contextcite_ablations}.")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise AscpError(f"--max-minutes must be positive, got {self.max_minutes}.")
        self.prompt()

    def prompt(self) -> PromptTemplate:
        from ascp.lm.prompts import prompt_template

        return prompt_template(self.instruction, self.template, self.system)

    def to_json(self) -> dict[str, Any]:
        return {
            "widths": list(self.widths), "paddings": list(self.paddings), "estimators": list(self.estimators),
            "protocols": list(self.protocols), "m": self.m, "seed": self.seed, "limit": self.limit,
            "contextcite_ablations": self.contextcite_ablations, "sampling": self.sampling.__dict__,
            "instruction": self.instruction, "template": self.template, "system": self.system,
            "max_minutes": self.max_minutes, "max_words": self.max_words,
            **({"embedder": self.embedder} if any(estimator_facts(e).needs_embedder for e in self.estimators)
               else {}),
        }

    def probe_settings(self, name: str) -> ProbeSettings:
        """The settings `name` is probed with (thresholds are set by the analysis, not here)."""
        options: dict[str, Any] = {}
        if estimator_facts(name).needs_embedder:
            options["embedder"] = self.embedder
        if any(p.name == "num_ablations" for p in estimator_params(name)):
            options["num_ablations"] = self.contextcite_ablations
        return ProbeSettings(name, options)


@dataclass
class ValidationRun:
    """Everything the report needs; `rows` are per-passage scores, `conditions` per context."""

    config: ValidationConfig
    cases: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    stopped_early: bool = False
    seconds: float = 0.0


def select_cases(builder: PoolBuilder, cases: Sequence[Case], config: ValidationConfig) -> list[Case]:
    """The first `limit` cases that can be built at the narrowest width under every padding."""
    narrowest = min(config.widths)
    chosen: list[Case] = []
    for case in cases:
        if all(isinstance(builder.build(case, narrowest, p), ControlledPool) for p in config.paddings):
            chosen.append(case)
            if config.limit is not None and len(chosen) >= config.limit:
                break
    return chosen


def select(cases: Sequence[Case], sources: Sequence[Case], config: ValidationConfig) -> tuple[PoolBuilder, list[Case]]:
    """The pool builder and the selected cases; a clear error when no case is eligible."""
    config.check()
    builder = PoolBuilder(sources, m=config.m, seed=config.seed, max_words=config.max_words)
    selected = select_cases(builder, cases, config)
    if not selected:
        raise AscpError(
            f"no eligible case: none of the {len(cases)} cases has {config.m} answer-bearing passages with disjoint "
            f"answer sets and enough padding for width {min(config.widths)} under {', '.join(config.paddings)} "
            "padding; try other data, a smaller width or another padding."
        )
    return builder, selected


def request_id(case_id: str, width: int, padding: str) -> str:
    return f"{case_id}|k{width}|{padding}"


class _Runner:
    def __init__(self, lm, builder: PoolBuilder, config: ValidationConfig, run: ValidationRun) -> None:
        self.lm, self.builder, self.config, self.run = lm, builder, config, run
        self.template = config.prompt()
        self.settings = {n: config.probe_settings(n) for n in config.estimators}

    def estimator(self, name: str, rid: str) -> Estimator:
        """The estimator of request `rid` (`ProbeSettings.estimator_for`, the one seed rule)."""
        return self.settings[name].estimator_for(self.config.seed, rid)

    def skip(self, pool: ControlledPool, protocol: str, reason: str, kind: str) -> None:
        self.run.skips.append(Skip(pool.case_id, pool.width, pool.padding, reason, kind, protocol))

    def fits(self, pool: ControlledPool, protocol: str, prompt_tokens: int, response_tokens: int) -> bool:
        window = self.lm.context_window
        if prompt_tokens + response_tokens <= window:
            return True
        self.skip(pool, protocol, f"prompt {prompt_tokens} + response {response_tokens} tokens exceed the "
                  f"model's window of {window}", "prompt exceeds the model's context window")
        return False

    def inputs(self, case: Case, pools: list[ControlledPool], protocol: str) -> list[tuple[ControlledPool, ProbeInput]]:
        """The prepared (prompt, response) of every pool under one protocol."""
        lm, cfg = self.lm, self.config
        prompts = [lm.encode_prompt(p.question, p.context(), self.template) for p in pools]
        if protocol == "fixed":
            necessary = tuple(p.passage for p in self.builder.necessary(case))
            target_prompt = lm.encode_prompt(case.question, necessary, self.template)
            seed = derive_seed(cfg.seed, case.id, "fixed-target")
            target = sample_responses(lm, [target_prompt], cfg.sampling, [seed])
            todo = [(pool, prompt, target[0]) for pool, prompt in zip(pools, prompts, strict=True)]
        else:
            ok = [(pool, prompt) for pool, prompt in zip(pools, prompts, strict=True)
                  if self.fits(pool, protocol, prompt.num_tokens, cfg.sampling.max_new_tokens)]
            seeds = [derive_seed(cfg.seed, request_id(p.case_id, p.width, p.padding)) for p, _ in ok]
            sampled = sample_responses(lm, [pr for _, pr in ok], cfg.sampling, seeds, cfg.batch_size)
            todo = [(pool, prompt, s) for (pool, prompt), s in zip(ok, sampled, strict=True)]
        out = []
        for pool, prompt, (text, ids) in todo:
            if not ids:
                self.skip(pool, protocol, "the model generated an empty response", "empty response")
            elif protocol == "free" or self.fits(pool, protocol, prompt.num_tokens, len(ids)):
                out.append((pool, ProbeInput(pool.question, pool.context(), prompt, text, ids)))
        return out

    def score(self, protocol: str, pool: ControlledPool, item: ProbeInput) -> None:
        rid = request_id(pool.case_id, pool.width, pool.padding)
        seconds: dict[str, float] = {}
        key = {"protocol": protocol, "case_id": pool.case_id, "width": pool.width, "padding": pool.padding}
        for name in self.config.estimators:
            probed = probe_response(self.lm, self.estimator(name, rid), item)
            seconds[name] = round(probed.seconds, 4)
            reading = probed.reading
            for j, pp in enumerate(pool.passages):
                self.run.rows.append({**key, "estimator": name, "position": j, "passage_id": pp.id,
                                      "role": pp.role, "answers": list(pp.answers),
                                      "score": reading.scores[pp.id], "normalized": reading.normalized[pp.id]})
        self.run.conditions.append({**key, "response": item.response_text, "response_tokens": len(item.response_ids),
                                    "prompt_tokens": item.prompt.num_tokens, "seconds": seconds})


def run_validation(
    lm, cases: Sequence[Case], sources: Sequence[Case], config: ValidationConfig,
    log: Callable[[str], None] | None = None,
) -> ValidationRun:
    """Run the experiment; `sources` are all cases off-query padding may come from."""
    started = time.perf_counter()
    builder, selected = select(cases, sources, config)
    run = ValidationRun(config=config)
    runner = _Runner(lm, builder, config, run)
    for n, case in enumerate(selected, start=1):
        pools: list[ControlledPool] = []
        for width in config.widths:
            for padding in config.paddings:
                built = builder.build(case, width, padding)
                if isinstance(built, ControlledPool):
                    pools.append(built)
                else:
                    run.skips.append(built)
        for protocol in config.protocols:
            for pool, item in runner.inputs(case, pools, protocol):
                runner.score(protocol, pool, item)
        run.cases.append(case.id)
        elapsed = time.perf_counter() - started
        if log:
            log(f"case {n}/{len(selected)} ({case.id}) done: {len(pools)} contexts, {elapsed:.0f} s elapsed")
        if config.max_minutes is not None and elapsed > 60 * config.max_minutes and n < len(selected):
            run.stopped_early = True
            if log:
                log(f"stopping after {n} cases: --max-minutes {config.max_minutes:g} reached")
            break
    run.seconds = time.perf_counter() - started
    return run

