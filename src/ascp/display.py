"""Console rendering (rich) of attribution results."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ascp.types import AttributionRequest, AttributionResult


def attribution_table(request: AttributionRequest, result: AttributionResult) -> Table:
    """One table per request: passages in context order with raw and normalised scores."""
    unit = "nats/token" if result.estimator in {"loo", "replace", "hierarchical", "contextcite"} else "score"
    table = Table(
        title=f"{request.id}: {request.question}", caption=f"response: {result.response}", title_justify="left"
    )
    table.add_column("passage")
    table.add_column("title")
    table.add_column(f"{result.estimator} ({unit})", justify="right")
    table.add_column("normalised", justify="right")
    table.add_column("used", justify="center")
    for p in request.passages:
        table.add_row(
            p.id, p.title[:40], f"{result.scores[p.id]:+.4f}", f"{result.normalized[p.id]:.3f}",
            "yes" if p.id in result.used else "",
        )
    return table


def print_results(
    console: Console, requests: Sequence[AttributionRequest], results: Sequence[AttributionResult]
) -> None:
    for request, result in zip(requests, results, strict=True):
        console.print(attribution_table(request, result))
        console.print(f"  {result.response_tokens} response tokens, {result.seconds:.2f} s\n")
