"""`ascp reproduce --preset NAME`: a packaged experiment spec, run into a store, then reported with the
paper's signs checked (`ascp.report.claims`).

Presets live in `ascp/resources/presets/<name>.yaml`; their data paths, `"{data_root}/..."`, are read
under the data folder (`--data-root`, else `$ASCP_DATA`, else `../shared/data`) and recorded relative
to it (the spec copied into the store names `asqa/...`; plan.json and splits.json describe each file by
that path, its SHA-256 and size: `ascp.caching.files.describe_file`). The run store is the output
folder itself, so rerunning the same command resumes a killed run; the report goes to `OUT/report`.

A preset may hold a `development` section (not a spec field): the candidates of Table 10's steered
decoder, run on development positions disjoint from the test frame's, compared once by the
one-standard-error rule, and the choice frozen for the test positions (`reproduce`, docs/reports.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ascp.caching.files import default_data_root
from ascp.errors import AscpError
from ascp.reading import UsedThreshold
from ascp.report.claims import Claim


def _grid(policy: str, k: int, T: int) -> str:
    """A cpu-small grid cell (open-loop, probed with leave-one-out like every cell)."""
    return f"{policy}(k={k},T={T})"


PRESET_CLAIMS: dict[str, tuple[Claim, ...]] = {
    "cpu-small": (
        Claim("budget-matched: many narrow rounds beat one wide generation", _grid("rotate", 2, 12),
              _grid("rotate", 24, 1), "pr", "+0.144 [+0.119, +0.170] (Sec. 8.1)", +1),
        Claim("rotation beats the fixed context at k=2, T=12", _grid("rotate", 2, 12), _grid("vanilla", 2, 12),
              "pr", "+0.140 [+0.113, +0.169] (Table 4)", +1),
        Claim("rotation beats the fixed context at k=2, T=5", _grid("rotate", 2, 5), _grid("vanilla", 2, 5), "pr",
              "+0.090 [+0.068, +0.113] (Table 4)", +1),
        Claim("more generations help: T=12 over T=1 at k=2", _grid("rotate", 2, 12), _grid("rotate", 2, 1), "pr",
              "+0.229 / +0.289 on ASQA (Table 5)", +1),
        Claim("width helps a single generation a little: k=24 over k=2 at T=1", _grid("rotate", 24, 1),
              _grid("rotate", 2, 1), "pr", "+0.043 / +0.023 on ASQA, n.s. (Table 5)", +1),
        Claim("Ascp beats vanilla RAG (scheduler only)", "ascp(k=5,T=5)", "vanilla(k=5,T=5)", "pr",
              "+0.063, q < .001 (Table 11)", +1),
        Claim("Ascp beats MMR (scheduler only)", "ascp(k=5,T=5)", "mmr(k=5,T=5)", "pr",
              "+0.061, q < .001 (Table 11)", +1),
        Claim("Ascp and deep rotation reach the same recall", "ascp(k=5,T=5)", "rotate(k=5,T=5)", "pr",
              "-0.003, q = 0.717 (Table 11)", 0),
        Claim("Ascp offers fewer passages than deep rotation", "ascp(k=5,T=5)", "rotate(k=5,T=5)", "offered",
              "10.55 vs 25.00 (Sec. 8.4)", -1),
        Claim("Ascp has a higher evidence coverage rate than deep rotation", "ascp(k=5,T=5)", "rotate(k=5,T=5)",
              "ecr_thresholded", "+0.307 (Table 10, steered Ascp)", +1),
    ),
}
_SCHEDULER_ONLY = (  # Table 11: Ascp without steering against each baseline the preset runs
    Claim("Ascp beats vanilla RAG (scheduler only)", "ascp(k=5,T=5)", "vanilla(k=5,T=5)", "pr",
          "+0.063, q < .001 (Table 11)", +1),
    Claim("Ascp beats MMR (scheduler only)", "ascp(k=5,T=5)", "mmr(k=5,T=5)", "pr", "+0.061, q < .001 (Table 11)", +1),
    Claim("Ascp and deep rotation reach the same recall (scheduler only)", "ascp(k=5,T=5)", "rotate(k=5,T=5)", "pr",
          "-0.003, q = 0.717 (Table 11)", 0),
    Claim("Ascp offers fewer passages than deep rotation", "ascp(k=5,T=5)", "rotate(k=5,T=5)", "offered",
          "10.55 vs 25.00 (Sec. 8.4)", -1),
)
PRESET_CLAIMS["heldout-small"] = _SCHEDULER_ONLY
PRESET_CLAIMS["heldout-gpu"] = _SCHEDULER_ONLY  # Table 11 through vLLM (an engine cannot steer: no Table 10)
PRESETS = tuple(PRESET_CLAIMS)


def steered_claims(steered: str) -> tuple[Claim, ...]:
    """Table 10's claims for the frozen steered condition `steered` (a condition name)."""
    return (
        Claim("steered Ascp beats vanilla RAG", steered, "vanilla(k=5,T=5)", "pr", "+0.072, q < .001 (Table 10)", +1),
        Claim("steered Ascp beats MMR", steered, "mmr(k=5,T=5)", "pr", "+0.070, q < .001 (Table 10)", +1),
        Claim("steered Ascp and deep rotation reach the same recall", steered, "rotate(k=5,T=5)", "pr",
              "+0.006, q = 0.343 (Table 10)", 0),
        Claim("steering adds little recall to the scheduler", steered, "ascp(k=5,T=5)", "pr",
              "+0.009, q = 0.102 (Table 10)", 0),
        Claim("steered Ascp has a higher evidence coverage rate than deep rotation", steered, "rotate(k=5,T=5)",
              "ecr_thresholded", "+0.307 (Table 10)", +1),
    )


# ----- the development split (Table 10's decoder, chosen once) ------------------------------------

DEVELOPMENT = "development"  # a preset-only key (not a spec field): read here, removed before the spec
DECODER = "decoder.json"  # OUT/decoder.json: the development comparison and the frozen choice
SPLITS = "splits.json"  # OUT/splits.json: the development and test positions and case ids of each task
TABLE10 = "table10"  # OUT/table10/: the store of the frozen steered condition on the test positions


@dataclass(frozen=True)
class Development:
    """The development split of a preset: the candidates of the steered decoder, compared once on
    positions disjoint from the test frame's, by PR@T under the one-standard-error rule."""

    positions: dict[str, str]  # task name -> FIRST-LAST
    candidates: tuple[float, ...]  # steering strengths alpha
    eta: float
    scheduler: str  # the condition the decoder steers, e.g. ascp(k=5,T=5)

    def condition(self, alpha: float) -> str:
        from dataclasses import replace

        from ascp.experiments.condition import Condition

        return replace(Condition.parse(self.scheduler), steer=alpha, eta=self.eta).name


def _development(raw: Any, tasks: list[str]) -> Development:
    from ascp.experiments.spec import parse_positions

    where = f"preset field {DEVELOPMENT}"
    if not isinstance(raw, dict) or set(raw) != {"tasks", "candidates", "eta", "scheduler"}:
        raise AscpError(f"{where}: expected tasks, candidates, eta and scheduler.")
    positions = raw["tasks"]
    if not isinstance(positions, dict) or set(positions) != set(tasks):
        raise AscpError(f"{where}.tasks: expected the positions of every task ({', '.join(tasks)}).")
    for name, value in positions.items():
        first, last = parse_positions(f"{where}.tasks.{name}", value)
        positions[name] = f"{first}-{last}"
    candidates = raw["candidates"]
    if not isinstance(candidates, list) or not candidates or not all(isinstance(a, int | float) for a in candidates):
        raise AscpError(f"{where}.candidates: expected a list of steering strengths.")
    return Development(positions, tuple(sorted(float(a) for a in candidates)), float(raw["eta"]), raw["scheduler"])


def development_spec(spec, development: Development):
    """The test spec on the development positions, with the decoder candidates as its conditions."""
    from dataclasses import replace

    from ascp.experiments.condition import Condition
    from ascp.experiments.spec import parse_positions

    tasks = tuple(replace(t, positions=parse_positions("development", development.positions[t.name]))
                  for t in spec.tasks)
    conditions = tuple(Condition.parse(development.condition(a)) for a in development.candidates)
    return replace(spec, name=f"{spec.name}-{DEVELOPMENT}", tasks=tasks, conditions=conditions,
                   text=_spec_text(spec.text, f"{spec.name}-{DEVELOPMENT}", tasks, conditions))


def frozen_spec(spec, condition: str):
    """The test spec with the one frozen steered condition (Table 10's Ascp row)."""
    from dataclasses import replace

    from ascp.experiments.condition import Condition

    conditions = (Condition.parse(condition),)
    return replace(spec, name=f"{spec.name}-{TABLE10}", conditions=conditions,
                   text=_spec_text(spec.text, f"{spec.name}-{TABLE10}", spec.tasks, conditions))


def _spec_text(text: str, name: str, tasks, conditions) -> str:
    """The YAML of a derived spec (its name, task positions and conditions replaced), runnable as it is."""
    import yaml

    raw = yaml.safe_load(text) if text else None
    if not isinstance(raw, dict):  # a spec built in Python has no YAML of its own
        return ""
    raw["name"] = name
    for task, item in zip(tasks, raw["tasks"], strict=True):
        item["positions"] = task.positions_text
    raw.pop("grid", None)
    raw["conditions"] = [c.name for c in conditions]
    return yaml.safe_dump(raw, sort_keys=False)


def choose_decoder(run_dir: Path, development: Development, n_boot: int = 10_000) -> dict[str, Any]:
    """The one-standard-error choice on the development store `run_dir`: the smallest alpha whose PR@T
    (equal task weights) is within one standard error of the best candidate's, the SE being the
    bootstrap SE of the paired per-query difference from the best. Returns what decoder.json records."""
    import numpy as np

    from ascp.records.reader import read_units
    from ascp.report.frame import estimate_difference, paired, task_weighted_mean, unit_frame

    frame = unit_frame(read_units(run_dir))
    names = {a: development.condition(a) for a in development.candidates}
    means = {a: task_weighted_mean(frame, names[a], "pr") for a in development.candidates}
    if not all(np.isfinite(m) for m in means.values()):
        raise AscpError(f"{run_dir} lacks a candidate's units; rerun the same command to finish the development run.")
    best = max(development.candidates, key=lambda a: (means[a], -a))
    rows, chosen = [], None
    for alpha in development.candidates:
        if alpha == best:
            se, delta = 0.0, 0.0
        else:
            est = estimate_difference(paired(frame, names[alpha], names[best], "pr"), np.random.default_rng(0), n_boot)
            se, delta = (float("nan"), float("nan")) if est is None else (est.se, est.mean)
        within = alpha == best or (np.isfinite(se) and delta >= -se)
        if within and chosen is None:
            chosen = alpha
        rows.append({"alpha": alpha, "condition": names[alpha], "pr": means[alpha], "delta_from_best": delta,
                     "se": se, "within_one_se": bool(within)})
    assert chosen is not None  # the best is always within
    return {"rule": "the smallest alpha whose development PR@T (equal task weights) is within one standard error "
                    "of the best candidate's (SE: bootstrap SE of the paired per-query difference from the best, "
                    f"{n_boot} replicates, default_rng(0))",
            "eta": development.eta, "scheduler": development.scheduler, "candidates": rows, "best": best,
            "chosen": chosen, "condition": names[chosen], "units": int(len(frame))}


def preset_spec(name: str, data_root: Path, limit: int | None = None, model: str | None = None,
                backend: str | None = None, embedder: str | None = None, request_cache: str | None = None,
                estimator: str | None = None):
    """The preset's `ExperimentSpec`, its data paths resolved under `data_root` (checked to exist);
    `model` replaces the preset's generator (a model spec as `--model` takes), `backend` its backend,
    `embedder` its embedder (a name or folder as `--embedder` takes), `estimator` the probe of every
    condition (a registered estimator name)."""
    return load_preset(name, data_root, limit, model, backend, embedder, estimator)[0]


def _with_estimator(condition: Any, estimator: str) -> Any:
    """A preset condition (short name or mapping) probed with `estimator`."""
    from dataclasses import replace

    from ascp.experiments.condition import Condition

    if isinstance(condition, str):
        return replace(Condition.parse(condition), estimator=estimator).name
    return {**condition, "estimator": estimator} if isinstance(condition, dict) else condition


def load_preset(name: str, data_root: Path, limit: int | None = None, model: str | None = None,
                backend: str | None = None, embedder: str | None = None, estimator: str | None = None):
    """(the preset's spec as `preset_spec` makes it, its `Development` split or None)."""
    import yaml

    from ascp.experiments.spec import parse_spec

    if name not in PRESET_CLAIMS:
        raise AscpError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}.")
    if estimator is not None:
        from ascp.attribution import ESTIMATOR_NAMES

        if estimator not in ESTIMATOR_NAMES:
            raise AscpError(f"--estimator: unknown estimator {estimator!r}; choose one of "
                            f"{', '.join(ESTIMATOR_NAMES)}.")
    if embedder is not None:
        from ascp.embed.embedders import EMBEDDER_NAMES, check_embedder

        checked = check_embedder(embedder, "--embedder")  # names `--embedder` (not the spec field) when wrong
        embedder = embedder if embedder in EMBEDDER_NAMES else checked
    if not data_root.is_dir():
        raise AscpError(f"data folder {data_root} does not exist; pass --data-root (the folder holding asqa/), "
                        "or set ASCP_DATA.")
    text = (resources.files("ascp") / "resources" / "presets" / f"{name}.yaml").read_text(encoding="utf-8")
    # the data paths relative to the data root, as the spec copied into the store names them
    text = text.replace('"{data_root}/', '"')
    raw = yaml.safe_load(text)
    development = raw.pop(DEVELOPMENT, None)
    if limit is not None:
        if limit < 1:
            raise AscpError(f"--limit must be at least 1, got {limit}.")
        for task in raw["tasks"]:
            task["limit"] = limit
    if model is not None:
        path = Path(model).expanduser()
        raw["models"] = [model if model == "default" or not path.exists()
                         else {"name": path.stem, "path": str(path.resolve())}]
    if backend is not None:
        raw["backend"] = backend
    if embedder is not None:
        raw["embedder"] = embedder
    if estimator is not None:
        raw["conditions"] = [_with_estimator(c, estimator) for c in raw.get("conditions", [])]
        if development is not None and "scheduler" in development:
            development["scheduler"] = _with_estimator(development["scheduler"], estimator)
    changed = (limit is not None or model is not None or backend is not None or embedder is not None
               or estimator is not None)
    if changed or development is not None:
        text = yaml.safe_dump(raw, sort_keys=False)
    spec = parse_spec(raw, base=data_root, text=text)
    return spec, None if development is None else _development(development, [t.name for t in spec.tasks])


def write_splits(out: Path, plan, development_plan) -> dict[str, Any]:
    """OUT/splits.json: each task's test and development positions, eligible counts and case ids; refuses
    (one sentence) a development split that overlaps the test positions."""
    from ascp.jsonio import atomic_writer

    splits: dict[str, Any] = {"tasks": {}}
    for task in plan.spec.tasks:
        dev_task = next(t for t in development_plan.spec.tasks if t.name == task.name)
        (a, b), (c, d) = task.positions, dev_task.positions
        if a <= d and c <= b:
            raise AscpError(f"task {task.name}: the development positions {dev_task.positions_text} overlap the test "
                            f"positions {task.positions_text}; the development split must be disjoint.")
        splits["tasks"][task.name] = {
            "data": task.data_record,
            "test": {"positions": task.positions_text, "eligible": len(plan.cases[task.name]),
                     "cases": [c.id for c in plan.cases[task.name]]},
            DEVELOPMENT: {"positions": dev_task.positions_text, "eligible": len(development_plan.cases[task.name]),
                          "cases": [c.id for c in development_plan.cases[task.name]]},
        }
    splits["disjoint"] = True
    splits["rule"] = ("positions are 0-based items in file order, selected before the eligibility filter "
                      "(min_pool); 'eligible' counts the cases kept")
    with atomic_writer(out / SPLITS) as handle:
        handle.write(json.dumps(splits, indent=2) + "\n")
    return splits


def preset_report(name: str, out: str | Path, report_out: str | Path | None = None, n_boot: int = 10_000,
                  seed: int = 0, used_threshold: UsedThreshold | str | float | None = None,
                  data_root: str | Path | None = None):
    """The report of a preset's store `out` with the preset's claims; for a preset with a development
    split, the frozen steered condition's store (OUT/table10) joins the frame and Table 10's claims."""
    from ascp.report import write_report

    out = Path(out)
    claims = PRESET_CLAIMS[name]
    also: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()
    decoder = out / DECODER
    if decoder.is_file() and (out / TABLE10 / "units.jsonl").is_file():
        choice = json.loads(decoder.read_text(encoding="utf-8"))
        claims = claims + steered_claims(choice["condition"])
        also = (out / TABLE10,)
        notes = (f"Steered decoder frozen from the development split (alpha = {choice['chosen']}, eta = "
                 f"{choice['eta']}; {DECODER}); its test units are in {TABLE10}/.",)
    return write_report(out, report_out, n_boot=n_boot, seed=seed, claims=claims, used_threshold=used_threshold,
                        title=f"ascp reproduce --preset {name}", notes=notes, also=also, data_root=data_root)


def reproduce(name: str, out: str | Path, data_root: str | Path | None = None, limit: int | None = None,
              progress=None, on_start=None, n_boot: int = 10_000, model: str | None = None,
              backend: str | None = None, embedder: str | None = None, request_cache: str | Path | None = None,
              executor: str = "local", workers: int = 1, address: str | None = None, estimator: str | None = None,
              **ray_options: Any):
    """Run (or resume) the preset into `out`, then write `out/report` with the paper's signs checked.

    `request_cache`: the request cache file (`ascp.lm.request_cache`); None keeps it in the run store,
    `out/requests.sqlite`, so the preset's conditions compute each shared request once and a resumed
    or repeated run feeds nothing already fed; `"off"` runs without one. `estimator` probes every
    condition with that estimator instead of the preset's (the claims then compare those cells).
    A preset with a development split runs, in this order: its test conditions into `out`; the
    decoder candidates on the development positions into `out/development`; the one-standard-error
    choice into `out/decoder.json`; the chosen condition, frozen, on the test positions into
    `out/table10`. Every step resumes. `executor`, `workers`, `address` and `ray_options` are
    `ascp.experiments.run_experiment`'s."""
    from ascp.experiments.store import check_out_location

    out = Path(out)
    check_out_location(out)
    root = Path(data_root) if data_root is not None else default_data_root()
    spec, development = load_preset(name, root, limit, model=model, backend=backend, embedder=embedder,
                                    estimator=estimator)
    if request_cache is None:
        request_cache = out / "requests.sqlite"
    results = run_frame(spec, development, out, n_boot=n_boot, on_start=on_start, executor=executor,
                        workers=workers, address=address, progress=progress, request_cache=request_cache,
                        **ray_options)
    report = preset_report(name, out, n_boot=n_boot, data_root=root)
    return _combined(results), report


def run_frame(spec, development: Development | None, out: Path, n_boot: int = 10_000, on_start=None,
              executor: str = "local", workers: int = 1, **options: Any) -> list:
    """The steps of `reproduce` for a spec and its development split (None: the spec's run only); every
    plan is checked before the first step runs. Returns each step's `RunResult`."""
    from ascp.experiments.run import prepare, run_experiment
    from ascp.jsonio import atomic_writer

    plan = prepare(spec, executor, workers)
    dev_plan = prepare(development_spec(spec, development), executor, workers) if development else None
    options = dict(executor=executor, workers=workers, **options)

    def started(*counts: int) -> None:
        if dev_plan is not None:  # the store folder exists now
            write_splits(out, plan, dev_plan)
        if on_start is not None:
            on_start(*counts)

    results = [run_experiment(spec, out, plan=plan, on_start=started, **options)]
    if development is not None and dev_plan is not None:
        results.append(run_experiment(dev_plan.spec, out / DEVELOPMENT, plan=dev_plan, on_start=on_start, **options))
        choice = choose_decoder(out / DEVELOPMENT, development, n_boot)
        with atomic_writer(out / DECODER) as handle:
            handle.write(json.dumps(choice, indent=2) + "\n")
        frozen = prepare(frozen_spec(spec, choice["condition"]), executor, workers)
        results.append(run_experiment(frozen.spec, out / TABLE10, plan=frozen, on_start=on_start, **options))
    return results


def _combined(results):
    """One `RunResult` for a preset's stores: units summed, savings of every step."""
    from dataclasses import replace

    first = results[0]
    return replace(first, total=sum(r.total for r in results), done=sum(r.done for r in results),
                   written=sum(r.written for r in results), pending_rounds=sum(r.pending_rounds for r in results),
                   savings=tuple(line for r in results for line in r.savings))
