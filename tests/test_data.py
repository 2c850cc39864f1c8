"""Data loaders: the generic JSONL case format, the ALCE-style ASQA file, pool ranking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascp.data import detect_format, load_cases
from ascp.data.ranking import rank_pools
from ascp.errors import AscpError
from ascp.types import AnswerUnit, Case, Passage

ASQA = Path(__file__).resolve().parents[2] / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"
needs_asqa = pytest.mark.skipif(not ASQA.is_file(), reason=f"real ASQA pools not found at {ASQA}")
DEMO = Path(__file__).resolve().parents[1] / "src" / "ascp" / "resources" / "demo_cases.jsonl"


def write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_generic_jsonl_keeps_pool_order_and_accepts_alias_lists(tmp_path):
    row = {"id": "c", "question": "q?", "pool": [{"id": "b", "text": "x"}, {"id": "a", "text": "y", "score": 2}],
           "answers": [["one", "1"], {"id": "two", "aliases": ["two"]}, {"claim": "A claim."}]}
    (case,) = load_cases(write(tmp_path / "c.jsonl", [row]))
    assert [p.id for p in case.pool] == ["b", "a"] and [p.rank for p in case.pool] == [1, 2]
    assert case.pool[1].score == 2.0
    assert case.units[0].aliases == ("one", "1") and case.units[1].id == "two"
    assert case.units[2].claim == "A claim." and case.units[2].aliases == ()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"id": "c", "question": "q", "pool": [{"id": "a", "text": "x"}], "answers": []}, "no gold answer units"),
        ({"id": "c", "question": "q", "pool": [], "answers": [["x"]]}, "pool is empty"),
        ({"id": "c", "question": " ", "pool": [{"id": "a", "text": "x"}], "answers": [["x"]]}, "question is empty"),
        ({"id": "c", "question": "q", "pool": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}],
          "answers": [["x"]]}, "appears twice"),
    ],
)
def test_generic_jsonl_bad_cases(tmp_path, row, message):
    with pytest.raises(AscpError, match=message):
        load_cases(write(tmp_path / "c.jsonl", [row]))


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(AscpError, match="does not exist"):
        load_cases(tmp_path / "nope.jsonl")
    path = write(tmp_path / "c.txt", [{"id": 1}])
    with pytest.raises(AscpError, match="cannot tell the format"):
        load_cases(path)
    with pytest.raises(AscpError, match="unknown format"):
        load_cases(path, format="xml")


def test_demo_set_is_well_formed():
    cases = load_cases(DEMO, format="jsonl")
    assert len(cases) >= 5
    for case in cases:
        assert len(case.pool) >= 12 and case.units
        assert all(u.aliases for u in case.units)


def test_bm25_ranking_puts_the_matching_passage_first():
    case = Case("c", "who painted the mona lisa", (
        Passage("x", "The river flows north through the valley."),
        Passage("y", "Leonardo da Vinci painted the Mona Lisa in Florence."),
    ), (AnswerUnit("u", ("leonardo",)),))
    (ranked,) = rank_pools([case], "bm25")
    assert [p.id for p in ranked.pool] == ["y", "x"] and [p.rank for p in ranked.pool] == [1, 2]
    with pytest.raises(AscpError, match="unknown ranker"):
        rank_pools([case], "random")


@pytest.mark.real_data
@needs_asqa
def test_asqa_units_are_qa_pairs_and_pools_are_reranked():
    raw = json.loads(ASQA.read_text(encoding="utf-8"))
    assert detect_format(ASQA) == "asqa"
    cases = load_cases(ASQA, limit=3, rank_by="bm25")
    assert len(cases) == 3
    for case, item in zip(cases, raw, strict=False):
        assert case.id == str(item["id"]) and case.task == "asqa"
        expected = [tuple(qa["short_answers"]) for qa in item["qa_pairs"] if qa["short_answers"]]
        assert [u.aliases for u in case.units] == expected
        assert {p.id for p in case.pool} == {str(d["id"]) for d in item["docs"]}
        assert [p.rank for p in case.pool] == list(range(1, len(case.pool) + 1))
        scores = [p.score for p in case.pool]
        assert scores == sorted(scores, reverse=True)
