"""`ascp report` of an `ascp simulate` folder: the policy comparison as markdown, LaTeX, JSON and a page."""

from __future__ import annotations

import json
from pathlib import Path

from ascp.errors import AscpError
from ascp.jsonio import check_parent, check_replaceable
from ascp.report.render import write_report_folder
from ascp.report.tables import Table
from ascp.stats.format import num

METRICS = ("offered", "used", "ecr", "ceiling", "used_ceiling")


def simulation_table(comparison: dict) -> Table:
    """Per policy the mean of each metric, and its paired-bootstrap difference from the baseline."""
    base = comparison["baseline"]
    rows, data = [], []
    for policy, row in comparison["policies"].items():
        cells = [policy]
        for metric in METRICS:
            diff = row.get(f"{metric}_vs_{base}")
            cells.append(num(row[metric]) + (f" ({diff['mean']:+.3f} [{diff['lo']:+.3f}, {diff['hi']:+.3f}])"
                                             if diff else ""))
        rows.append(cells)
        data.append({"policy": policy, **row})
    config = comparison.get("config", {})
    test = comparison.get("independence")
    caption = (f"{config.get('cases', '?')} cases, k={config.get('k')}, T={config.get('T')}, consumer "
               f"{config.get('consumer')}; in parentheses: policy - {base}, 95% paired bootstrap over cases "
               f"({config.get('n_boot')} replicates).")
    if test:
        caption += (f" App. A.2 independence test across policies: chi2 = {test['chi2']:.1f} on {test['df']} df, "
                    f"p = {test['p']:.3g}, overdispersion = {test['overdispersion']:.2f}.")
    return Table("simulation", "Schedulers under a model-free consumer", caption, ["policy", *METRICS], rows, data)


def write_simulation_report(sim_dir: Path, out: Path | None = None) -> Path:
    """Write `out` (default `sim_dir/report`) all or nothing; returns it."""
    path = sim_dir / "comparison.json"
    try:
        comparison = json.loads(path.read_text(encoding="utf-8"))
        table = simulation_table(comparison)
    except (OSError, ValueError, KeyError, TypeError):
        raise AscpError(f"{path} is not the comparison of an `ascp simulate` run; rerun `ascp simulate`.") from None
    out = out if out is not None else sim_dir / "report"
    check_replaceable(out, "index.html", "report")
    check_parent(out)
    from ascp.caching.files import is_description
    from ascp.report.build import shown_path

    data = comparison.get("config", {}).get("data")
    intro = [f"Simulation folder: {shown_path(sim_dir)}; data: {data['path'] if is_description(data) else data}."]
    write_report_folder(out, f"ascp report: {sim_dir.name}", intro, [table])
    return out
