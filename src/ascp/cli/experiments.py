"""`ascp experiment run/status/export/relocate`, `density`, `report` and `reproduce`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ascp.cli.common import (
    EmbedderOpt,
    EmbedderOverrideOpt,
    PrefixCacheOpt,
    RequestCacheOpt,
    _experiment_progress,
    app,
    err,
    out,
    user_errors,
)
from ascp.errors import AscpError
from ascp.jsonio import check_parent

# The executor options of `experiment run` and `reproduce`.
ExecutorOpt = Annotated[str, typer.Option("--executor", help="local (one process, batched) or ray.")]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Ray actors per model (each loads it once).")]
AddressOpt = Annotated[str | None, typer.Option("--address", help="Join this Ray cluster; default: start a local one.")]
CpusPerWorkerOpt = Annotated[float, typer.Option("--cpus-per-worker", help="Ray: CPUs per actor.")]
GpusPerWorkerOpt = Annotated[float, typer.Option("--gpus-per-worker", help="Ray: GPUs per actor.")]
MemoryPerWorkerOpt = Annotated[float, typer.Option(
    "--memory-per-worker", help="Ray: GB of memory each actor reserves, so a node runs only the actors it "
    "can hold (0: no reservation).")]


experiment_app = typer.Typer(
    no_args_is_help=True,
    help="Declarative experiments: a YAML spec of tasks x models x seeds x conditions, run into a resumable store.",
)
app.add_typer(experiment_app, name="experiment")


def _ray_options(executor: str, cpus_per_worker: float, gpus_per_worker: float,
                 memory_per_worker: float) -> dict[str, Any]:
    """The Ray executor's options: resources per actor and a line per finished chunk with the units
    each worker has done."""
    if executor != "ray":
        return {}
    from ascp.experiments.executors import worker_resources

    worker_resources(cpus_per_worker, gpus_per_worker, memory_per_worker)  # one sentence before anything is written

    def on_worker(label: str, units: int) -> None:
        err.print(f"{label}: {units} units done", markup=False, highlight=False)

    return {"cpus_per_worker": cpus_per_worker, "gpus_per_worker": gpus_per_worker,
            "memory_per_worker_gb": memory_per_worker, "on_worker": on_worker}


@experiment_app.command("run")
def experiment_run(
    spec: Annotated[Path, typer.Argument(help="YAML spec: name, tasks, models, seeds, grid or conditions.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Run store folder; rerun the same command to resume.")],
    executor: ExecutorOpt = "local",
    workers: WorkersOpt = 1,
    address: AddressOpt = None,
    cpus_per_worker: CpusPerWorkerOpt = 1.0,
    gpus_per_worker: GpusPerWorkerOpt = 0.0,
    memory_per_worker: MemoryPerWorkerOpt = 0.0,
    embedder: EmbedderOverrideOpt = None,
    request_cache: RequestCacheOpt = None,
    prefix_cache_mb: PrefixCacheOpt = None,
    data_root: Annotated[Path | None, typer.Option("--data-root", help="Folder the spec's relative data paths "
                                                   "are read under (default: the spec's folder, then the "
                                                   "current one).")] = None,
) -> None:
    """Run (or resume) every unit of an experiment spec; finished units are never redone or lost."""
    from ascp.experiments.run import prepare, run_experiment
    from ascp.experiments.store import check_out_location

    with user_errors():
        check_out_location(out_dir)
        plan = prepare(spec, executor, workers, embedder=embedder, prefix_cache_mb=prefix_cache_mb,
                       data_root=data_root)
        options = _ray_options(executor, cpus_per_worker, gpus_per_worker, memory_per_worker)
        bar, on_start, progress = _experiment_progress(f"{plan.spec.name} ({executor})")

        try:
            with bar:
                result = run_experiment(plan.spec, out_dir, executor=executor, workers=workers, address=address,
                                        progress=progress, plan=plan, on_start=on_start,
                                        request_cache=request_cache, **options)
        except KeyboardInterrupt:
            err.print(f"interrupted; finished units are kept in {out_dir}; rerun the same command to resume.")
            raise typer.Exit(130) from None
        err.print(f"wrote {result.written} units; {result.done}/{result.total} done in {out_dir}/units.jsonl",
                  markup=False, highlight=False)
        for line in result.savings:
            err.print(line, markup=False, highlight=False)


@experiment_app.command("status")
def experiment_status(
    directory: Annotated[Path, typer.Argument(help="A run store folder (the --out of `experiment run`).")],
    groups: Annotated[bool, typer.Option("--groups/--no-groups", help="Also list task x model x seed x condition."
                                         )] = True,
) -> None:
    """Show how many units of a run store are done, overall and per group."""
    from rich.table import Table

    from ascp.experiments.run import status

    with user_errors():
        info = status(directory)
        if groups:
            table = Table(title=f"{info['name']}: {directory}")
            for column in ("task", "model", "seed", "condition", "done"):
                table.add_column(column, justify="right" if column in ("seed", "done") else "left")
            for g in info["groups"]:
                table.add_row(g["task"], g["model"], str(g["seed"]), g["condition"], f"{g['done']}/{g['total']}")
            out.print(table)
        running = f" (being written by pid {info['writer_pid']})" if info["writer_pid"] else ""
        out.print(f"{info['done']}/{info['total']} units done{running}", markup=False, highlight=False)


@experiment_app.command("export")
def experiment_export(
    directory: Annotated[Path, typer.Argument(help="A run store folder (the --out of `experiment run`).")],
) -> None:
    """Write DIR/units.parquet (one row per unit) and DIR/rounds.parquet (one row per round)."""
    from ascp.experiments.run import export

    with user_errors():
        paths = export(directory)
        err.print(f"wrote {paths[0]} and {paths[1]}", markup=False, highlight=False)


@experiment_app.command("relocate")
def experiment_relocate(
    directory: Annotated[Path, typer.Argument(help="A run store folder (the --out of `experiment run` or "
                                              "`reproduce`); the stores below it are rewritten too.")],
    data_root: Annotated[Path, typer.Option("--data-root", help="The folder its data files lie under now "
                                            "(e.g. ../shared/data).")],
    base: Annotated[Path | None, typer.Option("--base", help="The folder local model paths are named relative "
                                              "to (default: the current one).")] = None,
) -> None:
    """Rewrite a store's plan.json, spec.yaml and splits.json to name each data file by its path under the
    data root, SHA-256 and size instead of an absolute path (no number changes; idempotent)."""
    from ascp.experiments.relocate import relocate

    with user_errors():
        changed = relocate(directory, data_root, base)
        err.print(f"rewrote {len(changed)} files" + (f" ({', '.join(str(p) for p in changed)})" if changed else
                  f"; {directory} names no absolute data path"), markup=False, highlight=False)


@app.command("density")
def density_command(
    data: Annotated[list[Path], typer.Option("--data", help="A data file; repeat --data for several tasks.")],
    format: Annotated[str, typer.Option("--format", help="auto, jsonl, asqa, qampari, eli5, alce, hotpotqa, "
                                        "hotpotqa-ircot or recipes (one format for every --data).")] = "auto",
    rank_by: Annotated[str, typer.Option("--rank-by", help="Pool order: auto (the format's default), given, dense "
                                         "or bm25.")] = "auto",
    limit: Annotated[int | None, typer.Option("--limit", help="Use only the first N cases of each file.")] = None,
    depth: Annotated[int | None, typer.Option("--depth", help="Pool depth (recipes: extend by BM25 over the "
                                              "corpus; others: keep the top N).")] = None,
    max_rank: Annotated[int, typer.Option("--max-rank", help="Deepest rank counted (N).")] = 30,
    nli_model: Annotated[str | None, typer.Option("--nli-model", help="NLI model (a local folder or a cached name; "
                                                  "the one rule of `ascp run`, docs/metrics.md) to attest claim "
                                                  "units (ELI5); default: claims are skipped.")] = None,
    out_path: Annotated[Path | None, typer.Option("--out", help="Also write the densities as JSON.")] = None,
    embedder: EmbedderOpt = "default",
) -> None:
    """Relevance density per task (Table 3): rho by rank band, head-5 shares, gold units, log-log slope."""
    with user_errors():
        import json

        from ascp.data import load_cases_with_order
        from ascp.embed.embedders import check_embedder, resolve_embedder
        from ascp.metrics.density import density_by_task

        # dense re-ranking only (loaded if used); the default is checked then, so given/bm25 need no MiniLM
        embed_fn = resolve_embedder(embedder if embedder == "default" else check_embedder(embedder))
        if max_rank < 5:
            raise AscpError(f"--max-rank must be at least 5, got {max_rank}.")
        if out_path is not None:
            check_parent(out_path, "--out")
        matcher = None
        if nli_model is not None:
            from ascp.metrics.nli import load_nli_matcher  # the loader and decision rule of every command

            with err.status(f"loading NLI model {nli_model!r}"):
                matcher = load_nli_matcher(nli_model)
        results: list[tuple] = []  # (file, density): one row per task per file
        orders: dict[Path, str] = {}  # file -> the pool order used (auto resolves per file)
        for path in data:
            with err.status(f"loading and ranking {path.name}"):
                cases, orders[path] = load_cases_with_order(path, format=format, rank_by=rank_by, limit=limit,
                                                            require_pool=False, depth=depth, embed_fn=embed_fn)
            with err.status(f"attesting gold units in {path.name}"):
                results.extend((path, d) for d in density_by_task(cases, max_rank=max_rank, matcher=matcher))
        from ascp.render.console import density_table

        table = density_table(results, rank_by, max_rank)
        out.print(table)
        if out_path is not None:
            from ascp.jsonio import atomic_writer

            with atomic_writer(out_path) as handle:
                json.dump([{"data": str(path), "order": orders[path], **d.to_json()} for path, d in results], handle,
                          indent=2)
            err.print(f"wrote {out_path}")


@app.command("report")
def report_command(
    directory: Annotated[Path, typer.Argument(help="A run store folder (the --out of `ascp experiment run`) or "
                                              "an `ascp simulate` folder.")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Report folder (default: DIR/report).")] = None,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Bootstrap replicates per interval.")] = 10_000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap draws.")] = 0,
    preset: Annotated[str | None, typer.Option("--preset", help="Also check the paper claims of this "
                                               "`ascp reproduce` preset (e.g. cpu-small).")] = None,
    used_threshold: Annotated[str | None, typer.Option(
        "--used-threshold", help="Width-invariant threshold of the tables' ECR: a positive number (raw probe "
        "score) or an `ascp calibrate` folder (default: the calibrated default, docs/calibration.md).")] = None,
    data_root: Annotated[Path | None, typer.Option("--data-root", help="Folder the store's data files are "
                                                   "recorded under (default: $ASCP_DATA, else ../shared/data).")
                         ] = None,
) -> None:
    """Write paper-layout tables (markdown, LaTeX), PNG figures and an HTML page for an experiment run."""
    from ascp.report import write_report
    from ascp.reproduce import PRESET_CLAIMS, PRESETS

    with user_errors():
        from ascp.records.reader import kind_of

        if kind_of(directory) == "simulation":  # an `ascp simulate` folder: its comparison table
            from ascp.report.simulation import write_simulation_report

            written = write_simulation_report(directory, out_dir)
            err.print(f"1 table (simulation); open {written}/index.html", markup=False, highlight=False)
            return
        if preset is not None and preset not in PRESET_CLAIMS:
            raise AscpError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}.")
        from ascp.reading import resolve_used_threshold

        used = resolve_used_threshold(used_threshold)  # read once; a bad value fails before the store is read
        if preset is not None:  # the preset's claims; a held-out preset's frozen steered store joins the frame
            from ascp.reproduce import preset_report

            report = preset_report(preset, directory, out_dir, n_boot=n_boot, seed=seed, used_threshold=used,
                                   data_root=data_root)
        else:
            report = write_report(directory, out_dir, n_boot=n_boot, seed=seed, used_threshold=used,
                                  data_root=data_root)
        err.print(f"{report.units}/{report.total} units; {len(report.tables)} tables "
                  f"({', '.join(report.tables)}), {len(report.figures)} figures; open {report.out}/index.html",
                  markup=False, highlight=False)


@app.command("reproduce")
def reproduce_command(
    out_dir: Annotated[Path, typer.Option("--out", help="Run store and report folder; rerun to resume.")],
    preset: Annotated[str, typer.Option("--preset", help="cpu-small: the paper's key contrasts on ASQA, "
                                        "embedded model, < 60 min on 2 CPU cores; heldout-small: the frozen "
                                        "held-out frame of Tables 10 and 11 (100 ASQA + 100 HotpotQA queries, "
                                        "two seeds; hours on a CPU, docs/results/heldout-small).")] = "cpu-small",
    data_root: Annotated[Path | None, typer.Option("--data-root", help="Folder holding asqa/ (default: $ASCP_DATA, "
                                                   "else ../shared/data).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Queries per task (default: the preset's).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Replace the preset's generator: a model folder, "
                                              "a .gguf file or a cached hub id.")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="auto, hf or llamacpp (default: the "
                                                "preset's backend; cpu-small pins hf).")] = None,
    embedder: EmbedderOverrideOpt = None,
    estimator: Annotated[str | None, typer.Option("--estimator", help="Probe every cell with this estimator "
                                                  "instead of the preset's loo (e.g. gated); the claims then "
                                                  "compare those cells.")] = None,
    request_cache: RequestCacheOpt = None,
    executor: ExecutorOpt = "local",
    workers: WorkersOpt = 1,
    address: AddressOpt = None,
    cpus_per_worker: CpusPerWorkerOpt = 1.0,
    gpus_per_worker: GpusPerWorkerOpt = 0.0,
    memory_per_worker: MemoryPerWorkerOpt = 0.0,
) -> None:
    """Run a packaged reduction of the paper's experiments, then report which of its signs reproduce."""
    from ascp.reproduce import reproduce

    with user_errors():
        bar, on_start, progress = _experiment_progress(f"{preset} ({executor})")
        options = _ray_options(executor, cpus_per_worker, gpus_per_worker, memory_per_worker)
        try:
            with bar:
                result, report = reproduce(preset, out_dir, data_root, limit, progress=progress, on_start=on_start,
                                           model=model, backend=backend, embedder=embedder, estimator=estimator,
                                           request_cache=request_cache, executor=executor, workers=workers,
                                           address=address, **options)
        except KeyboardInterrupt:
            err.print(f"interrupted; finished units are kept in {out_dir}; rerun the same command to resume.")
            raise typer.Exit(130) from None
        err.print(f"{result.done}/{result.total} units; report: {report.out}/index.html (tables: "
                  f"{', '.join(report.tables)})", markup=False, highlight=False)
        for line in result.savings:
            err.print(line, markup=False, highlight=False)


