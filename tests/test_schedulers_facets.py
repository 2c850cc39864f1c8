"""Per-case work is done only for the cases a run uses, and once per case per process: a limited
load ranks (embeds) only the selected cases, and every policy / condition shares a case's pool
view (`ascp.schedulers.facets.build_pool_view`) with records equal to unshared runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import unit_records

import ascp.schedulers.facets as facets
from ascp.data import load_cases_with_order
from ascp.embed.embedders import hashing_embed
from ascp.experiments import load_spec, make_plan, run_experiment
from ascp.types import Case, Passage


def case_obj(i: int, n: int = 6) -> dict:
    return {"id": f"c{i}", "question": f"when was author {i} born?",
            "pool": [{"id": f"d{j}", "title": "T", "text": f"born in {1850 + (j * 7 + i) % 11} near river {i}"}
                     for j in range(n + i % 3)],
            "answers": [["1850"], ["1853"]]}


def write_cases(path: Path, n: int = 12) -> Path:
    path.write_text("".join(json.dumps(case_obj(i)) + "\n" for i in range(n)), encoding="utf-8")
    return path


class SpyEmbedder:
    """hashing_embed that records every text it is asked to embed."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, texts):
        self.texts.extend(texts)
        return hashing_embed(texts)


def count_views(monkeypatch) -> list[str]:
    """The ids of the cases whose pool view is built (not taken from the cache), in order."""
    built: list[str] = []
    real = facets.pool_view_from_embeddings

    def spy(case, *args, **kwargs):
        built.append(case.id)
        return real(case, *args, **kwargs)

    monkeypatch.setattr(facets, "pool_view_from_embeddings", spy)
    return built


def pool_texts(case: Case) -> list[str]:
    return [case.question, *(p.full_text for p in case.pool)]


@pytest.mark.parametrize("min_pool", [None, 7])
def test_a_limited_load_ranks_only_the_selected_cases(tmp_path, min_pool):
    data = write_cases(tmp_path / "cases.jsonl")
    everything, _ = load_cases_with_order(data, rank_by="dense", min_pool=min_pool, embed_fn=hashing_embed)
    spy = SpyEmbedder()
    limited, order = load_cases_with_order(data, rank_by="dense", limit=2, min_pool=min_pool, embed_fn=spy)
    assert order == "dense"
    assert limited == everything[:2]  # same cases, same order, same pools (ids, ranks, scores)
    # only the two selected cases were embedded (in file order, before ranking)
    raw = {c["id"]: c for c in map(lambda i: case_obj(i), range(12))}
    expected = []
    for case in limited:
        item = raw[case.id]
        expected += [item["question"], *(f"{p['title']}: {p['text']}" for p in item["pool"])]
    assert spy.texts == expected


def test_plan_embeds_only_the_limited_cases(tmp_path, monkeypatch, tiny_model_dir):
    write_cases(tmp_path / "cases.jsonl", n=20)
    spec = {"name": "limit", "tasks": [{"name": "toy", "data": "cases.jsonl", "format": "jsonl",
                                        "rank_by": "dense", "limit": 2}],
            "models": [str(tiny_model_dir)], "seeds": [0], "conditions": ["rotate(k=2,T=2,estimator=bm25)"],
            "embedder": "hashing"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    spy = SpyEmbedder()
    import ascp.experiments.embedders as embedders

    monkeypatch.setattr(embedders, "resolve_embedder", lambda name: spy)
    plan = make_plan(load_spec(tmp_path / "spec.yaml"))
    cases = plan.cases["toy"]
    assert [c.id for c in cases] == ["c0", "c1"]
    assert sorted(spy.texts) == sorted(t for c in cases for t in pool_texts(c))


def test_a_view_is_built_once_per_case_and_embedder(monkeypatch):
    built = count_views(monkeypatch)
    case = Case("c", "who?", (Passage("a", "x one", title="T"), Passage("b", "y two")), ())
    spy = SpyEmbedder()
    first = facets.build_pool_view(case, spy)
    assert facets.build_pool_view(case, spy) is first and built == ["c"]
    assert not first.embeddings.flags.writeable  # one policy cannot change what the next one reads
    other = SpyEmbedder()  # another embedder, another pool order, an edited case: built afresh
    facets.build_pool_view(case, other)
    facets.build_pool_view(Case("c", "who?", case.pool[::-1], ()), spy)
    facets.build_pool_view(Case("c", "who else?", case.pool, ()), spy)
    assert built == ["c"] * 4


def strip_times(directory: Path) -> list[dict]:
    return sorted(unit_records(directory), key=lambda r: json.dumps(r, sort_keys=True))


def test_experiment_records_equal_an_unshared_run(tmp_path, monkeypatch, tiny_model_dir):
    """Conditions and seeds share each case's view; every record equals a run that builds a view
    per condition (cache size 0: today's behaviour before views were shared)."""
    write_cases(tmp_path / "cases.jsonl", n=3)
    spec = {"name": "share", "tasks": [{"name": "toy", "data": "cases.jsonl", "format": "jsonl", "rank_by": "dense"}],
            "models": [str(tiny_model_dir)], "seeds": [0, 1], "sampling": {"max_new_tokens": 4},
            "embedder": "hashing", "batch_cases": 2,
            "conditions": ["rotate(k=2,T=2,estimator=bm25)", "mmr(k=2,T=2,estimator=bm25)", "ascp(k=2,T=2)",
                           "ascp(k=3,T=2,estimator=bm25)"]}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    built = count_views(monkeypatch)
    facets.clear_pool_views()
    run_experiment(tmp_path / "spec.yaml", tmp_path / "shared")
    shared_builds = len(built)
    monkeypatch.setattr(facets, "POOL_VIEW_CACHE_SIZE", 0)
    facets.clear_pool_views()
    built.clear()
    run_experiment(tmp_path / "spec.yaml", tmp_path / "unshared")
    assert shared_builds == 3 and len(built) == 3 * 2 * 4  # once per case vs once per (case, seed, condition)
    assert strip_times(tmp_path / "shared") == strip_times(tmp_path / "unshared")


def test_policies_of_one_process_share_views_with_equal_portfolios(monkeypatch, tiny_lm):
    from ascp.api import run_portfolios

    cases = [Case(f"q{i}", f"when was author {i} born?",
                  tuple(Passage(f"d{j}", f"born in {1850 + (j * 5 + i) % 9} near river {i}", title="T")
                        for j in range(6)), ()) for i in range(2)]
    policies = ["rotate", "vanilla", "mmr", "ascp"]

    def run_all():
        return [run_portfolios(cases, policy=p, k=2, T=2, model=tiny_lm, estimator="bm25", seed=0,
                               max_new_tokens=4, embed_fn=hashing_embed) for p in policies]

    def plain(portfolios):
        return [[(p.case_id, p.policy, [r.to_json() | {"seconds": 0, "generation_seconds": 0} for r in p.rounds],
                  p.metrics) for p in run] for run in portfolios]

    built = count_views(monkeypatch)
    facets.clear_pool_views()
    shared = plain(run_all())
    assert built == ["q0", "q1"]  # once per case for all four policies
    monkeypatch.setattr(facets, "POOL_VIEW_CACHE_SIZE", 0)
    facets.clear_pool_views()
    assert plain(run_all()) == shared
