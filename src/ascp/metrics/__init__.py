"""What a portfolio achieved: answer matching, portfolio metrics, diversity, probe-ranking quality.

`answers` (alias matching, the `Matcher` seam), `nli` (the one NLI matcher for claim units),
`attestation` (which passages attest which units), `portfolio` (PR@T, ECR, the evidence ceiling,
`case_metrics`), `diversity`, `ranking` (AUC, cover@m), `density` (relevance density, Table 3) and
`citations`. The names below keep `from ascp.metrics import X` working for every metric.
"""

from ascp.metrics.answers import STOPWORDS, Matcher, normalize_answer, recovered, recovered_per_response, unit_recovered
from ascp.metrics.diversity import distinct_n, diversity_tokens, lexical_groundedness, self_bleu, semantic_diversity
from ascp.metrics.portfolio import (
    METRIC_KEYS,
    best_single_recall,
    case_metrics,
    evidence_ceiling,
    evidence_coverage_rate,
    offered_count,
    portfolio_recall,
    thresholded_coverage,
    thresholded_used,
    used_count,
    utilisation_concentration,
)
from ascp.metrics.ranking import auc, cover_at_m

__all__ = ["METRIC_KEYS", "STOPWORDS", "Matcher", "auc", "best_single_recall", "case_metrics", "cover_at_m",
           "distinct_n", "diversity_tokens", "evidence_ceiling", "evidence_coverage_rate", "lexical_groundedness",
           "normalize_answer", "offered_count", "portfolio_recall", "recovered", "recovered_per_response",
           "self_bleu", "semantic_diversity", "thresholded_coverage", "thresholded_used", "unit_recovered",
           "used_count", "utilisation_concentration"]
