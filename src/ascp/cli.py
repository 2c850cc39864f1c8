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
from typing import Annotated

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


def run_attribution(
    input_path: Path, estimator_name: str, model: str, seed: int, out_path: Path | None,
    max_new_tokens: int, temperature: float, top_p: float, threshold: float | None,
    instruction: str, device: str, show: bool,
) -> None:
    from ascp.attribution import make_estimator
    from ascp.attribution.probe import ProbeConfig, attribute_one, prepare_inputs
    from ascp.jsonio import write_jsonl
    from ascp.lm.generation import SamplingConfig
    from ascp.prompts import PromptTemplate
    from ascp.requests import load_requests

    # Everything that can be checked without the model is checked first.
    options = {"seed": seed} if estimator_name == "contextcite" else {}
    estimator = make_estimator(estimator_name, **options)
    requests = load_requests(input_path)
    if out_path is not None and not out_path.parent.exists():
        raise AscpError(f"output folder {out_path.parent} does not exist; create it first.")
    config = ProbeConfig(
        template=PromptTemplate.named(instruction),
        sampling=SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens),
        seed=seed,
        threshold=threshold,
    )
    from ascp.lm.resolve import load_language_model

    with err.status(f"loading model {model!r}"):
        lm = load_language_model(model, device=device)
    with _progress() as bar:
        free = sum(r.response is None for r in requests)
        gen_task = bar.add_task("generating responses", total=free) if free else None
        items = prepare_inputs(lm, requests, config, progress=lambda n: bar.advance(gen_task, n))
        task = bar.add_task(f"probing ({estimator.name})", total=len(requests))
        results = []
        for request, item in zip(requests, items, strict=True):
            results.append(attribute_one(lm, estimator, request, item, config))
            bar.advance(task)
    if out_path is not None:
        write_jsonl(out_path, (r.to_json() for r in results))
        err.print(f"wrote {len(results)} results to {out_path}")
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
) -> None:
    """Score how much a fixed (or freshly generated) response relied on each passage."""
    with user_errors():
        run_attribution(input, estimator, model, seed, out_path, max_new_tokens, temperature, top_p,
                        threshold, instruction, device, show)


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
    device: str, lm=None,
):
    """Run one policy over loaded cases with a progress bar; returns (portfolios, case rows, lm)."""
    from ascp.embed import embed
    from ascp.lm.generation import SamplingConfig
    from ascp.lm.resolve import load_language_model
    from ascp.loop import LoopConfig
    from ascp.runner import run_policy

    for case in cases:
        if len(case.pool) < k:
            raise AscpError(f"case {case.id!r}: its pool has {len(case.pool)} passages, fewer than k={k}.")
    config = LoopConfig(policy=policy, k=k, T=T, estimator=estimator, seed=seed,
                        sampling=SamplingConfig(max_new_tokens=max_new_tokens))
    if lm is None:
        with err.status(f"loading model {model!r}"):
            lm = load_language_model(model, device=device)
    with _progress() as bar:
        task = bar.add_task(f"{policy} k={k} T={T}", total=len(cases) * T)
        portfolios, rows = run_policy(lm, cases, config, embed, progress=lambda n: bar.advance(task, n))
    return portfolios, rows, lm, config


@app.command()
def run(
    data: Annotated[Path, typer.Option("--data", help="Cases: generic JSONL or an ALCE-style ASQA JSON file.")],
    policy: Annotated[str, typer.Option("--policy", help="Scheduler: vanilla, rotate, mmr, xquad, pm2, dpp, "
                                        "carriage, carriage-narrow, ascp (and ascp variants).")],
    k: Annotated[int, typer.Option("--k", help="Passages per context.")],
    T: Annotated[int, typer.Option("--T", help="Rounds (generations) per case.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: rounds.jsonl, cases.jsonl, summary.json.")],
    format: Annotated[str, typer.Option("--format", help="auto, jsonl or asqa.")] = "auto",
    model: ModelOpt = "default",
    estimator: EstimatorOpt = "loo",
    seed: SeedOpt = 0,
    limit: Annotated[int | None, typer.Option("--limit", help="Use only the first N cases.")] = None,
    rank_by: Annotated[str, typer.Option("--rank-by", help="Ranking of pools without comparable scores: "
                                         "dense or bm25.")] = "dense",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
) -> None:
    """Run T rounds of one scheduling policy on every case and write the portfolio with its metrics."""
    with user_errors():
        from ascp.data import load_cases
        from ascp.display import summary_table
        from ascp.runio import check_out_dir, write_run

        _validate_run_args(policy, k, T, estimator)
        if limit is not None and limit < 1:
            raise AscpError(f"--limit must be at least 1, got {limit}.")
        check_out_dir(out_dir)
        cases = load_cases(data, format=format, rank_by=rank_by, limit=limit)
        portfolios, rows, _, config = execute_run(cases, policy, k, T, model, estimator, seed, max_new_tokens, device)
        run_config = {"data": str(data), "format": format, "rank_by": rank_by, "policy": policy, "k": k, "T": T,
                      "model": model, "estimator": estimator, "seed": seed, "limit": limit,
                      "sampling": config.sampling.__dict__}
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
            portfolios, rows, lm, _ = execute_run(cases, policy, k, T, model, "loo", seed, 48, "auto", lm=lm)
            for case, portfolio, row in zip(cases, portfolios, rows, strict=True):
                out.print(portfolio_panel(case, portfolio, row))
            means[policy] = summarize(rows)
        out.print(summary_table(means, title="demo: mean over questions"))


def main() -> None:
    """Console-script entry point (typer handles usage errors with exit code 2)."""
    app()


if __name__ == "__main__":
    main()
