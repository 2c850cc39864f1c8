"""`ascp judge`: the judge meta-evaluation of Fig. 7 over a run's portfolios (`ascp.validation.judge`)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from ascp.cli.common import _EMBEDDER_HELP, BackendOpt, DeviceOpt, _progress, app, err, user_errors


@app.command("judge")
def judge_command(
    run_dir: Annotated[Path, typer.Argument(help="An `ascp run` output folder (or an `ascp experiment run` "
                                            "store).")],
    judge_model: Annotated[str, typer.Option(
        "--judge-model", help="The judge: 'default' (embedded SmolLM2-135M, a smoke test only), a model folder, "
        "a .gguf file or a cached hub id.")],
    backend: BackendOpt = "auto",
    device: DeviceOpt = "auto",
    embedder: Annotated[str, typer.Option(
        "--embedder", help=f"Embedder of the proxy (cosine between a document and the responses): "
        f"{_EMBEDDER_HELP}.")] = "default",
    out_dir: Annotated[Path | None, typer.Option("--out", help="Output folder: judgements.jsonl, judge.json, "
                                                 "results.md (default: RUN_DIR/judge).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Judge only the first N portfolios.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier judge output in "
                                            "--out.")] = False,
) -> None:
    """Judge a run's portfolios with an identity-blinded LLM (document coverage and textual novelty, P(yes)
    from log-probabilities) and correlate the probe's ECR with it (Fig. 7)."""
    with user_errors():
        from ascp.api import load_model
        from ascp.embed.embedders import check_embedder, resolve_embedder
        from ascp.lm.protocol import backend_name, model_name
        from ascp.validation.judge import check_judge_out, judge_portfolios, load_portfolios, prompts_used, write_judge

        embedder = check_embedder(embedder)  # a missing embedder fails before any work
        source, portfolios = load_portfolios(run_dir, limit)
        out = out_dir if out_dir is not None else run_dir / "judge"
        check_judge_out(out, overwrite=overwrite)
        with err.status(f"loading judge model {judge_model!r}"):
            lm = load_model(judge_model, device=device, backend=backend)
        embed_fn = resolve_embedder(embedder)
        with _progress() as bar:
            task = bar.add_task(f"judging {len(portfolios)} portfolios", total=len(portfolios))
            result = judge_portfolios(lm, portfolios, embed_fn, progress=lambda n: bar.advance(task, n))
        command = " ".join(["ascp judge", shlex.quote(str(run_dir)), "--judge-model", shlex.quote(judge_model),
                            f"--backend {backend}", f"--device {device}", "--embedder", shlex.quote(embedder),
                            "--out", shlex.quote(str(out)), *([f"--limit {limit}"] if limit else [])])
        config = {"run": str(run_dir), "source": source, "judge_model": judge_model, "judge_name": model_name(lm),
                  "backend": backend_name(lm), "device": device, "embedder": embedder, "limit": limit,
                  "prompts": prompts_used()}
        write_judge(out, result, config, command)
        rho = result.statistics["panel_b"]["ecr_vs_judge_coverage"]
        err.print(f"wrote {out}/judgements.jsonl, judge.json, results.md ({len(portfolios)} portfolios; ECR vs "
                  f"judge coverage rho = {rho['rho']:.3f}, n = {rho['n']})", markup=False, highlight=False)

