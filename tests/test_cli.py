"""`ascp attribute` end to end (subprocesses against a saved tiny model) and its user errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import cli_env, run_ascp

from ascp.attribution import free_threshold
from ascp.attribution.loo import LeaveOneOut
from ascp.types import Passage

OUTPUT_KEYS = {
    "id", "estimator", "response", "response_tokens", "scores", "normalized", "used", "threshold", "prompt",
    "passage_spans", "seconds", "tokens_processed", "unit",
}

PASSAGES = [
    {"id": "shelley-mary", "title": "Mary Shelley",
     "text": "Mary Shelley wrote the Gothic novel Frankenstein in 1818."},
    {"id": "shelley-percy", "title": "Percy Bysshe Shelley", "text": "Percy Shelley was an English Romantic poet."},
    {"id": "film", "text": "Frankenstein is a 1931 American horror film directed by James Whale."},
]
# Input order is deliberately not sorted by id.
REQUESTS = [
    {"id": "zeta", "question": "Who wrote Frankenstein?", "passages": PASSAGES,
     "response": "Frankenstein was written by Mary Shelley."},
    {"id": "alpha", "question": "Who was Percy Shelley?", "passages": PASSAGES[1:],
     "response": "An English Romantic poet."},
    {"id": "mid", "question": "When was the film made?", "passages": PASSAGES[::-1], "response": None},
]
SEED = "5"


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----- successful runs ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_run(tmp_path_factory, tiny_model_dir):
    base = tmp_path_factory.mktemp("cli-good")
    inp = write_jsonl(base / "requests.jsonl", REQUESTS)
    out = base / "out" / "results.jsonl"
    out.parent.mkdir()
    proc = run_ascp("attribute", "--input", str(inp), "--out", str(out), "--model", str(tiny_model_dir),
                   "--seed", SEED, "--max-new-tokens", "8", home=base / "home")
    return proc, out


def test_attribute_writes_one_line_per_request_in_order(good_run):
    proc, out = good_run
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == [r["id"] for r in REQUESTS]
    assert sorted(p.name for p in out.parent.iterdir()) == ["results.jsonl"]  # no temporary files left
    for row, request in zip(rows, REQUESTS, strict=True):
        assert set(row) == OUTPUT_KEYS
        ids = [p["id"] for p in request["passages"]]
        assert row["estimator"] == "loo"
        assert list(row["scores"]) == ids and list(row["normalized"]) == ids and list(row["passage_spans"]) == ids
        assert all(np.isfinite(v) for v in row["scores"].values())
        norm = np.array(list(row["normalized"].values()))
        assert np.all(norm >= 0) and (norm.sum() == pytest.approx(1.0) or norm.sum() == 0)
        tau = free_threshold(len(ids))
        assert row["used"] == [d for d in ids if row["normalized"][d] >= tau and row["normalized"][d] > 0]
        assert isinstance(row["seconds"], float) and row["seconds"] >= 0
        assert row["response_tokens"] >= 1
        if request["response"] is not None:
            assert row["response"] == request["response"]


def test_progress_reaches_a_log_as_plain_lines(good_run):
    # stderr is a pipe here, where rich draws no bar: the probe's progress still reaches it.
    proc, _ = good_run
    assert f"probing (loo): {len(REQUESTS)}/{len(REQUESTS)} (" in proc.stderr, proc.stderr


def test_passage_spans_slice_the_prompt(good_run):
    _, out = good_run
    for row, request in zip(read_jsonl(out), REQUESTS, strict=True):
        prompt = row["prompt"]
        previous = -1
        for p in request["passages"]:
            start, end = row["passage_spans"][p["id"]]
            block = prompt[start:end]
            assert block.startswith(f"[{p['id']}]")
            assert p["text"] in block
            assert start > previous  # context order
            previous = start
        assert request["question"] in prompt


def test_cli_scores_match_the_in_process_probe(good_run, tiny_lm, make_item):
    # The saved folder reloads to the same model: CLI scores equal in-process LOO scores.
    _, out = good_run
    for row, request in zip(read_jsonl(out), REQUESTS, strict=True):
        if request["response"] is None:
            continue
        passages = [Passage(id=p["id"], text=p["text"], title=p.get("title", "")) for p in request["passages"]]
        item = make_item(tiny_lm, request["question"], passages, request["response"])
        expected = LeaveOneOut().score(tiny_lm, item).values
        assert row["prompt"] == item.prompt.text
        assert row["response_tokens"] == len(item.response_ids)
        np.testing.assert_allclose(list(row["scores"].values()), expected, rtol=0, atol=1e-5)


def test_free_protocol_is_reproducible_under_the_seed(good_run, tmp_path, tiny_model_dir, tiny_lm):
    _, out = good_run
    generated = {r["id"]: r for r in read_jsonl(out)}["mid"]
    assert generated["response"].strip()
    # The response scored is tokenizer(response) of the text reported (at most 8 tokens sampled;
    # a random model's samples may re-tokenize to other, more tokens).
    canonical = tiny_lm.tokenizer(generated["response"], add_special_tokens=False)["input_ids"]
    assert generated["response_tokens"] == len(canonical) >= 1
    # Same seed, the free request alone: the same response (seeded per request id, not per batch).
    inp = write_jsonl(tmp_path / "free.jsonl", [REQUESTS[2]])
    again = tmp_path / "again.jsonl"
    proc = run_ascp("attribute", "--input", str(inp), "--out", str(again), "--model", str(tiny_model_dir),
                   "--seed", SEED, "--max-new-tokens", "8", home=tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    (row,) = read_jsonl(again)
    assert row["response"] == generated["response"]
    assert row["response_tokens"] == generated["response_tokens"]
    assert row["scores"] == pytest.approx(generated["scores"], abs=1e-6)


def test_help_exits_zero(tmp_path):
    proc = run_ascp("--help", home=tmp_path)
    assert proc.returncode == 0
    assert "attribute" in proc.stdout
    proc = run_ascp("attribute", "--help", home=tmp_path)
    assert proc.returncode == 0
    assert "--estimator" in proc.stdout and "--input" in proc.stdout


def test_console_script_help(tmp_path):
    script = Path(sys.executable).parent / "ascp"
    if not script.exists():
        pytest.skip("the `ascp` console script is not installed next to this interpreter")
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=cli_env(tmp_path),
                          timeout=120, check=False)
    assert proc.returncode == 0 and "attribute" in proc.stdout


# ----- user errors ----------------------------------------------------------------------------
def request(**changes):
    base = {"id": "r1", "question": "Who wrote Frankenstein?", "passages": PASSAGES[:2],
            "response": "Mary Shelley wrote it."}
    base.update(changes)
    return base


# name -> (input lines or None for a missing file, extra arguments, substrings the message must contain)
BAD_INPUTS = {
    "empty-passage-list": ([request(passages=[])], [], ["passage list is empty", ":1"]),
    "duplicate-passage-ids": ([request(passages=[PASSAGES[0], PASSAGES[0]])], [], ["'shelley-mary'", "twice"]),
    "empty-question": ([request(question="   ")], [], ["question is empty"]),
    "empty-response": ([request(response="")], [], ["response is empty"]),
    "response-not-a-string": ([request(response=5)], [], ["'response' must be a string or null"]),
    "duplicate-request-ids": ([request(), request()], [], ["'r1'", "more than once"]),
    "unknown-estimator": ([request()], ["--estimator", "nope"], ["unknown estimator 'nope'"]),
    "unknown-instruction": ([request()], ["--instruction", "nope"], ["unknown instruction 'nope'"]),
    "unknown-model": ([request()], ["--model", "no/such-model-xyz"], ["unknown model 'no/such-model-xyz'"]),
    "malformed-jsonl": ([request(), '{"id": "r2", "question": '], [], ["requests.jsonl:2", "not valid JSON"]),
    "not-an-object": ([request(), "[1, 2]"], [], ["requests.jsonl:2", "not an object"]),
    "no-lines": (["", "  "], [], ["no JSON lines"]),
    "missing-input": (None, [], ["does not exist"]),
}


def assert_user_error(proc: subprocess.CompletedProcess[str], must_contain) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr  # one sentence, nothing else
    message = lines[0]
    assert message.startswith("error: ") and message.rstrip().endswith(".")
    for text in must_contain:
        assert text in message
    return message


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_sentence(case, tmp_path, tiny_model_dir):
    lines, extra, must_contain = BAD_INPUTS[case]
    inp = tmp_path / "in" / "requests.jsonl"
    inp.parent.mkdir()
    if lines is not None:
        write_jsonl(inp, lines)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = ["attribute", "--input", str(inp), "--out", str(out_dir / "results.jsonl")]
    if "--model" not in extra:
        args += ["--model", str(tiny_model_dir)]
    proc = run_ascp(*args, *extra, home=tmp_path / "home")
    assert_user_error(proc, must_contain)
    assert list(out_dir.iterdir()) == []  # no output file, no temporary file


def test_missing_output_folder(tmp_path, tiny_model_dir):
    inp = write_jsonl(tmp_path / "requests.jsonl", [request()])
    out = tmp_path / "nowhere" / "results.jsonl"
    proc = run_ascp("attribute", "--input", str(inp), "--out", str(out), "--model", str(tiny_model_dir),
                   home=tmp_path / "home")
    assert_user_error(proc, ["output folder", "does not exist"])
    assert not out.parent.exists()


def test_prompt_longer_than_the_context_window(tmp_path, small_window_model_dir, tiny_lm):
    req = request()
    inp = write_jsonl(tmp_path / "requests.jsonl", [req])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    previous = out_dir / "results.jsonl"
    previous.write_text("earlier results\n")  # a failed run must leave an existing file untouched
    proc = run_ascp("attribute", "--input", str(inp), "--out", str(previous), "--model", str(small_window_model_dir),
                   home=tmp_path / "home")
    message = assert_user_error(proc, ["context window of 64 tokens", "'r1'"])
    passages = [Passage(id=p["id"], text=p["text"], title=p.get("title", "")) for p in req["passages"]]
    n_prompt = tiny_lm.encode_prompt(req["question"], passages).num_tokens
    n_response = len(tiny_lm.encode(req["response"]))
    assert n_prompt + n_response > 64
    assert f"prompt ({n_prompt} tokens)" in message
    assert f"response ({n_response} tokens)" in message
    assert previous.read_text() == "earlier results\n"
    assert sorted(p.name for p in out_dir.iterdir()) == ["results.jsonl"]


def test_demo_computes_round_one_once_for_every_policy(cli, tiny_model_dir):
    result = cli("demo", "--model", tiny_model_dir, "--embedder", "hashing", "--questions", "1", "--T", "2")
    assert result.exit_code == 0, result.output
    assert "1 ambiguous questions" in result.output and "demo: mean over questions" in result.output
    # 3 policies x 2 rounds; round 1 (the top k, one seed) is one request, so rotate's and vanilla's come
    # from ascp's (and any later round whose context and seed an earlier policy's round had)
    shared = re.search(r"shared between policies: (\d+) of 6 generations", " ".join(result.output.split()))
    assert shared is not None and int(shared.group(1)) >= 2, result.output


@pytest.mark.parametrize("questions", ["0", "7"])
def test_demo_questions_out_of_range_is_one_sentence(cli, questions):
    result = cli("demo", "--questions", questions, "--embedder", "hashing")
    assert result.exit_code == 2
    assert f"--questions {questions}: the demo set has 6 questions; give 1 to 6." in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_line_progress_says_each_task_is_done_once(capsys):
    from ascp.cli.common import LineProgress

    bar = LineProgress(every=3600)
    task = bar.add_task("rounds", total=2)
    for step in (1, 1, 0):  # a last advance of 0 after the end prints nothing more
        bar.advance(task, step)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rounds: 2/2 ("), lines
