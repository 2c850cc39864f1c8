"""Head-to-head: ascp's causal context use against what a RAGAS user has without an LLM judge.

On the controlled ASQA contexts of the committed probe validation
(`docs/results/probe-validation/loo-vs-proxies`: 25 cases, widths 3 and 6, off-query and
same-query padding, m = 2 necessary passages, each context's fixed 48-token target response
generated from the necessary passages alone), every retrieved context of every sample is scored
by
- ascp's `CausalContextUse` RAGAS metric, run inside `ragas.evaluate` on the embedded SmolLM2
  (exact leave-one-out; the contexts are the plain strings a RAGAS sample holds, so untitled);
- RAGAS's own non-LLM metrics applied per context (the real classes): string similarity and
  ROUGE-L between the context and the response (reference-free, like ContextUtilization), the
  per-context similarity to the annotated long answers behind NonLLMContextPrecisionWithReference
  (reference-based), and StringPresence of a gold short-answer alias in the context;
- for reference, the committed validate-probe LOO readings (the same contexts with titles).
Each score is held against the gold necessity labels: mean within-context AUC (scikit-learn's
`roc_auc_score`, 95% cluster bootstrap over cases) and, for metrics with a verdict, accuracy.

Run in .venv-evals (`make evals`):
    .venv-evals/bin/python benchmarks/ragas_head_to_head.py --out docs/results/ragas-head-to-head

writes OUT/results.json (every context's scores and the summary) and OUT/results.md (the tables
with the command and machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

import numpy as np  # noqa: E402

DATA = "../shared/data/asqa/asqa_wikidpr_pools.json"
STORE = "docs/results/probe-validation/loo-vs-proxies"
CONDITIONS = [(3, "off-query"), (3, "same-query"), (6, "off-query"), (6, "same-query")]
METRICS = {
    "ascp": "ascp causal context use (loo, via ragas.evaluate)",
    "ascp-committed": "committed validate-probe loo (titled passages)",
    "similarity": "RAGAS NonLLMStringSimilarity(context, response)",
    "rougeL": "RAGAS RougeScore rougeL(context, response)",
    "reference": "RAGAS NonLLMContextPrecisionWithReference per-context similarity to long answers",
    "presence": "RAGAS StringPresence(gold alias in context)",
}
REFERENCE_FREE = ("ascp", "ascp-committed", "similarity", "rougeL")


def read_store(store: Path) -> tuple[dict[tuple, list[dict]], dict[tuple, str]]:
    rows: dict[tuple, list[dict]] = defaultdict(list)
    for line in (store / "scores.jsonl").open():
        r = json.loads(line)
        if r["estimator"] == "loo" and r["protocol"] == "fixed":
            rows[(r["case_id"], r["width"], r["padding"])].append(r)
    responses = {}
    for line in (store / "responses.jsonl").open():
        r = json.loads(line)
        if r["protocol"] == "fixed":
            responses[(r["case_id"], r["width"], r["padding"])] = r["response"]
    for rs in rows.values():
        rs.sort(key=lambda r: r["position"])
    return rows, responses


def build_samples(data: Path, store: Path, limit: int | None) -> list[dict[str, Any]]:
    """The committed contexts rebuilt from the data (passage texts, roles) with their responses."""
    from ascp.data import load_cases
    from ascp.validation.pools import ControlledPool, PoolBuilder

    rows, responses = read_store(store)
    config = json.loads((store / "summary.json").read_text())["config"]
    cases = load_cases(data, format="asqa", rank_by="given")
    items = {str(it.get("id") or it.get("sample_id")): it for it in json.loads(data.read_text())}
    builder = PoolBuilder(cases, m=config["m"], seed=config["seed"], max_words=config["max_words"])
    by_id = {c.id: c for c in cases}
    wanted = list(dict.fromkeys(k[0] for k in rows))[:limit]
    samples = []
    for case_id in wanted:
        case = by_id[case_id]
        long_answers = [a["long_answer"] for a in items[case_id].get("annotations", []) if a.get("long_answer")]
        for width, padding in CONDITIONS:
            key = (case_id, width, padding)
            pool = builder.build(case, width, padding)
            assert isinstance(pool, ControlledPool), key
            committed = rows[key]
            if [p.id for p in pool.passages] != [r["passage_id"] for r in committed]:
                raise SystemExit(f"the rebuilt context {key} differs from the committed one; is this the same data?")
            samples.append({
                "key": key, "user_input": case.question, "response": responses[key],
                "retrieved_contexts": [p.passage.text for p in pool.passages],
                "necessary": [p.role == "necessary" for p in pool.passages],
                "committed": [r["score"] for r in committed],
                "aliases": [a for u in case.units for a in u.aliases],
                "reference_contexts": long_answers,
            })
    return samples


async def ragas_scores(sample: dict[str, Any]) -> dict[str, list[float]]:
    """RAGAS's non-LLM metrics, each applied to every retrieved context of the sample."""
    from ragas.dataset_schema import SingleTurnSample
    from ragas.metrics import NonLLMContextPrecisionWithReference, NonLLMStringSimilarity, RougeScore, StringPresence

    similarity, rouge, presence = NonLLMStringSimilarity(), RougeScore(rouge_type="rougeL"), StringPresence()
    reference = NonLLMContextPrecisionWithReference()
    out: dict[str, list[float]] = defaultdict(list)
    for context in sample["retrieved_contexts"]:
        pair = SingleTurnSample(reference=context, response=sample["response"])
        out["similarity"].append(await similarity.single_turn_ascore(pair))
        out["rougeL"].append(await rouge.single_turn_ascore(pair))
        # exactly the per-context value NonLLMContextPrecisionWithReference thresholds at 0.5
        out["reference"].append(max([await reference.distance_measure.single_turn_ascore(
            SingleTurnSample(reference=context, response=ref)) for ref in sample["reference_contexts"]] or [0.0]))
        out["presence"].append(max([await presence.single_turn_ascore(
            SingleTurnSample(reference=alias, response=context)) for alias in sample["aliases"]] or [0.0]))
    out["reference-sample"] = [await reference.single_turn_ascore(SingleTurnSample(
        retrieved_contexts=sample["retrieved_contexts"], reference_contexts=sample["reference_contexts"]))]
    return out


def causal_scores(samples: list[dict[str, Any]], log) -> tuple[list[dict[str, Any]], float]:
    """ascp's metric inside ragas.evaluate; the per-context readings it kept."""
    from ragas import EvaluationDataset, evaluate

    import ascp
    from ascp.integrations.ragas import CausalContextUse

    use = CausalContextUse(probe=ascp.Probe(ascp.load_model("default", device="cpu"), instruction="commit"))
    dataset = EvaluationDataset.from_list([{k: s[k] for k in ("user_input", "response", "retrieved_contexts")}
                                           for s in samples])
    start = time.perf_counter()
    result = evaluate(dataset, metrics=[use], raise_exceptions=True, show_progress=True)
    seconds = time.perf_counter() - start
    frame = result.to_pandas()
    readings = []
    for i, s in enumerate(samples):
        chunks = use.chunk_readings({k: s[k] for k in ("user_input", "response", "retrieved_contexts")})
        readings.append({"score": [c["score"] for c in chunks], "used": [c["used"] for c in chunks],
                         "sample": float(frame["causal_context_use"][i])})
    log(f"ascp: {len(samples)} samples scored by ragas.evaluate in {seconds:.0f} s")
    return readings, seconds


def summarize(samples: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    from sklearn.metrics import roc_auc_score

    from ascp.validation.analysis import clustered_mean

    table: dict[str, dict[str, Any]] = {}
    for metric in METRICS:
        table[metric] = {}
        for width, padding in [*CONDITIONS, (0, "all")]:
            chosen = [s for s in samples if padding == "all" or s["key"][1:] == (width, padding)]
            aucs = [roc_auc_score(s["necessary"], s["scores"][metric]) for s in chosen]
            cell: dict[str, Any] = {"auc": clustered_mean(aucs, [s["key"][0] for s in chosen], null=0.5, n_boot=n_boot)}
            verdicts = {"ascp": "used", "reference": "reference-verdict", "presence": "presence"}
            if metric in verdicts:
                acc = [float(np.mean(np.array(s["verdicts"][verdicts[metric]]) == np.array(s["necessary"])))
                       for s in chosen]
                cell["accuracy"] = clustered_mean(acc, [s["key"][0] for s in chosen], null=0.5, n_boot=n_boot)
            if metric != "ascp":  # paired: ascp's AUC minus this metric's, context by context
                diffs = [roc_auc_score(s["necessary"], s["scores"]["ascp"]) - a for s, a in zip(chosen, aucs,
                                                                                                  strict=True)]
                cell["ascp_minus"] = clustered_mean(diffs, [s["key"][0] for s in chosen], null=0.0, n_boot=n_boot)
            table[metric]["all" if padding == "all" else f"k={width} {padding}"] = cell
    return table


def render(summary: dict[str, Any]) -> str:
    cols = [f"k={w} {p}" for w, p in CONDITIONS] + ["all"]
    fmt = lambda e: f"{e['mean']:.3f} [{e['lo']:.3f}, {e['hi']:.3f}]"  # noqa: E731
    lines = ["| metric (per retrieved context) | needs | " + " | ".join(cols) + " |",
             "|---|---|" + "---|" * len(cols)]
    for metric, label in METRICS.items():
        needs = "response" if metric in REFERENCE_FREE else "gold reference"
        lines.append(f"| {label} | {needs} | " + " | ".join(fmt(summary["table"][metric][c]["auc"]) for c in cols)
                     + " |")
    lines += ["", "Paired AUC difference, ascp's metric minus each other metric (context by context; 95% cluster "
              "bootstrap over cases, p for no difference):", "",
              "| ascp minus | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    pfmt = lambda e: f"{e['mean']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}] p={e['p']:.3f}"  # noqa: E731
    for metric, label in METRICS.items():
        if metric != "ascp":
            lines.append(f"| {label} | " + " | ".join(pfmt(summary["table"][metric][c]["ascp_minus"]) for c in cols)
                         + " |")
    lines += ["", "Accuracy of the per-context verdict against the necessity labels:", "",
              "| verdict | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    names = {"ascp": "ascp used (tau(k))", "reference": "RAGAS reference similarity >= 0.5",
             "presence": "RAGAS StringPresence"}
    for metric, label in names.items():
        lines.append(f"| {label} | " + " | ".join(fmt(summary["table"][metric][c]["accuracy"]) for c in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path(DATA))
    ap.add_argument("--store", type=Path, default=Path(STORE))
    ap.add_argument("--limit", type=int, default=None, help="first N cases of the store")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json and results.md")
    ap.add_argument("--reuse", action="store_true", help="summarise the per-context scores already in "
                    "OUT/results.json again (nothing is rescored)")
    args = ap.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"{args.data} is missing: this benchmark needs the shared ASQA pools.")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    if args.reuse:
        earlier = json.loads((args.out / "results.json").read_text())
        samples, seconds = earlier["contexts"], earlier["summary"]["ascp_seconds"]
        started, command = earlier["summary"]["started"], earlier["summary"]["command"]
        for s in samples:
            s["key"] = tuple(s["key"])
        summary = {**earlier["summary"], "table": summarize(samples, args.n_boot), "command": command,
                   "resummarised_by": " ".join(["python", *sys.argv])}
        write(args, summary, samples, seconds, started)
        return
    samples = build_samples(args.data, args.store, args.limit)
    log(f"{len(samples)} contexts rebuilt from {args.data}; every one equals its committed context")
    readings, seconds = causal_scores(samples, log)
    for s, r in zip(samples, readings, strict=True):
        rs = asyncio.run(ragas_scores(s))
        s["scores"] = {"ascp": r["score"], "ascp-committed": s["committed"],
                       **{m: rs[m] for m in ("similarity", "rougeL", "reference", "presence")}}
        s["verdicts"] = {"used": r["used"], "reference-verdict": [v >= 0.5 for v in rs["reference"]],
                         "presence": [v >= 0.5 for v in rs["presence"]]}
        s["sample_scores"] = {"causal_context_use": r["sample"],
                              "non_llm_context_precision_with_reference": rs["reference-sample"][0]}
    summary = {"table": summarize(samples, args.n_boot), "contexts": len(samples),
               "cases": len({s["key"][0] for s in samples}), "ascp_seconds": round(seconds, 1),
               "started": started, "machine": f"{platform.processor() or platform.machine()}, "
                                              f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
               "command": " ".join(["python", *sys.argv])}
    write(args, summary, samples, seconds, started)


def write(args: argparse.Namespace, summary: dict[str, Any], samples: list[dict[str, Any]], seconds: float,
          started: str) -> None:
    keep = ("key", "necessary", "scores", "verdicts", "sample_scores")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"summary": summary, "metrics": METRICS, "contexts": [
        {k: s[k] for k in keep} for s in samples]}, indent=1) + "\n")
    page = [f"# ascp's causal context use against RAGAS's non-LLM metrics ({summary['cases']} ASQA cases, "
            f"{summary['contexts']} controlled contexts)", "",
            f"- command: `{summary['command']}`"
            + (f" (tables recomputed from its results.json by `{summary['resummarised_by']}`)"
               if "resummarised_by" in summary else ""),
            f"- machine: {summary['machine']}; started {started}; "
            f"ascp's metric took {seconds:.0f} s inside ragas.evaluate",
            f"- data: `{args.data}`; contexts and fixed responses: `{args.store}`", "",
            "Mean within-context AUC of the necessary passages [95% cluster bootstrap over cases]:", "",
            render(summary), ""]
    (args.out / "results.md").write_text("\n".join(page))
    print("\n".join(page))


if __name__ == "__main__":
    main()
