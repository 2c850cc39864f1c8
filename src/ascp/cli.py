"""The `ascp` command line: the edge where files and flags become dataclasses.

Every error a user can cause is printed as one sentence on stderr with exit code 2; no
traceback, and no partial output file.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ascp.errors import AscpError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Evidence-aware portfolio RAG: probe, schedule, steer.",
)
err = Console(stderr=True)
# Tables are wide; when output is not a terminal (CI logs, pipes) give rich room for them.
out = Console() if sys.stdout.isatty() else Console(width=160)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn an `AscpError` into one sentence on stderr and exit code 2 (no traceback)."""
    try:
        yield
    except AscpError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print("interrupted; nothing was written.")
        raise typer.Exit(130) from None


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True,
    )


def _experiment_progress(label: str):
    """(bar, on_start, progress) for `run_experiment`: a rounds bar that starts once the store is open."""
    bar = _progress()
    state: dict = {}

    def on_start(rounds: int, done: int, total: int) -> None:
        err.print(f"{label}: {done}/{total} units done; {total - done} to run", markup=False, highlight=False)
        state["task"] = bar.add_task("rounds", total=rounds)

    def progress(rounds: int, units: int) -> None:
        if "task" in state:
            bar.advance(state["task"], rounds)

    return bar, on_start, progress


def run_attribution(
    input_path: Path, estimator_name: str, model: str, seed: int, out_path: Path | None,
    max_new_tokens: int, temperature: float, top_p: float, threshold: float | None,
    instruction: str, device: str, show: bool, html_path: Path | None = None,
) -> None:
    from ascp.api import Probe, load_model
    from ascp.jsonio import write_jsonl
    from ascp.lm.generation import SamplingConfig
    from ascp.requests import load_requests

    # Everything that can be checked without the model is checked first (Probe's settings too,
    # with a stand-in for the model).
    sampling = SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    settings: dict[str, Any] = dict(seed=seed, threshold=threshold, instruction=instruction, sampling=sampling)
    Probe(None, estimator_name, **settings)
    requests = load_requests(input_path)
    for target in (out_path, html_path):
        if target is not None and not target.parent.exists():
            raise AscpError(f"output folder {target.parent} does not exist; create it first.")
    with err.status(f"loading model {model!r}"):
        probe = Probe(load_model(model, device=device), estimator_name, **settings)
    with _progress() as bar:
        free = sum(r.response is None for r in requests)
        gen_task = bar.add_task("generating responses", total=free) if free else None
        task = bar.add_task(f"probing ({probe.estimator.name})", total=len(requests))
        results = probe.attribute_many(requests, on_generated=lambda n: bar.advance(gen_task, n),
                                       on_scored=lambda n: bar.advance(task, n))
    if out_path is not None:
        write_jsonl(out_path, (r.to_json() for r in results))
        err.print(f"wrote {len(results)} results to {out_path}")
    if html_path is not None:
        from ascp.jsonio import atomic_writer
        from ascp.render.pages import attribution_page

        page = attribution_page(results, {r.id: r.question for r in requests}, f"ascp attribute: {input_path.name}")
        with atomic_writer(html_path) as handle:
            handle.write(page)
        err.print(f"wrote {html_path}")
    if show:
        from ascp.display import print_results

        print_results(out, requests, results)


Input = Annotated[Path, typer.Option("--input", help="JSONL of requests: id, question, passages, response (or null).")]
EstimatorOpt = Annotated[
    str, typer.Option("--estimator", help="loo, replace, hierarchical, contextcite, bm25, qd-cosine or yd-cosine.")
]
OutOpt = Annotated[Path, typer.Option("--out", help="Output JSONL, one result per request (written atomically).")]
ModelOpt = Annotated[
    str,
    typer.Option("--model", help="'default' (embedded SmolLM2-135M), a model folder, a .gguf file or a cached hub id."),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for free-protocol generation and ContextCite masks.")]
DataOpt = Annotated[Path, typer.Option("--data", help="Cases: generic JSONL or an ALCE-style ASQA JSON file.")]
KOpt = Annotated[int, typer.Option("--k", help="Passages per context.")]
TOpt = Annotated[int, typer.Option("--T", help="Rounds (generations) per case.")]
ThresholdOpt = Annotated[
    float | None,
    typer.Option("--threshold", help="Fixed 'used' threshold on normalised scores; default tau(k) = 0.555 k^-0.633."),
]


@app.command()
def attribute(
    input: Input,
    out_path: OutOpt,
    estimator: EstimatorOpt = "loo",
    model: ModelOpt = "default",
    seed: SeedOpt = 0,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Generation limit (free protocol).")] = 128,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.7,
    top_p: Annotated[float, typer.Option("--top-p")] = 1.0,
    threshold: ThresholdOpt = None,
    instruction: Annotated[str, typer.Option("--instruction", help="commit or integrate.")] = "commit",
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
    show: Annotated[bool, typer.Option("--show", help="Also print a table per request.")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="Also write a self-contained page: each request's "
                                              "passages shaded by their normalised score.")] = None,
) -> None:
    """Score how much a fixed (or freshly generated) response relied on each passage."""
    with user_errors():
        run_attribution(input, estimator, model, seed, out_path, max_new_tokens, temperature, top_p,
                        threshold, instruction, device, show, html)


def _validate_run_args(policy: str, k: int, T: int, estimator: str) -> None:
    from ascp.attribution import ESTIMATOR_NAMES
    from ascp.schedulers import parse_scheduler

    if k < 1 or T < 1:
        raise AscpError(f"k and T must be at least 1 (got --k {k} --T {T}).")
    parse_scheduler(policy)  # raises with the list of valid names
    if estimator not in ESTIMATOR_NAMES:
        raise AscpError(f"unknown estimator {estimator!r}; choose one of {', '.join(ESTIMATOR_NAMES)}.")


def execute_run(
    cases, policy: str, k: int, T: int, model: str, estimator: str, seed: int, max_new_tokens: int,
    device: str, lm=None, steer=None,
):
    """Run one policy over loaded cases with a progress bar; returns (portfolios, case rows, lm).

    `steer`: a `SteerConfig` for attribution-steered decoding from round 2 on, or None.
    """
    from ascp.api import load_model, run_portfolios

    for case in cases:
        if len(case.pool) < k:
            raise AscpError(f"case {case.id!r}: its pool has {len(case.pool)} passages, fewer than k={k}.")
    if lm is None:
        with err.status(f"loading model {model!r}"):
            lm = load_model(model, device=device)
    with _progress() as bar:
        task = bar.add_task(f"{policy} k={k} T={T}", total=len(cases) * T)
        portfolios = run_portfolios(cases, policy=policy, k=k, T=T, model=lm, estimator=estimator, seed=seed,
                                    max_new_tokens=max_new_tokens, steer=steer,
                                    progress=lambda n: bar.advance(task, n))
    rows = [{"case_id": p.case_id, "policy": p.policy, "pool": [d.id for d in case.pool], **p.metrics}
            for case, p in zip(cases, portfolios, strict=True)]
    return portfolios, rows, lm


@app.command()
def run(
    data: DataOpt,
    policy: Annotated[str, typer.Option("--policy", help="Scheduler: vanilla, rotate, mmr, xquad, pm2, dpp, "
                                        "carriage, carriage-narrow, ascp (and ascp variants).")],
    k: KOpt,
    T: TOpt,
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: rounds.jsonl, cases.jsonl, summary.json.")],
    format: Annotated[str, typer.Option("--format", help="auto, jsonl or asqa.")] = "auto",
    model: ModelOpt = "default",
    estimator: EstimatorOpt = "loo",
    seed: SeedOpt = 0,
    limit: Annotated[int | None, typer.Option("--limit", help="Use only the first N cases.")] = None,
    rank_by: Annotated[str, typer.Option("--rank-by", help="Pool order: auto (the format's default: given for "
                                         "jsonl, dense for ASQA), given, dense or bm25.")] = "auto",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
    steer: Annotated[bool, typer.Option("--steer", help="Attribution-steered decoding (Eq. 5 + APC) from round 2 "
                                        "on, away from passages the probe flagged as used.")] = False,
    alpha: Annotated[float | None, typer.Option("--alpha", help="Steering strength, >= 0 (with --steer; "
                                                "default 0.5).")] = None,
    eta: Annotated[float | None, typer.Option("--eta", help="Plausibility cutoff in [0, 1) (with --steer; "
                                              "default 0.1).")] = None,
    contrast: Annotated[bool, typer.Option("--contrast/--no-contrast", help="With --steer: the Eq. 5 contrast "
                                           "term (off: APC only).")] = True,
    apc: Annotated[bool, typer.Option("--apc/--no-apc", help="With --steer: the adaptive plausibility "
                                      "constraint (off: contrast only).")] = True,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the results of an earlier run in "
                                            "--out.")] = False,
) -> None:
    """Run T rounds of one scheduling policy on every case and write the portfolio with its metrics."""
    with user_errors():
        from ascp.data import load_cases
        from ascp.decoding import SteerConfig
        from ascp.display import summary_table
        from ascp.runio import check_out_dir, write_run

        _validate_run_args(policy, k, T, estimator)
        if limit is not None and limit < 1:
            raise AscpError(f"--limit must be at least 1, got {limit}.")
        if not steer and (alpha is not None or eta is not None or not contrast or not apc):
            raise AscpError("--alpha, --eta, --no-contrast and --no-apc only apply with --steer; add --steer.")
        steer_config = SteerConfig(alpha=0.5 if alpha is None else alpha, eta=0.1 if eta is None else eta,
                                   contrast=contrast, apc=apc) if steer else None
        check_out_dir(out_dir, overwrite=overwrite)
        cases = load_cases(data, format=format, rank_by=rank_by, limit=limit)
        portfolios, rows, _ = execute_run(cases, policy, k, T, model, estimator, seed, max_new_tokens, device,
                                          steer=steer_config)
        from ascp.lm.generation import SamplingConfig
        run_config = {"data": str(data), "format": format, "rank_by": rank_by, "policy": policy, "k": k, "T": T,
                      "model": model, "estimator": estimator, "seed": seed, "limit": limit,
                      "sampling": SamplingConfig(max_new_tokens=max_new_tokens).__dict__,
                      "steer": steer_config.to_json() if steer_config else None}
        summary = write_run(out_dir, cases, portfolios, rows, run_config)
        out.print(summary_table({policy: summary["mean"]}, title=f"{data.name}: {len(rows)} cases, k={k}, T={T}"))
        err.print(f"wrote {out_dir}/rounds.jsonl, cases.jsonl, summary.json")


@app.command()
def demo(
    model: ModelOpt = "default",
    seed: SeedOpt = 0,
    k: Annotated[int, typer.Option("--k")] = 2,
    T: Annotated[int, typer.Option("--T")] = 4,
) -> None:
    """Compare ascp, rotate and vanilla portfolios on the bundled demo set (embedded defaults)."""
    with user_errors():
        from ascp.data import load_cases
        from ascp.display import portfolio_panel, summary_table
        from ascp.runio import summarize

        path = Path(str(resources.files("ascp") / "resources" / "demo_cases.jsonl"))
        cases = load_cases(path, format="jsonl")
        out.print(f"[bold]ascp demo[/bold]: {len(cases)} ambiguous questions, policies ascp / rotate / vanilla, "
                  f"k={k}, T={T}, model {model!r}, causal LOO probe\n")
        lm, means = None, {}
        for policy in ("ascp", "rotate", "vanilla"):
            portfolios, rows, lm = execute_run(cases, policy, k, T, model, "loo", seed, 48, "auto", lm=lm)
            for case, portfolio, row in zip(cases, portfolios, rows, strict=True):
                out.print(portfolio_panel(case, portfolio, row))
            means[policy] = summarize(rows)
        out.print(summary_table(means, title="demo: mean over questions"))


@app.command("simulate")
def simulate_command(
    data: DataOpt,
    policy: Annotated[str, typer.Option("--policy", help="Comma-separated policies, e.g. vanilla,rotate,ascp; "
                                        "the first is the baseline of the comparison.")],
    k: KOpt,
    T: TOpt,
    consumer: Annotated[str, typer.Option("--consumer", help="toy(q=0.5), oracle or replay(run=RUN_DIR).")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: one run folder per policy and "
                                          "comparison.json.")],
    format: Annotated[str, typer.Option("--format", help="auto or a format name (docs/data.md).")] = "auto",
    rank_by: Annotated[str, typer.Option("--rank-by", help="auto, given, dense or bm25.")] = "auto",
    limit: Annotated[int | None, typer.Option("--limit", help="Use only the first N cases.")] = None,
    min_pool: Annotated[int | None, typer.Option("--min-pool", help="Keep cases with at least N passages.")] = None,
    seed: SeedOpt = 0,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Bootstrap replicates per interval.")] = 2000,
    cache: Annotated[Path | None, typer.Option("--cache", help="Embedding cache file (default: "
                                               "$ASCP_HOME/embeddings/minilm.npz).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier simulation in --out.")] = False,
) -> None:
    """The closed loop with a model-free consumer in place of the generator and probe: seconds per policy."""
    with user_errors():
        from ascp.consumers import Oracle, Replay, make_consumer
        from ascp.data import load_cases
        from ascp.embed import embed
        from ascp.paths import ascp_home
        from ascp.runio import check_out_dir
        from ascp.schedulers import parse_scheduler
        from ascp.simulate import (
            EmbeddingCache,
            compare,
            pool_views,
            simulate_portfolios,
            split_policies,
            write_simulation,
        )

        policies = split_policies(policy)
        if not policies:
            raise AscpError("--policy names no policy; give e.g. --policy vanilla,ascp.")
        for name in policies:
            parse_scheduler(name)
        if len(set(policies)) < len(policies):
            raise AscpError(f"--policy {policy!r} names a policy twice; give each policy once.")
        if k < 1 or T < 1:
            raise AscpError(f"k and T must be at least 1 (got --k {k} --T {T}).")
        reader = make_consumer(consumer, seed=seed)
        check_out_dir(out_dir, overwrite=overwrite)
        if (out_dir / "comparison.json").exists() and not overwrite:
            raise AscpError(f"--out {out_dir} already holds a simulation; pass --overwrite to replace it.")
        embedder = EmbeddingCache(embed, cache or ascp_home() / "embeddings" / "minilm.npz")
        with err.status(f"loading {data.name}"):
            cases = load_cases(data, format=format, rank_by=rank_by, limit=limit, min_pool=min_pool,
                               embed_fn=embedder)
        if not cases:
            raise AscpError(f"no case of {data} is left (--min-pool {min_pool}, --limit {limit}); relax the filters.")
        if isinstance(reader, Oracle) and any(not u.aliases for c in cases for u in c.units):
            raise AscpError(f"the oracle consumer needs answer aliases, and {data} has claim units (ELI5-style); "
                            "use toy(q=...) or replay(...) for this data.")
        short = [c.id for c in cases if len(c.pool) < k]
        if short:
            raise AscpError(f"case {short[0]!r}: its pool has fewer than k={k} passages; pass --min-pool {k}.")
        if isinstance(reader, Replay):
            reader.check(cases, T)
        with err.status(f"embedding {len(cases)} pools (cached in {embedder.path})"):
            views = pool_views(cases, embedder)
            embedder.save()
        results = {}
        with _progress() as bar:
            for name in policies:
                task = bar.add_task(name, total=len(cases))

                def advance(n: int, task=task) -> None:
                    bar.advance(task, n)

                portfolios = simulate_portfolios(cases, name, k, T, reader, views, seed=seed, progress=advance)
                results[portfolios[0].policy if portfolios else name] = portfolios
        comparison = compare(results, n_boot=n_boot, seed=seed)
        config = {"data": str(data), "format": format, "rank_by": rank_by, "limit": limit, "min_pool": min_pool,
                  "k": k, "T": T, "consumer": reader.name, "seed": seed, "n_boot": n_boot, "cases": len(cases)}
        write_simulation(out_dir, cases, results, config, comparison)
        from ascp.display import simulation_table

        out.print(simulation_table(comparison, title=f"{data.name}: {len(cases)} cases, k={k}, T={T}, "
                                                      f"consumer {reader.name}"))
        err.print(f"wrote {out_dir}/ (one run folder per policy) and comparison.json", markup=False,
                  highlight=False)


@app.command("view")
def view_command(
    directory: Annotated[Path, typer.Argument(help="An `ascp run` or `ascp simulate` output folder.")],
    out_path: Annotated[Path | None, typer.Option("--out", help="The page (default: DIR/view.html).")] = None,
) -> None:
    """Write one self-contained page of a run: per case, round by round, the context with the used
    passages marked, the response and the gold units it recovered; policies side by side."""
    with user_errors():
        import json

        from ascp.data import load_cases
        from ascp.jsonio import atomic_writer
        from ascp.render.pages import run_folders, run_page

        if not directory.is_dir():
            raise AscpError(f"{directory} is not a folder; give the --out folder of `ascp run` or `ascp simulate`.")
        runs = run_folders(directory)
        if not runs:
            raise AscpError(f"{directory} holds no run (rounds.jsonl, cases.jsonl, summary.json); give the --out "
                            "folder of `ascp run` or `ascp simulate`.")
        target = out_path or directory / "view.html"
        if not target.parent.exists():
            raise AscpError(f"output folder {target.parent} does not exist; create it first.")
        config = json.loads((next(iter(runs.values())) / "summary.json").read_text(encoding="utf-8"))["config"]
        data = Path(str(config.get("data", "")))
        cases = None
        if data.is_file():
            with err.status(f"reading questions and answers from {data.name}"):
                cases = {c.id: c for c in load_cases(data, format=config.get("format", "auto"), rank_by="given",
                                                     require_pool=False)}
        else:
            err.print(f"note: the data file {data} is not here; the page shows no questions or answer units.",
                      markup=False, highlight=False)
        page = run_page(runs, cases, f"ascp view: {directory.name} ({', '.join(runs)})")
        with atomic_writer(target) as handle:
            handle.write(page)
        err.print(f"wrote {target}", markup=False, highlight=False)


@app.command("pools")
def pools_command(
    data: Annotated[Path, typer.Option("--data", help="Cases: generic JSONL or an ALCE-style ASQA JSON file.")],
    width: Annotated[int, typer.Option("--width", help="Passages per controlled context (K >= m).")],
    padding: Annotated[str, typer.Option("--padding", help="off-query, same-query or duplicates.")],
    out_path: Annotated[Path, typer.Option("--out", help="Output JSONL, one controlled pool per case.")],
    m: Annotated[int, typer.Option("--m", help="Necessary passages (disjoint answer sets).")] = 2,
    seed: SeedOpt = 0,
    format: Annotated[str, typer.Option("--format", help="auto or a format name (docs/data.md).")] = "auto",
    max_passage_words: Annotated[int, typer.Option(
        "--max-passage-words", help="Longer passages are not eligible for any role (0: no limit).")] = 200,
) -> None:
    """Build controlled pools (Appendix C): m necessary passages plus padding, shuffled per case."""
    with user_errors():
        from ascp.data import load_cases
        from ascp.jsonio import write_jsonl
        from ascp.validation.pools import build_pools, check_pool_args, skip_summary

        check_pool_args(width, padding, m)
        if not out_path.parent.exists():
            raise AscpError(f"output folder {out_path.parent} does not exist; create it first.")
        cases = load_cases(data, format=format, rank_by="given")  # no pool choice depends on a ranking
        built, skips = build_pools(cases, width, padding, m=m, seed=seed, max_words=max_passage_words)
        reasons = "; ".join(f"{k}: {v}" for k, v in skip_summary(skips).items())
        if not built:
            raise AscpError(f"no eligible case in {data} for width {width} with {padding} padding ({reasons}).")
        write_jsonl(out_path, (p.to_json() for p in built))
        err.print(f"wrote {len(built)} pools to {out_path}; skipped {len(skips)} of {len(cases)} cases"
                  + (f" ({reasons})" if skips else ""), markup=False, highlight=False)


@app.command("validate-probe")
def validate_probe(
    data: Annotated[Path, typer.Option("--data", help="Cases: generic JSONL or an ALCE-style ASQA JSON file.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: scores.jsonl, responses.jsonl, "
                                          "summary.json, results.md, figure-<protocol>.png.")],
    widths: Annotated[str, typer.Option("--widths", help="Context widths, comma-separated.")] = "3,6,12,24",
    paddings: Annotated[str, typer.Option("--paddings", help="off-query, same-query, duplicates.")]
    = "off-query,same-query",
    estimators: Annotated[str, typer.Option("--estimators", help="Comma-separated estimator names.")]
    = "loo,replace,contextcite,bm25,qd-cosine,yd-cosine",
    protocol: Annotated[str, typer.Option("--protocol", help="fixed, free, or fixed,free for both.")] = "fixed",
    limit: Annotated[int | None, typer.Option("--limit", help="Use the first N eligible cases.")] = None,
    m: Annotated[int, typer.Option("--m", help="Necessary passages per context.")] = 2,
    seed: SeedOpt = 0,
    model: ModelOpt = "default",
    contextcite_ablations: Annotated[int, typer.Option("--contextcite-ablations")] = 32,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.7,
    instruction: Annotated[str, typer.Option("--instruction", help="commit or integrate.")] = "commit",
    max_minutes: Annotated[float | None, typer.Option(
        "--max-minutes", help="Start no new case after this many minutes (the report says so).")] = None,
    format: Annotated[str, typer.Option("--format", help="auto or a format name (docs/data.md).")] = "auto",
    max_passage_words: Annotated[int, typer.Option("--max-passage-words")] = 200,
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Cluster-bootstrap replicates.")] = 2000,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
) -> None:
    """Validate the probe on controlled pools (Sec. 4, Fig. 3): AUC, cover@m gain, operating-point transfer."""
    with user_errors():
        from ascp.attribution import ESTIMATOR_NAMES
        from ascp.data import load_cases
        from ascp.lm.generation import SamplingConfig
        from ascp.lm.resolve import load_language_model
        from ascp.runio import check_out_dir
        from ascp.validation import experiment as vx
        from ascp.validation.pools import PADDINGS
        from ascp.validation.report import build_summary, write_outputs

        if bootstrap < 100:
            raise AscpError(f"--bootstrap must be at least 100, got {bootstrap}.")
        config = vx.ValidationConfig(
            widths=vx.parse_widths(widths), paddings=vx.parse_list(paddings, PADDINGS, "padding"),
            estimators=vx.parse_list(estimators, ESTIMATOR_NAMES, "estimator"),
            protocols=vx.parse_list(protocol, vx.PROTOCOLS, "protocol"), m=m, seed=seed, limit=limit,
            contextcite_ablations=contextcite_ablations, instruction=instruction, max_minutes=max_minutes,
            sampling=SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens),
            max_words=max_passage_words,
        )
        config.check()
        check_out_dir(out_dir)
        cases = load_cases(data, format=format, rank_by="given")  # no pool choice depends on a ranking
        _, selected = vx.select(cases, cases, config)
        err.print(f"{len(selected)} eligible cases selected", markup=False, highlight=False)
        with err.status(f"loading model {model!r}"):
            lm = load_language_model(model, device=device)
        run = vx.run_validation(lm, selected, cases, config, log=lambda s: err.print(s, markup=False, highlight=False))
        def command(limit, max_minutes) -> str:
            return " ".join(
                ["ascp validate-probe", f"--data {data}", f"--out {out_dir}", f"--widths {widths}",
                 f"--paddings {paddings}", f"--estimators {estimators}", f"--protocol {protocol}",
                 *([f"--limit {limit}"] if limit else []), f"--m {m}", f"--seed {seed}", f"--model {model}",
                 f"--contextcite-ablations {contextcite_ablations}", f"--max-new-tokens {max_new_tokens}",
                 f"--temperature {temperature}", f"--instruction {instruction}",
                 *([f"--max-minutes {max_minutes:g}"] if max_minutes else []), f"--format {format}",
                 f"--max-passage-words {max_passage_words}", f"--bootstrap {bootstrap}",
                 f"--device {device}"])

        summary = build_summary(run, str(data), model, n_boot=bootstrap, command=command(limit, max_minutes))
        summary["reproduce"] = command(len(run.cases), None)  # the same cases, without the time budget
        write_outputs(out_dir, run, summary)
        err.print(f"wrote {out_dir}/results.md, scores.jsonl, responses.jsonl, summary.json and figures "
                  f"({len(run.cases)} cases, {run.seconds:.0f} s)", markup=False, highlight=False)


# ----- ascp experiment: declarative specs -> resumable run store -> Parquet ---------------------

experiment_app = typer.Typer(
    no_args_is_help=True,
    help="Declarative experiments: a YAML spec of tasks x models x seeds x conditions, run into a resumable store.",
)
app.add_typer(experiment_app, name="experiment")


@experiment_app.command("run")
def experiment_run(
    spec: Annotated[Path, typer.Argument(help="YAML spec: name, tasks, models, seeds, grid or conditions.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Run store folder; rerun the same command to resume.")],
    executor: Annotated[str, typer.Option("--executor", help="local (one process, batched) or ray.")] = "local",
    workers: Annotated[int, typer.Option("--workers", help="Ray actors per model (each loads it once).")] = 1,
    address: Annotated[str | None, typer.Option("--address", help="Join this Ray cluster; default: start a "
                                                "local one.")] = None,
    cpus_per_worker: Annotated[float, typer.Option("--cpus-per-worker", help="Ray: CPUs per actor.")] = 1.0,
    gpus_per_worker: Annotated[float, typer.Option("--gpus-per-worker", help="Ray: GPUs per actor.")] = 0.0,
) -> None:
    """Run (or resume) every unit of an experiment spec; finished units are never redone or lost."""
    from ascp.experiments.run import prepare, run_experiment

    with user_errors():
        plan = prepare(spec, executor, workers)
        options: dict[str, Any] = (
            {"cpus_per_worker": cpus_per_worker, "gpus_per_worker": gpus_per_worker} if executor == "ray" else {}
        )
        bar, on_start, progress = _experiment_progress(f"{plan.spec.name} ({executor})")

        try:
            with bar:
                result = run_experiment(plan.spec, out_dir, executor=executor, workers=workers, address=address,
                                        progress=progress, plan=plan, on_start=on_start, **options)
        except KeyboardInterrupt:
            err.print(f"interrupted; finished units are kept in {out_dir}; rerun the same command to resume.")
            raise typer.Exit(130) from None
        err.print(f"wrote {result.written} units; {result.done}/{result.total} done in {out_dir}/units.jsonl",
                  markup=False, highlight=False)


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
    nli_model: Annotated[str | None, typer.Option("--nli-model", help="NLI cross-encoder (folder or cached name) "
                                                  "to attest claim units (ELI5); default: claims are skipped.")] = None,
    out_path: Annotated[Path | None, typer.Option("--out", help="Also write the densities as JSON.")] = None,
) -> None:
    """Relevance density per task (Table 3): rho by rank band, head-5 shares, gold units, log-log slope."""
    with user_errors():
        import json

        from ascp.data import load_cases
        from ascp.data.density import density_by_task

        if max_rank < 5:
            raise AscpError(f"--max-rank must be at least 5, got {max_rank}.")
        if out_path is not None and not out_path.parent.exists():
            raise AscpError(f"output folder {out_path.parent} does not exist; create it first.")
        matcher = None
        if nli_model is not None:
            from ascp.data.matching import NLIMatcher

            matcher = NLIMatcher(nli_model)
        results: list[tuple] = []  # (file, density): one row per task per file
        for path in data:
            with err.status(f"loading and ranking {path.name}"):
                cases = load_cases(path, format=format, rank_by=rank_by, limit=limit, require_pool=False, depth=depth)
            with err.status(f"attesting gold units in {path.name}"):
                results.extend((path, d) for d in density_by_task(cases, max_rank=max_rank, matcher=matcher))
        from ascp.display import density_table

        table = density_table(results, rank_by, max_rank)
        out.print(table)
        if out_path is not None:
            from ascp.jsonio import atomic_writer

            with atomic_writer(out_path) as handle:
                json.dump([{"data": str(path), **d.to_json()} for path, d in results], handle, indent=2)
            err.print(f"wrote {out_path}")


@app.command("report")
def report_command(
    directory: Annotated[Path, typer.Argument(help="A run store folder (the --out of `ascp experiment run`).")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Report folder (default: DIR/report).")] = None,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Bootstrap replicates per interval.")] = 10_000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap draws.")] = 0,
    preset: Annotated[str | None, typer.Option("--preset", help="Also check the paper claims of this "
                                               "`ascp reproduce` preset (e.g. cpu-small).")] = None,
) -> None:
    """Write paper-layout tables (markdown, LaTeX), PNG figures and an HTML page for an experiment run."""
    from ascp.report import write_report
    from ascp.reproduce import PRESET_CLAIMS, PRESETS

    with user_errors():
        if preset is not None and preset not in PRESET_CLAIMS:
            raise AscpError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}.")
        claims = PRESET_CLAIMS[preset] if preset else ()
        title = f"ascp reproduce --preset {preset}" if preset else None
        report = write_report(directory, out_dir, n_boot=n_boot, seed=seed, claims=claims, title=title)
        err.print(f"{report.units}/{report.total} units; {len(report.tables)} tables "
                  f"({', '.join(report.tables)}), {len(report.figures)} figures; open {report.out}/index.html",
                  markup=False, highlight=False)


@app.command("reproduce")
def reproduce_command(
    out_dir: Annotated[Path, typer.Option("--out", help="Run store and report folder; rerun to resume.")],
    preset: Annotated[str, typer.Option("--preset", help="cpu-small: the paper's key contrasts on ASQA, "
                                        "embedded model, < 60 min on 2 CPU cores.")] = "cpu-small",
    data_root: Annotated[Path | None, typer.Option("--data-root", help="Folder holding asqa/ (default: $ASCP_DATA, "
                                                   "else ../shared/data).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Queries per task (default: the preset's).")] = None,
) -> None:
    """Run a packaged reduction of the paper's experiments, then report which of its signs reproduce."""
    from ascp.reproduce import reproduce

    with user_errors():
        bar, on_start, progress = _experiment_progress(preset)

        try:
            with bar:
                result, report = reproduce(preset, out_dir, data_root, limit, progress=progress, on_start=on_start)
        except KeyboardInterrupt:
            err.print(f"interrupted; finished units are kept in {out_dir}; rerun the same command to resume.")
            raise typer.Exit(130) from None
        err.print(f"{result.done}/{result.total} units; report: {report.out}/index.html (tables: "
                  f"{', '.join(report.tables)})", markup=False, highlight=False)


def _params_table(title: str, entries: list[tuple[str, list[tuple[str, str, str, str]]]]):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in ("name", "option", "type", "default", "meaning"):
        table.add_column(column)
    for name, params in entries:
        if not params:
            table.add_row(name, "", "", "", "(no options)")
        for i, (option, kind, default, meaning) in enumerate(params):
            table.add_row(name if i == 0 else "", option, kind, default, meaning)
    return table


@app.command("policies")
def policies() -> None:
    """List the scheduling policies with their options (use as `--policy 'name(option=value,...)'`)."""
    from ascp.params import describe
    from ascp.schedulers import SCHEDULER_NAMES, scheduler_params

    out.print(_params_table("policies", [(n, describe(scheduler_params(n))) for n in SCHEDULER_NAMES]))


@app.command("estimators")
def estimators() -> None:
    """List the attribution estimators with their options."""
    from ascp.attribution import ESTIMATOR_NAMES, estimator_params
    from ascp.params import describe

    out.print(_params_table("estimators", [(n, describe(estimator_params(n))) for n in ESTIMATOR_NAMES]))


def main() -> None:
    """Console-script entry point (typer handles usage errors with exit code 2)."""
    app()


if __name__ == "__main__":
    main()
