"""The request cache (`ascp.lm.request_cache`): every hit equals the uncached path, nothing is fed
twice across calls, runs and processes, and a file it cannot trust or use never changes a number."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import fill_disk, invoke_cli, run_ascp, unit_records

from ascp.lm.request_cache import CachedModel, RequestCache, cached_model, model_fingerprint
from ascp.lm.sampling import SamplingConfig


class Counting:
    """A model that counts the rows it is asked to generate and score (everything else is `lm`'s)."""

    def __init__(self, lm) -> None:
        self.lm = lm
        self.generated = 0
        self.scored = 0

    def __getattr__(self, name):
        return getattr(self.lm, name)

    @property
    def context_window(self) -> int:
        return self.lm.context_window

    def generate(self, prompts, config, seeds, batch_size=8, on_batch=None):
        self.generated += len(prompts)
        return self.lm.generate(prompts, config, seeds, batch_size, on_batch)

    def score(self, prompts, response, reuse_prefix=True):
        self.scored += len(prompts)
        return self.lm.score(prompts, response, reuse_prefix)


def prompts_of(lm, n: int) -> list[list[int]]:
    from ascp.types import Passage

    return [list(lm.encode_prompt(f"question {i}?", [Passage(id=f"d{i}", text=f"passage number {i} says {i * 7}.")]
                                  ).ids) for i in range(n)]


@pytest.fixture()
def counted(tiny_lm, tmp_path):
    inner = Counting(tiny_lm)
    inner.fingerprint = model_fingerprint(tiny_lm)
    lm = cached_model(inner, tmp_path / "requests.sqlite")
    assert isinstance(lm, CachedModel)
    return inner, lm


def test_generation_hits_equal_the_uncached_path_and_feed_nothing(counted, tiny_lm):
    inner, lm = counted
    prompts, config, seeds = prompts_of(tiny_lm, 4), SamplingConfig(max_new_tokens=6), [3, 4, 5, 6]
    plain = tiny_lm.generate(prompts, config, seeds)
    assert lm.generate(prompts, config, seeds) == plain and inner.generated == 4
    assert lm.generate(prompts, config, seeds) == plain and inner.generated == 4  # all four from the file
    # a call mixing known and new rows computes only the new ones, in order
    mixed = lm.generate([prompts[1], prompts[0]], config, [4, 9])
    assert inner.generated == 5 and mixed[0] == plain[1]
    assert mixed[1] == tiny_lm.generate([prompts[0]], config, [9])[0]
    # another setting or seed is another row
    lm.generate(prompts[:1], SamplingConfig(max_new_tokens=6, temperature=0.3), [3])
    assert inner.generated == 6
    stats = lm.cache.stats
    assert (stats.generation_hits, stats.generation_misses) == (5, 6)


def test_score_hits_equal_the_uncached_path_and_report_tokens_fed(counted, tiny_lm):
    inner, lm = counted
    prompts = prompts_of(tiny_lm, 3)
    response = tiny_lm.encode("passage number one says seven.")
    plain = tiny_lm.score(prompts, response)
    first = lm.score(prompts, response)
    assert first.tokens_processed == plain.tokens_processed > 0
    for a, b in zip(first.logprobs, plain.logprobs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    again = lm.score(prompts, response)
    assert again.tokens_processed == 0 and inner.scored == 3
    assert all(np.array_equal(a, b) for a, b in zip(again.logprobs, first.logprobs, strict=True))
    # one token-counting rule (`tokens_fed`): a hit saves the whole pass a from-scratch scorer feeds
    assert lm.cache.stats.tokens_saved == sum(len(p) + len(response) - 1 for p in prompts)
    assert lm.cache.stats.tokens_saved == tiny_lm.score(prompts, response, reuse_prefix=False).tokens_processed
    # the naive reference always computes
    lm.score(prompts[:1], response, reuse_prefix=False)
    assert inner.scored == 4


def test_fingerprints_tell_models_and_dtypes_apart(tiny_lm, tiny_model_dir):
    from ascp.lm.resolve import load_language_model
    from ascp.lm.tiny import tiny_language_model

    assert model_fingerprint(tiny_lm) == model_fingerprint(tiny_language_model(seed=0))
    assert model_fingerprint(tiny_lm) != model_fingerprint(tiny_language_model(seed=1))
    folder = load_language_model(str(tiny_model_dir), backend="hf", device="cpu")
    assert model_fingerprint(folder) == model_fingerprint(load_language_model(str(tiny_model_dir), backend="hf",
                                                                              device="cpu"))
    half = load_language_model(str(tiny_model_dir), backend="hf", device="cpu", dtype="bfloat16")
    assert model_fingerprint(half) != model_fingerprint(folder)
    (tiny_model_dir / "config.json").touch()  # the weights files' identity, not the config's mtime, decides
    assert model_fingerprint(folder) == model_fingerprint(load_language_model(str(tiny_model_dir), backend="hf",
                                                                              device="cpu"))


class Opaque(Counting):
    backend = "my-own-server"  # a backend ascp does not know, without a `fingerprint`
    fingerprint = None  # (else `Counting` would pass on the wrapped model's own)


def test_a_model_it_cannot_fingerprint_runs_uncached_with_one_warning(tiny_lm, tmp_path):
    with pytest.warns(UserWarning, match="cannot tell model .* apart from others") as caught:
        lm = cached_model(Opaque(tiny_lm), tmp_path / "r.sqlite")
    assert isinstance(lm, Opaque) and len(caught) == 1 and not (tmp_path / "r.sqlite").exists()


def test_a_damaged_or_foreign_entry_is_computed_again_never_returned(counted, tiny_lm, tmp_path):
    inner, lm = counted
    prompts, config = prompts_of(tiny_lm, 2), SamplingConfig(max_new_tokens=6)
    plain = tiny_lm.generate(prompts, config, [1, 2])
    lm.generate(prompts, config, [1, 2])
    db = sqlite3.connect(tmp_path / "requests.sqlite")
    (key0, value0), (key1, value1) = db.execute("SELECT key, value FROM rows ORDER BY rowid").fetchall()
    db.execute("UPDATE rows SET value = ? WHERE key = ?", (value0.replace(b'"text": "', b'"text": "X'), key0))
    db.execute("UPDATE rows SET value = ? WHERE key = ?", (value0, key1))  # a row copied under another key
    db.commit()
    db.close()
    assert lm.generate(prompts, config, [1, 2]) == plain
    assert inner.generated == 4 and lm.cache.stats.discarded == 2
    assert lm.generate(prompts, config, [1, 2]) == plain and inner.generated == 4  # stored whole again


@pytest.mark.parametrize("damage", ["garbage", "schema"])
def test_a_file_it_cannot_use_warns_once_and_the_run_goes_on_uncached(tiny_lm, tmp_path, damage):
    path = tmp_path / "requests.sqlite"
    if damage == "garbage":
        path.write_bytes(b"this is no database at all" * 100)
        reason = "it is damaged"
    else:
        RequestCache(path).close()
        db = sqlite3.connect(path)
        db.execute("UPDATE meta SET value = '999' WHERE name = 'schema'")
        db.commit()
        db.close()
        reason = "it was written by another ascp version"
    with pytest.warns(UserWarning, match=f"request cache {re.escape(str(path))}: {reason}.*running without it"
                      ) as caught:
        lm = cached_model(tiny_lm, path)
    assert lm is tiny_lm and len(caught) == 1
    assert "\n" not in str(caught[0].message)


def test_a_read_only_or_full_disk_never_stops_the_run(tiny_lm, small_disk):
    read_only = small_disk("64k", read_only=True)
    with pytest.warns(UserWarning, match="running without it"):
        assert cached_model(tiny_lm, read_only / "requests.sqlite") is tiny_lm
    disk = small_disk("256k")
    lm = cached_model(tiny_lm, disk / "requests.sqlite")
    assert isinstance(lm, CachedModel)
    filler = fill_disk(disk)
    prompts, config = prompts_of(tiny_lm, 6), SamplingConfig(max_new_tokens=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = lm.generate(prompts, config, list(range(6)))
    assert out == tiny_lm.generate(prompts, config, list(range(6)))
    assert any("the disk is full" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert not lm.cache.enabled  # off for the rest of the run
    filler.unlink()


def test_processes_share_one_file(tmp_path):
    """Four processes write and read one cache file at once (as Ray workers on one machine do)."""
    script = (
        "import sys\n"
        "from ascp.lm.request_cache import RequestCache\n"
        "c = RequestCache(sys.argv[1]); me = sys.argv[2]\n"
        "for i in range(200):\n"
        "    c.put_many([(f'{me}-{i}'.encode(), b'v' * 64), (f'shared-{i}'.encode(), b's' * 64)])\n"
        "    assert c.get_many([f'{me}-{i}'.encode()]) == {f'{me}-{i}'.encode(): b'v' * 64}\n"
        "print('ok')\n")
    path = tmp_path / "shared.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), f"p{n}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 and out.strip() == "ok" for p, (out, _) in zip(procs, outs, strict=True)), outs
    cache = RequestCache(path)
    keys = [f"p{n}-{i}".encode() for n in range(4) for i in range(200)] + [f"shared-{i}".encode() for i in range(200)]
    assert len(cache.get_many(keys)) == 1000 and cache.stats.discarded == 0


def write_spec(folder: Path, model_dir: Path, policies: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cases.jsonl").write_text("".join(json.dumps({
        "id": f"c{i}", "question": f"when was author c{i} born?", "answers": [["1850"]],
        "pool": [{"id": f"d{j}", "text": f"author c{i} was born in {1850 + j} in town {j}."} for j in range(6)]})
        + "\n" for i in range(4)))
    spec = {"name": "cached", "tasks": [{"name": "toy", "data": "cases.jsonl"}], "models": [str(model_dir)],
            "seeds": [0], "grid": {"policy": policies, "k": [2], "T": [2]}, "sampling": {"max_new_tokens": 5},
            "embedder": "hashing", "batch_cases": 2}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def rows_of(store: Path) -> dict:
    return {(r["case_id"], r["condition"]): r for r in unit_records(store)}


def close_rows(a: dict, b: dict) -> None:
    """Same units, contexts and responses; scores within 1e-6 (a hit's prefix reuse ran in another order)."""
    assert a.keys() == b.keys()
    for key in a:
        for r, s in zip(a[key]["rounds"], b[key]["rounds"], strict=True):
            assert (r["context"], r["response"]) == (s["context"], s["response"]), key
            assert r["scores"] == pytest.approx(s["scores"], abs=1e-6), key


def test_an_experiment_rerun_or_grown_feeds_nothing_twice_and_equals_uncached_runs(tmp_path, tiny_model_dir):
    from ascp.experiments.run import run_experiment

    cache = tmp_path / "requests.sqlite"
    spec = write_spec(tmp_path / "a", tiny_model_dir, ["rotate"])
    plain = run_experiment(spec, tmp_path / "plain")
    first = run_experiment(spec, tmp_path / "first", request_cache=cache)
    assert not any("request cache" in line for line in plain.savings) and "0 of 8 generations" in first.savings[0]
    close_rows(rows_of(tmp_path / "first"), rows_of(tmp_path / "plain"))
    again = run_experiment(spec, tmp_path / "again", request_cache=cache)
    assert "8 of 8 generations and" in again.savings[0]
    hits, total = (int(x) for x in again.savings[0].split("generations and ")[1].split(" scored")[0].split(" of "))
    assert hits == total > 0
    assert rows_of(tmp_path / "again") == rows_of(tmp_path / "first")  # every number from the file, exactly
    # a grown experiment: vanilla's round 1 is rotate's (the top 2, same seeds), so it comes from the file
    grown = write_spec(tmp_path / "b", tiny_model_dir, ["rotate", "vanilla"])
    both = run_experiment(grown, tmp_path / "grown", request_cache=cache)
    assert "12 of 16 generations" in both.savings[0], both.savings
    uncached = run_experiment(grown, tmp_path / "grown-plain")
    close_rows(rows_of(tmp_path / "grown"), rows_of(tmp_path / "grown-plain"))
    assert not any("request cache" in line for line in uncached.savings)


def test_the_command_line_says_what_the_cache_saved(tmp_path, tiny_model_dir):
    requests = tmp_path / "req.jsonl"
    requests.write_text("".join(json.dumps({"id": f"r{i}", "question": f"when was c{i} born?", "response": "In 1850.",
                                            "passages": [{"id": f"d{j}", "text": f"c{i} was born in {1850 + j}."}
                                                         for j in range(3)]}) + "\n" for i in range(2)))
    args = ["attribute", "--input", requests, "--model", tiny_model_dir, "--backend", "hf",
            "--request-cache", tmp_path / "cache"]
    (tmp_path / "cache").mkdir()  # a folder holds requests.sqlite
    first = invoke_cli([*args, "--out", tmp_path / "one.jsonl"])
    assert first.exit_code == 0, first.output
    assert "0 of 0 generations and 0 of 8 scored prompts answered from the cache" in first.output
    second = invoke_cli([*args, "--out", tmp_path / "two.jsonl"])
    assert second.exit_code == 0 and "8 of 8 scored prompts answered from the cache" in second.output
    def results(name: str) -> list[dict]:  # the readings, without what they cost
        return [{k: v for k, v in json.loads(line).items() if k not in ("seconds", "tokens_processed")}
                for line in (tmp_path / name).read_text().splitlines()]

    assert results("one.jsonl") == results("two.jsonl")
    fed = [[json.loads(line)["tokens_processed"] for line in (tmp_path / name).read_text().splitlines()]
           for name in ("one.jsonl", "two.jsonl")]
    assert all(n > 0 for n in fed[0]) and fed[1] == [0, 0]  # the second run fed the model nothing
    assert (tmp_path / "cache" / "requests.sqlite").exists()


def test_a_damaged_cache_file_is_one_warning_line_and_the_command_goes_on(tmp_path, tiny_model_dir):
    requests = tmp_path / "req.jsonl"
    requests.write_text(json.dumps({"id": "r", "question": "when?", "response": "In 1850.",
                                    "passages": [{"id": "d", "text": "born in 1850."}]}) + "\n")
    damaged = tmp_path / "requests.sqlite"
    damaged.write_bytes(b"not a database" * 200)
    done = run_ascp("attribute", "--input", requests, "--out", tmp_path / "s.jsonl", "--model", tiny_model_dir,
                    "--backend", "hf", "--request-cache", damaged, home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "request cache" in line]
    assert warned == [f"warning: request cache {damaged}: it is damaged (not a SQLite database); running without "
                      "it (nothing computed is reused)."], done.stderr
    assert "Traceback" not in done.stderr and (tmp_path / "s.jsonl").exists()


def test_ray_workers_fill_and_read_one_cache(tmp_path, tiny_model_dir):
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")
    from ascp.experiments.run import run_experiment

    cache = tmp_path / "requests.sqlite"
    spec = write_spec(tmp_path / "a", tiny_model_dir, ["rotate", "vanilla"])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        first = run_experiment(spec, tmp_path / "ray", executor="ray", workers=2, request_cache=cache)  # both write
        again = run_experiment(spec, tmp_path / "again", executor="ray", workers=2, request_cache=cache)
    finally:
        ray.shutdown()
    lines = [line for line in again.savings if "request cache" in line]
    assert len(lines) == 2 and len([line for line in first.savings if "request cache" in line]) == 2
    for line in lines:  # each worker answered every row from the file
        counts = re.findall(r"(\d+) of (\d+) (?:generations|scored prompts)", line)
        assert len(counts) == 2 and all(hits == total for hits, total in counts), line
    # rows both workers computed at once (vanilla's round 1 is rotate's) hold the first one stored
    close_rows(rows_of(tmp_path / "again"), rows_of(tmp_path / "ray"))
    run_experiment(spec, tmp_path / "local")
    close_rows(rows_of(tmp_path / "ray"), rows_of(tmp_path / "local"))


def test_the_summaries_token_counts_agree_with_a_recount_from_the_records(tmp_path, tiny_model_dir):
    """One token-counting rule (`ascp.lm.protocol.tokens_fed`): the tokens a rerun's request cache says
    it did not feed are the records' own: each round's prompt (its generation's prefill) and, per
    scored prompt of its leave-one-out probe (the full prompt and each deletion), the prompt and the
    response but its last token; the scorer's own count of a from-scratch pass is the same number."""
    from ascp.experiments.run import run_experiment
    from ascp.lm.protocol import tokens_fed
    from ascp.lm.resolve import load_language_model
    from ascp.types import Passage

    cache = tmp_path / "requests.sqlite"
    spec = write_spec(tmp_path / "a", tiny_model_dir, ["rotate"])
    run_experiment(spec, tmp_path / "first", request_cache=cache)
    again = run_experiment(spec, tmp_path / "again", request_cache=cache)
    said = int(re.search(r"\(([\d,]+) tokens not fed\)", again.savings[0]).group(1).replace(",", ""))
    lm = load_language_model(str(tiny_model_dir), backend="hf", device="cpu")
    cases = {c["id"]: c for c in map(json.loads, (tmp_path / "a" / "cases.jsonl").read_text().splitlines())}
    generation = scoring = scratch = 0
    for unit in unit_records(tmp_path / "again"):
        case = cases[unit["case_id"]]
        texts = {p["id"]: p["text"] for p in case["pool"]}
        for r in unit["rounds"]:
            prompt = lm.encode_prompt(case["question"], [Passage(id=i, text=texts[i]) for i in r["context"]])
            assert prompt.num_tokens == r["prompt_tokens"]
            generation += tokens_fed(r["prompt_tokens"])
            response = lm.encode(r["response"])
            assert len(response) == r["response_tokens"]
            if not response:
                continue
            deletions = [lm.encode(prompt.edited_text({i + 1: ""})) for i in range(len(r["context"]))]
            variants = [list(prompt.ids), *deletions]
            scoring += sum(tokens_fed(len(v), len(response)) for v in variants)
            scratch += lm.score(variants, response, reuse_prefix=False).tokens_processed
    assert scoring > 0 and said == generation + scoring and scratch == scoring
