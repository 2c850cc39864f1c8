"""Running one chunk: the loop plus per-case metrics (`ascp.runner.run_policy`) -> one record per unit.

Shared by every executor, so local and Ray runs produce the same records. A unit record is
the unit key, the condition's fields, every per-case metric, the ranked pool and the rounds
(`ascp.runio.round_records` without the repeated case id). Only the `seconds` fields vary
between runs of the same spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ascp.experiments.condition import Condition
from ascp.experiments.plan import Chunk
from ascp.experiments.spec import Settings
from ascp.lm.protocol import backend_name
from ascp.metrics import Matcher


def loop_config(condition: Condition, seed: int, settings: Settings):
    """The `LoopConfig` of one condition and seed. A structured single response (`budget` B) decodes up to
    B x the spec's max_new_tokens; the loop checks that prompt plus that many tokens fit the model's window."""
    from dataclasses import replace

    from ascp.api import prompt_template
    from ascp.loop import LoopConfig

    sampling = settings.sampling()
    if condition.budget is not None:
        sampling = replace(sampling, max_new_tokens=settings.max_new_tokens * condition.budget)
    kwargs: dict[str, Any] = dict(
        policy=condition.scheduler, k=condition.k, T=condition.T, estimator=condition.estimator, seed=seed,
        sampling=sampling,
        template=prompt_template(condition.instruction, settings.template, settings.system),
        threshold=settings.threshold, batch_size=settings.batch_size,
    )
    if condition.steer is not None:
        from ascp.decoding import SteerConfig

        kwargs["steer"] = SteerConfig(alpha=condition.steer, eta=0.1 if condition.eta is None else condition.eta)
    return LoopConfig(**kwargs)


def run_chunk(lm, chunk: Chunk, embed_fn: Callable, progress: Callable[[int], None] | None = None,
              matcher: Matcher | None = None) -> list[dict]:
    """Run every case of the chunk (batched by the loop) and return one record per case; claim
    units are decided by `matcher` (`load_matcher(settings)`, loaded once per worker)."""
    from ascp.runner import run_policy

    config = loop_config(chunk.condition, chunk.seed, chunk.settings)
    portfolios, rows = run_policy(lm, chunk.cases, config, embed_fn, progress=progress, matcher=matcher)
    records = []
    for case, portfolio, row in zip(chunk.cases, portfolios, rows, strict=True):
        records.append({
            "task": chunk.task, "model": chunk.model.name, "backend": backend_name(lm), "seed": chunk.seed,
            "case_id": case.id,
            **chunk.condition.fields(),
            **portfolio.metrics,
            "pool": row["pool"],
            "seconds": round(sum(r.seconds for r in portfolio.rounds), 4),
            "rounds": [r.to_json() for r in portfolio.rounds],
        })
    return records


def load_matcher(settings: Settings) -> Matcher | None:
    """The spec's claim matcher (`nli_model`), on the spec's device; None when the spec names none."""
    if settings.nli_model is None:
        return None
    from ascp.nli import load_nli_matcher

    return load_nli_matcher(settings.nli_model, device=settings.device, where="spec field nli_model:")


def load_model(model_source: str, device: str, backend: str = "auto"):
    from ascp.lm.resolve import load_language_model

    return load_language_model(model_source, device=device, backend=backend)
