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

Modules: `portfolios` (loading), `prompts`, `scoring` (the P(yes) rule), `readings` (probe and
proxy), `judging` (a portfolio's and a run's judgements), `statistics`, `report` (the output folder).
"""

from ascp.validation.judge.judging import JudgeResult, PortfolioJudgement, judge_portfolio, judge_portfolios
from ascp.validation.judge.portfolios import JudgedPortfolio, load_portfolios
from ascp.validation.judge.prompts import (
    COVERAGE_INSTRUCTION,
    COVERAGE_QUESTION,
    DOCUMENT_FORMAT,
    NOVELTY_INSTRUCTION,
    NOVELTY_QUESTION,
    answers_block,
    blinded,
    coverage_prompts,
    coverage_template,
    masked,
    novelty_prompts,
    novelty_template,
    prompts_used,
)
from ascp.validation.judge.readings import EmbedFn, probe_reading, proxy_readings
from ascp.validation.judge.report import JUDGE_FILES, PAPER, check_judge_out, results_markdown, write_judge
from ascp.validation.judge.scoring import NO_WORDS, USED_AT, YES_WORDS, answer_ids, p_yes
from ascp.validation.judge.statistics import judge_statistics, spearman, top1_agreement

__all__ = [
    "COVERAGE_INSTRUCTION", "COVERAGE_QUESTION", "DOCUMENT_FORMAT", "JUDGE_FILES", "NOVELTY_INSTRUCTION",
    "NOVELTY_QUESTION", "NO_WORDS", "PAPER", "USED_AT", "YES_WORDS", "EmbedFn", "JudgeResult", "JudgedPortfolio",
    "PortfolioJudgement", "answer_ids", "answers_block", "blinded", "check_judge_out", "coverage_prompts",
    "coverage_template", "judge_portfolio", "judge_portfolios", "judge_statistics", "load_portfolios",
    "masked", "novelty_prompts", "novelty_template", "p_yes",
    "probe_reading", "prompts_used", "proxy_readings", "results_markdown", "spearman", "top1_agreement",
    "write_judge",
]
