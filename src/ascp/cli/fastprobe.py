"""`ascp fit-probe`: fit the attention map of one model (the `attention` and `gated` estimators)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from ascp.cli.common import BackendOpt, DataOpt, DeviceOpt, ModelOpt, app, err, user_errors
from ascp.errors import AscpError
from ascp.jsonio import check_parent

FitSeedOpt = Annotated[int, typer.Option("--seed", help="Seed of each item's width, passages and sampled response.")]


def _progress_line(label: str) -> Callable[[str], None]:
    return lambda line: err.print(f"{label}: {line}", markup=False, highlight=False)


@app.command("fit-probe")
def fit_probe(
    data: DataOpt,
    out_path: Annotated[Path, typer.Option("--out", help="The attention map file to write (JSON, written whole).")],
    train_positions: Annotated[str, typer.Option(
        "--train-positions", help="Items the map is fitted on, FIRST-LAST in file order (0-based, inclusive).")]
    = "0-199",
    dev_positions: Annotated[str, typer.Option(
        "--dev-positions", help="Items the band is sized and the fit reported on, FIRST-LAST.")] = "200-249",
    train_contexts: Annotated[int | None, typer.Option(
        "--train-contexts", help="Use the first N eligible training items (default: all of the range).")] = None,
    dev_contexts: Annotated[int | None, typer.Option(
        "--dev-contexts", help="Use the first N eligible development items (default: all of the range).")] = None,
    widths: Annotated[str, typer.Option("--widths", help="Context widths drawn per item among those its pool "
                                        "allows, comma-separated.")] = "3,5,10,24",
    model: ModelOpt = "default",
    backend: BackendOpt = "hf",
    device: DeviceOpt = "auto",
    seed: FitSeedOpt = 0,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Length limit of the sampled responses.")]
    = 48,
    target: Annotated[float, typer.Option("--target", help="Agreement of gated's used with loo's that the band "
                                          "must reach on the development items.")] = 0.99,
    format: Annotated[str, typer.Option("--format", help="auto or a format name (docs/data.md).")] = "auto",
    readings_path: Annotated[Path | None, typer.Option(
        "--readings", help="A JSON-lines file that keeps every context read: a rerun reads only the contexts it "
        "lacks, and processes given disjoint position ranges (split at multiples of 8, the sampling batch) can "
        "share it.")] = None,
) -> None:
    """Fit the attention estimators' map onto exact leave-one-out for one model, and size gated's band."""
    with user_errors():
        from ascp.api import load_model
        from ascp.attribution.attention import attention_model
        from ascp.attribution.attention_map import model_digest
        from ascp.caching.files import describe_file
        from ascp.data import load_cases_with_order
        from ascp.experiments.spec import parse_positions
        from ascp.fitprobe.fit import draw_contexts, fit_map, read_contexts
        from ascp.fitprobe.readings import READINGS_FEATURE, FitReadings, check_readings_path, context_key
        from ascp.lm.sampling import SamplingConfig

        train_range = parse_positions("--train-positions", train_positions)
        dev_range = parse_positions("--dev-positions", dev_positions)
        if not (train_range[1] < dev_range[0] or dev_range[1] < train_range[0]):
            raise AscpError(f"--train-positions {train_positions} and --dev-positions {dev_positions} overlap; give "
                            "disjoint ranges.")
        try:
            width_list = sorted({int(w) for w in widths.split(",") if w.strip()})
        except ValueError:
            raise AscpError(f"--widths must be whole numbers separated by commas, got {widths!r}.") from None
        if not width_list or width_list[0] < 1:
            raise AscpError(f"--widths must name widths of at least 1, got {widths!r}.")
        if not 0 < target <= 1:
            raise AscpError(f"--target must be in (0, 1], got {target}.")
        for name, value in (("--train-contexts", train_contexts), ("--dev-contexts", dev_contexts)):
            if value is not None and value < 1:
                raise AscpError(f"{name} must be at least 1, got {value}.")
        check_parent(out_path, "--out")
        if readings_path is not None:
            check_readings_path(readings_path)  # before the model loads
        sampling = SamplingConfig(max_new_tokens=max_new_tokens)
        splits = {}
        for label, (first, last), limit in (("train", train_range, train_contexts), ("dev", dev_range, dev_contexts)):
            cases, _ = load_cases_with_order(data, format=format, rank_by="given", positions=(first, last))
            positioned = list(enumerate(cases, start=first))
            drawn = draw_contexts(positioned, seed, width_list)
            splits[label] = (len(cases), drawn[:limit] if limit else drawn)
        with err.status(f"loading model {model!r}"):
            lm = load_model(model, device=device, backend=backend)
        attention_model(lm, "attention")
        readings, known = None, {}
        if readings_path is not None:
            readings = FitReadings(readings_path, {"feature": READINGS_FEATURE, "model": model_digest(lm),
                                                   "data": data.name, "seed": seed, "max_new_tokens": max_new_tokens})
            known = readings.load()  # a file of other settings is refused before any work
        start = time.perf_counter()
        read = {}
        for label, (_, drawn) in splits.items():
            earlier = [known.get(context_key(case.id, (p.id for p in passages))) for _, case, passages in drawn]
            kept = sum(c is not None and c.knockout is not None for c in earlier)
            older = sum(c is not None and c.knockout is None for c in earlier)
            fresh = len(drawn) - kept - older
            err.print(f"{label}: {len(drawn)} contexts, {fresh} to read (attention pass + exact loo)"
                      + (f", {older} older readings to complete with knockout scores" if older else "")
                      + (f", {kept} kept in {readings_path}" if readings_path is not None else ""), markup=False,
                      highlight=False)
            read[label] = read_contexts(lm, drawn, sampling, seed, progress=_progress_line(label), readings=readings)
        provenance = {
            "data": describe_file(data, Path.cwd()),  # path under the current folder, SHA-256, size
            "seed": seed, "max_new_tokens": max_new_tokens, "widths_asked": width_list,
            "train_positions": f"{train_range[0]}-{train_range[1]}", "dev_positions": f"{dev_range[0]}-{dev_range[1]}",
            "items_in_range": {label: n for label, (n, _) in splits.items()},
            "contexts_drawn": {label: len(drawn) for label, (_, drawn) in splits.items()},
            "left_out": {label: skipped for label, (_, skipped) in read.items()},
            "positions_used": {label: [c.position for c in contexts] for label, (contexts, _) in read.items()},
        }
        fitted = fit_map(lm, read["train"][0], read["dev"][0], provenance, target)
        contexts = [c for contexts, _ in read.values() for c in contexts]
        fitted = fitted.with_band(fitted.band, {
            "seconds": round(time.perf_counter() - start, 1),
            # what reading the contexts cost when each was read (a refit from --readings feeds nothing)
            "attention_seconds": round(sum(c.attention_seconds for c in contexts), 1),
            "loo_seconds": round(sum(c.loo_seconds for c in contexts), 1),
            "attention_tokens": sum(c.attention_tokens for c in contexts),
            "loo_tokens": sum(c.loo_tokens for c in contexts)})
        fitted.save(out_path)
        dev = fitted.fit["dev"]
        err.print(f"wrote {out_path}: {dev['contexts']} dev contexts, Spearman with exact loo "
                  f"{dev['spearman_attention']} (attention) / {dev['spearman_gated']} (gated), used agreement "
                  f"{dev['used_agreement_attention']} / {dev['used_agreement_gated']} at band {fitted.band} "
                  f"({dev['verified_share']:.0%} of passages verified)", markup=False, highlight=False)
