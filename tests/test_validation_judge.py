"""`ascp judge` (the judge meta-evaluation of Fig. 7): the P(yes) rule on a stub model, the statistics
against hand-computed values, blinding, determinism, and the command's outputs and user errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import invoke_cli

from ascp.embed.embedders import hashing_embed
from ascp.errors import AscpError
from ascp.lm.protocol import LanguageModel, ScoredPrompts
from ascp.lm.tiny import build_tokenizer
from ascp.lm.tokenized import TokenizedModel
from ascp.reading import Reading
from ascp.types import Round
from ascp.validation.judge import (
    JudgedPortfolio,
    judge_portfolios,
    judge_statistics,
    load_portfolios,
    masked,
    p_yes,
    spearman,
    top1_agreement,
)

# Total log-probability of each answer word; P(yes) = (e^-1 + e^-2) / (e^-1 + e^-2 + e^-3 + e^-0.5).
ANSWER_LOGPROBS = {"Yes": -1.0, "yes": -2.0, "No": -3.0, "no": -0.5}
EXPECTED = (math.exp(-1) + math.exp(-2)) / (math.exp(-1) + math.exp(-2) + math.exp(-3) + math.exp(-0.5))


class StubJudge(TokenizedModel):
    """The model seam with fixed answer log-probabilities: the word's total spread over its tokens.

    A prompt holding `boost` gets +`shift` on both yes spellings (so some documents read as used).
    Every scored prompt's text is kept in `seen`.
    """

    def __init__(self, boost: str | None = None, shift: float = 4.0) -> None:
        self.tokenizer = build_tokenizer()
        self.name = "stub-judge"
        self.boost, self.shift = boost, shift
        self.seen: list[str] = []

    @property
    def context_window(self) -> int:
        return 4096

    def score(self, prompts, response, reuse_prefix=True) -> ScoredPrompts:
        word = self.decode(response).strip()
        out = []
        for prompt in prompts:
            text = self.decode(prompt)
            self.seen.append(text)
            total = ANSWER_LOGPROBS[word] + (self.shift if self.boost and self.boost in text and word.lower() == "yes"
                                             else 0.0)
            out.append(np.full(len(response), total / len(response)))
        return ScoredPrompts(tuple(out), sum(len(p) + len(response) for p in prompts))

    def generate(self, prompts, config, seeds, batch_size=8, on_batch=None):
        raise NotImplementedError


# ----- a hand-made run folder -------------------------------------------------------------------
POOL = [
    {"id": "PID-alpha-17", "title": "Secret Title Alpha", "text": "Mary Shelley wrote the novel in 1818."},
    {"id": "PID-beta-29", "title": "", "text": "Percy Shelley was an English poet near the river."},
    {"id": "PID-gamma-31", "title": "Gamma", "text": "The quick brown fox jumps over the lazy dog."},
]
CASES = [{"id": "case-one", "question": "Who wrote the novel?", "pool": POOL, "answers": [["Mary Shelley"]]},
         {"id": "case-two", "question": "Who was the poet?", "pool": POOL, "answers": [["Percy"]]}]
POLICY = "xquad"


def _round(t: int, context: list[str], response: str, normalized: list[float]) -> dict:
    return Round(round=t, context=tuple(context), response=response, response_tokens=5,
                 reading=Reading({pid: 0.1 * a for pid, a in zip(context, normalized, strict=True)},
                                 dict(zip(context, normalized, strict=True)), (), None), seconds=0.0).to_json()


def write_run(folder: Path) -> Path:
    """Two portfolios of two rounds (k=2) with known probe readings, and their case file."""
    folder.mkdir(parents=True)
    data = folder.parent / f"{folder.name}-cases.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    rounds = [
        ("case-one", _round(1, ["PID-alpha-17", "PID-beta-29"], "Mary Shelley [PID-alpha-17] wrote it.",
                            [0.8123, 0.1877])),
        ("case-one", _round(2, ["PID-gamma-31", "PID-beta-29"], "A fox and a dog [ PID-gamma-31 ].", [0.6, 0.4])),
        ("case-two", _round(1, ["PID-beta-29", "PID-alpha-17"], "Percy was a poet.", [0.7, 0.3])),
        ("case-two", _round(2, ["PID-beta-29", "PID-gamma-31"], "Percy was a poet.", [0.9, 0.1])),
    ]
    with (folder / "rounds.jsonl").open("w", encoding="utf-8") as handle:
        for case_id, rec in rounds:
            handle.write(json.dumps({"case_id": case_id, **rec}) + "\n")
    rows = [{"case_id": "case-one", "policy": POLICY, "pool": [p["id"] for p in POOL], "ecr": 1.0,
             "ecr_thresholded": 0.5, "distinct_2": 0.9},
            {"case_id": "case-two", "policy": POLICY, "pool": [p["id"] for p in POOL], "ecr": 0.5,
             "ecr_thresholded": 0.25, "distinct_2": 0.4}]
    (folder / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "summary.json").write_text(json.dumps({"config": {"data": str(data), "format": "jsonl",
                                                               "policy": POLICY}}), encoding="utf-8")
    return folder


@pytest.fixture
def run_folder(tmp_path) -> Path:
    return write_run(tmp_path / "run")


# ----- the scoring rule ---------------------------------------------------------------------------
def test_p_yes_is_the_normalised_answer_probability_on_a_stub(tmp_path):
    stub = StubJudge()
    assert isinstance(stub, LanguageModel)
    prompts = [stub.encode_prompt("q", []), stub.encode_prompt("another question", [])]
    assert p_yes(stub, prompts) == pytest.approx([EXPECTED, EXPECTED], abs=1e-12)
    boosted = StubJudge(boost="another", shift=4.0)
    shifted = (math.exp(3) + math.exp(2)) / (math.exp(3) + math.exp(2) + math.exp(-3) + math.exp(-0.5))
    assert p_yes(boosted, prompts) == pytest.approx([EXPECTED, shifted], abs=1e-12)
    assert p_yes(stub, []).shape == (0,)


def test_p_yes_on_the_tiny_model_is_a_probability_and_reproducible(tiny_lm):
    prompts = [tiny_lm.encode_prompt("Is the sky blue?", []), tiny_lm.encode_prompt("Is grass red?", [])]
    first, second = p_yes(tiny_lm, prompts), p_yes(tiny_lm, prompts)
    assert np.all((first > 0) & (first < 1)) and np.array_equal(first, second)


# ----- statistics -------------------------------------------------------------------------------
def test_spearman_matches_hand_computed_values():
    # ranks differ by (0, -1, 1, 0): rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4])["rho"] == pytest.approx(0.8)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx({"rho": -1.0, "p": 0.0, "n": 4})
    # ties get mid-ranks: x ranks (1, 2.5, 2.5, 4), y ranks (1, 2, 3, 4) -> Pearson of ranks
    rx, ry = np.array([1, 2.5, 2.5, 4]), np.array([1, 2, 3, 4])
    assert spearman([1, 2, 2, 3], [10, 20, 30, 40])["rho"] == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    constant = spearman([0.5, 0.5, 0.5], [1, 2, 3])
    assert math.isnan(constant["rho"]) and math.isnan(constant["p"]) and constant["n"] == 3
    dropped = spearman([1, float("nan"), 2, 3, 4], [1, 5, 3, 2, 4])
    assert dropped["n"] == 4 and dropped["rho"] == pytest.approx(0.8)
    assert math.isnan(spearman([1, 2], [2, 1])["rho"]) and spearman([1, 2], [2, 1])["n"] == 2


def test_top1_agreement_counts_unique_tops_and_mcnemar():
    rows = [
        {"offered": 3, "top_judge": "a", "top_probe": "a", "top_proxy": "b"},   # probe only
        {"offered": 3, "top_judge": "a", "top_probe": "a", "top_proxy": "b"},   # probe only
        {"offered": 2, "top_judge": "c", "top_probe": "c", "top_proxy": "c"},   # both
        {"offered": 2, "top_judge": "c", "top_probe": None, "top_proxy": "c"},  # proxy only (probe tied)
        {"offered": 2, "top_judge": None, "top_probe": "c", "top_proxy": "c"},  # judge tied: excluded
        {"offered": 1, "top_judge": "c", "top_probe": "c", "top_proxy": "c"},   # one passage: excluded
    ]
    top = top1_agreement(rows)
    assert top["n"] == 4 and top["probe"] == {"agree": 3, "share": 0.75} and top["proxy"] == {"agree": 2, "share": 0.5}
    # exact McNemar: 2 vs 1 discordant, two-sided binomial p = 1.0
    assert top["mcnemar"] == {"probe_only": 2, "proxy_only": 1, "p": pytest.approx(1.0)}
    empty = top1_agreement([])
    assert empty["n"] == 0 and math.isnan(empty["probe"]["share"]) and math.isnan(empty["mcnemar"]["p"])


def test_judge_statistics_on_hand_made_records():
    docs = [{"probe": p, "proxy": x, "p_yes": y} for p, x, y in
            [(0.9, 0.1, 0.8), (0.1, 0.2, 0.3), (0.5, 0.3, 0.6), (0.2, 0.4, 0.1)]]
    rows = [{"ecr": e, "ecr_thresholded": t, "distinct_2": d, "judge_coverage": c, "judge_mean_p_yes": m,
             "novelty": n, "offered": 2, "top_judge": None, "top_probe": None, "top_proxy": None}
            for e, t, d, c, m, n in [(1.0, 0.5, 0.9, 1.0, 0.7, 0.2), (0.5, 0.5, 0.4, 0.5, 0.4, 0.9),
                                     (0.25, 0.5, 0.1, 0.0, 0.2, float("nan"))]]
    stats = judge_statistics(docs, rows)
    # judge ranks (4, 2, 3, 1); probe (4, 1, 3, 2): d^2 = 2 -> 0.8; proxy (1, 2, 3, 4): d^2 = 18 -> -0.8
    assert stats["panel_a"]["probe_vs_judge"] == pytest.approx({"rho": 0.8, "p": 0.2, "n": 4})
    assert stats["panel_a"]["proxy_vs_judge"]["rho"] == pytest.approx(-0.8)
    assert stats["panel_b"]["ecr_vs_judge_coverage"] == pytest.approx({"rho": 1.0, "p": 0.0, "n": 3})
    constant = stats["panel_b"]["ecr_thresholded_vs_judge_coverage"]  # ecr_thresholded is constant
    assert math.isnan(constant["rho"]) and constant["n"] == 3
    assert stats["panel_c"]["novelty_vs_distinct_2"]["n"] == 2  # the T = 1 portfolio has no novelty
    assert math.isnan(stats["panel_c"]["novelty_vs_distinct_2"]["rho"])


# ----- judging a run --------------------------------------------------------------------------------
def test_run_folder_loads_with_probe_measures(run_folder):
    source, portfolios = load_portfolios(run_folder)
    assert source == "run" and [p.key for p in portfolios] == [{"case_id": "case-one", "policy": POLICY},
                                                               {"case_id": "case-two", "policy": POLICY}]
    one = portfolios[0]
    assert isinstance(one, JudgedPortfolio) and one.offered == ("PID-alpha-17", "PID-beta-29", "PID-gamma-31")
    assert (one.ecr, one.ecr_thresholded, one.distinct_2) == (1.0, 0.5, 0.9)
    assert [p.key["case_id"] for p in load_portfolios(run_folder, limit=1)[1]] == ["case-one"]


def test_judge_records_readings_and_coverage(run_folder):
    _, portfolios = load_portfolios(run_folder)
    # the judge says "used" only for the document about foxes
    result = judge_portfolios(StubJudge(boost="quick brown fox"), portfolios, hashing_embed)
    docs = [j for j in result.judgements if j["kind"] == "coverage"]
    novelty = [j for j in result.judgements if j["kind"] == "novelty"]
    assert len(docs) == 6 and len(novelty) == 2 and [n["round"] for n in novelty] == [2, 2]
    first = docs[:3]
    assert [d["passage_id"] for d in first] == ["PID-alpha-17", "PID-beta-29", "PID-gamma-31"]
    assert [d["rounds"] for d in first] == [[1], [1, 2], [2]]
    assert [d["probe"] for d in first] == pytest.approx([0.8123, 0.4, 0.6])  # max over the rounds offering d
    assert [d["probe_raw"] for d in first] == pytest.approx([0.08123, 0.04, 0.06])
    assert [d["used"] for d in first] == [False, False, True]
    assert first[0]["p_yes"] == pytest.approx(EXPECTED)
    rows = result.portfolios
    assert rows[0]["judge_coverage"] == pytest.approx(1 / 3) and rows[0]["top_judge"] == "PID-gamma-31"
    assert rows[0]["top_probe"] == "PID-alpha-17" and rows[0]["novelty"] == pytest.approx(EXPECTED)
    # proxy: max over the rounds offering d of cos(d, y_t)
    texts = [p["title"] + ": " + p["text"] if p["title"] else p["text"] for p in POOL]
    emb = hashing_embed([texts[0], "Mary Shelley [PID-alpha-17] wrote it."])
    assert first[0]["proxy"] == pytest.approx(float(emb[0] @ emb[1]))
    assert result.statistics["panel_b"]["ecr_vs_judge_coverage"]["n"] == 2


def test_the_judge_is_identity_blinded(run_folder):
    _, portfolios = load_portfolios(run_folder)
    stub = StubJudge()
    judge_portfolios(stub, portfolios, hashing_embed)
    assert stub.seen
    for text in stub.seen:
        for secret in ("PID-", "alpha-17", "gamma-31", POLICY, "Secret Title", "0.8123", "0.1877", "case-one"):
            assert secret not in text, (secret, text)
    shown = "\n".join(stub.seen)
    assert "Mary Shelley [?] wrote it." in shown and "A fox and a dog [?]." in shown
    assert "The quick brown fox jumps over the lazy dog." in shown  # documents by their text


def test_masked_hides_bracketed_ids_only():
    assert masked("  See [d1] and [ d12 ],\nnot d1.", ["d1", "d12"]) == "See [?] and [?], not d1."
    assert masked("", ["d1"]) == "(empty)"


def test_a_judge_run_is_deterministic(run_folder, tiny_lm):
    _, portfolios = load_portfolios(run_folder)
    first = judge_portfolios(tiny_lm, portfolios, hashing_embed)
    second = judge_portfolios(tiny_lm, portfolios, hashing_embed)
    assert json.dumps(first.judgements) == json.dumps(second.judgements)
    assert first.portfolios == second.portfolios


def test_an_experiment_store_loads(tmp_path, run_folder):
    store = tmp_path / "store"
    store.mkdir()
    data = json.loads((run_folder / "summary.json").read_text())["config"]["data"]
    (store / "plan.json").write_text(json.dumps({"tasks": [{"name": "t", "data": data, "format": "jsonl"}]}))
    rounds = [json.loads(line) for line in (run_folder / "rounds.jsonl").read_text().splitlines()]
    unit = {"task": "t", "model": "m", "seed": 0, "case_id": "case-one", "condition": "xquad(k=2,T=2)",
            "ecr": 1.0, "distinct_2": 0.9,  # no ecr_thresholded: computed from the rounds' raw scores
            "rounds": [{k: v for k, v in r.items() if k != "case_id"} for r in rounds if r["case_id"] == "case-one"]}
    (store / "units.jsonl").write_text(json.dumps(unit) + "\n")
    source, portfolios = load_portfolios(store)
    assert source == "store" and len(portfolios) == 1
    assert portfolios[0].key == {k: unit[k] for k in ("task", "model", "seed", "case_id", "condition")}
    from ascp.metrics import thresholded_coverage

    assert portfolios[0].ecr_thresholded == thresholded_coverage(portfolios[0].rounds)  # the calibrated default


def test_loading_refuses_bad_folders(tmp_path, run_folder):
    with pytest.raises(AscpError, match="is not a folder"):
        load_portfolios(tmp_path / "absent")
    with pytest.raises(AscpError, match="rounds.jsonl"):
        load_portfolios(tmp_path)
    (run_folder.parent / "run-cases.jsonl").unlink()
    with pytest.raises(AscpError, match="case file .* is not here"):
        load_portfolios(run_folder)


# ----- the command ----------------------------------------------------------------------------------
def test_cli_judges_an_ascp_run_end_to_end(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    run = tmp_path / "run"
    result = invoke_cli(["run", "--data", str(data), "--format", "jsonl", "--rank-by", "given",
                                      "--policy", "rotate", "--k", "2", "--T", "2", "--model", str(tiny_model_dir),
                                      "--max-new-tokens", "4", "--device", "cpu", "--embedder", "hashing",
                                      "--out", str(run)])
    assert result.exit_code == 0, result.output
    outputs = []
    for name in ("a", "b"):
        args = ["judge", str(run), "--judge-model", str(tiny_model_dir), "--device", "cpu", "--embedder", "hashing",
                "--out", str(tmp_path / name)]
        result = invoke_cli(args)
        assert result.exit_code == 0, result.output
        outputs.append(tmp_path / name)
    a, b = outputs
    assert sorted(p.name for p in a.iterdir()) == ["judge.json", "judgements.jsonl", "results.md"]
    assert (a / "judgements.jsonl").read_bytes() == (b / "judgements.jsonl").read_bytes()  # reproducible
    lines = [json.loads(line) for line in (a / "judgements.jsonl").read_text().splitlines()]
    assert sum(line["kind"] == "coverage" for line in lines) == 6  # rotate k=2, T=2 over 3 passages: all offered
    summary = json.loads((a / "judge.json").read_text())
    assert summary["counts"]["portfolios"] == 2 and summary["config"]["prompts"]["yes"] == ["Yes", "yes"]
    for panel in ("panel_a", "panel_b", "panel_c"):
        assert all("n" in s for k, s in summary[panel].items() if k != "top1")
    report = (a / "results.md").read_text()
    assert "Command: `ascp judge" in report and "## (b)" in report and "0.654" in report
    # an earlier judge output is not replaced silently
    result = invoke_cli(args[:-1] + [str(a)])
    assert result.exit_code == 2 and "already holds a judge output" in result.output
    assert invoke_cli(args[:-1] + [str(a), "--overwrite"]).exit_code == 0


def _one_sentence(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and lines[0].endswith("."), result.output
    return lines[0]


def test_cli_bad_input_is_one_sentence_and_writes_nothing(tmp_path, run_folder, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    out = tmp_path / "out"
    base = ["--judge-model", str(tiny_model_dir), "--embedder", "hashing", "--out", str(out)]
    assert "is not a folder" in _one_sentence(invoke_cli(["judge", str(tmp_path / "nope"), *base]))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "rounds.jsonl" in _one_sentence(invoke_cli(["judge", str(empty), *base]))
    line = _one_sentence(invoke_cli(["judge", str(run_folder), "--judge-model", str(tmp_path / "no-model"),
                                             "--embedder", "hashing"]))
    assert "no-model" in line
    assert "--limit" in _one_sentence(invoke_cli(["judge", str(run_folder), *base, "--limit", "0"]))
    assert not out.exists() and not (run_folder / "judge").exists()
