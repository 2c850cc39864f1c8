"""Which source supports each sentence: the estimators head to head on ContextCite's own metrics.

Contexts: the first `--contexts` ASQA pools and HotpotQA questions of `../shared/data` (file order,
k = 5 passages as the data ranks them) that no committed run or fit used: no record under
docs/results/ and no position of the shipped attention map's fit names them (`used_cases`; the
plans' reserved splits that never ran do not count). Each gets the embedded model's own sampled
response; every response sentence is a span. Both source granularities run on the same contexts and
responses: the k passages, and their sentences (`sources="sentences"`, ids `<passage>#<n>`). Per
sentence and method, with the sources ranked by the method's reading of that sentence:

- **top-k drop** (k = 1, 3): the sentence's log-probability (summed over its tokens) under the full
  context minus under the context without the k top-ranked sources (ContextCite's metric; higher is
  better);
- **LDS**: the Spearman correlation, over `--lds-masks` random ablations keeping each source with
  probability 0.5 (drawn from a stream of their own, apart from any estimator's), between the
  method's additive prediction (the sum of the kept sources' scores) and the actual logit-probability
  of the sentence (ContextCite's target);

and per response the tokens each method fed and its seconds. The tables give each method's means and,
paired sentence by sentence, its difference from exact `loo` with a cluster-bootstrap interval over
contexts (`against_loo`). Every method reads each sentence from
its own passes (`spans="sentences"`). `context-cite` is the package of the ContextCite paper
(0.0.4, in the bench lock) at its defaults (64 ablations, keep 0.5, Lasso 0.01, its own masks),
given ascp's model, tokenizer, prompt and sources through its partitioner interface and the
response through its output cache; its import-time `nltk.download` is made a no-op (offline; the
partitioner given needs no nltk data). The targets: per-sentence readings feed no extra token
(`loo` with and without spans), exact `loo` over sentences at most 0.35x the tokens of
`contextcite-64` with a top-3 drop at least as large, and per-sentence `loo` equal to a naive
leave-one-out (independent passes, no prefix reuse) within 5e-3 nats per token on the first
`--naive` contexts of each task.

Rows are appended per context to OUT/rows.jsonl, so a stopped run resumes where it stopped;
`--stop-after MINUTES` ends a part between contexts. `--redo GRANULARITY:METHOD` drops one pair's rows
from the contexts done (after a change to that method) and a run reads it again on them before going on
with new contexts; the tables hold only contexts with every pair.

    python benchmarks/spans_head_to_head.py --out docs/results/spans [--contexts 20] [--lds-masks 32]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from task_requests import FILES, check_files  # noqa: E402  (the shared data files)

K = 5
GRANULARITIES = ("passages", "sentences")
METHODS = {  # name -> estimator spec (None: the context-cite package)
    "loo": "loo", "hierarchical": "hierarchical", "gated": "gated", "attention": "attention",
    "contextcite-32": "contextcite(num_ablations=32)", "contextcite-64": "contextcite(num_ablations=64)",
    "context-cite package": None, "bm25": "bm25", "yd-cosine": "yd-cosine",
}
PAIRS = frozenset((g, m) for g in GRANULARITIES for m in METHODS)
_CASE_ID = re.compile(r"-?\d{6,}|[0-9a-f]{24}")  # ASQA's and HotpotQA's case ids as they appear in records


def used_cases(case_ids: set[str], own: Path) -> set[str]:
    """The case ids that a committed run or fit used: named in any record under docs/results/ (not in a
    plan's or split's reserved list, nor in this benchmark's own folder `own`) or at a position of the
    shipped attention map's fit."""
    from ascp.data import load_cases

    used: set[str] = set()
    mine = {own.resolve(), (ROOT / "docs" / "results" / "spans").resolve()}
    for path in (ROOT / "docs" / "results").rglob("*"):
        if (not path.is_file() or path.suffix in (".png", ".svg") or path.name in ("plan.json", "splits.json")
                or mine & set(path.resolve().parents)):
            continue
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        used |= set(_CASE_ID.findall(data.decode("utf-8", "replace"))) & case_ids
    fit = json.loads((ROOT / "src/ascp/resources/attention_maps/smollm2-135m-instruct.json").read_text())["fit"]
    fitted = [c.id for c in load_cases(ROOT.parent / "shared" / "data" / fit["data"]["path"], rank_by="given")]
    for positions in fit["positions_used"].values():
        used |= {fitted[i] for i in positions}
    return used


def fresh_requests(per_task: int, own: Path) -> list[dict[str, Any]]:
    """The first `per_task` eligible contexts per task that no committed run or fit used."""
    from ascp.data import load_cases

    cases = {task: load_cases(path, rank_by="given") for task, path in FILES.items()}
    used = used_cases({c.id for v in cases.values() for c in v}, own)
    per: list[list[dict[str, Any]]] = []
    for task, items in cases.items():
        chosen = [(i, c) for i, c in enumerate(items) if len(c.pool) >= K and c.id not in used][:per_task]
        if len(chosen) < per_task:
            raise SystemExit(f"{task} has only {len(chosen)} eligible contexts that no committed run or fit used.")
        per.append([{"id": f"{task}/{c.id}", "task": task, "position": i, "question": c.question, "response": None,
                     "passages": [{"id": p.id, "title": p.title, "text": p.text} for p in c.pool[:K]]}
                    for i, c in chosen])
    return [r for pair in zip(*per, strict=True) for r in pair]  # tasks alternate: a stopped run stays balanced


def package_reading(lm: Any, prompt: Any, question: str, response: str, spans: Sequence[tuple[int, int]]
                    ) -> tuple[list[Any], int, float, bool]:
    """The context-cite package at its defaults over `prompt`'s sources: its attributions per span (character
    offsets of the response), the tokens it fed, its seconds, and whether its prompt ids equal ascp's."""
    import nltk
    import numpy as np

    nltk.download = lambda *args, **kwargs: True  # its utils download punkt_tab at import; no network here
    from context_cite import ContextCiter
    from context_cite.context_partitioner import BaseContextPartitioner

    segments = prompt.segment_texts
    sources = {prompt.segment_of(i): i for i in range(len(prompt.passage_ids))}

    class Sources(BaseContextPartitioner):
        """The context as ascp cut it: the passage blocks between the instruction and the question."""

        @property
        def num_sources(self) -> int:
            return len(sources)

        def split_context(self) -> None:
            return None

        def get_source(self, index: int) -> str:
            return segments[prompt.segment_of(index)]

        def get_context(self, mask: Any = None) -> str:
            keep = np.ones(len(sources), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
            return "".join(s for j, s in enumerate(segments[1:-1], start=1) if j not in sources or keep[sources[j]])

    head, tail = lm.frame("")
    instruction = segments[0][len(head):]
    question_part = segments[-1][: len(segments[-1]) - len(tail)]
    if not question_part.endswith(question.strip()):
        raise SystemExit("the prompt's tail does not end with the question; the benchmark expects ascp's template")
    template = (instruction.replace("{", "{{").replace("}", "}}") + "{context}"
                + question_part[: -len(question.strip())].replace("{", "{{").replace("}", "}}") + "{query}")
    context = "".join(segments[1:-1])
    cc = ContextCiter(lm.model, lm.tokenizer, context, question.strip(), partitioner=Sources(context),
                      prompt_template=template)
    ids, chat_prompt = cc._get_prompt_ids(return_prompt=True)
    cc._cache["output"] = chat_prompt + response
    start = time.perf_counter()
    cc._compute_masks_and_logit_probs()
    seconds = time.perf_counter() - start
    response_ids = cc._response_ids
    fed = sum(len(cc._get_prompt_ids(mask=m)) + len(response_ids) for m in cc._masks)
    return ([cc.get_attributions(a, b, verbose=False) for a, b in spans], fed, seconds,
            list(ids) == list(prompt.ids))


def run_context(lm: Any, request: dict[str, Any], args: argparse.Namespace,
                missing: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The `missing` (granularity, method) pairs on one context (all of them for a new context): the rows of
    its sentences, and one cost row per pair; the naive check runs with `loo`."""
    import numpy as np
    from scipy.stats import spearmanr

    from ascp.api import Probe
    from ascp.attribution.ablation import Ablations
    from ascp.attribution.contextcite import logit_prob
    from ascp.attribution.sources import sentence_sources
    from ascp.attribution.spans import assign_tokens, sentence_spans
    from ascp.lm.prompts import prompt_template
    from ascp.lm.sampling import derive_seed
    from ascp.types import Passage

    body = {k: request[k] for k in ("id", "question", "passages", "response")}
    passages = tuple(Passage(id=p["id"], text=p["text"], title=p["title"]) for p in request["passages"])
    template = prompt_template("commit", None, "")
    response_ids = lm.encode(request["response"])
    bounds = sentence_spans(request["response"])
    rows: list[dict[str, Any]] = []
    for granularity in GRANULARITIES:
        methods = [name for name in METHODS if (granularity, name) in missing]
        if not methods:
            continue
        prompt = lm.encode_prompt(request["question"], passages, template)
        if granularity == "sentences":
            prompt, _ = sentence_sources(prompt, passages, template, request["id"])
        ids = list(prompt.passage_ids)
        readings: dict[str, Any] = {}
        for name in methods:
            spec = METHODS[name]
            if spec is None:
                continue
            readings[name] = Probe(lm, spec, seed=args.seed, spans="sentences", sources=granularity).attribute_many(
                [body])[0]
            if [(s.start, s.end) for s in readings[name].spans] != bounds:
                raise SystemExit(f"{request['id']}: {name} read other sentences than sentence_spans gives")
            rows.append({"kind": "cost", "context": request["id"], "task": request["task"], "granularity": granularity,
                         "method": name, "sources": len(ids), "tokens": readings[name].tokens_processed,
                         "seconds": readings[name].seconds})
        if "context-cite package" in methods:
            package, fed, seconds, same_prompt = package_reading(lm, prompt, request["question"], request["response"],
                                                                 bounds)
            rows.append({"kind": "cost", "context": request["id"], "task": request["task"],
                         "granularity": granularity, "method": "context-cite package", "sources": len(ids),
                         "tokens": fed, "seconds": seconds, "same_prompt": same_prompt})
        groups = assign_tokens(bounds, lm.response_token_spans(request["response"]), request["response"])
        evaluation = Ablations(lm, prompt, response_ids)
        full = np.asarray(evaluation.full_logprobs)
        rng = np.random.default_rng(derive_seed(args.seed, f"lds-masks:{granularity}:{request['id']}"))
        masks = rng.random((args.lds_masks, len(ids))) < 0.5
        masked = [np.asarray(o) for o in evaluation.score([prompt.deletion(np.flatnonzero(~m)) for m in masks])]
        # spans cost no token; per-sentence loo equals independent passes of each deletion
        if request["naive"] and "loo" in methods:
            plain = Probe(lm, "loo", seed=args.seed, sources=granularity).attribute_many([body])[0]
            rows.append({"kind": "spans-cost", "context": request["id"], "granularity": granularity,
                         "loo_tokens_with_spans": readings["loo"].tokens_processed,
                         "loo_tokens_without": plain.tokens_processed})
            naive = Ablations(lm, prompt, response_ids, reuse_prefix=False)
            deleted = [np.asarray(o) for o in naive.score([prompt.deletion([i]) for i in range(len(ids))])]
            naive_full = np.asarray(naive.full_logprobs)
            gap = max(abs(span.reading.scores[pid] - (naive_full[t].mean() - deleted[i][t].mean()))
                      for span, t in zip(readings["loo"].spans, groups, strict=True) for i, pid in enumerate(ids))
            rows.append({"kind": "naive", "context": request["id"], "granularity": granularity, "max_gap": float(gap)})
        removals: dict[frozenset[int], np.ndarray] = {}
        for s_index, tokens in enumerate(groups):
            actual = [logit_prob(float(o[tokens].sum())) for o in masked]
            for name in methods:
                vector = (np.asarray(package[s_index], dtype=np.float64) if METHODS[name] is None else
                          np.array([readings[name].spans[s_index].reading.scores[i] for i in ids]))
                order = list(np.argsort(-vector, kind="stable"))
                row = {"kind": "sentence", "context": request["id"], "task": request["task"],
                       "granularity": granularity, "sentence": s_index, "method": name, "tokens": len(tokens)}
                for top in (1, 3):
                    removed = frozenset(int(i) for i in order[:top])
                    if removed not in removals:
                        (removals[removed],) = evaluation.score([prompt.deletion(removed)])
                    row[f"top{top}_drop"] = float(full[tokens].sum() - removals[removed][tokens].sum())
                predicted = masks.astype(float) @ vector
                row["lds"] = float(spearmanr(predicted, actual).statistic) if np.ptp(predicted) > 0 else None
                rows.append(row)
    return rows


def check_resumed(lm: Any, requests: list[dict[str, Any]], responses: list[str], rows: list[dict[str, Any]]) -> None:
    """A resumed run must regenerate the responses its rows were read from: each done context's response
    splits into sentences of the same token counts as its rows say, or the run stops in one sentence."""
    from ascp.attribution.spans import assign_tokens, sentence_spans

    recorded: dict[str, dict[int, int]] = {}
    for row in rows:
        if row["kind"] == "sentence" and row["method"] == "loo" and row["granularity"] == "passages":
            recorded.setdefault(row["context"], {})[row["sentence"]] = row["tokens"]
    for request, response in zip(requests, responses, strict=True):
        if request["id"] not in recorded:
            continue
        counts = [len(t) for t in assign_tokens(sentence_spans(response), lm.response_token_spans(response), response)]
        if counts != [recorded[request["id"]][i] for i in sorted(recorded[request["id"]])]:
            raise SystemExit(f"{request['id']}: today's response is not the one its rows in rows.jsonl were read "
                             f"from (sentence tokens {counts}); resume with the model and seed of the first part.")


def pairs_done(rows: list[dict[str, Any]]) -> dict[str, set[tuple[str, str]]]:
    """Per context, the (granularity, method) pairs its rows hold (each has one cost row)."""
    have: dict[str, set[tuple[str, str]]] = {}
    for row in rows:
        if row["kind"] == "cost":
            have.setdefault(row["context"], set()).add((row["granularity"], row["method"]))
    return have


def redo_pair(text: str) -> tuple[str, str]:
    """`GRANULARITY:METHOD` of `--redo`, checked."""
    granularity, _, method = text.partition(":")
    if (granularity, method) not in PAIRS:
        raise argparse.ArgumentTypeError(f"{text!r} is not GRANULARITY:METHOD with a granularity of "
                                         f"{', '.join(GRANULARITIES)} and a method of {', '.join(METHODS)}")
    return granularity, method


def drop_pairs(store: Path, rows: list[dict[str, Any]], pairs: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """`rows` without the cost and sentence rows of `pairs`, written over `store` at once (`atomic_writer`,
    so a stop never leaves it half-written)."""
    from ascp.jsonio import atomic_writer

    kept = [r for r in rows if not (r["kind"] in ("cost", "sentence") and (r["granularity"], r["method"]) in pairs)]
    with atomic_writer(store) as handle:
        handle.writelines(json.dumps(r) + "\n" for r in kept)
    return kept


def machine_line() -> str:
    return f"{platform.processor() or platform.machine()}, nproc={os.cpu_count()}, Python {platform.python_version()}"


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per granularity and method: mean top-1/top-3 drop, LDS, tokens and seconds per response."""
    import pandas as pd

    frame = pd.DataFrame([r for r in rows if r["kind"] == "sentence"])
    cost = pd.DataFrame([r for r in rows if r["kind"] == "cost"])
    tables: dict[str, list[dict[str, Any]]] = {}
    for granularity in GRANULARITIES:
        part, spent = frame[frame["granularity"] == granularity], cost[cost["granularity"] == granularity]
        table = []
        for name in METHODS:
            mine, paid = part[part["method"] == name], spent[spent["method"] == name]
            lds = mine["lds"].dropna()
            table.append({"method": name, "top-1 drop": float(mine["top1_drop"].mean()),
                          "top-3 drop": float(mine["top3_drop"].mean()), "LDS": float(lds.mean()),
                          "LDS sentences": int(len(lds)), "sentences": int(len(mine)),
                          "tokens / response": float(paid["tokens"].mean()),
                          "seconds / response": float(paid["seconds"].mean()),
                          "sources / context": float(paid["sources"].mean())})
        tables[granularity] = table
    spans_cost = [r for r in rows if r["kind"] == "spans-cost"]
    naive = [r for r in rows if r["kind"] == "naive"]
    prompts = [r["same_prompt"] for r in rows if r["kind"] == "cost" and r["method"] == "context-cite package"]
    return {"tables": tables,
            "spans_cost_equal": sum(r["loo_tokens_with_spans"] == r["loo_tokens_without"] for r in spans_cost),
            "spans_cost_checked": len(spans_cost),
            "naive_max_gap": {g: max((r["max_gap"] for r in naive if r["granularity"] == g), default=None)
                              for g in GRANULARITIES},
            "naive_contexts": len({r["context"] for r in naive}),
            "package_same_prompt": f"{sum(prompts)} of {len(prompts)}",
            "against_loo": against_loo(rows)}


METRICS = {"top-1 drop": "top1_drop", "top-3 drop": "top3_drop", "LDS": "lds"}


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def against_loo(rows: list[dict[str, Any]], n_boot: int = 2000) -> dict[str, list[dict[str, Any]]]:
    """Per granularity and method: its reading minus exact `loo`'s on the same sentence, per metric, as a
    mean with a 95% percentile cluster-bootstrap interval over contexts (a response's sentences share
    their context, so a context enters a replicate whole; one seeded stream, so the tables rebuild
    exactly). A sentence enters a metric's difference when both readings are finite (an LDS is
    undefined where the ablations leave the sentence's probability constant)."""
    import numpy as np

    from ascp.stats.bootstrap import cluster_bootstrap

    rng = np.random.default_rng(0)
    reading = {(r["granularity"], r["context"], r["sentence"], r["method"]): r
               for r in rows if r["kind"] == "sentence"}
    out: dict[str, list[dict[str, Any]]] = {}
    for granularity in GRANULARITIES:
        exact = {key[1:3]: r for key, r in reading.items() if key[0] == granularity and key[3] == "loo"}
        out[granularity] = []
        for name in METHODS:
            if name == "loo":
                continue
            entry: dict[str, Any] = {"method": name}
            for label, field in METRICS.items():
                pairs = []  # (context, method - loo) per sentence both read finitely
                for (context, sentence), mine in exact.items():
                    theirs = reading.get((granularity, context, sentence, name))
                    if theirs is not None and all(_finite(v) for v in (mine[field], theirs[field])):
                        pairs.append((context, theirs[field] - mine[field]))
                if not pairs:
                    entry[label] = None
                    continue
                estimate = cluster_bootstrap([d for _, d in pairs], [c for c, _ in pairs], n_boot=n_boot, rng=rng)
                entry[label] = {"mean": estimate.mean, "lo": estimate.lo, "hi": estimate.hi,
                                "sentences": len(pairs), "contexts": estimate.n}
            out[granularity].append(entry)
    return out


def write_report(out: Path, summary: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, granularity in zip(axes, GRANULARITIES, strict=True):
        for r in summary["tables"][granularity]:
            if r["tokens / response"] > 0:
                ax.scatter(r["tokens / response"], r["top-3 drop"])
                ax.annotate(r["method"], (r["tokens / response"], r["top-3 drop"]), fontsize=7)
        ax.set_xscale("log")
        # Thousands on the major ticks only: a log axis's default minor labels overlap at this width.
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.margins(x=0.25)
        ax.set_title(f"sources: {granularity}")
        ax.set_xlabel("tokens fed per response (log; proxies feed none)")
        ax.set_ylabel("top-3 log-probability drop (nats)")
    fig.tight_layout()
    fig.savefig(out / "cost.png", dpi=120)
    lines = [f"Command: `{meta['command']}`  ",
             f"Machine: {meta['machine']}; the embedded model (SmolLM2-135M-Instruct, "
             f"transformers, CPU), k = {K}; {meta['contexts']} contexts ({meta['positions']}), "
             f"{meta['sentences']} response sentences.", "", "![cost against top-3 drop](cost.png)", ""]
    for granularity in GRANULARITIES:
        lines += [f"### Sources: {granularity}", "",
                  "| method | top-1 drop | top-3 drop | LDS | tokens / response | seconds / response |",
                  "|---|---|---|---|---|---|"]
        for r in summary["tables"][granularity]:
            lines.append(f"| {r['method']} | {r['top-1 drop']:.3f} | {r['top-3 drop']:.3f} | {r['LDS']:.3f} | "
                         f"{r['tokens / response']:,.0f} | {r['seconds / response']:.2f} |")
        lines.append("")
    intervals = sum(entry[m] is not None for g in GRANULARITIES for entry in summary["against_loo"][g] for m in METRICS)
    lines += ["### Against exact `loo`, sentence by sentence", "",
              "Each method's reading minus `loo`'s on the same response sentence (positive: the method does "
              "better on that metric), the mean with a 95% percentile cluster-bootstrap interval over "
              f"contexts (2,000 replicates; no adjustment for the {intervals} intervals). An interval that excludes 0 "
              "is a difference these contexts show; one that holds 0 is not.", ""]
    for granularity in GRANULARITIES:
        lines += [f"| {granularity}: method - loo | " + " | ".join(METRICS) + " |",
                  "|---|" + "---|" * len(METRICS)]
        for entry in summary["against_loo"][granularity]:
            cells = [("n/a" if entry[m] is None else
                      f"{entry[m]['mean']:+.3f} [{entry[m]['lo']:+.3f}, {entry[m]['hi']:+.3f}]") for m in METRICS]
            lines.append(f"| {entry['method']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"Per-sentence readings fed no extra token in {summary['spans_cost_equal']} of "
              f"{summary['spans_cost_checked']} (context, granularity) pairs (`loo` with and without spans). "
              f"Per-sentence `loo` against independent passes on {summary['naive_contexts']} contexts: largest gap "
              + ", ".join(f"{g} {v:.1e}" for g, v in summary["naive_max_gap"].items() if v is not None)
              + " nats per token. The package's prompt ids equal ascp's in "
              f"{summary['package_same_prompt']} readings.", ""]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for rows.jsonl, results.json, table.md")
    parser.add_argument("--contexts", type=int, default=20, help="contexts per task (default 20)")
    parser.add_argument("--lds-masks", type=int, default=32, help="random ablations of the LDS (default 32)")
    parser.add_argument("--naive", type=int, default=3, help="contexts per task checked against naive passes")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop-after", type=float, default=None, metavar="MINUTES",
                        help="start no new context once MINUTES have passed since the responses were "
                             "generated (a part of a run in parts); the report covers the contexts done")
    parser.add_argument("--redo", type=redo_pair, action="append", default=[], metavar="GRANULARITY:METHOD",
                        help="drop the rows of this pair from the contexts done and read it again on them "
                             "(after a change to that method; repeatable), then go on with new contexts")
    parser.add_argument("--report-only", action="store_true",
                        help="summarise the contexts OUT/rows.jsonl holds, run nothing (a stopped run's part)")
    args = parser.parse_args(argv)
    check_files()
    args.out.mkdir(parents=True, exist_ok=True)

    from ascp.api import Probe, load_model
    from ascp.lm.sampling import SamplingConfig

    requests = fresh_requests(args.contexts, args.out)
    store = args.out / "rows.jsonl"
    rows = [json.loads(line) for line in store.read_text().splitlines()] if store.is_file() else []
    if args.redo and not args.report_only:
        rows = drop_pairs(store, rows, set(args.redo))
    have = pairs_done(rows)
    done = {context for context, pairs in have.items() if pairs == PAIRS}
    if args.report_only:
        requests = [r for r in requests if r["id"] in done]
        return report(args, requests, rows)
    lm = load_model("default")
    machine = machine_line()
    backend = getattr(lm, "backend", type(lm).__name__)
    print(f"# spans head to head: {len(requests)} contexts (k = {K}), model default ({backend}); {machine}",
          flush=True)
    # Only the responses are wanted here: they do not depend on the estimator (seeded per request id,
    # the same batches), so the free bm25 reading stands in for a model-based one.
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens)
    sampled = Probe(lm, "bm25", seed=args.seed, sampling=sampling).attribute_many(
        [{k: r[k] for k in ("id", "question", "passages", "response")} for r in requests])
    check_resumed(lm, requests, [first.response for first in sampled], rows)
    began = time.perf_counter()
    per_task: dict[str, int] = {}
    for n, (request, first) in enumerate(zip(requests, sampled, strict=True), start=1):
        per_task[request["task"]] = per_task.get(request["task"], 0) + 1
        request["response"], request["naive"] = first.response, per_task[request["task"]] <= args.naive
        missing = set(PAIRS) - have.get(request["id"], set())
        if not missing:
            continue
        if args.stop_after is not None and time.perf_counter() - began > 60 * args.stop_after:
            print(f"stopped after {args.stop_after:g} minutes: {len(done)} of {len(requests)} contexts done; "
                  f"the same command{' without --redo' if args.redo else ''} resumes", flush=True)
            requests = [r for r in requests if r["id"] in done]
            break
        start = time.perf_counter()
        new = run_context(lm, request, args, missing)
        with store.open("a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in new)
        rows += new
        done.add(request["id"])
        sentences = sum(r["kind"] == "sentence" for r in new) // len(missing)
        what = "" if missing == PAIRS else f" ({', '.join(f'{g}:{m}' for g, m in sorted(missing))} again)"
        print(f"[{n}/{len(requests)}] {request['id']}: {sentences} "
              f"sentences{what}, {time.perf_counter() - start:.0f} s", flush=True)
    return report(args, requests, rows)


def report(args: argparse.Namespace, requests: list[dict[str, Any]], rows: list[dict[str, Any]]) -> int:
    """results.json, table.md and cost.png from the rows of the contexts run (`requests`; the rows of a
    context still missing a pair are left out)."""
    chosen = {r["id"] for r in requests}
    rows = [r for r in rows if r["context"] in chosen]
    machine = machine_line()
    summary = summarise(rows)
    positions = "; ".join(f"{task} positions {','.join(str(r['position']) for r in requests if r['task'] == task)}"
                          for task in FILES)
    command = (f"python benchmarks/spans_head_to_head.py --out docs/results/spans --contexts {args.contexts} "
               f"--lds-masks {args.lds_masks} --naive {args.naive} --max-new-tokens {args.max_new_tokens} "
               f"--seed {args.seed}")
    sentences = sum(r["kind"] == "sentence" for r in rows) // len(METHODS) // len(GRANULARITIES)
    meta = {"command": command, "machine": machine, "contexts": len(requests), "positions": positions,
            "sentences": sentences}
    (args.out / "results.json").write_text(json.dumps({**meta, "k": K, **summary}, indent=2) + "\n")
    lines = write_report(args.out, summary, meta)
    (args.out / "table.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
