"""The tables' ECR (thresholded used over offered), the evidence ceiling in reports, and `ascp calibrate`
(Sec. 4.4, Fig. 4): known answers on hand-built rounds and synthetic validation scores."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import invoke_cli

from ascp.errors import AscpError
from ascp.metrics import evidence_coverage_rate, thresholded_coverage, thresholded_used
from ascp.reading import Reading
from ascp.types import Round
from ascp.validation import calibration as cal
from ascp.validation.analysis import Context


def rnd(t: int, normalized: dict[str, float]) -> Round:
    return Round(round=t, context=tuple(normalized), response="r", response_tokens=1,
                 reading=Reading(dict(normalized), normalized, (), None), seconds=0.0)


ROUNDS = [rnd(1, {"a": 0.6, "b": 0.3, "c": 0.1}), rnd(2, {"c": 0.5, "d": 0.5})]


def test_thresholded_coverage_known_answers():
    assert thresholded_used(ROUNDS, 0.3) == {"a", "b", "c", "d"}  # b ties at 0.3 and counts
    assert thresholded_coverage(ROUNDS, 0.3) == 1.0
    assert thresholded_used(ROUNDS, 0.55) == {"a"}
    assert thresholded_coverage(ROUNDS, 0.55) == 0.25
    assert thresholded_coverage(ROUNDS, 0.5) == 0.75  # a, c (round 2), d
    # Eq. 2 is relative to each round's maximum: c (0.1 >= 0.1 x 0.6) counts there, not at tau = 0.55.
    assert evidence_coverage_rate(ROUNDS, 0.1) == 1.0
    assert math.isnan(thresholded_coverage([], 0.3))
    for bad in (0.0, -0.1, math.nan, math.inf):
        with pytest.raises(ValueError):
            thresholded_coverage(ROUNDS, bad)


def test_the_tables_threshold_reads_raw_scores_not_normalised_ones():
    # Raw drops of 0.2 nats/token on every passage: each is used at tau = 0.1 whatever the width,
    # though their normalised shares (1/3, 1/6) shrink with it. Negative raw scores never count.
    narrow = Round(round=1, context=("a", "b", "c"), response="r", response_tokens=1,
                   reading=Reading({"a": 0.2, "b": 0.2, "c": 0.2}, {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, (), None),
                   seconds=0.0)
    wide = Round(round=1, context=tuple("abcdef"), response="r", response_tokens=1,
                 reading=Reading({**dict.fromkeys("abcde", 0.2), "f": -0.3}, {**dict.fromkeys("abcde", 0.2), "f": 0.0},
                                 (), None), seconds=0.0)
    assert thresholded_used([narrow], 0.1) == {"a", "b", "c"}
    assert thresholded_used([wide], 0.1) == set("abcde")
    assert thresholded_coverage([wide], 0.1) == pytest.approx(5 / 6)
    assert thresholded_used([wide], 0.25) == set()


def test_default_threshold_is_the_calibrated_constant():
    assert 0 < cal.USED_THRESHOLD <= 1
    assert thresholded_used(ROUNDS) == thresholded_used(ROUNDS, cal.USED_THRESHOLD)


def ctx(case: str, width: int, padding: str, normalized: list[float], protocol: str = "fixed",
        roles: list[str] | None = None) -> Context:
    roles = roles or ["necessary"] + ["padding"] * (width - 1)
    return Context(protocol, "loo", case, width, padding, ids=tuple(f"{case}-{i}" for i in range(width)),
                   roles=tuple(roles), answers=tuple(frozenset() for _ in range(width)),
                   scores=np.asarray(normalized, dtype=float), normalized=np.asarray(normalized, dtype=float))


def test_width_invariant_threshold_pools_off_query_padding_across_widths():
    # Off-query padding of fixed-protocol contexts (the first passage of each is necessary, not
    # padding): 0.0, 0.1 | 0.2-0.5 | 0.6-0.9 | 1.0, 0.0 over widths 3 and 5 and two cases: 12 values.
    # Same-query padding and the free protocol are not pooled.
    contexts = [ctx("x", 3, "off-query", [0.0, 0.0, 0.1]), ctx("x", 5, "off-query", [0.0, 0.2, 0.3, 0.4, 0.5]),
                ctx("y", 5, "off-query", [0.0, 0.6, 0.7, 0.8, 0.9]), ctx("y", 3, "off-query", [0.0, 1.0, 0.0]),
                ctx("y", 3, "same-query", [0.0, 5.0, 5.0]), ctx("y", 3, "off-query", [0.0, 9.0, 9.0], "free")]
    # 0.95 quantile by linear interpolation: position 0.95 x 11 = 10.45 of the sorted values, between
    # 0.9 (index 10) and 1.0 (index 11).
    assert cal.width_invariant_threshold(contexts) == pytest.approx(0.9 + 0.45 * 0.1)
    # Width 3: 0, 0, 0.1, 1.0 -> position 2.85 -> 0.1 + 0.85 x 0.9; width 5: 0.2..0.9 -> position 6.65.
    assert cal.per_width_thresholds(contexts, "fixed") == pytest.approx({3: 0.865, 5: 0.865})
    assert cal.per_width_thresholds(contexts, "free") == {3: pytest.approx(9.0)}


def test_power_law_fit_recovers_the_papers_curve():
    a, b = cal.fit_power_law({k: 0.555 * k ** -0.633 for k in (3, 6, 12, 24)})
    assert a == pytest.approx(0.555) and b == pytest.approx(-0.633)
    assert all(math.isnan(x) for x in cal.fit_power_law({3: 0.4}))


def one_used(case: str, k: int, n_used: int) -> Context:
    scores = [1.0 / n_used] * n_used + [0.0] * (k - n_used)
    return ctx(case, k, "same-query", scores)


def test_elasticity_of_q_known_slopes():
    # One passage used at every width: q = 1/k, elasticity exactly -1.
    contexts = [one_used(c, k, 1) for c in "abcd" for k in (2, 4, 8)]
    est = cal.elasticity("one", contexts, lambda k: 0.5)
    assert est.mean == pytest.approx(-1.0) and est.dropped == 0 and est.clusters == 4
    assert est.mean_used == pytest.approx(1.0)
    # sqrt(k) passages used (k = 4, 16, 64 -> 2, 4, 8): q = k^-1/2, elasticity -0.5 under a > 0.
    contexts = [one_used(c, k, int(math.isqrt(k))) for c in "abcd" for k in (4, 16, 64)]
    assert cal.elasticity("sqrt", contexts, lambda k: 0.0).mean == pytest.approx(-0.5)


def test_a_constant_cut_on_normalised_scores_is_capped_by_the_normalisation():
    # Every passage carries the same raw drop (0.2) at k = 3 and k = 6: q = 1 on the raw scale
    # (elasticity 0), while a constant normalised cut of 0.3 keeps all three at k = 3 and none at
    # k = 6 (normalised shares 1/6): the normalisation, not the model, decides.
    def flat(case: str, k: int) -> Context:
        c = ctx(case, k, "same-query", [1.0 / k] * k)
        return Context(c.protocol, c.estimator, c.case_id, c.width, c.padding, c.ids, c.roles, c.answers,
                       scores=np.full(k, 0.2), normalized=c.normalized)

    contexts = [flat(c, k) for c in "abcd" for k in (3, 6)]
    assert cal.elasticity("raw", contexts, lambda k: 0.1, "raw").mean == pytest.approx(0.0, abs=1e-12)
    assert [cal.utilisation(c, 0.3) for c in contexts[:2]] == [1.0, 0.0]


def test_resolve_used_threshold(tmp_path):
    assert cal.resolve_used_threshold(None)[0] == cal.USED_THRESHOLD
    assert cal.resolve_used_threshold("0.25") == (0.25, "given")
    (tmp_path / "calibration.json").write_text(json.dumps({"width_invariant_threshold": {"value": 0.3}}))
    assert cal.resolve_used_threshold(str(tmp_path))[0] == 0.3
    assert cal.resolve_used_threshold("1.5") == (1.5, "given")  # raw nats per token may exceed 1
    for bad in ("0", "-0.2", "nan", "inf", str(tmp_path / "nothing")):
        with pytest.raises(AscpError, match="--used-threshold"):
            cal.resolve_used_threshold(bad)


def synthetic_scores(folder: Path, cases: int = 6) -> Path:
    """A validate-probe folder: fixed and free protocols, both paddings, widths 3, 6, 12."""
    rng = np.random.default_rng(0)
    rows = []
    for protocol in ("fixed", "free"):
        for i in range(cases):
            for width in (3, 6, 12):
                for padding in ("off-query", "same-query"):
                    raw = np.r_[rng.uniform(0.5, 1.0, 2), rng.normal(0, 0.1, width - 2)]
                    pos = np.clip(raw, 0, None)
                    norm = pos / pos.sum()
                    for j in range(width):
                        rows.append({"protocol": protocol, "case_id": f"c{i}", "width": width, "padding": padding,
                                     "estimator": "loo", "position": j, "passage_id": f"c{i}-{width}-{j}",
                                     "role": "necessary" if j < 2 else "padding", "answers": [],
                                     "score": float(raw[j]), "normalized": float(norm[j])})
    folder.mkdir()
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def test_calibrate_command_end_to_end(tmp_path):
    source = synthetic_scores(tmp_path / "val")
    out = tmp_path / "cal"
    res = invoke_cli(["calibrate", "--validation", str(source), "--out", str(out), "--bootstrap", "200"])
    assert res.exit_code == 0, res.output
    result = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    tau = result["width_invariant_threshold"]["value"]
    lo, hi = result["width_invariant_threshold"]["interval"]
    assert 0 < tau < 1 and lo <= tau <= hi
    assert result["widths"] == [3, 6, 12] and result["cases"] == 6
    labels = {r["label"] for r in result["elasticity"]}
    assert "width-invariant tau* on raw scores (fixed target)" in labels
    assert "paper tau_free(k) (free generation)" in labels
    assert result["width_invariant_threshold"]["scale"] == "raw"
    assert 0 < result["width_invariant_normalized"]["value"] <= 1
    assert math.isfinite(result["free_fit"]["b"])
    md = (out / "results.md").read_text(encoding="utf-8")
    assert f"{tau:.4f}" in md and "ascp calibrate --validation" in md
    assert (out / "fig4_calibration.png").read_bytes()[:4] == b"\x89PNG"
    # The report takes the calibration folder as its threshold.
    assert cal.resolve_used_threshold(str(out))[0] == pytest.approx(tau)


def test_calibrate_bad_input_is_one_sentence_and_writes_nothing(tmp_path):
    out = tmp_path / "cal"
    res = invoke_cli(["calibrate", "--validation", str(tmp_path), "--out", str(out)])
    assert res.exit_code == 2 and "holds no scores.jsonl" in res.output and not out.exists()
    source = synthetic_scores(tmp_path / "val")
    res = invoke_cli(["calibrate", "--validation", str(source), "--out", str(out), "--estimator", "bm25"])
    assert res.exit_code == 2 and "no 'bm25' scores" in res.output and not out.exists()
    assert "Traceback" not in res.output


def test_pairwise_entailment_redundancy_counts_ordered_pairs():
    from ascp.api import make_case
    from ascp.metrics.nli import LexicalClaimMatcher

    # d1 and d2 say the same thing (each entails the other lexically), d3 shares no content word:
    # 2 of the 6 ordered pairs entail.
    case = make_case("q?", [{"id": "d1", "text": "Canberra capital Australia"},
                            {"id": "d2", "text": "Australia capital Canberra"},
                            {"id": "d3", "text": "Sydney harbour bridge opened"}], [["Canberra"]])
    row = cal.redundancy([case], None, LexicalClaimMatcher().entails)[case.id]
    assert row["entailment"] == pytest.approx(2 / 6)
    assert row["attestation"] == pytest.approx(2 / 3) and "embedding" not in row


def test_calibrate_nli_model_needs_data_and_a_real_folder(tmp_path):
    source = synthetic_scores(tmp_path / "val")
    out = tmp_path / "cal"
    res = invoke_cli(["calibrate", "--validation", str(source), "--out", str(out), "--nli-model", "lexical"])
    assert res.exit_code == 2 and "needs --data" in res.output and not out.exists()
    res = invoke_cli(["calibrate", "--validation", str(source), "--out", str(out), "--data", str(source),
                              "--nli-model", str(tmp_path / "no-such-model")])
    assert res.exit_code == 2 and "--nli-model" in res.output and not out.exists()
