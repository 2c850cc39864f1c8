"""The `ascp` command line: the edge where files and flags become dataclasses.

Every error a user can cause is printed as one sentence on stderr with exit code 2; no
traceback, and no partial output file.
"""

from __future__ import annotations

import contextlib
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
out = Console()


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


@app.command()
def demo(model: ModelOpt = "default", estimator: EstimatorOpt = "loo", seed: SeedOpt = 0) -> None:
    """Run the causal probe on a small bundled example and print it as tables."""
    path = Path(str(resources.files("ascp") / "resources" / "demo_requests.jsonl"))
    out.print(f"[bold]ascp demo[/bold]: {estimator} attribution with model {model!r} on {path.name}\n")
    with user_errors():
        run_attribution(path, estimator, model, seed, None, 48, 0.7, 1.0, None, "commit", "auto", True)


def main() -> None:
    """Console-script entry point (typer handles usage errors with exit code 2)."""
    app()


if __name__ == "__main__":
    main()
