"""`ascp attribute`, `pools`, `validate-probe` and `estimators`: the probe and its validation."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from ascp.cli.common import (
    AttributeSeedOpt,
    BackendOpt,
    BootstrapSeedOpt,
    DataOpt,
    DeviceOpt,
    EstimatorOpt,
    FreeTokensOpt,
    Input,
    InstructionOpt,
    ModelOpt,
    OutOpt,
    PoolsSeedOpt,
    ProxyEmbedderOpt,
    RequestCacheOpt,
    SystemOpt,
    TemperatureOpt,
    TemplateOpt,
    ThresholdOpt,
    TopPOpt,
    ValidationSeedOpt,
    _params_table,
    _progress,
    app,
    cache_summary,
    err,
    out,
    read_template,
    user_errors,
)
from ascp.errors import AscpError
from ascp.jsonio import check_parent


def run_attribution(
    input_path: Path, estimator_name: str | None, model: str, seed: int, out_path: Path | None,
    max_new_tokens: int, temperature: float, top_p: float, threshold: float | None,
    instruction: str, device: str, show: bool, html_path: Path | None = None, template: str | None = None,
    system: str = "", backend: str = "auto", embedder: str | None = None, request_cache: str | None = None,
    spans: str | None = None, cite_markers: str | None = None, sources: str | None = None,
) -> None:
    """`ascp attribute` (and, with `cite_markers`, `ascp cite`: per-sentence readings written as causal
    citations, one `CitedResponse` record per request)."""
    from ascp.api import Probe, load_model
    from ascp.attribution.probe import probe_settings
    from ascp.attribution.requests import load_requests
    from ascp.jsonio import write_jsonl
    from ascp.lm.sampling import SamplingConfig

    # Everything that can be checked without the model is checked first: the probe is built once,
    # its model loaded last.
    if cite_markers is not None:
        from ascp.metrics.citations import MARKERS

        if cite_markers not in MARKERS:
            raise AscpError(f"--markers must be positions or ids, got {cite_markers!r}.")
        spans = "sentences"
    settings = probe_settings(estimator_name, threshold, spans=spans, sources=sources)
    if embedder is not None:
        settings = probe_settings(settings.estimator, threshold,
                                  {**settings.options, **proxy_embedder([settings.estimator], embedder)}, spans,
                                  sources)
    sampling = SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    probe = Probe(None, settings, seed=seed, instruction=instruction, sampling=sampling,
                  template=read_template(template), system=system)
    requests = load_requests(input_path)
    for target in (out_path, html_path):
        if target is not None:
            check_parent(target)
    with err.status(f"loading model {model!r}"):
        probe.model = load_model(model, device=device, backend=backend, request_cache=request_cache)
    with _progress() as bar:
        free = sum(r.response is None for r in requests)
        gen_task = bar.add_task("generating responses", total=free) if free else None
        task = bar.add_task(f"probing ({probe.estimator.name})", total=len(requests))
        results = probe.attribute_many(requests, on_generated=lambda n: bar.advance(gen_task, n),
                                       on_scored=lambda n: bar.advance(task, n))
    if out_path is not None and cite_markers is not None:
        from ascp.metrics.citations import cite_response

        cited = [cite_response(r, cite_markers) for r in results]
        write_jsonl(out_path, (c.to_json() for c in cited))
        unsupported = sum(len(c.unsupported) for c in cited)
        err.print(f"wrote {len(cited)} cited responses to {out_path}; {unsupported} of "
                  f"{sum(len(c.sentences) for c in cited)} sentences used no passage", markup=False, highlight=False)
    elif out_path is not None:
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
        from ascp.render.console import print_results

        print_results(out, requests, results)
    cache_summary(probe.model)



SourcesOpt = Annotated[str | None, typer.Option(
    "--sources", help="passages (default) or sentences: each passage's sentences are the sources, ids "
    "<passage id>#<n>, the prompt unchanged.")]


def proxy_embedder(estimators: list[str], embedder: str | None) -> dict[str, str]:
    """`--embedder` of the cosine proxies, checked before any work: {"embedder": canonical} or {}."""
    from ascp.attribution import estimator_facts, estimator_names
    from ascp.embed.embedders import check_embedder

    if embedder is None:
        return {}
    if not any(estimator_facts(e).needs_embedder for e in estimators):
        embedding = [n for n in estimator_names() if estimator_facts(n).needs_embedder]
        raise AscpError(f"--embedder applies to the estimators that embed text ({', '.join(embedding)}) only; drop "
                        "it or add one of them.")
    return {"embedder": check_embedder(embedder)}


@app.command()
def attribute(
    input: Input,
    out_path: OutOpt,
    estimator: EstimatorOpt = None,
    model: ModelOpt = "default",
    seed: AttributeSeedOpt = 0,
    max_new_tokens: FreeTokensOpt = 128,
    temperature: TemperatureOpt = 0.7,
    top_p: TopPOpt = 1.0,
    threshold: ThresholdOpt = None,
    instruction: InstructionOpt = "commit",
    device: DeviceOpt = "auto",
    backend: BackendOpt = "auto",
    show: Annotated[bool, typer.Option("--show", help="Also print a table per request.")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="Also write a self-contained page: each request's "
                                              "passages shaded by their normalised score.")] = None,
    template: TemplateOpt = None,
    system: SystemOpt = "",
    embedder: ProxyEmbedderOpt = None,
    request_cache: RequestCacheOpt = None,
    spans: Annotated[str | None, typer.Option("--spans", help="sentences: also a reading per response sentence "
                                              "(each record's `spans`), from the passes the estimator already "
                                              "ran (every built-in estimator; the proxies score "
                                              "each sentence's text).")] = None,
    sources: SourcesOpt = None,
) -> None:
    """Score how much a fixed (or freshly generated) response relied on each passage."""
    with user_errors():
        run_attribution(input, estimator, model, seed, out_path, max_new_tokens, temperature, top_p,
                        threshold, instruction, device, show, html, template, system, backend, embedder,
                        request_cache, spans, sources=sources)



@app.command()
def cite(
    input: Input,
    out_path: Annotated[Path, typer.Option("--out", help="Output JSONL, one cited response per request: `cited` "
                                           "(the response with markers), `sentences` (text, sources, supported).")],
    markers: Annotated[str, typer.Option("--markers", help="positions ([2]: the passage's place in the context) or "
                                         "ids (\\[doc-7]).")] = "positions",
    estimator: EstimatorOpt = None,
    model: ModelOpt = "default",
    seed: AttributeSeedOpt = 0,
    max_new_tokens: FreeTokensOpt = 128,
    temperature: TemperatureOpt = 0.7,
    top_p: TopPOpt = 1.0,
    threshold: ThresholdOpt = None,
    instruction: InstructionOpt = "commit",
    device: DeviceOpt = "auto",
    backend: BackendOpt = "auto",
    template: TemplateOpt = None,
    system: SystemOpt = "",
    request_cache: RequestCacheOpt = None,
    sources: SourcesOpt = None,
) -> None:
    """Cite each sentence of a fixed (or freshly generated) response with the passages it used, causally."""
    with user_errors():
        run_attribution(input, estimator, model, seed, out_path, max_new_tokens, temperature, top_p, threshold,
                        instruction, device, False, None, template, system, backend, None, request_cache,
                        cite_markers=markers, sources=sources)


@app.command("pools")
def pools_command(
    data: DataOpt,
    width: Annotated[int, typer.Option("--width", help="Passages per controlled context (K >= m).")],
    padding: Annotated[str, typer.Option("--padding", help="off-query, same-query or duplicates.")],
    out_path: Annotated[Path, typer.Option("--out", help="Output JSONL, one controlled pool per case.")],
    m: Annotated[int, typer.Option("--m", help="Necessary passages (disjoint answer sets).")] = 2,
    seed: PoolsSeedOpt = 0,
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
        check_parent(out_path, "--out")
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
    data: DataOpt,
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: scores.jsonl, responses.jsonl, "
                                          "summary.json, results.md, figure-<protocol>.png.")],
    widths: Annotated[str, typer.Option("--widths", help="Context widths, comma-separated.")] = "3,6,12,24",
    paddings: Annotated[str, typer.Option("--paddings", help="off-query, same-query, duplicates.")]
    = "off-query,same-query",
    estimators: Annotated[str | None, typer.Option("--estimators", help="Comma-separated estimator names (default: "
                                                   "Fig. 3's six, loo,replace,contextcite,bm25,qd-cosine,yd-cosine).")]
    = None,
    protocol: Annotated[str, typer.Option("--protocol", help="fixed, free, or fixed,free for both.")] = "fixed",
    limit: Annotated[int | None, typer.Option("--limit", help="Use the first N eligible cases.")] = None,
    m: Annotated[int, typer.Option("--m", help="Necessary passages per context.")] = 2,
    seed: ValidationSeedOpt = 0,
    model: ModelOpt = "default",
    contextcite_ablations: Annotated[int, typer.Option("--contextcite-ablations")] = 32,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.7,
    instruction: Annotated[str, typer.Option("--instruction", help="commit, integrate, commit+structured or "
                                             "integrate+structured (docs/experiments.md).")] = "commit",
    max_minutes: Annotated[float | None, typer.Option(
        "--max-minutes", help="Start no new case after this many minutes (the report says so).")] = None,
    format: Annotated[str, typer.Option("--format", help="auto or a format name (docs/data.md).")] = "auto",
    max_passage_words: Annotated[int, typer.Option("--max-passage-words")] = 200,
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Cluster-bootstrap replicates.")] = 2000,
    device: DeviceOpt = "auto",
    backend: BackendOpt = "auto",
    template: TemplateOpt = None,
    system: SystemOpt = "",
    embedder: ProxyEmbedderOpt = None,
) -> None:
    """Validate the probe on controlled pools (Sec. 4, Fig. 3): AUC, cover@m gain, operating-point transfer."""
    with user_errors():
        from ascp.attribution import ESTIMATOR_NAMES, VALIDATION_ESTIMATORS
        from ascp.data import load_cases
        from ascp.lm.resolve import load_language_model
        from ascp.lm.sampling import SamplingConfig
        from ascp.loop.runfolder import check_out_dir
        from ascp.validation import experiment as vx
        from ascp.validation.pools import PADDINGS
        from ascp.validation.report import build_summary, write_outputs

        if bootstrap < 100:
            raise AscpError(f"--bootstrap must be at least 100, got {bootstrap}.")
        estimators = estimators or ",".join(VALIDATION_ESTIMATORS)
        config = vx.ValidationConfig(
            widths=vx.parse_widths(widths), paddings=vx.parse_list(paddings, PADDINGS, "padding"),
            estimators=vx.parse_list(estimators, ESTIMATOR_NAMES, "estimator"),
            protocols=vx.parse_list(protocol, vx.PROTOCOLS, "protocol"), m=m, seed=seed, limit=limit,
            contextcite_ablations=contextcite_ablations, instruction=instruction, max_minutes=max_minutes,
            sampling=SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens),
            max_words=max_passage_words, template=read_template(template), system=system,
            embedder=proxy_embedder(list(vx.parse_list(estimators, ESTIMATOR_NAMES, "estimator")),
                                    embedder).get("embedder", "default"),
        )
        config.check()
        check_out_dir(out_dir)
        cases = load_cases(data, format=format, rank_by="given")  # no pool choice depends on a ranking
        _, selected = vx.select(cases, cases, config)
        err.print(f"{len(selected)} eligible cases selected", markup=False, highlight=False)
        with err.status(f"loading model {model!r}"):
            lm = load_language_model(model, device=device, backend=backend)
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
                 f"--device {device}", f"--backend {backend}",
                 *([f"--embedder {shlex.quote(embedder)}"] if embedder else []),
                 *([f"--template {shlex.quote(template)}"] if template else []),
                 *([f"--system {shlex.quote(system)}"] if system else [])])

        summary = build_summary(run, str(data), model, n_boot=bootstrap, command=command(limit, max_minutes))
        summary["reproduce"] = command(len(run.cases), None)  # the same cases, without the time budget
        write_outputs(out_dir, run, summary)
        err.print(f"wrote {out_dir}/results.md, scores.jsonl, responses.jsonl, summary.json and figures "
                  f"({len(run.cases)} cases, {run.seconds:.0f} s)", markup=False, highlight=False)


@app.command("calibrate")
def calibrate_command(
    validation: Annotated[list[Path], typer.Option(
        "--validation", help="An `ascp validate-probe` output folder (repeat to pool several); the free "
        "fit needs --protocol free or fixed,free runs.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: calibration.json, results.md, "
                                          "fig4_calibration.png.")],
    estimator: Annotated[str | None, typer.Option("--estimator", help="Whose normalised scores to calibrate "
                                                  "(default: loo).")] = None,
    quantile: Annotated[float, typer.Option("--quantile", help="Operating point on off-query padding.")] = 0.95,
    data: Annotated[Path | None, typer.Option(
        "--data", help="The validated cases' file, for the redundancy strata of Fig. 4(b).")] = None,
    embedder: Annotated[str, typer.Option(
        "--embedder", help="Embedder of the embedding-redundancy measure: default, hashing or a folder.")] = "default",
    nli_model: Annotated[str | None, typer.Option(
        "--nli-model", help="A local NLI model folder for the pairwise-entailment redundancy stratum (with "
        "--data); 'lexical' is a named approximation.")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", help="Case-bootstrap replicates.")] = 2000,
    seed: BootstrapSeedOpt = 0,
) -> None:
    """Calibrate the width-invariant used threshold, fit tau_free(k) and the width elasticity (Sec. 4.4, Fig. 4)."""
    with user_errors():
        from ascp.jsonio import check_replaceable, staged_folder
        from ascp.records import read_results
        from ascp.report.calibration import write_calibration
        from ascp.validation.analysis import contexts
        from ascp.validation.calibration import calibrate, redundancy

        if bootstrap < 100:
            raise AscpError(f"--bootstrap must be at least 100, got {bootstrap}.")
        if not 0.5 <= quantile < 1:
            raise AscpError(f"--quantile must lie in [0.5, 1), got {quantile}.")
        from ascp.attribution import DEFAULT_ESTIMATOR

        estimator = estimator or DEFAULT_ESTIMATOR
        rows = [row for folder in validation for row in read_results(folder, kinds=("validate-probe",)).scores]
        ctxs = [c for c in contexts(rows) if c.estimator == estimator]
        if not ctxs:
            found = sorted({r.get("estimator", "?") for r in rows})
            raise AscpError(f"no {estimator!r} scores in {', '.join(map(str, validation))} (found: "
                            f"{', '.join(found)}); pass --estimator with one of those.")
        if not any(c.protocol == "fixed" and c.padding == "off-query" for c in ctxs):
            raise AscpError("the width-invariant threshold needs fixed-protocol runs with off-query padding; run "
                            "`ascp validate-probe --protocol fixed,free --paddings off-query,same-query`.")
        check_replaceable(out_dir, "calibration.json", "calibration")
        check_parent(out_dir, "--out")
        if nli_model is not None and data is None:
            raise AscpError("--nli-model measures the pools' pairwise entailment and needs --data (the validated "
                            "cases' file); add --data or drop --nli-model.")
        if nli_model is not None:
            from ascp.metrics.nli import check_nli_model

            check_nli_model(nli_model)  # a bad folder fails before any work
        strata = None
        if data is not None:
            from ascp.data import load_cases
            from ascp.experiments.embedders import check_embedder, resolve_embedder

            check_embedder(embedder)
            wanted = {c.case_id for c in ctxs}
            cases = [c for c in load_cases(data, rank_by="given") if c.id in wanted]
            if not cases:
                raise AscpError(f"none of the validated cases is in {data}; pass the --data file of the "
                                "validate-probe runs.")
            entails = None
            if nli_model is not None:
                from ascp.metrics.nli import load_nli_matcher

                with err.status(f"loading NLI model {nli_model!r}"):
                    entails = load_nli_matcher(nli_model).entails
            with err.status(f"redundancy of {len(cases)} natural pools"):
                strata = redundancy(cases, resolve_embedder(embedder), entails)
        with err.status(f"calibrating {len(ctxs)} contexts ({bootstrap} bootstrap replicates)"):
            result = calibrate(ctxs, quantile=quantile, n_boot=bootstrap, seed=seed, strata=strata)
        result.update(estimator=estimator, n_boot=bootstrap, sources=[str(v) for v in validation])
        command = " ".join(["ascp calibrate", *(f"--validation {v}" for v in validation), f"--out {out_dir}",
                            f"--estimator {estimator}", f"--quantile {quantile:g}",
                            *([f"--data {data}", f"--embedder {embedder}"] if data is not None else []),
                            *([f"--nli-model {nli_model}"] if nli_model is not None else []),
                            f"--bootstrap {bootstrap}", f"--seed {seed}"])
        with staged_folder(out_dir, whole=True) as tmp:
            write_calibration(tmp, result, command)
        tau = result["width_invariant_threshold"]["value"]
        err.print(f"width-invariant threshold {tau:.4f}; wrote {out_dir}/results.md, calibration.json and "
                  "fig4_calibration.png", markup=False, highlight=False)


# ----- ascp experiment: declarative specs -> resumable run store -> Parquet ---------------------



@app.command("estimators")
def estimators() -> None:
    """List the attribution estimators with their options."""
    from ascp.attribution import estimator_names, estimator_params
    from ascp.params import describe

    with user_errors():  # a plugin that fails to load is one sentence
        out.print(_params_table("estimators", [(n, describe(estimator_params(n))) for n in estimator_names()]))




@app.command("export")
def export_command(
    source: Annotated[Path, typer.Argument(help="An `ascp validate-probe`, `ascp run` or `ascp simulate` output "
                                           "folder, an experiment store, or the JSONL output of `ascp attribute`.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: <system>.run per estimator or policy, and "
                                          "qrels.txt + units.qrels where the source has labels.")],
    score: Annotated[str, typer.Option("--score", help="The reading ranked: score (raw, as the validation's AUC "
                                       "and cover@m) or normalized.")] = "score",
    tag: Annotated[str | None, typer.Option("--tag", help="The run tag (last column; default: the estimator or "
                                            "policy).")] = None,
    data: Annotated[Path | None, typer.Option("--data", help="For a run folder or store: the data file with the gold "
                                              "units (default: the one the run read).")] = None,
) -> None:
    """Write probe readings as TREC run files and the labels as qrels (trec_eval, ir_measures, ranx)."""
    with user_errors():
        from ascp.integrations.trec import read_source, write_export

        kind, export = read_source(source, data=data, score=score)
        files = write_export(out_dir, export, tag)
        queries = len(next(iter(export.runs.values())))
        err.print(f"wrote {', '.join(p.name for p in files)} into {out_dir} ({kind} output: {queries} queries)",
                  markup=False, highlight=False)
