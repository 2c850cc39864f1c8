"""The judge meta-evaluation of Fig. 7: the probe's ECR against an identity-blinded LLM judge.

Any generator ascp can load serves as the judge. Its verdicts are never sampled: each is
P(yes) = P("yes") / (P("yes") + P("no")) from the teacher-forced log-probabilities of the answer
words after the judge prompt (`lm.score`, the model seam), so a judge run is reproducible.

- Coverage: for every passage d offered in a portfolio, "do the portfolio's answers use
  information from this document?" (the answers and d's text only; no passage id, policy name,
  probe score or system is shown). Judge coverage = share of offered passages with P(yes) >= 0.5;
  also the mean P(yes).
- Novelty: response-only; for rounds t >= 2, "does y_t say something y_1..y_{t-1} do not?";
  a portfolio's novelty is the mean over its rounds.
- Statistics (`judge_statistics`): Spearman rho with n (nan where undefined) for (a) the probe's
  and an embedding proxy's per-document reading against the judge, with top-1 agreement per
  portfolio; (b) ECR (`ecr`, `ecr_thresholded`) against judge coverage; (c) judge novelty
  against ECR and distinct-2.

Input: an `ascp run` folder (`rounds.jsonl`, `cases.jsonl`, `summary.json`; passage texts from the
case file its config names) or an `ascp experiment run` store (`plan.json`, `units.jsonl`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.lm.encoded import EncodedPrompt
from ascp.lm.prompts import PromptTemplate
from ascp.lm.protocol import LanguageModel
from ascp.types import Case, Passage, Round

EmbedFn = Callable[[Sequence[str]], np.ndarray]

JUDGE_FILES = ("judgements.jsonl", "judge.json", "results.md")
USED_AT = 0.5  # a passage counts as judged used when P(yes) >= this

# Answer words scored after the prompt; each side's probability is summed over its spellings.
YES_WORDS = ("Yes", "yes")
NO_WORDS = ("No", "no")

COVERAGE_INSTRUCTION = ("You are checking which documents a set of answers drew on. Below are the answers "
                        "given to one question, then one document.")
COVERAGE_QUESTION = "Do the answers use information from this document? Answer yes or no."
DOCUMENT_FORMAT = "Document:\n{text}\n\n"
NOVELTY_INSTRUCTION = ("You are checking whether an answer adds anything new. Below are earlier answers to one "
                       "question, then a new answer.")
NOVELTY_QUESTION = ("New answer: {question}\n\nDoes the new answer say something that the earlier answers do not? "
                    "Answer yes or no.")

# Fig. 7 / Sec. 3.3 (179 portfolios, 858 document-level judgements, a strong LLM judge).
PAPER = {"portfolios": 179, "documents": 858, "ecr_vs_judge_coverage": 0.654, "novelty_vs_ecr": 0.425}


# ------------------------------------------------------------------------------------------ input


@dataclass(frozen=True)
class JudgedPortfolio:
    """One portfolio to judge: who it is (`key`, for the output only), its case and rounds, and the
    probe-side measures recorded with it."""

    key: dict[str, Any]
    case: Case
    rounds: tuple[Round, ...]
    ecr: float
    ecr_thresholded: float
    distinct_2: float

    @property
    def offered(self) -> tuple[str, ...]:
        """Distinct passage ids shown across rounds, in order of first appearance."""
        return tuple(dict.fromkeys(pid for r in self.rounds for pid in r.context))

    @property
    def responses(self) -> list[str]:
        return [r.response for r in self.rounds]

    def shown_responses(self) -> list[str]:
        """The responses as the judge sees them (`masked`: no passage id of the case's pool)."""
        ids = [p.id for p in self.case.pool] + list(self.offered)
        return [masked(r, ids) for r in self.responses]

    def passage(self, pid: str) -> Passage:
        try:
            return self.case.passage(pid)
        except KeyError:
            raise AscpError(f"case {self.case.id!r}: passage {pid!r} of the run is not in its case file; "
                            "judge the run against the case file it was made from.") from None


def _metric(record: dict[str, Any], name: str, rounds: Sequence[Round]) -> float:
    """A recorded metric, or computed from the rounds where the record predates it."""
    value = record.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    from ascp.metrics.diversity import distinct_n
    from ascp.metrics.portfolio import evidence_coverage_rate, thresholded_coverage

    if name == "ecr":
        return evidence_coverage_rate(rounds)
    if name == "ecr_thresholded":
        return thresholded_coverage(rounds)
    return distinct_n([r.response for r in rounds], 2)


def _portfolio(key: dict[str, Any], case: Case, rounds: Sequence[Round], record: dict[str, Any]) -> JudgedPortfolio:
    ordered = tuple(sorted(rounds, key=lambda r: r.round))
    return JudgedPortfolio(key=key, case=case, rounds=ordered, ecr=_metric(record, "ecr", ordered),
                           ecr_thresholded=_metric(record, "ecr_thresholded", ordered),
                           distinct_2=_metric(record, "distinct_2", ordered))


def _load_case_file(data: str, format: str, where: str) -> dict[str, Case]:
    from ascp.data import load_cases

    path = Path(data)
    if not path.is_file():
        raise AscpError(f"the case file {data!r} named in {where} is not here; judge from the folder the run was "
                        "made in, so its passage texts can be read.")
    return {c.id: c for c in load_cases(path, format=format, rank_by="given", require_pool=False)}


def _case(cases: dict[str, Case], case_id: str, data: str) -> Case:
    if case_id not in cases:
        raise AscpError(f"case {case_id!r} of the run is not in {data}; judge the run against its own case file.")
    return cases[case_id]


def load_run_portfolios(directory: Path, limit: int | None = None) -> list[JudgedPortfolio]:
    """The portfolios of an `ascp run` folder, in `cases.jsonl` order (the first `limit`)."""
    from ascp.jsonio import read_jsonl

    summary = json.loads((directory / "summary.json").read_text(encoding="utf-8"))
    config = summary.get("config", {})
    rounds: dict[str, list[Round]] = {}
    for _, rec in read_jsonl(directory / "rounds.jsonl"):
        rounds.setdefault(str(rec["case_id"]), []).append(Round.from_json(rec))
    rows = [rec for _, rec in read_jsonl(directory / "cases.jsonl")][:limit]
    data = str(config.get("data", ""))
    cases = _load_case_file(data, str(config.get("format", "auto")), f"{directory}/summary.json")
    policy = str(config.get("policy", ""))
    return [_portfolio({"case_id": str(row["case_id"]), "policy": str(row.get("policy", policy))},
                       _case(cases, str(row["case_id"]), data), rounds.get(str(row["case_id"]), []), row)
            for row in rows]


def load_store_portfolios(directory: Path, limit: int | None = None) -> list[JudgedPortfolio]:
    """The units of an `ascp experiment run` store, in file order (the first `limit`)."""
    from ascp.experiments.store import read_plan, read_units

    tasks = {t["name"]: t for t in read_plan(directory)["tasks"]}
    units = read_units(directory)[:limit]
    cases: dict[str, dict[str, Case]] = {}
    out = []
    for unit in units:
        task = tasks[unit["task"]]
        if task["name"] not in cases:
            cases[task["name"]] = _load_case_file(task["data"], task.get("format", "auto"), f"{directory}/plan.json")
        key = {k: unit[k] for k in ("task", "model", "seed", "case_id", "condition")}
        out.append(_portfolio(key, _case(cases[task["name"]], str(unit["case_id"]), task["data"]),
                              [Round.from_json(r) for r in unit.get("rounds", [])], unit))
    return out


def load_portfolios(directory: str | Path, limit: int | None = None) -> tuple[str, list[JudgedPortfolio]]:
    """("run" or "store", the portfolios) of an `ascp run` folder or an experiment store; one
    AscpError sentence for anything else."""
    directory = Path(directory)
    if limit is not None and limit < 1:
        raise AscpError(f"--limit must be at least 1, got {limit}.")
    if not directory.is_dir():
        raise AscpError(f"{directory} is not a folder; give the --out folder of `ascp run` (or of "
                        "`ascp experiment run`).")
    store = (directory / "plan.json").is_file() and (directory / "units.jsonl").is_file()
    if not store:
        missing = [name for name in ("rounds.jsonl", "cases.jsonl", "summary.json") if not (directory / name).is_file()]
        if missing:
            raise AscpError(f"{directory} holds no run ({', '.join(missing)} missing); give the --out folder of "
                            "`ascp run` (or of `ascp experiment run`).")
    try:
        found = ("store", load_store_portfolios(directory, limit)) if store else \
            ("run", load_run_portfolios(directory, limit))
    except (KeyError, TypeError, ValueError) as exc:
        raise AscpError(f"{directory} is not a readable ascp run ({exc.__class__.__name__}: {exc}); give an "
                        "unmodified output folder of `ascp run` or `ascp experiment run`.") from None
    if not any(p.offered for p in found[1]):
        raise AscpError(f"{directory} holds no portfolio with an offered passage; nothing to judge.")
    return found


# ------------------------------------------------------------------------------------------ prompts


def masked(response: str, ids: Sequence[str]) -> str:
    """The response with whitespace collapsed and bracketed citations of passage ids ("[d7]") shown as
    "[?]", so no passage id reaches the judge; an empty response reads "(empty)"."""
    text = " ".join(response.split())
    for pid in sorted(ids, key=len, reverse=True):
        text = re.sub(r"\[\s*" + re.escape(pid) + r"\s*\]", "[?]", text)
    return text or "(empty)"


def answers_block(responses: Sequence[str]) -> str:
    """"Answer 1: ...\\nAnswer 2: ..." (the responses as `masked` gives them)."""
    return "\n".join(f"Answer {i}: {r}" for i, r in enumerate(responses, start=1))


def coverage_template(responses: Sequence[str]) -> PromptTemplate:
    """The coverage judge's template: instruction and answers, then one document, then the question."""
    return PromptTemplate(instruction=f"{COVERAGE_INSTRUCTION}\n\nAnswers:\n{answers_block(responses)}",
                          passage_format=DOCUMENT_FORMAT, untitled_passage_format=DOCUMENT_FORMAT,
                          question_format=COVERAGE_QUESTION)


def novelty_template(earlier: Sequence[str]) -> PromptTemplate:
    """The novelty judge's template: instruction and earlier answers, then the new one (the "question")."""
    return PromptTemplate(instruction=f"{NOVELTY_INSTRUCTION}\n\nEarlier answers:\n{answers_block(earlier)}",
                          question_format=NOVELTY_QUESTION)


def blinded(passage: Passage) -> Passage:
    """The passage as the judge sees it: its text only (no id, no title)."""
    return Passage(id="document", text=passage.text)


def coverage_prompts(lm: LanguageModel, responses: Sequence[str], passages: Sequence[Passage]) -> list[EncodedPrompt]:
    """One prompt per passage: does the portfolio use information from it?"""
    template = coverage_template(responses)
    return [lm.encode_prompt("", [blinded(p)], template=template) for p in passages]


def novelty_prompts(lm: LanguageModel, responses: Sequence[str]) -> list[EncodedPrompt]:
    """One prompt per round t >= 2: does y_t say something new relative to y_1..y_{t-1}?"""
    return [lm.encode_prompt(responses[t], [], template=novelty_template(responses[:t]))
            for t in range(1, len(responses))]


# ------------------------------------------------------------------------------------------ scoring


def answer_ids(lm: LanguageModel, prompt_text: str, words: Sequence[str]) -> list[tuple[int, ...]]:
    """Token ids of each answer word as the judge's reply: after a space when the prompt ends in a
    non-space character (a base model's "Answer:"), else as is (a chat template's assistant turn)."""
    space = " " if prompt_text and not prompt_text[-1].isspace() else ""
    return [tuple(lm.encode(space + w)) for w in words]


def p_yes(lm: LanguageModel, prompts: Sequence[EncodedPrompt]) -> np.ndarray:
    """P(yes) / (P(yes) + P(no)) per prompt, from teacher-forced log-probabilities (never sampled).

    P(side) sums exp(sum of token log-probs) over the side's spellings (`YES_WORDS`, `NO_WORDS`).
    """
    if not prompts:
        return np.zeros(0)
    groups: dict[tuple[tuple[int, ...], ...], list[int]] = {}  # prompts sharing the answer tokenisation
    for i, p in enumerate(prompts):
        ids = (*answer_ids(lm, p.text, YES_WORDS), *answer_ids(lm, p.text, NO_WORDS))
        groups.setdefault(ids, []).append(i)
    out = np.zeros(len(prompts))
    for answers, members in groups.items():
        totals = np.array([_answer_logprob(lm, [prompts[i] for i in members], a) for a in answers])
        yes = np.logaddexp.reduce(totals[: len(YES_WORDS)], axis=0)
        no = np.logaddexp.reduce(totals[len(YES_WORDS):], axis=0)
        out[members] = 1.0 / (1.0 + np.exp(no - yes))
    return out


def _answer_logprob(lm: LanguageModel, prompts: Sequence[EncodedPrompt], answer: Sequence[int]) -> np.ndarray:
    """log p(answer | prompt) for each prompt (nats), one `score` call."""
    if not answer:
        raise AscpError(f"judge model {getattr(lm, 'name', '?')!r}: an answer word tokenises to nothing.")
    for p in prompts:
        lm.check_fits("judge prompt", p.num_tokens, len(answer))
    scored = lm.score([p.ids for p in prompts], answer)
    return np.array([float(np.sum(lp)) for lp in scored.logprobs])


# ------------------------------------------------------------------------------------------ readings


def probe_reading(rounds: Sequence[Round], pid: str, raw: bool = False) -> float:
    """Max over the rounds whose context held `pid` of its normalised (or raw) probe score."""
    values = [float((r.scores if raw else r.normalized).get(pid, 0.0)) for r in rounds if pid in r.context]
    return max(values) if values else math.nan


def proxy_readings(portfolio: JudgedPortfolio, embed_fn: EmbedFn) -> dict[str, float]:
    """The embedding proxy: max over the rounds whose context held d of cos(d, y_t); passages are
    embedded as "title: text" (as the yd-cosine estimator does)."""
    offered = portfolio.offered
    texts = [portfolio.passage(pid).full_text for pid in offered] + portfolio.responses
    vectors = np.asarray(embed_fn(texts), dtype=float)
    docs, answers = vectors[: len(offered)], vectors[len(offered):]
    cosines = docs @ answers.T
    return {pid: max(float(cosines[i, t]) for t, r in enumerate(portfolio.rounds) if pid in r.context)
            for i, pid in enumerate(offered)}


# ------------------------------------------------------------------------------------------ judging


@dataclass(frozen=True)
class PortfolioJudgement:
    """A portfolio's judge records (`documents`, `novelty`) and its row of per-portfolio measures."""

    documents: list[dict[str, Any]]
    novelty: list[dict[str, Any]]
    row: dict[str, Any]


def judge_portfolio(lm: LanguageModel, portfolio: JudgedPortfolio, embed_fn: EmbedFn) -> PortfolioJudgement:
    """Every judgement of one portfolio: one per offered passage, one per round t >= 2."""
    offered = portfolio.offered
    responses = portfolio.shown_responses()
    covered = p_yes(lm, coverage_prompts(lm, responses, [portfolio.passage(pid) for pid in offered]))
    proxy = proxy_readings(portfolio, embed_fn) if offered else {}
    documents = [{"kind": "coverage", **portfolio.key, "passage_id": pid,
                  "rounds": [r.round for r in portfolio.rounds if pid in r.context],
                  "probe": probe_reading(portfolio.rounds, pid),
                  "probe_raw": probe_reading(portfolio.rounds, pid, raw=True),
                  "proxy": proxy[pid], "p_yes": float(p), "used": bool(p >= USED_AT)}
                 for pid, p in zip(offered, covered, strict=True)]
    novel = p_yes(lm, novelty_prompts(lm, responses))
    novelty = [{"kind": "novelty", **portfolio.key, "round": portfolio.rounds[t + 1].round, "p_yes": float(p)}
               for t, p in enumerate(novel)]
    row = {**portfolio.key, "offered": len(offered), "rounds": len(portfolio.rounds), "ecr": portfolio.ecr,
           "ecr_thresholded": portfolio.ecr_thresholded, "distinct_2": portfolio.distinct_2,
           "judge_coverage": float(np.mean(covered >= USED_AT)) if offered else math.nan,
           "judge_mean_p_yes": float(np.mean(covered)) if offered else math.nan,
           "novelty": float(np.mean(novel)) if novel.size else math.nan,
           "top_judge": _unique_top(offered, list(covered)),
           "top_probe": _unique_top(offered, [d["probe"] for d in documents]),
           "top_proxy": _unique_top(offered, [d["proxy"] for d in documents])}
    return PortfolioJudgement(documents, novelty, row)


def _unique_top(ids: Sequence[str], values: Sequence[float]) -> str | None:
    """The id of the single largest value; None when the top is tied (or there is nothing)."""
    if not ids:
        return None
    top = max(values)
    tied = [i for i, v in zip(ids, values, strict=True) if math.isclose(v, top, rel_tol=1e-9, abs_tol=1e-12)]
    return tied[0] if len(tied) == 1 else None


# ------------------------------------------------------------------------------------------ statistics


def spearman(x: Sequence[float], y: Sequence[float]) -> dict[str, float | int]:
    """Spearman rho and its p-value over the pairs where both are finite, with n; rho and p are nan
    with fewer than 3 pairs or a constant side."""
    from scipy.stats import spearmanr

    pairs = np.array([(a, b) for a, b in zip(x, y, strict=True) if math.isfinite(a) and math.isfinite(b)], dtype=float)
    n = len(pairs)
    if n < 3 or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
        return {"rho": math.nan, "p": math.nan, "n": n}
    result = spearmanr(pairs[:, 0], pairs[:, 1])
    return {"rho": float(result.statistic), "p": float(result.pvalue), "n": n}


def top1_agreement(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per portfolio with at least 2 offered passages and a unique judge top: does the probe's
    (the proxy's) unique top passage equal the judge's? A tied reading disagrees. With an exact
    McNemar test (binomial over the portfolios where exactly one of the two agrees)."""
    from scipy.stats import binomtest

    eligible = [r for r in rows if r["offered"] >= 2 and r["top_judge"] is not None]
    probe = [r["top_probe"] == r["top_judge"] for r in eligible]
    proxy = [r["top_proxy"] == r["top_judge"] for r in eligible]
    n = len(eligible)
    only_probe = sum(a and not b for a, b in zip(probe, proxy, strict=True))
    only_proxy = sum(b and not a for a, b in zip(probe, proxy, strict=True))
    discordant = only_probe + only_proxy
    return {"n": n,
            "probe": {"agree": sum(probe), "share": sum(probe) / n if n else math.nan},
            "proxy": {"agree": sum(proxy), "share": sum(proxy) / n if n else math.nan},
            "mcnemar": {"probe_only": only_probe, "proxy_only": only_proxy,
                        "p": float(binomtest(only_probe, discordant, 0.5).pvalue) if discordant else math.nan}}


def judge_statistics(documents: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The three panels of Fig. 7 (every rho with its n)."""
    judged = [d["p_yes"] for d in documents]

    def per_portfolio(a: str, b: str) -> dict[str, float | int]:
        return spearman([r[a] for r in rows], [r[b] for r in rows])

    return {
        "panel_a": {"probe_vs_judge": spearman([d["probe"] for d in documents], judged),
                    "proxy_vs_judge": spearman([d["proxy"] for d in documents], judged),
                    "top1": top1_agreement(rows)},
        "panel_b": {"ecr_vs_judge_coverage": per_portfolio("ecr", "judge_coverage"),
                    "ecr_vs_judge_mean_p_yes": per_portfolio("ecr", "judge_mean_p_yes"),
                    "ecr_thresholded_vs_judge_coverage": per_portfolio("ecr_thresholded", "judge_coverage"),
                    "ecr_thresholded_vs_judge_mean_p_yes": per_portfolio("ecr_thresholded", "judge_mean_p_yes")},
        "panel_c": {"novelty_vs_distinct_2": per_portfolio("novelty", "distinct_2"),
                    "novelty_vs_ecr": per_portfolio("novelty", "ecr"),
                    "novelty_vs_ecr_thresholded": per_portfolio("novelty", "ecr_thresholded")},
    }


# ------------------------------------------------------------------------------------------ a whole run


@dataclass(frozen=True)
class JudgeResult:
    """Every judgement (coverage lines, then novelty lines, per portfolio), the per-portfolio rows
    and the statistics."""

    judgements: list[dict[str, Any]]
    portfolios: list[dict[str, Any]]
    statistics: dict[str, Any]


def judge_portfolios(lm: LanguageModel, portfolios: Sequence[JudgedPortfolio], embed_fn: EmbedFn,
                     progress: Callable[[int], None] | None = None) -> JudgeResult:
    """Judge every portfolio (deterministic: the same model and run give the same result)."""
    judgements: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    documents: list[dict[str, Any]] = []
    for portfolio in portfolios:
        done = judge_portfolio(lm, portfolio, embed_fn)
        judgements += done.documents + done.novelty
        documents += done.documents
        rows.append(done.row)
        if progress is not None:
            progress(1)
    return JudgeResult(judgements, rows, judge_statistics(documents, rows))


def prompts_used() -> dict[str, Any]:
    """The judge's prompt pieces and answer words, verbatim (recorded in judge.json)."""
    return {"coverage": {"instruction": COVERAGE_INSTRUCTION, "answers": "Answers:\nAnswer 1: ...",
                         "document": DOCUMENT_FORMAT, "question": COVERAGE_QUESTION},
            "novelty": {"instruction": NOVELTY_INSTRUCTION, "answers": "Earlier answers:\nAnswer 1: ...",
                        "question": NOVELTY_QUESTION},
            "yes": list(YES_WORDS), "no": list(NO_WORDS), "used_at": USED_AT}


# ------------------------------------------------------------------------------------------ output


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
    from ascp.jsonio import check_replaceable

    check_replaceable(out, "judge.json", "judge output")
    if (out / "judge.json").exists() and not overwrite:
        raise AscpError(f"--out {out} already holds a judge output; pass --overwrite to replace it or choose "
                        "another folder.")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise AscpError(f"the parent folder of --out ({parent}) does not exist; create it first.")


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
