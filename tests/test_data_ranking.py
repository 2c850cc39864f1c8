"""Pool order (`ascp.data.ranking`, `load_cases_with_order`): ALCE files keep their retriever's order
under `--rank-by auto` (paper Sec. 7.1), merged-retriever unions are re-ranked, and the order used
is recorded by plans, runs and simulations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import invoke_cli

from ascp.data import UNRANKED_ORDER, auto_order, load_cases, load_cases_with_order
from ascp.data.alce import merged_retrievers, read_alce
from ascp.embed.embedders import embedded_minilm_dir, hashing_embed

SHARED_ASQA = Path(__file__).resolve().parents[2] / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"


QUESTION = "Who painted the Mona Lisa?"


DOCS = [
    {"id": "bananas", "title": "Banana", "text": "Bananas are long yellow fruit grown in tropical plantations."},
    {"id": "volcano", "title": "Volcano", "text": "A volcano erupts when magma pressure breaks the crust."},
    {"id": "mona", "title": "Mona Lisa", "text": "The Mona Lisa was painted by Leonardo da Vinci in Florence."},
]


FILE_ORDER = ["bananas", "volcano", "mona"]


def alce_file(path: Path, sources: list[str | None] | None = None, n_items: int = 2) -> Path:
    """An ALCE ASQA file; `sources` gives each doc a retriever name (None: no `source` field)."""
    docs = [dict(d, score=30.0 - i, **({"source": sources[i]} if sources and sources[i] else {}))
            for i, d in enumerate(DOCS)]
    items = [{"id": f"q{n}", "question": QUESTION, "docs": docs,
              "qa_pairs": [{"question": QUESTION, "short_answers": ["Leonardo da Vinci"]}]} for n in range(n_items)]
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


def ids(case) -> list[str]:
    return [p.id for p in case.pool]


def test_alce_files_keep_their_retriever_order_under_auto(tmp_path):
    path = alce_file(tmp_path / "gtr.json", sources=["gtr", "gtr", "gtr"])
    cases, order = load_cases_with_order(path, embed_fn=hashing_embed)
    assert order == "given" == auto_order("asqa")
    assert ids(cases[0]) == FILE_ORDER and [p.rank for p in cases[0].pool] == [1, 2, 3]
    assert cases[0].pool[0].score == 30.0  # the retriever's own score is kept
    # Asking for a re-ranking still re-ranks.
    (dense,), dense_order = load_cases_with_order(path, rank_by="dense", limit=1, embed_fn=hashing_embed)
    assert dense_order == "dense" and ids(dense)[0] == "mona"
    (bm25,) = load_cases(path, rank_by="bm25", limit=1)
    assert ids(bm25)[0] == "mona"


def test_a_merged_union_of_retrievers_is_re_ranked_under_auto(tmp_path):
    path = alce_file(tmp_path / "union.json", sources=["sparse", "hybrid", "sparse"])
    assert read_alce(path)[1] is False and merged_retrievers(json.loads(path.read_text()))
    cases, order = load_cases_with_order(path, embed_fn=hashing_embed)
    assert order == UNRANKED_ORDER == "dense"
    assert ids(cases[0])[0] == "mona" and ids(cases[0]) != FILE_ORDER
    (given,), given_order = load_cases_with_order(path, rank_by="given", limit=1)
    assert given_order == "given" and ids(given) == FILE_ORDER


def test_one_retriever_or_no_source_field_is_a_ranking(tmp_path):
    for name, sources in (("none.json", None), ("one.json", ["bm25", "bm25", "bm25"]),
                          ("partial.json", ["gtr", None, "gtr"])):
        path = alce_file(tmp_path / name, sources=sources)
        assert read_alce(path)[1] is True
        assert load_cases_with_order(path, format="alce", embed_fn=hashing_embed)[1] == "given"
    for fmt in ("qampari", "eli5", "alce"):
        assert auto_order(fmt) == "given"
    assert auto_order("hotpotqa") == "dense" and auto_order("jsonl") == "given"  # unchanged


@pytest.mark.skipif(embedded_minilm_dir() is None, reason="needs the embedded MiniLM wheel")
def test_auto_keeps_a_file_order_that_minilm_would_change(tmp_path):
    path = alce_file(tmp_path / "gtr.json", n_items=1)
    (minilm,) = load_cases(path, rank_by="dense")  # the default dense embedder: MiniLM
    assert ids(minilm)[0] == "mona" and ids(minilm) != FILE_ORDER
    (auto,) = load_cases(path)
    assert ids(auto) == FILE_ORDER


@pytest.mark.skipif(not SHARED_ASQA.is_file(), reason="../shared/data is absent")
def test_the_shared_asqa_pools_say_their_order_is_not_a_ranking():
    assert read_alce(SHARED_ASQA)[1] is False  # docs name `sparse` and `hybrid` retrievers


def test_the_presets_state_rank_by_explicitly():
    from importlib import resources

    folder = resources.files("ascp") / "resources" / "presets"
    presets = [p for p in folder.iterdir() if p.name.endswith(".yaml")]
    assert presets
    for preset in presets:
        for task in yaml.safe_load(preset.read_text(encoding="utf-8"))["tasks"]:
            assert task.get("rank_by") in ("given", "dense", "bm25"), (preset.name, task["name"])
            if task["data"].endswith("asqa_wikidpr_pools.json"):
                assert task["rank_by"] == "dense"


def test_the_experiment_plan_records_the_order_auto_used(tmp_path, tiny_model_dir):
    from ascp.experiments import load_spec, make_plan

    alce_file(tmp_path / "gtr.json")
    alce_file(tmp_path / "union.json", sources=["sparse", "hybrid", "sparse"])
    spec = {"name": "orders", "models": [str(tiny_model_dir)], "embedder": "hashing",
            "tasks": [{"name": "gtr", "data": "gtr.json"}, {"name": "union", "data": "union.json"},
                      {"name": "forced", "data": "union.json", "rank_by": "given"}],
            "grid": {"policy": ["vanilla"], "k": [2], "T": [1]}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    plan = make_plan(load_spec(tmp_path / "spec.yaml"))
    tasks = {t["name"]: t for t in plan.manifest()["tasks"]}
    assert tasks["gtr"]["order"] == "given" and tasks["union"]["order"] == "dense"
    assert "order" not in tasks["forced"] and tasks["forced"]["rank_by"] == "given"  # explicit: names itself
    assert ids(plan.cases["gtr"][0]) == FILE_ORDER and ids(plan.cases["union"][0])[0] == "mona"


def cli(*args: str):
    return invoke_cli(args)


def test_simulate_records_order_and_embedder_and_caches_per_embedder(tmp_path):
    from ascp.caching.files import ascp_home

    union = alce_file(tmp_path / "union.json", sources=["sparse", "hybrid", "sparse"])
    gtr = alce_file(tmp_path / "gtr.json")
    for data, order in ((union, "dense"), (gtr, "given")):
        out = tmp_path / f"sim-{data.stem}"
        result = cli("simulate", "--data", str(data), "--policy", "vanilla,rotate", "--k", "1", "--T", "2",
                     "--consumer", "toy(q=0.5)", "--out", str(out), "--embedder", "hashing", "--n-boot", "100")
        assert result.exit_code == 0, result.output
        config = json.loads((out / "vanilla" / "summary.json").read_text())["config"]
        assert config["order"] == order and config["embedder"] == "hashing" and config["rank_by"] == "auto"
        first = json.loads((out / "vanilla" / "rounds.jsonl").read_text().splitlines()[0])
        assert first["context"] == [("mona" if order == "dense" else "bananas")]  # vanilla: rank 1
    assert (ascp_home() / "embeddings" / "hashing.npz").is_file()


def test_run_records_order_and_embedder(tmp_path, tiny_model_dir):
    data = alce_file(tmp_path / "gtr.json", n_items=1)
    out = tmp_path / "run"
    result = cli("run", "--data", str(data), "--policy", "vanilla", "--k", "2", "--T", "1", "--out", str(out),
                 "--model", str(tiny_model_dir), "--max-new-tokens", "3", "--embedder", "hashing")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "summary.json").read_text())["config"]
    assert config["order"] == "given" and config["embedder"] == "hashing"
    (line,) = (out / "rounds.jsonl").read_text().splitlines()
    assert json.loads(line)["context"] == FILE_ORDER[:2]


