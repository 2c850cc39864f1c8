"""`write_report`: an experiment run store -> tables (markdown, LaTeX, JSON), PNG figures, one HTML page.

The report is written into a temporary sibling folder and moved into place at the end, so a
failed or interrupted report leaves the previous report (or nothing) behind, never half of one.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ascp.errors import AscpError
from ascp.jsonio import check_parent, check_replaceable
from ascp.reading import UsedThreshold, resolve_used_threshold
from ascp.report import figures as figs
from ascp.report import replication as rep
from ascp.report import tables as tabs
from ascp.report.claims import Claim, claims_table
from ascp.report.frame import unit_frame
from ascp.report.render import write_report_folder


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
    correlations = rep.correlation_table(frame)
    if correlations is not None:
        out.append(correlations)
    for make in (tabs.grid_table, tabs.decisive_table, tabs.hierarchical_width_table):
        table = make(frame, rng, n_boot)
        if table is not None:
            out.append(table)
    out += tabs.comparison_tables(frame, rng, n_boot)
    for make in (tabs.decoder_table, tabs.ablation_table):
        table = make(frame, rng, n_boot)
        if table is not None:
            out.append(table)
    extra = (rep.seed_table(frame), rep.instruction_table(frame, rng, n_boot), rep.structured_table(frame, rng, n_boot),
             tabs.elasticity_table(frame))
    return out + [t for t in extra if t is not None]


def complete_seeds(records: list[dict[str, Any]], plan: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The records of the seeds whose units are all finished, where at least one seed is: a seed enters the
    tables only when complete, since the crossed bootstrap reads every query under every seed (a seed run
    in parts would otherwise leave some tasks with no complete query). Returns the records kept and a line
    for the page naming each seed left out with its count (None when none is). A plan's units are its
    tasks' queries x models x seeds x conditions, so each seed holds units / seeds of them."""
    seeds = list(plan.get("seeds") or [])
    if len(seeds) < 2 or plan["units"] % len(seeds):
        return records, None
    per_seed = plan["units"] // len(seeds)
    counts = {s: sum(r["seed"] == s for r in records) for s in seeds}
    complete = [s for s in seeds if counts[s] == per_seed]
    partial = [s for s in seeds if 0 < counts[s] < per_seed]
    if not complete or not partial:
        return records, None
    kept = [r for r in records if r["seed"] in complete]
    return kept, ("Seeds in the tables: " + ", ".join(map(str, complete)) + "; "
                  + "; ".join(f"seed {s}: {counts[s]} of {per_seed} units finished" for s in partial)
                  + ", left out until complete (the crossed bootstrap reads every query under every seed).")


def shown_path(path: str | Path) -> str:
    """`path` relative to the working directory (e.g. docs/results/x, ../shared/data/y), so a committed
    report does not name the folders of the machine it was written on."""
    return os.path.relpath(Path(path).resolve(), Path.cwd())


def shown_data(entry: Any, data_root: str | Path | None = None, near: str | Path | None = None) -> str:
    """A plan's data entry in a report: the file found here relative to the working directory, else the
    path the plan recorded."""
    from ascp.caching.files import is_description

    path = data_file(entry, data_root, near)
    if path is not None:
        return shown_path(path)
    return str(entry["path"]) if is_description(entry) else shown_path(str(entry))


def data_file(entry: Any, data_root: str | Path | None = None, near: str | Path | None = None) -> Path | None:
    """The data file a plan's task entry names, when it is readable here and holds the bytes the plan
    recorded (`ascp.caching.files.locate_file` under `data_root`, default $ASCP_DATA or ../shared/data,
    or near the store `near`); None otherwise."""
    from ascp.caching.files import locate_file, same_content

    path = locate_file(entry, data_root, near)
    return path if path.is_file() and same_content(entry, path) else None


def fill_from_data(records: list[dict], plan: dict, data_root: str | Path | None = None,
                   near: str | Path | None = None) -> int:
    """Add to each record what needs its task's data file (the gold units and passage texts), when the
    file is readable and every unit of the case has aliases: the evidence ceiling of records written
    before it was recorded, and the answer-rule readings of the same portfolio, `pr_strict_yes_no`
    (no credit for a yes/no question whose portfolio says both), `pr_substring` (ALCE's STR-EM) and
    `yes_no` (whether the question's gold answer is yes or no). A described data file is found under
    `data_root` (`data_file`). Returns how many records still lack the ceiling."""
    from ascp.data import load_cases
    from ascp.metrics.portfolio import evidence_ceiling, strict_yes_no_recall, substring_recall, yes_no_answer

    for task in plan["tasks"]:
        todo = [r for r in records if r["task"] == task["name"]]
        path = data_file(task["data"], data_root, near) if todo else None
        if path is None:
            continue
        try:
            cases = {c.id: c for c in load_cases(path, format=task.get("format", "auto"), rank_by="given")}
        except AscpError:  # a file today's loader refuses: the report goes on without what it would add
            continue
        for rec in todo:
            case = cases.get(rec["case_id"])
            if case is None or not case.units or not all(u.aliases for u in case.units):
                continue
            responses = [r["response"] for r in rec.get("rounds", [])]
            rec["pr_strict_yes_no"] = strict_yes_no_recall(case.units, responses)
            rec["pr_substring"] = substring_recall(case.units, responses)
            rec["yes_no"] = yes_no_answer(case.units) is not None
            if "ceiling" not in rec:
                offered = dict.fromkeys(pid for r in rec.get("rounds", []) for pid in r["context"])
                rec["ceiling"] = evidence_ceiling(case.units, [case.passage(pid) for pid in offered])
    return sum("ceiling" not in r for r in records)


def write_report(run_dir: str | Path, out: str | Path | None = None, n_boot: int = 10_000, seed: int = 0,
                 title: str | None = None, claims: tuple[Claim, ...] = (), notes: tuple[str, ...] = (),
                 used_threshold: UsedThreshold | str | float | None = None, also: tuple[Path, ...] = (),
                 data_root: str | Path | None = None) -> Report:
    """Write the report of the run store `run_dir` into `out` (default `run_dir/report`).

    Bootstrap intervals use `n_boot` replicates drawn from `numpy.random.default_rng(seed)`, so the
    same store always gives the same report. `used_threshold` (a number, an `ascp calibrate` folder
    or None for the calibrated default) is the width-invariant threshold of the tables' ECR.
    `claims` adds a table of the paper's signs checked on this run (`ascp.report.claims`); `notes`
    are extra lines for the page's introduction. A partial store (a run still going, or killed) is
    reported as it stands, and the page says how many units it holds. `also`: more stores of the same tasks
    and models (other conditions) whose units join the frame.
    """
    from ascp.records import read_results

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise AscpError(f"run folder {run_dir} does not exist; pass the --out folder of `ascp experiment run`.")
    results = read_results(run_dir, kinds=("store",), purpose="a report contrasts the conditions of an "
                           "experiment's plan, which a run folder does not declare; view a run with `ascp view`")
    plan = dict(results.config)
    records = results.records()
    for extra in also:
        more = read_results(extra, kinds=("store",), purpose="a report joins only experiment stores")
        records += more.records()
        plan["units"] += more.config["units"]
    if not records:
        raise AscpError(f"{run_dir} has no finished units yet; run `ascp experiment run` first.")
    if n_boot < 100:
        raise AscpError(f"--n-boot must be at least 100, got {n_boot}.")
    out = Path(out) if out is not None else run_dir / "report"
    check_replaceable(out, "index.html", "report")
    check_parent(out)

    tau, tau_source = resolve_used_threshold(used_threshold)  # as given: already resolved at the command line
    finished = len(records)
    records, seeds_left_out = complete_seeds(records, plan)
    lacking = fill_from_data(records, plan, data_root, run_dir)
    frame = unit_frame(records, tau)
    rng = np.random.default_rng(seed)
    tables = build_tables(frame, rng, n_boot, claims)
    elasticity = next((t for t in tables if t.key == "fig4_elasticity"), None)

    def draw(folder: Path) -> list[tuple[str, str]]:
        (folder / "figures").mkdir()
        figures = []
        for name, make in (("fig5_grid.png", lambda p: figs.grid_figure(frame, p, rng, n_boot)),
                           ("fig6_cost.png", lambda p: figs.cost_figure(frame, p)),
                           ("fig4_elasticity.png", lambda p: figs.elasticity_figure(elasticity, p))):
            caption = make(folder / "figures" / name)
            if caption is not None:
                figures.append((f"figures/{name}", caption))
        return figures

    name = title or f"ascp report: {plan['name']}"
    intro = [f"Run store: {shown_path(run_dir)}; {finished} of {plan['units']} units finished"
             + ("" if finished == plan["units"] else " (partial: the run is not complete)") + ".",
             *([seeds_left_out] if seeds_left_out else []),
             "Tasks: " + ", ".join(f"{t['name']} ({len(t['cases'])} queries, "
                                   f"{shown_data(t['data'], data_root, run_dir)})" for t in plan["tasks"])
             + f"; models: {', '.join(m['name'] for m in plan['models'])}; seeds: {plan['seeds']}.",
             f"ECR in the tables: used over offered at the width-invariant threshold {tau:.4g} on raw probe "
             f"scores, nats per response token ({tau_source}); ECR@T (Eq. 2) is the relative-to-maximum "
             "rule, theta = 0.1."
             + (f" {lacking} units have no evidence ceiling (written before it was recorded, and their data "
                "file is not readable here)." if lacking else ""),
             f"Bootstrap: {n_boot} replicates, numpy default_rng({seed}). Generated "
             f"{_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.", *notes]
    figures = write_report_folder(out, name, intro, tables, draw)
    return Report(out, tuple(t.key for t in tables), tuple(p for p, _ in figures), finished, plan["units"])
