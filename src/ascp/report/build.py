"""`write_report`: an experiment run store -> tables (markdown, LaTeX, JSON), PNG figures, one HTML page.

The report is written into a temporary sibling folder and moved into place at the end, so a
failed or interrupted report leaves the previous report (or nothing) behind, never half of one.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascp.errors import AscpError
from ascp.jsonio import check_replaceable, staged_folder
from ascp.report import figures as figs
from ascp.report import tables as tabs
from ascp.report.claims import Claim, claims_table
from ascp.report.frame import unit_frame
from ascp.report.render import to_html_page, to_latex, to_markdown


@dataclass(frozen=True)
class Report:
    out: Path
    tables: tuple[str, ...]  # table keys
    figures: tuple[str, ...]  # figure file names
    units: int
    total: int


def build_tables(frame, rng: np.random.Generator, n_boot: int, claims: tuple[Claim, ...] = ()) -> list[tabs.Table]:
    """Every table the run supports, in the paper's order; the summary first, then `claims` if any."""
    out = [tabs.summary_table(frame)]
    checked = claims_table(frame, claims, rng, n_boot) if claims else None
    if checked is not None:
        out.append(checked)
    for make in (tabs.grid_table, tabs.decisive_table, tabs.hierarchical_width_table):
        table = make(frame, rng, n_boot)
        if table is not None:
            out.append(table)
    out += tabs.comparison_tables(frame, rng, n_boot)
    for make in (tabs.decoder_table, tabs.ablation_table):
        table = make(frame, rng, n_boot)
        if table is not None:
            out.append(table)
    elasticity = tabs.elasticity_table(frame)
    if elasticity is not None:
        out.append(elasticity)
    return out


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return _json_safe(obj.item())
    return obj


def write_report(run_dir: str | Path, out: str | Path | None = None, n_boot: int = 10_000, seed: int = 0,
                 title: str | None = None, claims: tuple[Claim, ...] = (), notes: tuple[str, ...] = ()) -> Report:
    """Write the report of the run store `run_dir` into `out` (default `run_dir/report`).

    Bootstrap intervals use `n_boot` replicates drawn from `numpy.random.default_rng(seed)`, so the
    same store always gives the same report. `claims` adds a table of the paper's signs checked on
    this run (`ascp.report.claims`); `notes` are extra lines for the page's introduction. A partial
    store (a run still going, or killed) is reported as it stands, and the page says how many units
    it holds.
    """
    from ascp.experiments.store import read_plan, read_units

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise AscpError(f"run folder {run_dir} does not exist; pass the --out folder of `ascp experiment run`.")
    plan = read_plan(run_dir)
    records = read_units(run_dir)
    if not records:
        raise AscpError(f"{run_dir} has no finished units yet; run `ascp experiment run` first.")
    if n_boot < 100:
        raise AscpError(f"--n-boot must be at least 100, got {n_boot}.")
    out = Path(out) if out is not None else run_dir / "report"
    check_replaceable(out, "index.html", "report")
    if not out.parent.is_dir():
        raise AscpError(f"the parent folder of {out} does not exist; create it first.")
    frame = unit_frame(records)
    rng = np.random.default_rng(seed)
    tables = build_tables(frame, rng, n_boot, claims)
    with staged_folder(out, whole=True) as tmp:
        (tmp / "tables").mkdir()
        (tmp / "figures").mkdir()
        for t in tables:
            (tmp / "tables" / f"{t.key}.md").write_text(to_markdown(t), encoding="utf-8")
            (tmp / "tables" / f"{t.key}.tex").write_text(to_latex(t), encoding="utf-8")
        (tmp / "tables" / "tables.json").write_text(json.dumps(
            _json_safe({t.key: {"title": t.title, "caption": t.caption, "data": t.data} for t in tables}),
            indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        figures = []
        elasticity = next((t for t in tables if t.key == "fig4_elasticity"), None)
        for name, draw in (("fig5_grid.png", lambda p: figs.grid_figure(frame, p, rng, n_boot)),
                           ("fig6_cost.png", lambda p: figs.cost_figure(frame, p)),
                           ("fig4_elasticity.png", lambda p: figs.elasticity_figure(elasticity, p))):
            caption = draw(tmp / "figures" / name)
            if caption is not None:
                figures.append((f"figures/{name}", caption))
        name = title or f"ascp report: {plan['name']}"
        intro = [f"Run store: {run_dir.resolve()}; {len(records)} of {plan['units']} units finished"
                 + ("" if len(records) == plan["units"] else " (partial: the run is not complete)") + ".",
                 "Tasks: " + ", ".join(f"{t['name']} ({len(t['cases'])} queries, {t['data']})" for t in plan["tasks"])
                 + f"; models: {', '.join(m['name'] for m in plan['models'])}; seeds: {plan['seeds']}.",
                 f"Bootstrap: {n_boot} replicates, numpy default_rng({seed}). Generated "
                 f"{_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.", *notes]
        (tmp / "index.html").write_text(to_html_page(name, intro, tables, figures), encoding="utf-8")
        md = [f"# {name}", "", *intro, ""]
        md += [to_markdown(t) for t in tables]
        md += [f"![{cap}]({path})\n\n{cap}\n" for path, cap in figures]
        (tmp / "report.md").write_text("\n".join(md), encoding="utf-8")
    return Report(out, tuple(t.key for t in tables), tuple(p for p, _ in figures), len(records), plan["units"])
