"""Self-contained pages a person reads (inline CSS and script, no network): attributions
(`ascp attribute --html`) and runs (`ascp view`), built from the same rows as the notebook views.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.records import Results
from ascp.render.html import SENTENCE_SCRIPT, STYLE, attribution_body, response_html
from ascp.types import AttributionResult, Case, Round

PAGE_STYLE = (
    "<style>body{margin:16px}.ascp h2{font-size:15px;margin:18px 0 4px}"
    ".ascp .case{border-top:1px solid #ccc;padding-top:6px}.ascp .hidden{display:none}"
    ".ascp .bar{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #ddd}"
    ".ascp .units{color:#1f4f8f}.ascp .metrics{color:#555}.ascp .ctx.used{font-weight:700}"
    ".ascp .ctx:not(.used) .tag{display:none}.ascp .ctx{border-radius:3px;padding:0 2px}</style>"
)
# Filter the sections by a search string (and, for attributions, to requests that used something).
SCRIPT = """<script>
(function () {
  var box = document.getElementById('search'), only = document.getElementById('only-used');
  function apply() {
    var q = box.value.toLowerCase(), shown = 0;
    document.querySelectorAll('[data-section]').forEach(function (el) {
      var ok = el.textContent.toLowerCase().indexOf(q) >= 0 &&
               (!only || !only.checked || el.querySelector("[data-used='1']"));
      el.classList.toggle('hidden', !ok);
      if (ok) shown += 1;
    });
    document.getElementById('count').textContent = shown + ' shown';
  }
  box.addEventListener('input', apply);
  if (only) only.addEventListener('change', apply);
  apply();
  // Record the colour each passage is drawn in (what a reader sees; checked by the browser tests).
  document.querySelectorAll('[data-passage]').forEach(function (el) {
    el.setAttribute('data-shade', getComputedStyle(el).backgroundColor);
  });
  document.body.setAttribute('data-ready', '1');
})();
</script>"""


def _page(title: str, bar: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>{STYLE}{PAGE_STYLE}"
            f"</head><body><div class='ascp'><h1 style='font-size:18px'>{escape(title)}</h1>"
            f"<div class='bar'>{bar} <span id='count'></span></div>{body}</div>{SCRIPT}{SENTENCE_SCRIPT}</body></html>")


def attribution_page(results: Sequence[AttributionResult], questions: Mapping[str, str], title: str) -> str:
    """One section per request: the question, the response and every passage shaded by its
    normalised score (used ones outlined, the raw score on hover)."""
    sections = []
    for r in results:
        sections.append(
            f"<div class='case' data-section='{escape(r.id)}'><h2>{escape(r.id)}: "
            f"{escape(questions.get(r.id, ''))}</h2>{attribution_body(r)}</div>")
    bar = ("<input id='search' placeholder='search questions, responses, passages' size='40'> "
           "<label><input type='checkbox' id='only-used'> only requests with a used passage</label>")
    return _page(title, bar, "".join(sections))


# ----- runs --------------------------------------------------------------------------------------
def _context_item(r: Round, pid: str) -> str:
    """A passage of a round's context: bold with * when used; a sentence selected in the response
    re-marks it by the sentence's reading (`SENTENCE_SCRIPT`)."""
    used = pid in r.used
    return (f"<span class='ctx{' used' if used else ''}' data-passage='{escape(pid)}' data-used='{int(used)}' "
            f"data-normalized='{r.normalized.get(pid, 0.0):.6f}' data-whole-used='{int(used)}'>{escape(pid)}"
            f"<span class='tag'>*</span><span class='score'></span></span>")


def folder_view(directory: Path, may_read: Callable[[Path], bool] | None = None) -> tuple[str, str | None]:
    """The page of a run folder, simulation or experiment store (`ascp view`, the workbench) and a
    note when its questions and answer units are not shown: the data file the run read is absent, or
    `may_read` refuses it (the service reads only below its root)."""
    from ascp.data import load_cases
    from ascp.records import read_results

    results = read_results(directory, kinds=("run", "simulation", "store"))
    if not results.units:
        raise AscpError(f"{directory} holds no finished unit yet; view it when the run has written some.")
    sources = list(results.sources.values())
    absent = [data for data, _ in sources if not Path(data).is_file()]
    refused = [data for data, _ in sources if may_read is not None and not may_read(Path(data))]
    cases: dict[str, Case] | None = None
    note = None
    if absent:
        note = f"the data file {absent[0]} is not here; the page shows no questions or answer units."
    elif refused:
        note = (f"the data file {refused[0]} lies outside the folder served; the page shows no questions or answer "
                "units.")
    else:
        cases = {}
        for data, format in sources:
            cases.update({c.id: c for c in load_cases(Path(data), format=format, rank_by="given", require_pool=False)})
    groups = results.groups()
    return run_page(results, cases, f"ascp view: {directory.name} ({', '.join(groups)})"), note


def run_page(results: Results, cases: Mapping[str, Case] | None, title: str) -> str:
    """Per case and policy (or condition), round by round: the context with used passages marked,
    the response, the gold units the response recovered; the case's metrics; and a comparison on
    top. `results`: an `ascp run` folder, an `ascp simulate` output or an experiment store as
    `ascp.records.read_results` gave it (`Results.groups`: one column per condition)."""
    from ascp.loop.runfolder import summarize
    from ascp.metrics.answers import recovered_per_response

    loaded: dict[str, tuple[dict[str, Any], list[dict[str, Any]], dict[str, list[Round]]]] = {}
    for name, members in results.groups().items():
        rows = [{**u.record, "case_id": u.case_id} for u in members]
        loaded[name] = ({"mean": summarize(rows)}, rows, {u.case_id: list(u.rounds) for u in members})
    metric_keys = ("pr", "ecr", "ceiling", "used_ceiling", "offered", "used")
    head = "".join(f"<th>{k}</th>" for k in metric_keys)
    comparison = []
    for name, (summary, _, _) in loaded.items():
        means = summary.get("mean", {})
        cells = "".join(f"<td>{means[k]:.3f}</td>" if isinstance(means.get(k), (int, float)) else "<td>-</td>"
                        for k in metric_keys)
        comparison.append(f"<tr><td>{escape(name)}</td>{cells}</tr>")
    body = [f"<table><tr><th>policy (mean over cases)</th>{head}</tr>{''.join(comparison)}</table>"]
    case_ids = list(dict.fromkeys(str(row["case_id"]) for _, rows, _ in loaded.values() for row in rows))
    for cid in case_ids:
        case = (cases or {}).get(cid)
        parts = [f"<div class='case' data-section='{escape(cid)}'><h2>{escape(cid)}"
                 + (f": {escape(case.question)}" if case else "") + "</h2>"]
        for name, (_, rows, rounds) in loaded.items():
            row = next((r for r in rows if str(r["case_id"]) == cid), None)
            if row is None:
                continue
            shown = ", ".join(f"{k} {row[k]:.3f}" for k in metric_keys if isinstance(row.get(k), (int, float)))
            parts.append(f"<div><b>{escape(name)}</b> <span class='metrics'>{escape(shown)}</span></div>"
                         "<table><tr><th>t</th><th>context (used: *)</th><th>response</th>"
                         "<th>units recovered</th></tr>")
            units = case.units if case and case.units and all(u.aliases for u in case.units) else ()
            for r in rounds.get(cid, []):
                context = ", ".join(_context_item(r, d) for d in r.context)
                found = recovered_per_response(units, [r.response], None)[0] if units and r.response else set()
                recovered = ", ".join(escape(units[i].aliases[0]) for i in sorted(found))
                parts.append(f"<tr data-attribution='{escape(cid)}/{escape(name)}/{r.round}'><td>{r.round}</td>"
                             f"<td>{context}</td><td>{response_html(r.response, r.spans)}</td>"
                             f"<td class='units'>{recovered}</td></tr>")
            parts.append("</table>")
        parts.append("</div>")
        body.append("".join(parts))
    if cases is None:
        body.insert(0, "<div class='metrics'>The run's data file is not here: questions and answer units are "
                       "not shown.</div>")
    bar = "<input id='search' placeholder='search cases, passages, responses' size='40'>"
    return _page(title, bar, "".join(body))
