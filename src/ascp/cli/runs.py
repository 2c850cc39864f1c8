"""`ascp run`, `demo`, `simulate`, `view` and `policies`: portfolios, simulations and their pages."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from ascp.cli.common import (
    BackendOpt,
    DataOpt,
    DeviceOpt,
    EmbedderOpt,
    EstimatorOpt,
    KOpt,
    ModelOpt,
    PrefixCacheOpt,
    RequestCacheOpt,
    RunSeedOpt,
    SimulateSeedOpt,
    SystemOpt,
    TemplateOpt,
    ThresholdOpt,
    TOpt,
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


def execute_run(cases, config, model: str, device: str = "auto", lm=None, backend: str = "auto", matcher=None,
                embed_fn=None, request_cache: str | None = None, prefix_cache_mb: float | None = None):
    """Run one policy (a checked `LoopConfig`) over loaded cases with a progress bar; returns
    (portfolios, case rows, lm). The pools are checked against k before the model loads.

    `matcher`: decides claim units (ELI5), see `ascp.metrics.nli`; required when a case has them;
    `embed_fn`: the `--embedder` (None: the embedded MiniLM).
    """
    from ascp.api import load_model
    from ascp.embed.embedders import embed
    from ascp.loop.portfolios import check_pools
    from ascp.loop.runner import case_row, run_policy

    check_pools(cases, config.k)
    if lm is None:
        with err.status(f"loading model {model!r}"):
            lm = load_model(model, device=device, backend=backend, request_cache=request_cache,
                            prefix_cache_mb=prefix_cache_mb)
    with _progress() as bar:
        task = bar.add_task(f"{config.policy} k={config.k} T={config.T}", total=len(cases) * config.T)
        portfolios = run_policy(lm, cases, config, embed_fn or embed, progress=lambda n: bar.advance(task, n),
                                matcher=matcher)
    rows = [case_row(case, p) for case, p in zip(cases, portfolios, strict=True)]
    return portfolios, rows, lm


@app.command()
def run(
    data: DataOpt,
    policy: Annotated[str, typer.Option("--policy", help="Scheduler: vanilla, rotate, mmr, xquad, pm2, dpp, "
                                        "carriage, carriage-narrow, ascp (and ascp variants).")],
    k: KOpt,
    T: TOpt,
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: rounds.jsonl, cases.jsonl, summary.json.")],
    format: Annotated[str, typer.Option("--format", help="auto or a format name (docs/data.md).")] = "auto",
    model: ModelOpt = "default",
    estimator: EstimatorOpt = None,
    threshold: ThresholdOpt = None,
    spans: Annotated[str | None, typer.Option("--spans", help="sentences: also each round's reading per response "
                                              "sentence (rounds.jsonl `spans`; loo, replace, contextcite, "
                                              "the proxies).")] = None,
    seed: RunSeedOpt = 0,
    limit: Annotated[int | None, typer.Option("--limit", help="Use only the first N cases.")] = None,
    rank_by: Annotated[str, typer.Option("--rank-by", help="Pool order: auto (the format's default: the file's "
                                         "order for jsonl and ALCE files, dense for merged-retriever pools such as "
                                         "the shared ASQA ones), given, dense or bm25.")] = "auto",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
    device: DeviceOpt = "auto",
    backend: BackendOpt = "auto",
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
    template: TemplateOpt = None,
    system: SystemOpt = "",
    nli_model: Annotated[str | None, typer.Option("--nli-model", help="How claim units (ELI5) are recalled: a "
                                                  "local NLI model folder (ALCE claim recall by entailment) or "
                                                  "'lexical' (an approximation, not ALCE's metric).")] = None,
    embedder: EmbedderOpt = "default",
    alce_out: Annotated[Path | None, typer.Option("--alce-out", help="Also write the portfolios in ALCE's result "
                                                  "format into this folder (<task>-round<t>.json and "
                                                  "<task>-portfolio.json, for ALCE's eval.py; docs/alce.md).")] = None,
    request_cache: RequestCacheOpt = None,
    prefix_cache_mb: PrefixCacheOpt = None,
) -> None:
    """Run T rounds of one scheduling policy on every case and write the portfolio with its metrics."""
    with user_errors():
        from ascp.attribution.probe import probe_settings
        from ascp.data import load_cases_with_order
        from ascp.lm.protocol import backend_name
        from ascp.lm.steering import SteerConfig
        from ascp.loop.portfolios import LoopConfig
        from ascp.loop.runfolder import check_out_dir, write_run
        from ascp.render.console import summary_table

        if prefix_cache_mb is not None:
            from ascp.lm.prefixes import check_megabytes

            check_megabytes(prefix_cache_mb, "--prefix-cache-mb")
        if limit is not None and limit < 1:
            raise AscpError(f"--limit must be at least 1, got {limit}.")
        if not steer and (alpha is not None or eta is not None or not contrast or not apc):
            raise AscpError("--alpha, --eta, --no-contrast and --no-apc only apply with --steer; add --steer.")
        given = {name: value for name, value in (("alpha", alpha), ("eta", eta)) if value is not None}
        steer_config = SteerConfig(**given, contrast=contrast, apc=apc) if steer else None  # its defaults else
        from ascp.lm.prompts import prompt_template
        from ascp.lm.sampling import SamplingConfig

        prompt = read_template(template)
        # every setting of the run checked once, before any work
        config = LoopConfig(policy, k, T, probe=probe_settings(estimator, threshold, spans=spans), seed=seed,
                            sampling=SamplingConfig(max_new_tokens=max_new_tokens),
                            template=prompt_template(template=prompt, system=system), steer=steer_config)
        from ascp.embed.embedders import check_embedder, resolve_embedder

        embedder = check_embedder(embedder)  # a missing embedder fails before any work
        embed_fn = resolve_embedder(embedder)
        from ascp.metrics.nli import check_nli_model, load_nli_matcher, matcher_name, require_matcher

        if nli_model is not None:
            check_nli_model(nli_model)
        check_out_dir(out_dir, overwrite=overwrite)
        if alce_out is not None:
            from ascp.data import detect_format
            from ascp.integrations.alce import check_alce_out

            check_alce_out(alce_out, detect_format(data) if format == "auto" else format, overwrite=overwrite,
                           run_dir=out_dir)
        cases, order = load_cases_with_order(data, format=format, rank_by=rank_by, limit=limit, embed_fn=embed_fn)
        require_matcher(cases, nli_model is not None)
        matcher = None
        if nli_model is not None:
            with err.status(f"loading NLI model {nli_model!r}"):
                matcher = load_nli_matcher(nli_model, device=device)
        portfolios, rows, lm = execute_run(cases, config, model, device, backend=backend, matcher=matcher,
                                          embed_fn=embed_fn, request_cache=request_cache,
                                          prefix_cache_mb=prefix_cache_mb)
        run_config = {"data": str(data), "format": format, "rank_by": rank_by, "order": order, "embedder": embedder,
                      "policy": policy, "k": k, "T": T,
                      "model": model, "backend": backend_name(lm), "estimator": config.probe.estimator,
                      "estimator_options": dict(config.probe.options), "threshold": config.probe.threshold,
                      "spans": config.probe.spans,
                      "seed": seed, "limit": limit, "sampling": config.sampling.__dict__,
                      "steer": steer_config.to_json() if steer_config else None,
                      "template": prompt, "system": system, "nli_model": matcher_name(matcher)}
        alce = None
        if alce_out is not None:  # built before anything is written: a failure leaves no run behind
            from ascp.data.detect import read_json_list
            from ascp.integrations.alce import alce_results, write_alce

            alce = alce_results(read_json_list(data, "ALCE items"), cases, portfolios, run_config)
        summary = write_run(out_dir, cases, portfolios, rows, run_config)
        out.print(summary_table({policy: summary["mean"]}, title=f"{data.name}: {len(rows)} cases, k={k}, T={T}"))
        err.print(f"wrote {out_dir}/rounds.jsonl, cases.jsonl, summary.json")
        cache_summary(lm)
        if alce_out is not None and alce is not None:
            written = write_alce(alce_out, alce)
            err.print(f"wrote {len(written)} ALCE result files into {alce_out}", markup=False, highlight=False)


# 2 questions at T = 3: about a minute on 2 cores (tokens and time: docs/results/compute-once); the
# full set (--questions 6 --T 4) takes about 3.5 minutes.
DEMO_QUESTIONS = 2
DEMO_T = 3


@app.command()
def demo(
    model: ModelOpt = "default",
    seed: RunSeedOpt = 0,
    k: Annotated[int, typer.Option("--k")] = 2,
    T: Annotated[int, typer.Option("--T")] = DEMO_T,
    questions: Annotated[int, typer.Option("--questions", help="How many of the 6 bundled questions to run "
                                           "(6 with --T 4: the full demo, minutes on 2 cores).")] = DEMO_QUESTIONS,
    backend: BackendOpt = "auto",
    embedder: EmbedderOpt = "default",
    request_cache: RequestCacheOpt = None,
) -> None:
    """Compare ascp, rotate and vanilla portfolios on the bundled demo set (embedded defaults)."""
    with user_errors():
        import tempfile

        from ascp.data import load_cases
        from ascp.embed.embedders import check_embedder, resolve_embedder
        from ascp.lm.prompts import prompt_template
        from ascp.lm.sampling import SamplingConfig
        from ascp.loop.portfolios import LoopConfig
        from ascp.loop.runfolder import summarize
        from ascp.render.console import portfolio_panel, summary_table

        embed_fn = resolve_embedder(check_embedder(embedder))
        path = Path(str(resources.files("ascp") / "resources" / "demo_cases.jsonl"))
        cases = load_cases(path, format="jsonl")
        if not 1 <= questions <= len(cases):
            raise AscpError(f"--questions {questions}: the demo set has {len(cases)} questions; "
                            f"give 1 to {len(cases)}.")
        cases = cases[:questions]
        out.print(f"[bold]ascp demo[/bold]: {len(cases)} ambiguous questions, policies ascp / rotate / vanilla, "
                  f"k={k}, T={T}, model {model!r}, causal LOO probe\n")
        # Round 1 is the same request under every policy (the top k, the same seed): a request cache,
        # temporary unless --request-cache names one, computes it once.
        with tempfile.TemporaryDirectory(prefix="ascp-demo-") as scratch:
            cache = request_cache or str(Path(scratch) / "requests.sqlite")
            lm, means = None, {}
            for policy in ("ascp", "rotate", "vanilla"):
                config = LoopConfig(policy, k, T, seed=seed, sampling=SamplingConfig(max_new_tokens=48),
                                    template=prompt_template())
                portfolios, rows, lm = execute_run(cases, config, model, lm=lm, backend=backend, embed_fn=embed_fn,
                                                   request_cache=cache)
                for case, portfolio, row in zip(cases, portfolios, rows, strict=True):
                    out.print(portfolio_panel(case, portfolio, row))
                means[policy] = summarize(rows)
            out.print(summary_table(means, title="demo: mean over questions"))
            cache_summary(lm, "shared between policies" if request_cache is None else None)
            if lm is not None:
                lm.close()


@app.command("simulate")
def simulate_command(
    data: DataOpt,
    policy: Annotated[str, typer.Option("--policy", help="Comma-separated policies, e.g. vanilla,rotate,ascp; "
                                        "the first is the baseline of the comparison.")],
    k: KOpt,
    T: TOpt,
    consumer: Annotated[str, typer.Option("--consumer", help="toy(q=0.5), oracle, replay(run=RUN_DIR) or "
                                          "fit(run=RUN_DIR).")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder: one run folder per policy and "
                                          "comparison.json.")],
    format: Annotated[str, typer.Option("--format", help="auto or a format name (docs/data.md).")] = "auto",
    rank_by: Annotated[str, typer.Option("--rank-by", help="auto, given, dense or bm25.")] = "auto",
    limit: Annotated[int | None, typer.Option("--limit", help="Use only the first N cases.")] = None,
    min_pool: Annotated[int | None, typer.Option("--min-pool", help="Keep cases with at least N passages.")] = None,
    seed: SimulateSeedOpt = 0,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Bootstrap replicates per interval.")] = 2000,
    cache: Annotated[Path | None, typer.Option("--cache", help="Embedding cache file, one per embedder (default: "
                                               "$ASCP_HOME/embeddings/<embedder>.npz, e.g. minilm.npz).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier simulation in --out.")] = False,
    embedder: EmbedderOpt = "default",
) -> None:
    """The closed loop with a model-free consumer in place of the generator and probe: seconds per policy."""
    with user_errors():
        from ascp.caching.files import ascp_home
        from ascp.data import load_cases_with_order
        from ascp.embed.cache import EmbeddingCache
        from ascp.embed.embedders import check_embedder, embedder_id, resolve_embedder
        from ascp.jsonio import check_replaceable
        from ascp.loop.consumers import Fit, Oracle, Replay, make_consumer
        from ascp.loop.runfolder import check_out_dir
        from ascp.loop.simulate import compare, pool_views, simulate_portfolios, split_policies, write_simulation
        from ascp.schedulers import check_scheduler

        policies = split_policies(policy)
        if not policies:
            raise AscpError("--policy names no policy; give e.g. --policy vanilla,ascp.")
        canonical = [check_scheduler(name) for name in policies]
        if len(set(canonical)) < len(canonical):
            raise AscpError(f"--policy {policy!r} names a policy twice (as {', '.join(canonical)}); give each once.")
        if k < 1 or T < 1:
            raise AscpError(f"k and T must be at least 1 (got --k {k} --T {T}).")
        reader = make_consumer(consumer, seed=seed)
        embedder = check_embedder(embedder)  # a missing embedder fails before any work
        check_out_dir(out_dir, overwrite=overwrite)
        check_replaceable(out_dir, "comparison.json", "simulation")
        if (out_dir / "comparison.json").exists() and not overwrite:
            raise AscpError(f"--out {out_dir} already holds a simulation; pass --overwrite to replace it.")
        if n_boot < 100:
            raise AscpError(f"--n-boot must be at least 100, got {n_boot}.")
        # keyed by embedder: two embedders never share a cache file (EmbeddingCache checks --cache too)
        cached = EmbeddingCache(resolve_embedder(embedder),
                                cache or ascp_home() / "embeddings" / f"{embedder_id(embedder)}.npz",
                                identity=embedder_id(embedder))
        with err.status(f"loading {data.name}"):
            cases, order = load_cases_with_order(data, format=format, rank_by=rank_by, limit=limit,
                                                 min_pool=min_pool, embed_fn=cached)
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
        if isinstance(reader, Fit):
            reader.prepare(cases)  # fitted before the pools are embedded: a run without these cases fails first
        with err.status(f"embedding {len(cases)} pools (cached in {cached.path})"):
            views = pool_views(cases, cached)
            cached.save()
        results = {}
        with _progress() as bar:
            for name in policies:
                task = bar.add_task(name, total=len(cases))

                def advance(n: int, task=task) -> None:
                    bar.advance(task, n)

                portfolios = simulate_portfolios(cases, name, k, T, reader, views, seed=seed, progress=advance)
                results[portfolios[0].policy if portfolios else name] = portfolios
        comparison = compare(results, n_boot=n_boot, seed=seed)
        from ascp.caching.files import describe_file

        # the data file by its path under the current folder, SHA-256 and size: no folder of this machine
        config = {"data": describe_file(data, Path.cwd()), "format": format, "rank_by": rank_by, "order": order,
                  "embedder": embedder, "limit": limit, "min_pool": min_pool,
                  "k": k, "T": T, "consumer": reader.name, "seed": seed, "n_boot": n_boot, "cases": len(cases)}
        write_simulation(out_dir, cases, results, config, comparison)
        from ascp.render.console import simulation_table

        out.print(simulation_table(comparison, title=f"{data.name}: {len(cases)} cases, k={k}, T={T}, "
                                                      f"consumer {reader.name}"))
        err.print(f"wrote {out_dir}/ (one run folder per policy) and comparison.json", markup=False,
                  highlight=False)


@app.command("view")
def view_command(
    directory: Annotated[Path, typer.Argument(help="An `ascp run` or `ascp simulate` output folder, or an "
                                              "experiment store.")],
    out_path: Annotated[Path | None, typer.Option("--out", help="The page (default: DIR/view.html).")] = None,
) -> None:
    """Write one self-contained page of a run: per case, round by round, the context with the used
    passages marked, the response and the gold units it recovered; policies (a store's conditions)
    side by side."""
    with user_errors():
        from ascp.jsonio import atomic_writer
        from ascp.render.pages import folder_view

        with err.status("reading the run and its questions"):
            page, note = folder_view(directory)
        target = out_path or directory / "view.html"
        check_parent(target)
        if note is not None:
            err.print(f"note: {note}", markup=False, highlight=False)
        with atomic_writer(target) as handle:
            handle.write(page)
        err.print(f"wrote {target}", markup=False, highlight=False)


@app.command("policies")
def policies() -> None:
    """List the scheduling policies with their options (use as `--policy 'name(option=value,...)'`)."""
    from ascp.params import describe
    from ascp.schedulers import scheduler_names, scheduler_params

    with user_errors():  # a plugin that fails to load is one sentence
        out.print(_params_table("policies", [(n, describe(scheduler_params(n))) for n in scheduler_names()]))


