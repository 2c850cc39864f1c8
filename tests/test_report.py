"""Reports: tables with known answers on synthetic run stores, rendering, figures, the all-or-nothing
write, `ascp report` / `ascp reproduce` errors, and one end-to-end run on the tiny model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import invoke_cli

from ascp.errors import AscpError
from ascp.experiments import Condition, run_experiment
from ascp.report import write_report
from ascp.report.claims import Claim, verdict
from ascp.report.frame import unit_frame
from ascp.report.render import latex_escape, to_latex, to_markdown
from ascp.report.tables import decisive_contrasts
from ascp.stats import Estimate

N_QUERIES = 12
ASQA_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"


def unit(cond: Condition, query: str, seed: int, pr: float, *, task: str = "toy", ecr: float = 0.5,
         used_fraction: float = 0.5, words: int = 10, tokens: int = 100) -> dict:
    """One synthetic unit record with the fields the store writes."""
    rounds = []
    for t in range(cond.T):
        context = [f"{query}-d{t * cond.k + j}" for j in range(cond.k)]
        n_used = int(round(used_fraction * cond.k))
        normalized = {d: 1.0 / n_used for d in context[:n_used]}  # the used passages share the mass
        rounds.append({"round": t + 1, "context": context, "response": " ".join(["w"] * words),
                       "response_tokens": tokens // 4, "scores": dict(normalized), "normalized": normalized,
                       "used": context[:n_used],
                       "steered": False, "overused": 0, "seconds": 0.1, "prompt_tokens": tokens - tokens // 4,
                       "generation_seconds": 0.05})
    return {"task": task, "model": "m", "seed": seed, "case_id": query, **cond.fields(),
            "pr": pr, "best_single": pr / 2, "ecr": ecr, "offered": float(cond.k * (cond.T if cond.arm != "fixed"
                                                                                     else 1)),
            "used": 1.0, "groundedness": 0.5, "distinct_1": 0.5, "distinct_2": 0.5, "distinct_3": 0.5,
            "self_bleu": 0.1, "semantic_diversity": math.nan, "concentration": 0.2, "pool": [], "seconds": 1.0,
            "rounds": rounds}


def write_store(folder: Path, records: list[dict], name: str = "synthetic") -> Path:
    folder.mkdir(parents=True)
    tasks = sorted({r["task"] for r in records})
    plan = {"name": name, "tasks": [{"name": t, "data": "x", "cases": sorted({r["case_id"] for r in records
                                                                              if r["task"] == t})} for t in tasks],
            "models": [{"name": "m", "source": "m"}], "seeds": sorted({r["seed"] for r in records}),
            "conditions": sorted({r["condition"] for r in records}), "units": len(records)}
    (folder / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    (folder / "units.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder


def c(text: str) -> Condition:
    return Condition.parse(text)


@pytest.fixture(scope="module")
def grid_store(tmp_path_factory) -> Path:
    """Rotation = fixed + 0.1 * T (an exact paired effect); budget cells; ascp vs baselines; 2 seeds."""
    rng = np.random.default_rng(0)
    records = []
    for seed in (0, 1):
        for i in range(N_QUERIES):
            q = f"q{i}"
            base = rng.uniform(0.1, 0.4)
            for T in (1, 4):
                records.append(unit(c(f"vanilla(k=2,T={T})"), q, seed, base))
                records.append(unit(c(f"rotate(k=2,T={T})"), q, seed, base + (0.1 * T if T > 1 else 0.0)))
            records.append(unit(c("rotate(k=8,T=1)"), q, seed, base - 0.05, used_fraction=0.25))
            records.append(unit(c("ascp(k=2,T=4)"), q, seed, base + 0.3, ecr=0.8))
            records.append(unit(c("mmr(k=2,T=4)"), q, seed, base + 0.1, ecr=0.6, used_fraction=1.0))
            records.append(unit(c("ascp-uniform(k=2,T=4)"), q, seed, base + 0.28))
            records.append(unit(c("ascp(k=2,T=4,steer=0.5,eta=0.1)"), q, seed, base + 0.32, words=8))
            records.append(unit(c("ascp(k=2,T=4,steer=0.0,eta=0.1)"), q, seed, base + 0.3 + 0.01 * seed, words=9))
            records.append(unit(c("ascp(k=2,T=4,steer=0.5,eta=0.0)"), q, seed, base + 0.305, words=9))
    return write_store(tmp_path_factory.mktemp("stores") / "grid", records)


@pytest.fixture(scope="module")
def grid_report(grid_store) -> dict:
    report = write_report(grid_store, n_boot=500, used_threshold=0.4)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    return {"report": report, "data": data}


def test_report_writes_every_supported_table_and_figure(grid_report):
    report = grid_report["report"]
    assert set(report.tables) >= {"summary", "table4_grid", "table5_contrasts", "table11_ascp_k2_T4",
                                  "table10_ascp_k2_T4", "table12_decoder", "table15_ablations"}
    for key in report.tables:
        assert (report.out / "tables" / f"{key}.md").read_text(encoding="utf-8").startswith("### ")
        assert "\\begin{tabular}" in (report.out / "tables" / f"{key}.tex").read_text(encoding="utf-8")
    assert "figures/fig5_grid.png" in report.figures and "figures/fig6_cost.png" in report.figures
    for fig in report.figures:
        assert (report.out / fig).read_bytes()[:4] == b"\x89PNG"
    page = (report.out / "index.html").read_text(encoding="utf-8")
    for key in report.tables:
        assert f'href="tables/{key}.md"' in page
    for fig in report.figures:
        assert f'src="{fig}"' in page
    assert not [p for p in report.out.parent.iterdir() if p.name.startswith(".report")]


def test_table4_recovers_the_exact_paired_effect(grid_report):
    rows = {(r["k"], r["T"]): r for r in grid_report["data"]["table4_grid"]["data"]}
    assert set(rows) == {(2, 1), (2, 4)}
    assert rows[(2, 1)]["delta_mean"] == pytest.approx(0.0)
    assert rows[(2, 1)]["delta_p"] == 1.0  # identical arms
    assert rows[(2, 4)]["delta_mean"] == pytest.approx(0.4)
    assert rows[(2, 4)]["delta_lo"] == pytest.approx(0.4) and rows[(2, 4)]["delta_hi"] == pytest.approx(0.4)
    assert rows[(2, 4)]["offered_rotation"] == 8 and rows[(2, 4)]["offered_fixed"] == 2
    md = (grid_report["report"].out / "tables" / "table4_grid.md").read_text(encoding="utf-8")
    assert "+0.400†" in md  # p at the bootstrap floor


def test_decisive_contrasts_are_budget_count_and_width():
    cells = {(2, 1): "a", (2, 4): "b", (8, 1): "c"}
    got = {label: (x, y) for label, x, y in decisive_contrasts(cells)}
    assert got == {"budget (2,4) vs (8,1)": ("b", "c"), "count T4 vs T1 at k2": ("b", "a"),
                   "width k8 vs k2 at T1": ("c", "a")}


def test_decisive_table_signs_and_bh(grid_report):
    rows = {r["contrast"]: r for r in grid_report["data"]["table5_contrasts"]["data"]}
    assert rows["budget (2,4) vs (8,1)"]["delta_mean"] == pytest.approx(0.45)
    assert rows["width k8 vs k2 at T1"]["delta_mean"] == pytest.approx(-0.05)
    assert all(r["q"] >= r["delta_p"] - 1e-12 for r in rows.values())


def test_comparison_tables_scheduler_only_and_steered(grid_report):
    t11 = {r["label"]: r for r in grid_report["data"]["table11_ascp_k2_T4"]["data"]}
    assert set(t11) == {"vanilla RAG", "deep rotation", "MMR"}  # ascp variants are ablations, not baselines
    assert t11["vanilla RAG"]["delta_pr_mean"] == pytest.approx(0.3)
    assert t11["deep rotation"]["delta_pr_mean"] == pytest.approx(-0.1)
    # The tables' ECR at threshold 0.4: Ascp uses 1 of 2 passages a round (a = 1.0), MMR both (a = 0.5 each).
    assert t11["MMR"]["delta_ecr_mean"] == pytest.approx(0.5 - 1.0)
    assert t11["MMR"]["delta_pr_method"].startswith("crossed")  # two seeds: crossed bootstrap
    t10 = [r["label"] for r in grid_report["data"]["table10_ascp_k2_T4"]["data"]]
    assert t10[0] == "Ascp without steering"


def test_seed_table_replicates_grid_and_held_out_contrasts_per_seed(grid_report):
    rows = {r["contrast"]: r for r in grid_report["data"]["table14_seeds"]["data"]}
    assert rows["rot over fix @k2T4"]["per_seed"] == pytest.approx({"0": 0.4, "1": 0.4})
    assert rows["Table 11: Ascp vs vanilla RAG @k2T4"]["per_seed"] == pytest.approx({"0": 0.3, "1": 0.3})
    assert rows["Table 11: Ascp vs MMR @k2T4"]["sd"] == pytest.approx(0.0)
    # the steered reference against its own scheduler unsteered (0.32 - 0.30 at each seed)
    assert rows["Table 10: Ascp vs Ascp without steering @k2T4"]["mean"] == pytest.approx(0.02)


def test_seed_table_weighs_tasks_equally_within_each_seed(tmp_path):
    """Two tasks of 3 and 5 queries whose Ascp-minus-MMR differs by seed: each seed's row is the mean of its
    two task means (not of its 8 queries), and the mean over seeds is Table 11's pooled ΔPR."""
    effect = {("a", 0): 0.1, ("b", 0): 0.3, ("a", 1): 0.0, ("b", 1): 0.2}
    records = []
    for (task, seed), delta in effect.items():
        for i in range(3 if task == "a" else 5):
            records.append(unit(c("mmr(k=2,T=3)"), f"{task}{i}", seed, 0.2 + 0.01 * i, task=task))
            records.append(unit(c("ascp(k=2,T=3)"), f"{task}{i}", seed, 0.2 + 0.01 * i + delta, task=task))
    report = write_report(write_store(tmp_path / "s", records), n_boot=200)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    row = {r["contrast"]: r for r in data["table14_seeds"]["data"]}["Table 11: Ascp vs MMR @k2T3"]
    assert row["per_seed"] == pytest.approx({"0": (0.1 + 0.3) / 2, "1": (0.0 + 0.2) / 2})
    assert row["sd"] == pytest.approx(0.1 / math.sqrt(2))
    pooled = data["table11_ascp_k2_T3"]["data"][0]
    assert pooled["label"] == "MMR" and pooled["delta_pr_mean"] == pytest.approx(row["mean"])
    markdown = (report.out / "tables" / "table14_seeds.md").read_text(encoding="utf-8")
    assert "| Table 11: Ascp vs MMR @k2T3 | 0.200 | 0.100 | 0.150 | 0.0707 |" in markdown


def test_each_full_steered_decoder_gets_its_own_table10(tmp_path):
    """Table 10's reference is the full decoder (steer and eta above 0; the partial ones are Table 12's); two
    of them at one k, T get a table each, named by the field that tells them apart, none overwriting the
    other."""
    records = []
    for i in range(6):
        for text, pr in (("mmr(k=2,T=3)", 0.2), ("ascp(k=2,T=3)", 0.3), ("ascp(k=2,T=3,steer=0.5,eta=0.1)", 0.35),
                         ("ascp(k=2,T=3,steer=1.0,eta=0.1)", 0.4), ("ascp(k=2,T=3,steer=0.5,eta=0.0)", 0.5)):
            records.append(unit(c(text), f"q{i}", 0, pr + 0.01 * i))
    report = write_report(write_store(tmp_path / "s", records), n_boot=200)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    assert {k for k in data if k.startswith("table1") and "_ascp_" in k} == {
        "table11_ascp_k2_T3", "table10_ascp_k2_T3_steer0.5", "table10_ascp_k2_T3_steer1.0"}
    steered = {k: {r["label"]: r["delta_pr_mean"] for r in data[k]["data"]} for k in data if k.startswith("table10")}
    assert steered["table10_ascp_k2_T3_steer0.5"] == pytest.approx({"Ascp without steering": 0.05, "MMR": 0.15})
    assert steered["table10_ascp_k2_T3_steer1.0"] == pytest.approx({"Ascp without steering": 0.1, "MMR": 0.2})
    assert data["table10_ascp_k2_T3_steer1.0"]["title"].startswith("Table 10: Ascp vs baselines at k=2, T=3, steer=1.0")


def test_decoder_table_uses_seed_t_with_two_seeds(grid_report):
    rows = {r["contrast"]: r for r in grid_report["data"]["table12_decoder"]["data"]}
    assert rows["full decoder - off"]["delta_pr_mean"] == pytest.approx(0.02)
    assert rows["full decoder - off"]["delta_pr_method"] == "t over seed means, df=1"
    assert rows["full decoder - off"]["delta_words_mean"] == pytest.approx(-8.0)  # 4 rounds x 2 fewer words
    assert rows["APC only"]["delta_pr_mean"] == pytest.approx(0.005)
    assert rows["contrast, APC held off"]["delta_pr_mean"] == pytest.approx(0.005)
    assert rows["APC, contrast held on"]["delta_pr_mean"] == pytest.approx(0.015)
    # (full + off) - (APC only + contrast only) = (0.32 + 0.30) - (0.305 + 0.305)
    assert rows["contrast x APC interaction"]["delta_pr_mean"] == pytest.approx(0.01)
    assert len(rows) == 6


def test_ablation_table_rows(grid_report):
    rows = {r["variant"]: r for r in grid_report["data"]["table15_ablations"]["data"]}
    assert rows["Ascp (full)"]["condition"].startswith("ascp(k=2,T=4,estimator=loo,instruction=commit,steer=0.5")
    assert rows["- steered decoding"]["delta_pr_mean"] == pytest.approx(-0.02)
    assert "probe → uniform" not in rows  # ascp-uniform ran without steering: not comparable to the full row


def test_elasticity_recovers_a_known_slope(tmp_path):
    records, fractions = [], {2: 1.0, 4: 0.5, 8: 0.375}  # fractions a k-passage context can hold exactly
    for i in range(8):
        for k, u in fractions.items():
            records.append(unit(c(f"rotate(k={k},T=1)"), f"q{i}", 0, 0.3, used_fraction=u))
    report = write_report(write_store(tmp_path / "s", records), n_boot=200)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    rows = data["fig4_elasticity"]["data"]
    # Raw scores of the used passages (1/n_used nats per token) clear the width-invariant threshold and
    # the others are 0, so both criteria count the same passages and recover the same slope.
    assert [r["criterion"] for r in rows] == ["used_fraction_invariant", "used_fraction"]
    slope = np.polyfit(np.log(list(fractions)), np.log(list(fractions.values())), 1)[0]
    for row in rows:
        assert row["ks"] == [2, 4, 8]
        assert row["elasticity_mean"] == pytest.approx(slope) and slope < -0.4
    assert "figures/fig4_elasticity.png" in report.figures


def test_verdicts():
    def est(m, lo, hi):
        return Estimate(m, lo, hi, 0.5, 10)

    assert verdict(est(0.1, 0.05, 0.2), +1) == "reproduced"
    assert verdict(est(0.1, -0.05, 0.2), +1) == "same sign, not significant"
    assert verdict(est(-0.1, -0.2, -0.05), +1) == "opposite sign, significant"
    assert verdict(est(-0.1, -0.2, 0.05), +1) == "opposite sign"
    assert verdict(est(0.01, -0.02, 0.05), 0) == "consistent"
    assert verdict(est(0.1, 0.05, 0.2), 0) == "differs"
    assert verdict(None, +1) == "not estimable"


def test_claims_table_in_report(grid_store, tmp_path):
    claims = (Claim("rotation beats fixed", "rotate(k=2,T=4)", "vanilla(k=2,T=4)", "pr", "+0.1", +1),
              Claim("absent conditions are skipped", "dpp(k=2,T=4)", "vanilla(k=2,T=4)", "pr", "+0.1", +1))
    report = write_report(grid_store, tmp_path / "r", n_boot=300, claims=claims)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    assert [r["verdict"] for r in data["claims"]["data"]] == ["reproduced"]
    assert report.tables[1] == "claims"


def test_claims_read_the_cells_of_a_run_probed_with_another_estimator(tmp_path):
    records = []
    for i in range(8):
        records.append(unit(c("rotate(k=2,T=4,estimator=gated)"), f"q{i}", 0, 0.6 + 0.01 * i))
        records.append(unit(c("vanilla(k=2,T=4,estimator=gated)"), f"q{i}", 0, 0.3 + 0.01 * i))
    claims = (Claim("rotation beats fixed", "rotate(k=2,T=4)", "vanilla(k=2,T=4)", "pr", "+0.1", +1),)
    report = write_report(write_store(tmp_path / "s", records), tmp_path / "r", n_boot=300, claims=claims)
    (row,) = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))["claims"]["data"]
    assert row["verdict"] == "reproduced" and "estimator=gated" in row["a"]


@pytest.mark.skipif(not (ASQA_ROOT / "asqa" / "asqa_wikidpr_pools.json").is_file(),
                    reason="the shared ASQA pools (../shared/data/asqa) are absent")
def test_reproduce_probes_every_cell_with_the_estimator_given():
    from ascp.reproduce import preset_spec

    spec = preset_spec("cpu-small", ASQA_ROOT, limit=2, estimator="gated")
    assert {cond.estimator for cond in spec.conditions} == {"gated"} and len(spec.conditions) == 10
    assert "estimator=gated" in spec.text
    assert {cond.estimator for cond in preset_spec("cpu-small", ASQA_ROOT).conditions} == {"loo"}
    with pytest.raises(AscpError, match="--estimator: unknown estimator 'nope'"):
        preset_spec("cpu-small", ASQA_ROOT, estimator="nope")


def test_rendering_escapes():
    from ascp.report.tables import Table

    t = Table("t", "A_title", "100% of x & y", ["ΔPR", "q"], [["+0.1†", "<.001"], ["-0.2*", "0.5"]])
    tex = to_latex(t)
    assert r"A\_title" in tex and r"100\% of x \& y" in tex and r"$\Delta$PR" in tex
    assert r"+0.1$^{\dagger}$" in tex and r"-0.2$^{*}$" in tex and r"$<$.001" in tex
    assert latex_escape("a_b") == r"a\_b"
    md = to_markdown(t)
    assert "| ΔPR | q |" in md and "| +0.1† | <.001 |" in md


def test_unit_frame_derives_cost_columns():
    rec = unit(c("rotate(k=2,T=3)"), "q", 0, 0.5, words=4, tokens=100)
    frame = unit_frame([rec])
    row = frame.iloc[0]
    assert row["tokens"] == 300 and row["latency"] == pytest.approx(0.15) and row["words"] == 12
    old = json.loads(json.dumps(rec))
    for r in old["rounds"]:
        del r["prompt_tokens"], r["generation_seconds"]
    assert math.isnan(unit_frame([old]).iloc[0]["tokens"])  # records from before cost fields: no cost


def test_report_bad_input_is_one_sentence(tmp_path, grid_store):
    missing = invoke_cli(["report", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output and "Traceback" not in missing.output
    (tmp_path / "empty").mkdir()
    empty = invoke_cli(["report", str(tmp_path / "empty")])
    assert empty.exit_code == 2 and "not an experiment run store" in empty.output
    orphan = invoke_cli(["report", str(grid_store), "--out", str(tmp_path / "no" / "such")])
    assert orphan.exit_code == 2 and "does not exist" in orphan.output
    assert not (tmp_path / "no").exists()
    preset = invoke_cli(["report", str(grid_store), "--preset", "nope", "--out", str(tmp_path / "r")])
    assert preset.exit_code == 2 and "unknown preset 'nope'" in preset.output
    few = invoke_cli(["report", str(grid_store), "--n-boot", "5", "--out", str(tmp_path / "r")])
    assert few.exit_code == 2 and "--n-boot" in few.output and not (tmp_path / "r").exists()


def test_a_failed_report_leaves_the_previous_one(grid_store, tmp_path, monkeypatch):
    out = tmp_path / "r"
    write_report(grid_store, out, n_boot=200)
    before = (out / "index.html").read_text(encoding="utf-8")

    def boom(*args, **kwargs):
        raise RuntimeError("figure failed")

    monkeypatch.setattr("ascp.report.figures.cost_figure", boom)
    with pytest.raises(RuntimeError):
        write_report(grid_store, out, n_boot=200)
    assert (out / "index.html").read_text(encoding="utf-8") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_end_to_end_tiny_experiment_then_report(tmp_path, tiny_model_dir):
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps({
        "id": f"c{i}", "question": f"when was author {i} born?",
        "pool": [{"id": f"d{j}", "title": "T", "text": f"born in {1850 + j} near river {i}"} for j in range(6)],
        "answers": [["1850"], ["1853"]]}) + "\n" for i in range(4)), encoding="utf-8")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "e2e", "tasks": [{"name": "toy", "data": str(data), "format": "jsonl"}],
        "models": [str(tiny_model_dir)], "seeds": [0], "grid": {"arm": ["rotation", "fixed"], "k": [1], "T": [1, 2]},
        "sampling": {"max_new_tokens": 4}, "embedder": "hashing"}), encoding="utf-8")
    run_experiment(spec, tmp_path / "run")
    result = invoke_cli(["report", str(tmp_path / "run"), "--n-boot", "200"])
    assert result.exit_code == 0, result.output
    assert "table4_grid" in result.output
    data = json.loads((tmp_path / "run" / "report" / "tables" / "tables.json").read_text(encoding="utf-8"))
    rows = {(r["k"], r["T"]): r for r in data["table4_grid"]["data"]}
    assert rows[(1, 1)]["delta_mean"] == 0.0  # T=1: rotation and fixed are the same context and seed
    assert rows[(1, 2)]["offered_rotation"] == 2 and rows[(1, 2)]["offered_fixed"] == 1
    assert (tmp_path / "run" / "report" / "figures" / "fig6_cost.png").is_file()


def test_reproduce_errors_are_one_sentence(tmp_path):
    bad = invoke_cli(["reproduce", "--preset", "nope", "--out", str(tmp_path / "o"),
                              "--data-root", str(tmp_path)])
    assert bad.exit_code == 2 and "unknown preset 'nope'" in bad.output
    missing = invoke_cli(["reproduce", "--out", str(tmp_path / "o"), "--data-root", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "data folder" in missing.output
    nofile = invoke_cli(["reproduce", "--out", str(tmp_path / "o"), "--data-root", str(tmp_path)])
    assert nofile.exit_code == 2 and "asqa_wikidpr_pools.json does not exist" in nofile.output
    assert not (tmp_path / "o").exists()
    # The out location is checked before any data is read (the real pools would take seconds).
    orphan = invoke_cli(["reproduce", "--out", str(tmp_path / "no" / "o"), "--data-root", str(tmp_path)])
    assert orphan.exit_code == 2 and "output folder" in orphan.output and "of --out" in orphan.output


@pytest.mark.skipif(not (ASQA_ROOT / "asqa" / "asqa_wikidpr_pools.json").is_file(),
                    reason="the shared ASQA pools (../shared/data/asqa) are absent")
def test_cpu_small_preset_resolves_on_the_real_data():
    from ascp.reproduce import PRESET_CLAIMS, preset_spec

    spec = preset_spec("cpu-small", ASQA_ROOT, limit=3)
    names = {cond.name for cond in spec.conditions}
    for claim in PRESET_CLAIMS["cpu-small"]:  # every claim refers to conditions the preset runs
        assert Condition.parse(claim.a).name in names and Condition.parse(claim.b).name in names
    assert spec.tasks[0].limit == 3 and spec.tasks[0].min_pool == 24


def test_table6_pools_width_contrasts_over_conditions(tmp_path):
    rng = np.random.default_rng(1)
    records, truth = [], {}
    for t, shift in enumerate((0.05, 0.10, 0.20, 0.30)):
        task = f"task{t}"
        diffs = []
        for i in range(15):
            base = rng.uniform(0.1, 0.5)
            d = shift + rng.normal(0, 0.05)
            diffs.append(d)
            records.append(unit(c("rotate(k=2,T=1)"), f"q{i}", 0, base, task=task))
            records.append(unit(c("rotate(k=8,T=1)"), f"q{i}", 0, base + d, task=task))
        truth[f"{task}/m"] = float(np.mean(diffs))
    report = write_report(write_store(tmp_path / "s", records), n_boot=400)
    data = json.loads((report.out / "tables" / "tables.json").read_text(encoding="utf-8"))
    (row,) = data["table6_width_pooled"]["data"]
    assert row["contrast"] == "width k8 vs k2 at T1" and row["conditions"] == sorted(truth)
    assert row["effects"] == pytest.approx([truth[n] for n in row["conditions"]])
    assert min(row["effects"]) < row["mean"] < max(row["effects"])
    for effect, shrunk in zip(row["effects"], row["blup"], strict=True):  # partial pooling moves toward the mean
        assert abs(shrunk - row["mean"]) <= abs(effect - row["mean"]) + 1e-12
    assert row["prediction_t"][0] < row["prediction_normal"][0] < row["mean"]  # t_{K-2} is wider


def test_grid_table_names_the_probe_when_cells_differ(tmp_path):
    records = []
    for i in range(6):
        for text in ("rotate(k=2,T=2,estimator=bm25)", "vanilla(k=2,T=2,estimator=bm25)", "rotate(k=5,T=2)",
                     "vanilla(k=5,T=2)"):
            records.append(unit(c(text), f"q{i}", 0, 0.2 + 0.1 * i + (0.1 if text.startswith("rotate") else 0)))
    report = write_report(write_store(tmp_path / "s", records), n_boot=200)
    md = (report.out / "tables" / "table4_grid.md").read_text(encoding="utf-8")
    assert "| probe |" in md and "| bm25 |" in md and "| loo |" in md


@pytest.mark.skipif(not (ASQA_ROOT / "asqa" / "asqa_wikidpr_pools.json").is_file(),
                    reason="the shared ASQA pools (../shared/data/asqa) are absent")
def test_reproduce_takes_another_generator_and_backend(tmp_path):
    from ascp.reproduce import preset_spec

    gguf = tmp_path / "Other-Model.Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF")
    spec = preset_spec("cpu-small", ASQA_ROOT, limit=2, model=str(gguf), backend="hf")
    assert [(m.name, m.source) for m in spec.models] == [("Other-Model.Q4_K_M", str(gguf.resolve()))]
    assert spec.settings.backend == "hf" and "backend: hf" in spec.text
    assert preset_spec("cpu-small", ASQA_ROOT).settings.backend == "hf"
    with pytest.raises(AscpError, match="backend"):
        preset_spec("cpu-small", ASQA_ROOT, backend="vulkan")


@pytest.mark.skipif(not (ASQA_ROOT / "asqa" / "asqa_wikidpr_pools.json").is_file(),
                    reason="the shared ASQA pools (../shared/data/asqa) are absent")
@pytest.mark.parametrize(("given", "expected"), [(None, "OUT/requests.sqlite"), ("off", "off"),
                                                 ("default", "default")])
def test_reproduce_keeps_its_request_cache_in_the_run_store(tmp_path, monkeypatch, given, expected):
    import ascp.experiments.run as run_module
    from ascp.lm.request_cache import default_cache_path, resolve_cache_path
    from ascp.reproduce import reproduce

    seen = {}

    def stop(spec, out, request_cache=None, **kwargs):
        seen["cache"] = resolve_cache_path(request_cache)
        raise RuntimeError("stopped before the run")

    monkeypatch.setattr(run_module, "run_experiment", stop)
    with pytest.raises(RuntimeError, match="stopped before the run"):
        reproduce("cpu-small", tmp_path / "out", ASQA_ROOT, limit=1, request_cache=given)
    want = {"OUT/requests.sqlite": tmp_path / "out" / "requests.sqlite", "off": None,
            "default": default_cache_path()}[expected]
    assert seen["cache"] == want
