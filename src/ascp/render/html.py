"""Self-contained HTML (inline CSS, no scripts, no network) for attributions and portfolios."""

from __future__ import annotations

from html import escape

from ascp.render.rows import passage_rows
from ascp.types import AttributionResult, Portfolio

STYLE = (
    "<style>.ascp{font-family:system-ui,sans-serif;font-size:13px;max-width:60em}"
    ".ascp .p{margin:4px 0;padding:6px 8px;border-radius:4px;border:1px solid #ddd;white-space:pre-wrap}"
    ".ascp .used{border:2px solid #1f6f3f}.ascp .tag{font-weight:600;color:#1f6f3f}"
    ".ascp .resp{margin:8px 0;padding:6px 8px;background:#f4f4f4;border-radius:4px;white-space:pre-wrap}"
    ".ascp table{border-collapse:collapse}.ascp td,.ascp th{padding:2px 8px;border-bottom:1px solid #eee}</style>"
)


def _shade(normalized: float) -> str:
    alpha = max(0.0, min(1.0, normalized))
    return f"background:rgba(255,170,0,{0.08 + 0.72 * alpha:.3f})" if alpha > 0 else "background:#fff"


def attribution_body(result: AttributionResult) -> str:
    """The response, then every passage shaded by its normalised score; used ones marked."""
    unit = result.unit
    parts = [f"<div class='resp'><b>response</b> ({result.response_tokens} tokens): {escape(result.response)}</div>"]
    for row in passage_rows(result):
        tag = "<span class='tag'>used</span> " if row.used else ""
        title = f"{result.estimator} {row.score:+.4f} {unit}; normalised {row.normalized:.3f}"
        parts.append(
            f"<div class='p{' used' if row.used else ''}' data-passage='{escape(row.id)}' data-used='{int(row.used)}' "
            f"data-normalized='{row.normalized:.6f}' title='{escape(title)}' style='{_shade(row.normalized)}'>"
            f"{tag}{escape(row.text)}</div>"
        )
    return "".join(parts)


def attribution_html(result: AttributionResult) -> str:
    head = f"<div><b>{escape(result.id)}</b> &middot; {escape(result.estimator)}</div>"
    return f"{STYLE}<div class='ascp'>{head}{attribution_body(result)}</div>"


def portfolio_html(portfolio: Portfolio) -> str:
    """Round by round: the context with used passages marked and the response; then the metrics."""
    rows = []
    for r in portfolio.rounds:
        context = ", ".join(f"<b>{escape(d)}</b>*" if d in r.used else escape(d) for d in r.context)
        rows.append(f"<tr><td>{r.round}</td><td>{context}</td><td>{escape(r.response)}</td></tr>")
    metrics = "".join(f"<tr><td>{escape(k)}</td><td>{v:.3f}</td></tr>" for k, v in portfolio.metrics.items())
    return (
        f"{STYLE}<div class='ascp'><div><b>{escape(portfolio.case_id)}</b> &middot; {escape(portfolio.policy)}"
        f" (* = used)</div><table><tr><th>t</th><th>context</th><th>response</th></tr>{''.join(rows)}</table>"
        + (f"<table>{metrics}</table>" if metrics else "") + "</div>"
    )
