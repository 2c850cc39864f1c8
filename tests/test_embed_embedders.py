"""Sentence embedders by name (`ascp.embed.embedders`, `--embedder`): names resolve or fail with the
fix, ids keep embedders apart (also in the embedding cache), mpnet offline, and every embedding
command rejects a missing embedder before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import invoke_cli

from ascp.embed.embedders import check_embedder, embedder_id, hashing_embed, mpnet_dir
from ascp.errors import AscpError
from ascp.loop.simulate import EmbeddingCache

QUESTION = "Who painted the Mona Lisa?"


DOCS = [
    {"id": "bananas", "title": "Banana", "text": "Bananas are long yellow fruit grown in tropical plantations."},
    {"id": "volcano", "title": "Volcano", "text": "A volcano erupts when magma pressure breaks the crust."},
    {"id": "mona", "title": "Mona Lisa", "text": "The Mona Lisa was painted by Leonardo da Vinci in Florence."},
]


def test_embedder_names_resolve_or_fail_with_the_fix(tmp_path, monkeypatch):
    assert check_embedder("hashing") == "hashing"
    with pytest.raises(AscpError, match=r"^--embedder: 'nope' is not default, hashing, minilm, mpnet"):
        check_embedder("nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AscpError, match="not a sentence-transformers folder"):
        check_embedder(str(empty))
    monkeypatch.setenv("ASCP_MPNET", str(tmp_path / "absent"))
    with pytest.raises(AscpError, match=r"--embedder mpnet: .*run `make mpnet`") as info:
        check_embedder("mpnet")
    assert "\n" not in str(info.value) and str(info.value).endswith(".")
    with pytest.raises(AscpError, match="spec field embedder mpnet"):
        check_embedder("mpnet", "spec field embedder")
    fake = tmp_path / "mpnet"
    fake.mkdir()
    (fake / "modules.json").write_text("[]")
    monkeypatch.setenv("ASCP_MPNET", str(fake))
    assert check_embedder("mpnet") == "mpnet" and mpnet_dir() == fake
    assert check_embedder(str(fake)) == str(fake.resolve())


def test_embedder_ids_keep_embedders_apart(tmp_path):
    assert embedder_id("default") == embedder_id("minilm") == "minilm"
    assert embedder_id("mpnet") == "mpnet" and embedder_id("hashing") == "hashing"
    a, b = tmp_path / "a" / "model", tmp_path / "b" / "model"
    assert embedder_id(str(a)) != embedder_id(str(b)) and embedder_id(str(a)).startswith("model-")
    assert embedder_id(str(a)) == embedder_id(str(a))


def test_the_embedding_cache_refuses_another_embedders_vectors(tmp_path):
    path = tmp_path / "cache.npz"
    cache = EmbeddingCache(hashing_embed, path, identity="hashing")
    first = cache(["a text", "another"])
    cache.save()
    again = EmbeddingCache(lambda texts: pytest.fail("embedded again"), path, identity="hashing")
    np.testing.assert_allclose(again(["another"]), first[1:], atol=1e-6)
    with pytest.raises(AscpError, match="holds vectors of embedder 'hashing', not of --embedder 'mpnet'"):
        EmbeddingCache(hashing_embed, path, identity="mpnet")
    legacy = tmp_path / "minilm.npz"  # written before identities: MiniLM's
    EmbeddingCache(hashing_embed, legacy).save()
    cache_without_id = EmbeddingCache(hashing_embed, legacy)
    cache_without_id(["x"])
    cache_without_id.save()
    EmbeddingCache(hashing_embed, legacy, identity="minilm")
    with pytest.raises(AscpError, match="embedder 'minilm'"):
        EmbeddingCache(hashing_embed, legacy, identity="hashing")


@pytest.mark.skipif(mpnet_dir() is None, reason="all-mpnet-base-v2 is not assembled (`make mpnet`)")
def test_mpnet_embeds_offline_in_768_dimensions():
    from ascp.embed.embedders import embed

    vectors = embed([QUESTION, DOCS[2]["text"], DOCS[0]["text"]], "mpnet")
    assert vectors.shape == (3, 768)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[1] @ vectors[0] > vectors[2] @ vectors[0]


def cli(*args: str):
    return invoke_cli(args)


def jsonl_cases(path: Path) -> Path:
    rows = [{"id": f"c{i}", "question": QUESTION, "pool": DOCS, "answers": [["Leonardo"]]} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["run", "simulate", "density", "demo", "experiment", "reproduce", "attribute",
                                     "validate-probe"])
def test_every_embedding_command_rejects_a_missing_embedder_before_any_work(tmp_path, tiny_model_dir,
                                                                            monkeypatch, command):
    monkeypatch.setenv("ASCP_MPNET", str(tmp_path / "absent"))
    data = jsonl_cases(tmp_path / "cases.jsonl")
    out = tmp_path / "out"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "models": [str(tiny_model_dir)], "embedder": "hashing",
                                    "tasks": [{"name": "t", "data": str(data)}],
                                    "grid": {"policy": ["vanilla"], "k": [2], "T": [1]}}), encoding="utf-8")
    args = {
        "run": ["run", "--data", str(data), "--policy", "vanilla", "--k", "2", "--T", "1", "--out", str(out),
                "--model", str(tiny_model_dir)],
        "simulate": ["simulate", "--data", str(data), "--policy", "vanilla", "--k", "2", "--T", "1",
                     "--consumer", "oracle", "--out", str(out)],
        "density": ["density", "--data", str(data), "--out", str(out / "d.json")],
        "demo": ["demo", "--model", str(tiny_model_dir)],
        "experiment": ["experiment", "run", str(spec), "--out", str(out)],
        "reproduce": ["reproduce", "--out", str(out), "--data-root", str(tmp_path)],
        "attribute": ["attribute", "--input", str(data), "--out", str(out / "a.jsonl"), "--estimator", "qd-cosine"],
        "validate-probe": ["validate-probe", "--data", str(data), "--out", str(out)],
    }[command]
    result = cli(*args, "--embedder", "mpnet")
    assert result.exit_code == 2, result.output
    assert "--embedder mpnet" in result.output and "make mpnet" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_the_embedder_flag_of_attribute_needs_a_cosine_estimator(tmp_path):
    data = jsonl_cases(tmp_path / "cases.jsonl")
    result = cli("attribute", "--input", str(data), "--out", str(tmp_path / "a.jsonl"), "--estimator", "loo",
                 "--embedder", "hashing")
    assert result.exit_code == 2
    assert "applies to the estimators that embed text (qd-cosine, yd-cosine) only" in result.output


