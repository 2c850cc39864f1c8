"""Running one chunk: the loop plus per-case metrics (`ascp.loop.runner.run_policy`) -> one record per unit.

Shared by every executor, so local and Ray runs produce the same records. A unit record is
the unit key, the condition's fields, every per-case metric, the ranked pool and the rounds
(`ascp.loop.runfolder.round_records` without the repeated case id). Only the `seconds` fields vary
between runs of the same spec.
"""

from __future__ import annotations

from collections.abc import Callable

from ascp.experiments.plan import Chunk, loop_config
from ascp.experiments.spec import Settings
from ascp.lm.protocol import backend_name
from ascp.metrics.answers import Matcher


def run_chunk(lm, chunk: Chunk, embed_fn: Callable, progress: Callable[[int], None] | None = None,
              matcher: Matcher | None = None) -> list[dict]:
    """Run every case of the chunk (batched by the loop) and return one record per case; claim
    units are decided by `matcher` (`load_matcher(settings)`, loaded once per worker)."""
    from ascp.loop.runner import run_policy

    config = loop_config(chunk.condition, chunk.seed, chunk.settings)
    portfolios = run_policy(lm, chunk.cases, config, embed_fn, progress=progress, matcher=matcher)
    records = []
    for case, portfolio in zip(chunk.cases, portfolios, strict=True):
        records.append({
            "task": chunk.task, "model": chunk.model.name, "backend": backend_name(lm), "seed": chunk.seed,
            "case_id": case.id,
            **chunk.condition.fields(),
            **portfolio.metrics,
            "pool": [p.id for p in case.pool],
            "seconds": round(sum(r.seconds for r in portfolio.rounds), 4),
            "rounds": [r.to_json() for r in portfolio.rounds],
        })
    return records


def load_matcher(settings: Settings) -> Matcher | None:
    """The spec's claim matcher (`nli_model`), on the spec's device; None when the spec names none."""
    if settings.nli_model is None:
        return None
    from ascp.metrics.nli import load_nli_matcher

    return load_nli_matcher(settings.nli_model, device=settings.device, where="spec field nli_model:")


def load_model(model_source: str, device: str, backend: str = "auto", request_cache: str | None = None,
               prefix_cache_mb: float | None = None):
    """The model of a unit with a prefix store of `prefix_cache_mb` (None: the default), behind the
    request cache file `request_cache` when one is given (`ascp.lm.resolve.assemble_model`)."""
    from ascp.lm.resolve import assemble_model

    return assemble_model(model_source, device=device, backend=backend, request_cache=request_cache,
                          prefix_cache_mb=prefix_cache_mb)
