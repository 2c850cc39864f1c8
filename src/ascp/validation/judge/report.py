"""The judge's output folder: `judgements.jsonl`, `judge.json` and `results.md` (one table per
Fig. 7 panel beside the paper's numbers), written all or nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.validation.judge.judging import JudgeResult

JUDGE_FILES = ("judgements.jsonl", "judge.json", "results.md")

# Fig. 7 / Sec. 3.3 (179 portfolios, 858 document-level judgements, a strong LLM judge).
PAPER = {"portfolios": 179, "documents": 858, "ecr_vs_judge_coverage": 0.654, "novelty_vs_ecr": 0.425}


def _num(value: float | None, digits: int = 3) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _rho_rows(panel: dict[str, Any], labels: dict[str, str], paper: dict[str, float]) -> list[str]:
    rows = ["| comparison | Spearman rho | p | n | paper |", "|---|---|---|---|---|"]
    for key, label in labels.items():
        s = panel[key]
        rows.append(f"| {label} | {_num(s['rho'])} | {_num(s['p'], 4)} | {s['n']} | "
                    f"{_num(paper[key]) if key in paper else '-'} |")
    return rows


def results_markdown(result: JudgeResult, config: dict[str, Any], command: str) -> str:
    """results.md: one table per Fig. 7 panel, with the command and the paper's numbers."""
    stats = result.statistics
    a, top = stats["panel_a"], stats["panel_a"]["top1"]
    documents = sum(1 for j in result.judgements if j["kind"] == "coverage")
    novelty = sum(1 for j in result.judgements if j["kind"] == "novelty")
    lines = [
        "# Judge meta-evaluation (Fig. 7)", "", f"Command: `{command}`", "",
        f"Judge `{config['judge_model']}` ({config['backend']}), identity-blinded, P(yes) from teacher-forced "
        f"log-probabilities; embedding proxy `{config['embedder']}`. {len(result.portfolios)} portfolios, "
        f"{documents} document-level judgements, {novelty} novelty judgements (paper: {PAPER['portfolios']} "
        f"portfolios, {PAPER['documents']} document-level judgements, a strong LLM judge). A small local judge "
        "is a smoke test of the pipeline, not a replication. Definitions: docs/judge.md.", "",
        "## (a) Identifying the supporting document", "",
        *_rho_rows(a, {"probe_vs_judge": "probe (max normalised score) vs judge P(yes), per document",
                       "proxy_vs_judge": "embedding proxy (max cos(d, y_t)) vs judge P(yes), per document"}, {}),
        "", "| top-1 agreement with the judge | agreeing | portfolios | share |", "|---|---|---|---|",
        f"| probe | {top['probe']['agree']} | {top['n']} | {_num(top['probe']['share'])} |",
        f"| embedding proxy | {top['proxy']['agree']} | {top['n']} | {_num(top['proxy']['share'])} |", "",
        f"Exact McNemar test, probe vs proxy: {top['mcnemar']['probe_only']} portfolios where only the probe "
        f"agrees, {top['mcnemar']['proxy_only']} where only the proxy does, p = {_num(top['mcnemar']['p'], 4)}.", "",
        "## (b) Probe-derived vs judge-derived coverage, per portfolio", "",
        *_rho_rows(stats["panel_b"], {"ecr_vs_judge_coverage": "ECR (theta = 0.1) vs judge coverage",
                                      "ecr_vs_judge_mean_p_yes": "ECR (theta = 0.1) vs judge mean P(yes)",
                                      "ecr_thresholded_vs_judge_coverage": "ECR thresholded vs judge coverage",
                                      "ecr_thresholded_vs_judge_mean_p_yes": "ECR thresholded vs judge mean P(yes)"},
                   PAPER),
        "", "## (c) Judge textual novelty (response-only), per portfolio with T >= 2", "",
        *_rho_rows(stats["panel_c"], {"novelty_vs_distinct_2": "novelty vs distinct-2",
                                      "novelty_vs_ecr": "novelty vs ECR (theta = 0.1)",
                                      "novelty_vs_ecr_thresholded": "novelty vs ECR thresholded"}, PAPER),
        "", "Paper (Sec. 3.3): ECR tracks the judge's coverage (rho = 0.654); the novelty judge tracks distinct-2 "
        "rather than evidence coverage (rho = 0.425 with coverage).", "",
    ]
    return "\n".join(lines)


def check_judge_out(out: Path, overwrite: bool = False) -> None:
    """Fail before any work when `out` cannot take a judge output, or holds one and not `overwrite`."""
    from ascp.jsonio import check_parent, check_replaceable

    check_replaceable(out, "judge.json", "judge output")
    if (out / "judge.json").exists() and not overwrite:
        raise AscpError(f"--out {out} already holds a judge output; pass --overwrite to replace it or choose "
                        "another folder.")
    check_parent(out, "--out")


def write_judge(out: Path, result: JudgeResult, config: dict[str, Any], command: str) -> None:
    """judgements.jsonl, judge.json and results.md, all or nothing (a staged folder)."""
    from ascp.jsonio import json_safe, staged_folder

    summary = {"command": command, "config": config, "paper": PAPER,
               "counts": {"portfolios": len(result.portfolios),
                          "documents": sum(1 for j in result.judgements if j["kind"] == "coverage"),
                          "novelty": sum(1 for j in result.judgements if j["kind"] == "novelty")},
               **result.statistics, "portfolios": result.portfolios}
    with staged_folder(out, whole=True) as tmp:
        with (tmp / "judgements.jsonl").open("w", encoding="utf-8") as handle:
            for record in result.judgements:
                handle.write(json.dumps(json_safe(record), ensure_ascii=False) + "\n")
        (tmp / "judge.json").write_text(json.dumps(json_safe(summary), indent=1, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
        (tmp / "results.md").write_text(results_markdown(result, config, command), encoding="utf-8")
