"""Self-contained HTML (inline CSS, no network) for attributions and portfolios.

An attribution with per-sentence readings draws its response as sentences; `SENTENCE_SCRIPT` (on
the pages of `ascp attribute --html`, `ascp view` and the service's workbench, not in notebooks)
makes each one selectable: selecting a sentence re-shades the passages by that sentence's reading,
marks the ones it used and shows its scores; selecting it again shows the whole response's reading.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape

from ascp.render.rows import passage_rows
from ascp.types import AttributionResult, Portfolio, SpanReading

STYLE = (
    "<style>.ascp{font-family:system-ui,sans-serif;font-size:13px;max-width:60em}"
    ".ascp .p{margin:4px 0;padding:6px 8px;border-radius:4px;border:1px solid #ddd;white-space:pre-wrap}"
    ".ascp .used{border:2px solid #1f6f3f}.ascp .tag{font-weight:600;color:#1f6f3f}"
    ".ascp .p:not(.used) .tag{display:none}"
    ".ascp .resp{margin:8px 0;padding:6px 8px;background:#f4f4f4;border-radius:4px;white-space:pre-wrap}"
    ".ascp table{border-collapse:collapse}.ascp td,.ascp th{padding:2px 8px;border-bottom:1px solid #eee}"
    ".ascp .sent{cursor:pointer;border-bottom:1px dotted #888}.ascp .sent.selected{background:#cfe3ff}"
    ".ascp .sent.unsupported{border-bottom-color:#c33}.ascp .score{color:#555;font-size:11px;margin-left:6px}"
    "</style>"
)
# Selecting a response sentence re-reads the passages of its attribution block by that sentence
# (document-level delegation, so blocks inserted later, as the workbench does, work too).
SENTENCE_SCRIPT = """<script>
(function () {
  function shade(n) { return n > 0 ? 'rgba(255,170,0,' + (0.08 + 0.72 * Math.min(1, n)).toFixed(3) + ')' : '#fff'; }
  function show(block, reading, label) {
    block.querySelectorAll('[data-passage]').forEach(function (el) {
      var pid = el.getAttribute('data-passage');
      var n = reading ? (reading.normalized[pid] || 0) : parseFloat(el.getAttribute('data-normalized'));
      var used = reading ? reading.used.indexOf(pid) >= 0 : el.getAttribute('data-whole-used') === '1';
      el.style.background = shade(n);
      el.classList.toggle('used', used);
      el.setAttribute('data-used', used ? '1' : '0');
      el.setAttribute('data-shade', getComputedStyle(el).backgroundColor);
      var badge = el.querySelector('.score');
      if (badge) badge.textContent = reading ? label + ': ' + (reading.scores[pid] >= 0 ? '+' : '') +
        reading.scores[pid].toFixed(4) + ' (normalised ' + n.toFixed(3) + ')' : '';
    });
  }
  // Record the colour each passage is drawn in (what a reader sees; the browser tests read it).
  window.ascpRecordShades = function (root) {
    root.querySelectorAll('[data-passage]').forEach(function (el) {
      el.setAttribute('data-shade', getComputedStyle(el).backgroundColor);
    });
  };
  document.addEventListener('click', function (event) {
    var sent = event.target.closest ? event.target.closest('[data-sentence]') : null;
    if (!sent) return;
    var block = sent.closest('[data-attribution]');
    var was = sent.classList.contains('selected');
    block.querySelectorAll('[data-sentence]').forEach(function (s) { s.classList.remove('selected'); });
    if (was) { block.removeAttribute('data-selected'); show(block, null, ''); return; }
    sent.classList.add('selected');
    block.setAttribute('data-selected', sent.getAttribute('data-sentence'));
    show(block, JSON.parse(sent.getAttribute('data-reading')), 'sentence ' +
         (parseInt(sent.getAttribute('data-sentence'), 10) + 1));
  });
})();
</script>"""


def _shade(normalized: float) -> str:
    alpha = max(0.0, min(1.0, normalized))
    return f"background:rgba(255,170,0,{0.08 + 0.72 * alpha:.3f})" if alpha > 0 else "background:#fff"


def response_html(response: str, spans: Sequence[SpanReading]) -> str:
    """The response as text, or as selectable sentences when it was read per sentence (`spans`)."""
    if not spans:
        return escape(response)
    parts, at = [], 0
    for i, span in enumerate(spans):
        reading = {"scores": span.reading.scores, "normalized": span.reading.normalized,
                   "used": list(span.reading.used)}
        parts.append(escape(response[at:span.start]))
        parts.append(f"<span class='sent{'' if span.reading.used else ' unsupported'}' data-sentence='{i}' "
                     f"data-reading='{escape(json.dumps(reading))}' title='used: "
                     f"{escape(', '.join(span.reading.used) or 'none')}'>{escape(span.text)}</span>")
        at = span.end
    parts.append(escape(response[at:]))
    return "".join(parts)


def attribution_body(result: AttributionResult) -> str:
    """The response (its sentences selectable when read per sentence), then every passage shaded by
    its normalised score; used ones marked."""
    unit = result.unit
    hint = " (select a sentence to read the passages by it)" if result.spans else ""
    parts = [f"<div class='resp'><b>response</b> ({result.response_tokens} tokens){hint}: "
             f"{response_html(result.response, result.spans)}</div>"]
    for row in passage_rows(result):
        title = f"{result.estimator} {row.score:+.4f} {unit}; normalised {row.normalized:.3f}"
        parts.append(
            f"<div class='p{' used' if row.used else ''}' data-passage='{escape(row.id)}' data-used='{int(row.used)}' "
            f"data-normalized='{row.normalized:.6f}' data-whole-used='{int(row.used)}' title='{escape(title)}' "
            f"style='{_shade(row.normalized)}'><span class='tag'>used </span>{escape(row.text)}"
            "<span class='score'></span></div>"
        )
    return f"<div data-attribution='{escape(result.id)}'>{''.join(parts)}</div>"


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
