"""`run_experiment`: spec -> plan -> store -> executor, resumable; plus `status` and `export`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.experiments.embedders import EmbedFn
from ascp.experiments.executors import EXECUTORS, Progress, import_ray, run_local, run_ray
from ascp.experiments.plan import Plan, UnitKey, make_plan
from ascp.experiments.spec import ExperimentSpec, load_spec, stored_text
from ascp.experiments.store import RunStore, iter_rounds, read_plan, read_units, writer_pid
from ascp.jsonio import atomic_writer
from ascp.params import is_whole


@dataclass(frozen=True)
class RunResult:
    out: Path
    total: int
    done: int  # units in the store after this run
    written: int  # units this run wrote
    pending_rounds: int  # rounds this run had to execute
    savings: tuple[str, ...] = ()  # what the request cache and prefix store saved, per model (Ray: per worker)


def prepare(spec: ExperimentSpec | str | Path, executor: str = "local", workers: int = 1,
            embedder: str | None = None, prefix_cache_mb: float | None = None,
            data_root: str | Path | None = None) -> Plan:
    """Validate everything (spec, data, conditions, executor) before any model work; `embedder`
    (`--embedder`) and `prefix_cache_mb` (`--prefix-cache-mb`) replace the spec's; `data_root`
    (`--data-root`) is the folder a spec file's relative data paths are read under."""
    if executor not in EXECUTORS:
        raise AscpError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}.")
    if not is_whole(workers) or workers < 1:
        raise AscpError(f"--workers must be at least 1, got {workers!r}.")
    if executor == "local" and workers != 1:
        raise AscpError("--workers applies to --executor ray; the local executor runs in one process, batched.")
    if executor == "ray":
        import_ray()
    if embedder is not None:
        from ascp.embed.embedders import EMBEDDER_NAMES, check_embedder

        checked = check_embedder(embedder, "--embedder")
        embedder = embedder if embedder in EMBEDDER_NAMES else checked  # folders: absolute
    if prefix_cache_mb is not None:
        from ascp.lm.prefixes import check_megabytes

        check_megabytes(prefix_cache_mb, "--prefix-cache-mb")
    spec = spec if isinstance(spec, ExperimentSpec) else load_spec(spec, data_root)
    if embedder is not None:
        spec = replace(spec, settings=replace(spec.settings, embedder=embedder))
    if prefix_cache_mb is not None:
        spec = replace(spec, settings=replace(spec.settings, prefix_cache_mb=float(prefix_cache_mb)))
    return make_plan(spec)


def run_experiment(
    spec: ExperimentSpec | str | Path,
    out: str | Path,
    executor: str = "local",
    workers: int = 1,
    address: str | None = None,
    embed_fn: EmbedFn | None = None,
    progress: Progress | None = None,
    plan: Plan | None = None,
    on_start: Any = None,
    request_cache: str | Path | None = None,
    **ray_options: Any,
) -> RunResult:
    """Run (or resume) every unit of `spec` into the store folder `out`.

    `embed_fn` replaces the spec's embedder (tests); `progress(rounds, units)` is called as work
    finishes; `on_start(pending_rounds, done, total)` once the store is open; `request_cache`: a
    SQLite file (or `"default"`) that every worker reads and fills (`ascp.lm.request_cache`), so a
    rerun, an added condition or a resumed crash feeds no pass already fed.
    """
    from ascp.lm.request_cache import resolve_cache_path

    cache = resolve_cache_path(request_cache)
    cache_path = None if cache is None else str(cache)
    plan = plan or prepare(spec, executor, workers)
    out = Path(out)
    with RunStore(out) as store:
        store.begin(plan.manifest(), stored_text(plan.spec), {t.name: t.data for t in plan.spec.tasks})
        before = len(store.done)
        pending = [chunk for chunk in plan.chunks() if any(k not in store.done for k in chunk.unit_keys())]
        rounds = sum(chunk.rounds for chunk in pending)
        if on_start is not None:
            on_start(rounds, before, plan.total)
        savings: list[str] = []
        if pending and executor == "local":
            savings = run_local(pending, store, embed_fn=embed_fn, progress=progress, request_cache=cache_path)
        elif pending:
            savings = run_ray(pending, store, workers=workers, address=address, embed_fn=embed_fn, progress=progress,
                              request_cache=cache_path, **ray_options)
        return RunResult(out, plan.total, len(store.done), len(store.done) - before, rounds, tuple(savings))


def status(directory: str | Path) -> dict[str, Any]:
    """Done/total overall and per (task, model, seed, condition), and the pid of a live writer."""
    directory = Path(directory)
    plan = read_plan(directory)
    records = read_units(directory)
    done = Counter((r["task"], r["model"], r["seed"], r["condition"]) for r in records)
    groups = []
    for task in plan["tasks"]:
        for model in plan["models"]:
            for seed in plan["seeds"]:
                for condition in plan["conditions"]:
                    key = (task["name"], model["name"], seed, condition)
                    groups.append({"task": key[0], "model": key[1], "seed": seed, "condition": condition,
                                   "done": done.get(key, 0), "total": len(task["cases"])})
    return {"name": plan["name"], "done": len(records), "total": plan["units"], "groups": groups,
            "writer_pid": writer_pid(directory)}


def export(directory: str | Path) -> tuple[Path, Path]:
    """Write DIR/units.parquet (one row per unit) and DIR/rounds.parquet (one row per unit x round)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise AscpError("Parquet export needs pyarrow; install it with `pip install pyarrow`.") from None
    directory = Path(directory)
    read_plan(directory)
    records = read_units(directory)
    if not records:
        raise AscpError(f"{directory} has no finished units yet; run `ascp experiment run` first.")
    units = [{k: v for k, v in r.items() if k != "rounds"} | {"rounds": len(r.get("rounds", []))} for r in records]
    rounds = list(iter_rounds(records))
    score_map = pa.map_(pa.string(), pa.float64())
    round_types = {"context": pa.list_(pa.string()), "used": pa.list_(pa.string()), "scores": score_map,
                   "normalized": score_map}
    for row in rounds:
        for key in ("scores", "normalized"):
            row[key] = list(row[key].items())
    paths = (directory / "units.parquet", directory / "rounds.parquet")
    unit_types = {"pool": pa.list_(pa.string()), "arm": pa.string(), "steer": pa.float64(), "eta": pa.float64()}
    for path, rows, types in ((paths[0], units, unit_types), (paths[1], rounds, round_types)):
        columns = list(dict.fromkeys(k for row in rows for k in row))
        arrays = [pa.array([row.get(c) for row in rows], type=types.get(c)) for c in columns]
        table = pa.Table.from_arrays(arrays, names=columns)
        with atomic_writer(path, "wb") as handle:
            pq.write_table(table, handle)
    return paths


def load_records(directory: str | Path) -> list[dict[str, Any]]:
    """The finished unit records of a store (a reader; safe while a run is writing)."""
    return read_units(Path(directory))


__all__ = ["RunResult", "UnitKey", "export", "load_records", "prepare", "run_experiment", "status"]
