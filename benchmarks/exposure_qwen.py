"""The exposure-aware scheduler with a real generator, and whether the simulator predicts it.

Reads a run store of `ascp experiment run` with the five k = 5, T = 5 conditions
(`ascp-exposure`, `ascp`, `rotate`, `vanilla`, `mmr`; docs/results/exposure-qwen/spec.yaml), and
1. tabulates each policy's real PR@T, ECR (tau(k) and tau*), passages offered, evidence ceiling
   and used ceiling, with paired bootstrap intervals of every policy against `ascp-exposure`;
2. replays the run's own readings in the simulator on the same cases: `replay(condition=C)` for
   each of the five conditions (the held-back readings of one policy standing in for the
   generator under every policy), and `fit(condition=rotate)` (a use model fitted on rotation's
   readings alone, predicting the other four policies it never saw);
3. compares each simulated ordering of the policies with the real one (Kendall's tau from scipy,
   and whether the sign of `ascp-exposure - ascp` agrees).

    .venv/bin/python benchmarks/exposure_qwen.py --store docs/results/exposure-qwen \
        --work /tmp/exposure-qwen-sim --out docs/results/exposure-qwen/replay
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import kendalltau

POLICIES = ("ascp-exposure", "ascp", "rotate", "vanilla", "mmr")
METRICS = ("offered", "ecr", "ceiling", "used_ceiling")  # the ones the simulator also has
REAL_ONLY = ("pr", "ecr_thresholded")


def real_table(store: Path, n_boot: int) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Per-policy means and paired differences against ascp-exposure, from the store's units."""
    from ascp.data import load_cases
    from ascp.experiments.spec import load_spec
    from ascp.metrics.portfolio import evidence_ceiling
    from ascp.stats.bootstrap import paired_bootstrap

    spec = load_spec(store / "spec.yaml")
    task = spec.tasks[0]
    cases = {c.id: c for c in load_cases(Path(task.data), format=task.format, rank_by="given")}
    per: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for line in (store / "units.jsonl").open():
        u = json.loads(line)
        case = cases[u["case_id"]]
        used = {d for r in u["rounds"] for d in r["used"]}
        row = {m: float(u[m]) for m in ("pr", "ecr", "ecr_thresholded", "offered", "ceiling")}
        row["used_ceiling"] = evidence_ceiling(case.units, [p for p in case.pool if p.id in used])
        per[u["policy"]][u["case_id"]] = row
    ids = sorted(per["ascp-exposure"])
    if any(sorted(per[p]) != ids for p in POLICIES):
        raise SystemExit(f"{store} does not hold every policy for every case; finish the run first.")
    table: dict[str, Any] = {}
    for p in POLICIES:
        table[p] = {m: float(np.mean([per[p][c][m] for c in ids])) for m in (*REAL_ONLY, *METRICS)}
        if p != "ascp-exposure":
            for m in (*REAL_ONLY, *METRICS):
                est = paired_bootstrap([per["ascp-exposure"][c][m] for c in ids], [per[p][c][m] for c in ids],
                                       n_boot=n_boot, rng=np.random.default_rng(0))
                table[p][f"{m}_exposure_minus"] = {"mean": est.mean, "lo": est.lo, "hi": est.hi, "p": est.p}
    return table, {"cases": len(ids), "task": task.name, "data": str(task.data), "min_pool": task.min_pool,
                   "limit": task.limit}, ids


def simulate(args: argparse.Namespace, info: dict[str, Any], conditions: list[str]) -> list[dict[str, Any]]:
    consumers = [(f"replay({c.split('(')[0]})", f"replay(run={args.store},condition={c})") for c in conditions]
    rotate = next(c for c in conditions if c.startswith("rotate("))
    consumers.append(("fit(rotate)", f"fit(run={args.store},condition={rotate})"))
    done = []
    args.work.mkdir(parents=True, exist_ok=True)
    for label, spec in consumers:
        out = args.work / label.replace("(", "-").replace(")", "")
        cmd = [args.ascp, "simulate", "--data", info["data"], "--min-pool", str(info["min_pool"]), "--limit",
               str(info["limit"]), "--policy", ",".join(POLICIES), "--k", "5", "--T", "5", "--consumer", spec,
               "--n-boot", str(args.n_boot), "--out", str(out), "--overwrite"]
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        done.append({"label": label, "consumer": spec, "command": " ".join(cmd),
                     "comparison": json.loads((out / "comparison.json").read_text())})
    return done


def agreement(real: dict[str, Any], simulated: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for m in METRICS:
        r = [real[p][m] for p in POLICIES]
        s = [simulated[p][m] for p in POLICIES]
        tau = kendalltau(r, s).statistic
        sign = np.sign(real["ascp-exposure"][m] - real["ascp"][m]) == np.sign(
            simulated["ascp-exposure"][m] - simulated["ascp"][m])
        out[m] = {"kendall_tau": None if np.isnan(tau) else float(tau), "exposure_vs_ascp_sign_agrees": bool(sign)}
    return out


def render(real: dict[str, Any], info: dict[str, Any], sims: list[dict[str, Any]], header: list[str]) -> str:
    f = lambda e: f"{e['mean']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]"  # noqa: E731
    lines = [*header, "", f"## The real run ({info['cases']} ASQA queries, k = 5, T = 5)", "",
             "| policy | PR@T | ECR (tau(k)) | ECR (tau*) | offered | evidence ceiling | used ceiling |",
             "|---|---|---|---|---|---|---|"]
    for p in POLICIES:
        t = real[p]
        lines.append(f"| {p} | {t['pr']:.3f} | {t['ecr']:.3f} | {t['ecr_thresholded']:.3f} | {t['offered']:.1f} | "
                     f"{t['ceiling']:.3f} | {t['used_ceiling']:.3f} |")
    lines += ["", "Paired differences ascp-exposure minus each policy [95% paired bootstrap over queries]:", "",
              "| against | PR@T | ECR (tau(k)) | offered | evidence ceiling | used ceiling |",
              "|---|---|---|---|---|---|"]
    for p in POLICIES[1:]:
        t = real[p]
        lines.append(f"| {p} | {f(t['pr_exposure_minus'])} | {f(t['ecr_exposure_minus'])} | "
                     f"{f(t['offered_exposure_minus'])} | {f(t['ceiling_exposure_minus'])} | "
                     f"{f(t['used_ceiling_exposure_minus'])} |")
    lines += ["", "## The same policies in the simulator, on the run's own readings", "",
              "Simulated (offered, evidence ceiling, used ceiling, ECR) per policy; Kendall's tau of the simulated "
              "against the real ordering of the five policies, and whether the sign of ascp-exposure minus ascp "
              "agrees with the real run's.", ""]
    for s in sims:
        pol = s["comparison"]["policies"]
        lines += [f"### {s['label']}", "", f"`{s['command']}`", "",
                  "| policy | offered | evidence ceiling | used ceiling | ECR |", "|---|---|---|---|---|"]
        for p in POLICIES:
            lines.append(f"| {p} | {pol[p]['offered']:.1f} | {pol[p]['ceiling']:.3f} | {pol[p]['used_ceiling']:.3f} | "
                         f"{pol[p]['ecr']:.3f} |")
        lines += ["", "| metric | Kendall's tau (5 policies) | sign of ascp-exposure - ascp agrees |", "|---|---|---|"]
        for m, a in s["agreement"].items():
            tau = "undefined (ties)" if a["kendall_tau"] is None else f"{a['kendall_tau']:+.2f}"
            lines.append(f"| {m} | {tau} | {'yes' if a['exposure_vs_ascp_sign_agrees'] else 'no'} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True, help="folder for the simulations' run folders")
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json and results.md")
    ap.add_argument("--ascp", default=str(Path(sys.executable).with_name("ascp")))
    ap.add_argument("--n-boot", type=int, default=10000)
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    t0 = time.perf_counter()
    real, info, ids = real_table(args.store, args.n_boot)
    conditions = sorted({json.loads(line)["condition"] for line in (args.store / "units.jsonl").open()})
    sims = simulate(args, info, conditions)
    for s in sims:
        folder = args.work / s["label"].replace("(", "-").replace(")", "") / "ascp"
        simulated_ids = sorted(json.loads(line)["case_id"] for line in (folder / "cases.jsonl").open())
        if simulated_ids != ids:
            raise SystemExit(f"the simulation {s['label']} ran on other cases than the store; check the filters.")
        s["agreement"] = agreement(real, s["comparison"]["policies"])
    header = ["# ascp-exposure with a real generator (Qwen2.5-Coder-0.5B), and the simulator's prediction", "",
              f"- command: `{' '.join(['python', *sys.argv])}`",
              f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
              f"{platform.python_version()}; started {started}, {time.perf_counter() - t0:.0f} s",
              f"- store: `{args.store}` ({info['cases']} queries of `{info['data']}`, pools of at least "
              f"{info['min_pool']} passages, the first {info['limit']})"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"info": info, "cases": ids, "real": real, "simulated": [
        {k: s[k] for k in ("label", "consumer", "command", "agreement")} | {"policies": s["comparison"]["policies"]}
        for s in sims]}, indent=1) + "\n")
    page = render(real, info, sims, header)
    (args.out / "results.md").write_text(page + "\n")
    print(page)


if __name__ == "__main__":
    main()
