"""Tables 16 and 17 of `ascp.report.replication` on hand-built records with known gaps: the structured
single response against the matched rotation portfolio, and steered cells paired with their
unsteered twins."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ascp.experiments import Condition
from ascp.report.build import build_tables
from ascp.report.frame import unit_frame
from ascp.report.replication import instruction_table, structured_table


def unit(text: str, query: str, pr: float, seed: int = 0) -> dict:
    """A unit record with the fields the report reads (rounds carry no probe scores)."""
    cond = Condition.parse(text)
    rounds = [{"round": t + 1, "context": [f"{query}-d{t * cond.k + j}" for j in range(cond.k)], "response": "w",
               "response_tokens": 1, "scores": {}, "normalized": {}, "used": [], "steered": False, "overused": 0,
               "seconds": 0.1, "prompt_tokens": 10, "generation_seconds": 0.05} for t in range(cond.T)]
    return {"task": "toy", "model": "m", "seed": seed, "case_id": query, **cond.fields(), "pr": pr,
            "best_single": pr, "ecr": 0.5, "offered": float(cond.k * cond.T), "used": 1.0, "groundedness": 0.5,
            "distinct_1": 0.5, "distinct_2": 0.5, "distinct_3": 0.5, "self_bleu": 0.1, "semantic_diversity": math.nan,
            "concentration": 0.2, "pool": [], "seconds": 1.0, "rounds": rounds}


OFFSETS = {
    "rotate(k=2,T=4)": 0.20, "rotate(k=2,T=4,instruction=integrate)": 0.25,
    "rotate(k=2,T=1,instruction=commit+structured,budget=4)": 0.0,
    "rotate(k=2,T=1,instruction=integrate+structured,budget=4)": 0.05,
    "vanilla(k=2,T=1,instruction=integrate+structured,budget=4)": 0.05,  # the same top k: no second row
    "rotate(k=5,T=4)": 0.30, "rotate(k=5,T=1,instruction=commit+structured,budget=4)": 0.22,
    "rotate(k=2,T=1)": -0.10,  # unbudgeted: not a structured response
    "rotate(k=2,T=5)": 0.40,  # T differs from every budget: unmatched
    "vanilla(k=2,T=4)": 0.10,  # the fixed arm is no portfolio here
    "rotate(k=2,T=4,estimator=bm25)": 0.50,  # another probe: unmatched
}


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(3)
    records = []
    for seed in (0, 1):
        for i in range(10):
            base = float(rng.uniform(0.1, 0.4))
            records += [unit(text, f"q{i}", base + offset, seed) for text, offset in OFFSETS.items()]
    return unit_frame(records)


def test_table17_gives_the_exact_gaps(frame):
    table = structured_table(frame, np.random.default_rng(0), 300)
    assert table is not None and table.key == "table17_structured"
    got = [(d["instruction"], d["portfolio_instruction"], d["k"], d["T"], d["gap_n"], round(d["gap_mean"], 10))
           for d in table.data]
    assert got == [("commit", "commit", 2, 4, 20, 0.2), ("commit", "integrate", 2, 4, 20, 0.25),
                   ("commit", "commit", 5, 4, 20, 0.08),
                   ("integrate", "commit", 2, 4, 20, 0.15), ("integrate", "integrate", 2, 4, 20, 0.2)]
    for d in table.data:  # a constant paired difference: the interval is the point, p at the floor
        assert d["gap_lo"] == pytest.approx(d["gap_mean"]) and d["gap_hi"] == pytest.approx(d["gap_mean"])
        assert d["pr_portfolio"] - d["pr_structured"] == pytest.approx(d["gap_mean"])
        assert d["structured"].startswith("rotate(")  # rotation's S is kept when both arms ran
    assert table.header == ["instruction", "portfolio instruction", "k", "T", "n", "portfolio PR@T",
                            "structured PR", "gap", "95% CI"]
    assert table.rows[0][:5] == ["commit", "commit", "2", "4", "20"] and table.rows[0][7] == "+0.200†"
    assert table.rows[0][8] == "[+0.200, +0.200]"


def test_table17_registered_after_table16_and_absent_without_a_pair(frame):
    keys = [t.key for t in build_tables(frame, np.random.default_rng(0), 200)]
    assert keys.index("table17_structured") == keys.index("table16_instruction") + 1
    plain = frame[frame["budget"].isna()].drop(columns="budget")
    assert structured_table(plain, np.random.default_rng(0), 200) is None  # no budget column at all
    unmatched = frame[~frame["condition"].str.startswith("rotate(k=2,T=4,")]
    unmatched = unmatched[~unmatched["condition"].str.startswith("rotate(k=5,")]
    assert structured_table(unmatched, np.random.default_rng(0), 200) is None


def test_table16_pairs_unsteered_cells_and_leaves_structured_out(frame):
    """Table 16's keys hold steer/eta = NaN for ordinary decoding; they must still match each other."""
    table = instruction_table(frame, np.random.default_rng(0), 200)
    assert table is not None
    assert [(d["k"], d["T"], round(d["delta_mean"], 10)) for d in table.data] == [(2, 4, 0.05)]


