"""Which source supports each sentence: the estimators head to head on ContextCite's own metrics.

Contexts: the last `--contexts` eligible items of the ASQA pools and of HotpotQA in
`../shared/data` (k = 5 passages as the data ranks them), refused if any committed plan or split
under docs/results/ names their case, each with the embedded model's own sampled response; every
response sentence is a span. Per sentence and method, with the sources ranked by the method's
reading of that sentence:

- **top-k drop** (k = 1, 3): the sentence's log-probability (summed over its tokens) under the full
  context minus under the context without the k top-ranked sources (ContextCite's metric; higher is
  better);
- **LDS**: the Spearman correlation, over `--lds-masks` random ablations keeping each source with
  probability 0.5 (drawn from a stream of their own, apart from any estimator's), between the
  method's additive prediction (the sum of the kept sources' scores) and the actual logit-probability
  of the sentence (ContextCite's target);

and per response the tokens each method fed and its seconds. `gated` and `attention` read the whole
response only, so every sentence gets their whole-response ranking (flagged in the table). Sources
are passages; sentence sources (`sources="sentences"`) are not built yet, so the table of that
granularity is absent. The `context-cite` package itself is not run (it loads models from the hub).

    python benchmarks/spans_head_to_head.py --out docs/results/spans [--contexts 20] [--lds-masks 32]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from task_requests import check_files, task_requests  # noqa: E402  (the requests of the shared data)

K = 5
METHODS = {  # name -> (estimator spec, reads sentences)
    "loo": ("loo", True), "hierarchical": ("hierarchical", True),
    "contextcite-32": ("contextcite(num_ablations=32)", True),
    "contextcite-64": ("contextcite(num_ablations=64)", True),
    "gated": ("gated", False), "attention": ("attention", False),
    "bm25": ("bm25", True), "yd-cosine": ("yd-cosine", True),
}


def committed_cases() -> set[str]:
    """Every case id a committed plan or split names (the contexts here must be new to all of them)."""
    ids: set[str] = set()
    for path in [*ROOT.glob("docs/results/**/plan.json"), *ROOT.glob("docs/results/**/splits.json")]:
        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in ("cases", "case_ids", "test", "dev", "train") and isinstance(value, list):
                        ids.update(str(v) for v in value if isinstance(v, (str, int)))
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)
        walk(json.loads(path.read_text(encoding="utf-8")))
    return ids


def sentence_logprob(logprobs: Any, tokens: Sequence[int]) -> float:
    return float(sum(logprobs[t] for t in tokens))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json, README.md, cost.png")
    parser.add_argument("--contexts", type=int, default=20, help="contexts per task (default 20)")
    parser.add_argument("--lds-masks", type=int, default=32, help="random ablations of the LDS (default 32)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    check_files()
    args.out.mkdir(parents=True, exist_ok=True)

    import numpy as np
    from scipy.stats import spearmanr

    from ascp.api import Probe, load_model
    from ascp.attribution.ablation import Ablations
    from ascp.attribution.contextcite import logit_prob
    from ascp.attribution.spans import assign_tokens
    from ascp.lm.prompts import prompt_template
    from ascp.lm.sampling import SamplingConfig, derive_seed
    from ascp.types import Passage

    lm = load_model("default")
    requests = [{**r, "task": r["id"].split("/")[0]}
                for r in task_requests(args.contexts, K, sep="/", last=True, skip=committed_cases())]
    print(f"# spans head to head: {len(requests)} contexts (k = {K}), model default ({lm.backend}); "
          f"{platform.processor() or platform.machine()}, nproc={os.cpu_count()}", flush=True)
    sampled = Probe(lm, seed=args.seed, sampling=SamplingConfig(max_new_tokens=args.max_new_tokens)).attribute_many(
        [{k: v for k, v in r.items() if k != "task"} for r in requests])
    template = prompt_template("commit", None, "")
    rows: list[dict[str, Any]] = []
    cost: dict[str, list[tuple[int, float]]] = {m: [] for m in METHODS}
    for n, (request, first) in enumerate(zip(requests, sampled, strict=True), start=1):
        request["response"] = first.response
        body = {k: v for k, v in request.items() if k != "task"}
        readings = {}
        for name, (spec, per_sentence) in METHODS.items():
            result = Probe(lm, spec, seed=args.seed, spans="sentences" if per_sentence else None).attribute_many(
                [body])[0]
            readings[name] = result
            cost[name].append((result.tokens_processed, result.seconds))
        spans = readings["loo"].spans
        ids = [p["id"] for p in request["passages"]]
        passages = tuple(Passage(id=p["id"], text=p["text"], title=p["title"]) for p in request["passages"])
        prompt = lm.encode_prompt(request["question"], passages, template)
        response_ids = lm.encode(request["response"])
        groups = assign_tokens([(s.start, s.end) for s in spans], lm.response_token_spans(request["response"]),
                               request["response"])
        evaluation = Ablations(lm, prompt, response_ids)
        full = np.asarray(evaluation.full_logprobs)
        rng = np.random.default_rng(derive_seed(args.seed, f"lds-masks:{request['id']}"))  # apart from any estimator's
        masks = rng.random((args.lds_masks, K)) < 0.5
        masked = [np.asarray(o) for o in evaluation.score([{i + 1: "" for i in range(K) if not m[i]} for m in masks])]
        removals: dict[frozenset[int], np.ndarray] = {}
        for s_index, tokens in enumerate(groups):
            actual = [logit_prob(sentence_logprob(o, tokens)) for o in masked]
            for name, result in readings.items():
                scores = (result.spans[s_index].reading.scores if result.spans else result.scores)
                vector = np.array([scores[i] for i in ids])
                order = list(np.argsort(-vector, kind="stable"))
                row = {"context": request["id"], "task": request["task"], "sentence": s_index, "method": name,
                       "tokens": len(tokens), "whole_response_ranking": not result.spans}
                for top in (1, 3):
                    removed = frozenset(int(i) for i in order[:top])
                    if removed not in removals:
                        (removals[removed],) = evaluation.score([{i + 1: "" for i in removed}])
                    row[f"top{top}_drop"] = sentence_logprob(full, tokens) - sentence_logprob(removals[removed], tokens)
                predicted = masks.astype(float) @ vector
                rho = spearmanr(predicted, actual).statistic if np.ptp(predicted) > 0 else float("nan")
                row["lds"] = float(rho)
                rows.append(row)
        print(f"[{n}/{len(requests)}] {request['id']}: {len(spans)} sentences, evaluation fed "
              f"{evaluation.tokens_processed:,} tokens", flush=True)

    import pandas as pd

    frame = pd.DataFrame(rows)
    table = []
    for name in METHODS:
        part = frame[frame["method"] == name]
        tokens = [t for t, _ in cost[name]]
        seconds = [s for _, s in cost[name]]
        table.append({"method": name, "reads sentences": bool(METHODS[name][1]),
                      "top-1 drop": float(part["top1_drop"].mean()), "top-3 drop": float(part["top3_drop"].mean()),
                      "LDS": float(part["lds"].mean(skipna=True)), "LDS sentences": int(part["lds"].notna().sum()),
                      "tokens / response": float(np.mean(tokens)), "seconds / response": float(np.mean(seconds))})
    machine = (f"{platform.processor() or platform.machine()}, nproc={os.cpu_count()}, "
               f"Python {platform.python_version()}")
    command = (f"python benchmarks/spans_head_to_head.py --out docs/results/spans --contexts {args.contexts} "
               f"--lds-masks {args.lds_masks} --max-new-tokens {args.max_new_tokens} --seed {args.seed}")
    sentences = int(len(frame) / len(METHODS))
    (args.out / "results.json").write_text(json.dumps({"command": command, "machine": machine, "k": K,
                                                       "contexts": len(requests), "sentences": sentences,
                                                       "table": table, "rows": rows}, indent=2) + "\n")
    lines = ["# Per-sentence attribution head to head (sources: passages)\n", f"Command: `{command}`  ",
             f"Machine: {machine}; the embedded model (SmolLM2-135M) on the CPU, k = {K}; {len(requests)} contexts, "
             f"{sentences} response sentences.\n",
             "| method | per sentence | top-1 drop | top-3 drop | LDS | tokens / response | seconds / response |",
             "|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['method']} | {'yes' if r['reads sentences'] else 'no (whole-response ranking)'} | "
                     f"{r['top-1 drop']:.3f} | {r['top-3 drop']:.3f} | {r['LDS']:.3f} | "
                     f"{r['tokens / response']:,.0f} | {r['seconds / response']:.2f} |")
    lines += ["", "Drops are in nats summed over the sentence's tokens; LDS is the mean Spearman over sentences "
              "whose prediction varies.", ""]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in table:
        ax.scatter(r["tokens / response"], r["top-3 drop"])
        ax.annotate(r["method"], (r["tokens / response"], r["top-3 drop"]), fontsize=8)
    ax.set_xscale("symlog")
    ax.set_xlabel("tokens fed per response")
    ax.set_ylabel("top-3 log-probability drop (nats)")
    fig.tight_layout()
    fig.savefig(args.out / "cost.png", dpi=120)
    lines.insert(4, "![cost against top-3 drop](cost.png)\n")
    (args.out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines[4:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
