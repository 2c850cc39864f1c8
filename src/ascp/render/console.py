"""Console rendering (rich) of attribution results."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ascp.render.rows import passage_rows
from ascp.types import AttributionRequest, AttributionResult


def attribution_table(request: AttributionRequest, result: AttributionResult) -> Table:
    """One table per request: passages in context order with raw and normalised scores (the rows
    of `ascp.render`, shared with the HTML views)."""
    table = Table(
        title=f"{request.id}: {request.question}", caption=f"response: {result.response}", title_justify="left"
    )
    table.add_column("passage")
    table.add_column("text")
    table.add_column(f"{result.estimator} ({result.unit})", justify="right")
    table.add_column("normalised", justify="right")
    table.add_column("used", justify="center")
    for row in passage_rows(result):
        snippet = " ".join(row.text.split())
        table.add_row(row.id, snippet[:48] + ("..." if len(snippet) > 48 else ""), f"{row.score:+.4f}",
                      f"{row.normalized:.3f}", "yes" if row.used else "")
    return table


def print_results(
    console: Console, requests: Sequence[AttributionRequest], results: Sequence[AttributionResult]
) -> None:
    for request, result in zip(requests, results, strict=True):
        console.print(attribution_table(request, result))
        console.print(f"  {result.response_tokens} response tokens, {result.seconds:.2f} s\n")


SUMMARY_COLUMNS = (
    ("pr", "PR@T"), ("best_single", "best single"), ("ceiling", "ceiling"), ("ecr_thresholded", "ECR"),
    ("used_thresholded", "used (tau*)"), ("offered", "offered"), ("ecr", "ECR@T (Eq. 2)"), ("used", "used (tau(k))"),
    ("groundedness", "grounded"), ("distinct_2", "distinct-2"), ("self_bleu", "self-BLEU"),
    ("concentration", "concentration"),
)


def summary_table(means_by_policy: dict[str, dict[str, float]], title: str) -> Table:
    """One row per policy with the mean of the headline metrics."""
    table = Table(title=title, title_justify="left")
    table.add_column("policy")
    present = [(k, label) for k, label in SUMMARY_COLUMNS if any(k in m for m in means_by_policy.values())]
    for _, label in present:
        table.add_column(label, justify="right")
    for policy, means in means_by_policy.items():
        table.add_row(policy, *(f"{means.get(k, float('nan')):.3f}" for k, _ in present))
    return table


def portfolio_panel(case, portfolio, row: dict) -> Table:
    """A case's portfolio: per round the context, the passages used (*), and the response."""
    table = Table(
        title=f"[{portfolio.policy}] {case.id}: {case.question}  PR={row['pr']:.2f} ECR={row['ecr']:.2f}",
        title_justify="left", show_lines=False,
    )
    table.add_column("t", justify="right")
    table.add_column("context (* = used)")
    table.add_column("response")
    for r in portfolio.rounds:
        context = ", ".join(f"{pid}*" if pid in r.used else pid for pid in r.context)
        text = " ".join(r.response.split())
        table.add_row(str(r.round), context, text[:160] + ("..." if len(text) > 160 else ""))
    return table


def density_table(results, rank_by: str, max_rank: int) -> Table:
    """`ascp density`: one row per task per file (a task in several files is labelled with the file)."""
    from ascp.metrics.density import BANDS, band_label

    repeated = {d.task for _, d in results if sum(e.task == d.task for _, e in results) > 1}
    labels = [band_label(lo, hi, max_rank) for lo, hi in BANDS]
    table = Table(title=f"Relevance density (ranks 1-{max_rank}; rank_by={rank_by}; att/q: gold units "
                        "attested in the pool; slope: d log rho / d log i)")
    for col in ("task", "queries", "skipped", "pool", "gold/q", "att/q", *(f"rho {b}" for b in labels),
                "head-5 any", "head-5 new", "slope"):
        table.add_column(col, justify="left" if col == "task" else "right", no_wrap=col == "task")

    def fmt(x: float, digits: int = 3) -> str:
        return "-" if x != x else f"{x:.{digits}f}"

    for path, d in results:
        label = f"{d.task} ({path.name})" if d.task in repeated else d.task
        table.add_row(label, str(d.used), str(d.skipped), fmt(d.mean_pool, 1), fmt(d.gold_units, 1),
                      fmt(d.attested_units, 1), *(fmt(d.bands[b]) for b in labels), fmt(d.head5_any),
                      fmt(d.head5_new), fmt(d.slope, 2))
    return table


def simulation_table(comparison: dict, title: str) -> Table:
    """`ascp simulate`: per policy the mean of each metric, and its difference from the baseline
    with the 95% paired-bootstrap interval."""
    from ascp.loop.simulate import SIMULATION_METRICS

    base = comparison["baseline"]
    table = Table(title=title, caption=f"differences: policy - {base}, 95% paired bootstrap over cases",
                  title_justify="left")
    table.add_column("policy")
    for metric in SIMULATION_METRICS:
        table.add_column(metric, justify="right")
    for name, row in comparison["policies"].items():
        cells = []
        for metric in SIMULATION_METRICS:
            diff = row.get(f"{metric}_vs_{base}")
            text = f"{row[metric]:.3f}"
            if diff is not None:
                text += f" ({diff['mean']:+.3f} [{diff['lo']:+.3f}, {diff['hi']:+.3f}])"
            cells.append(text)
        table.add_row(name, *cells)
    return table
