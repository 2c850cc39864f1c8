"""Declarative experiments: condition names, spec validation, the run store (SIGKILL + resume),
the local and Ray executors, status and Parquet export. Tiny random model, hashing embedder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import invoke_cli, units_by_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascp.errors import AscpError
from ascp.experiments import Condition, load_spec, make_plan, run_experiment, status
from ascp.experiments.plan import UnitKey
from ascp.experiments.store import RunStore, parse_units

N_CASES = 6
ASQA = Path(__file__).resolve().parents[2] / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"


def case_obj(cid: str, n: int = 6) -> dict:
    return {"id": cid, "question": f"when was author {cid} born?",
            "pool": [{"id": f"d{i}", "title": "T", "text": f"born in {1850 + i} near the river {cid}"}
                     for i in range(n)],
            "answers": [["1850"], ["1853"]]}


def write_spec(folder: Path, model_dir: Path, **overrides) -> Path:
    """A small grid over inline JSONL cases; `overrides` replace top-level spec fields."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "cases.jsonl"
    data.write_text("".join(json.dumps(case_obj(f"c{i}")) + "\n" for i in range(N_CASES)), encoding="utf-8")
    spec = {
        "name": "tiny-grid",
        "tasks": [{"name": "toy", "data": "cases.jsonl", "format": "jsonl"}],
        "models": [str(model_dir)],
        "seeds": [0],
        "grid": {"policy": ["rotate", "vanilla"], "k": [2], "T": [2]},
        "sampling": {"max_new_tokens": 5},
        "embedder": "hashing",
        "batch_cases": 2,
        **overrides,
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory, tiny_model_dir) -> Path:
    return write_spec(tmp_path_factory.mktemp("spec"), tiny_model_dir)


@pytest.fixture(scope="module")
def reference(spec_path, tmp_path_factory) -> Path:
    """An uninterrupted local run of the spec."""
    out = tmp_path_factory.mktemp("runs") / "reference"
    result = run_experiment(spec_path, out)
    assert (result.total, result.done, result.written) == (2 * N_CASES, 2 * N_CASES, 2 * N_CASES)
    return out


# ----- conditions ---------------------------------------------------------------------------------

NUMBER = st.one_of(st.integers(0, 50), st.floats(0, 10, allow_nan=False).map(lambda x: round(x, 3)))


@st.composite
def conditions(draw):
    policy = draw(st.sampled_from(["rotate", "vanilla", "fixed", "ascp", "mmr", "carriage", "dpp"]))
    options = {}
    if policy == "ascp":
        options = draw(st.dictionaries(st.sampled_from(["kappa", "beta", "feedback", "submodular"]),
                                       st.one_of(NUMBER, st.booleans(), st.sampled_from(["uniform", "none"])),
                                       max_size=3))
    steer = draw(st.one_of(st.none(), NUMBER))
    return Condition(policy=policy, k=draw(st.integers(1, 30)), T=draw(st.integers(1, 20)),
                     estimator=draw(st.sampled_from(["loo", "hierarchical", "bm25", "yd-cosine"])),
                     instruction=draw(st.sampled_from(["commit", "integrate"])), steer=steer,
                     eta=draw(st.one_of(st.none(), st.floats(0, 0.99).map(lambda x: round(x, 2)))),
                     options=tuple(options.items()))


@settings(max_examples=80, deadline=None)
@given(conditions())
def test_condition_name_round_trips_and_is_a_file_name(condition):
    name = condition.name
    assert Condition.parse(name) == condition
    assert Condition.parse(name).name == name
    assert "/" not in name and "\0" not in name and " " not in name and len(name) < 255
    assert hash(condition) == hash(Condition.parse(name))


def test_condition_short_forms_arms_and_defaults():
    c = Condition.parse("rotate(k=2,T=12)")
    assert c.name == "rotate(k=2,T=12,arm=rotation,estimator=loo,instruction=commit)"
    assert Condition.parse("fixed(T=3,k=2)").name == "vanilla(k=2,T=3,arm=fixed,estimator=loo,instruction=commit)"
    assert Condition.parse("ascp(k=5,T=5)").arm is None
    steered = Condition.parse("ascp(k=5,T=5,steer=0.5,kappa=1)")
    assert steered.name == "ascp(k=5,T=5,estimator=loo,instruction=commit,steer=0.5,eta=0.1,kappa=1)"
    assert steered.scheduler == "ascp(kappa=1)"
    with pytest.raises(AscpError, match="arm rotation means the rotate scheduler"):
        Condition.parse("vanilla(k=2,T=2,arm=rotation)")
    with pytest.raises(AscpError, match="arm"):
        Condition.parse("ascp(k=2,T=2,arm=fixed)")
    with pytest.raises(AscpError, match="lacks T"):
        Condition.parse("rotate(k=2)")


def test_steered_condition_builds_a_steered_loop_config():
    from ascp.experiments.execute import loop_config
    from ascp.experiments.spec import Settings

    config = loop_config(Condition.parse("ascp(k=2,T=3,steer=0.5,eta=0.2,instruction=integrate)"), 7, Settings())
    assert (config.steer.alpha, config.steer.eta, config.seed, config.policy) == (0.5, 0.2, 7, "ascp")
    assert "every interpretation" in config.template.instruction
    assert loop_config(Condition.parse("ascp(k=2,T=3)"), 0, Settings()).steer is None


# ----- specs --------------------------------------------------------------------------------------

def test_spec_grid_expands_with_arms_and_explicit_conditions(tmp_path, tiny_model_dir):
    path = write_spec(tmp_path, tiny_model_dir, grid={"arm": ["rotation", "fixed"], "k": [2, 3], "T": 2},
                      conditions=["ascp(k=2,T=2,steer=0.5)", {"policy": "rotate", "k": 2, "T": 2}],
                      seeds=[0, 1])
    spec = load_spec(path)
    names = [c.name for c in spec.conditions]
    assert names == [
        "rotate(k=2,T=2,arm=rotation,estimator=loo,instruction=commit)",
        "rotate(k=3,T=2,arm=rotation,estimator=loo,instruction=commit)",
        "vanilla(k=2,T=2,arm=fixed,estimator=loo,instruction=commit)",
        "vanilla(k=3,T=2,arm=fixed,estimator=loo,instruction=commit)",
        "ascp(k=2,T=2,estimator=loo,instruction=commit,steer=0.5,eta=0.1)",
    ]  # the explicit rotate(k=2,T=2) duplicates a grid cell and is kept once
    plan = make_plan(spec)
    assert plan.total == N_CASES * 2 * 5
    assert len(plan.unit_keys()) == len(set(plan.unit_keys())) == plan.total


@pytest.mark.skipif(not ASQA.is_file(), reason=f"real ASQA pools not present at {ASQA}")
def test_the_minimal_spec_of_the_issue_validates(tmp_path):
    text = (f"name: tiny-grid\ntasks: [{{name: asqa, data: {ASQA}, format: asqa, limit: 3}}]\n"
            "models: [default]\nseeds: [0]\ngrid: {policy: [rotate, vanilla], k: [2], T: [2]}\n")
    (tmp_path / "spec.yaml").write_text(text)
    try:
        spec = load_spec(tmp_path / "spec.yaml")
    except AscpError as exc:  # the default model's wheel is optional
        pytest.skip(str(exc))
    assert [c.policy for c in spec.conditions] == ["rotate", "vanilla"]
    assert spec.tasks[0].limit == 3 and spec.models[0].name == "default"


BAD_SPECS = [
    ({"template": "no slot {question}"}, "template", "needs one {passages} slot"),
    ({"system": 3}, "system", "expected a string"),
    ({"template": "A {passages} B {question}", "grid": {"policy": ["rotate"], "k": [2], "T": [2],
                                                       "instruction": ["integrate"]}}, "template",
     "cannot set instruction"),
    ({"grid": {"policy": ["nope"], "k": [2], "T": [2]}}, "grid.policy", "unknown scheduler"),
    ({"tasks": [{"name": "toy", "data": "missing.jsonl"}]}, "tasks[0].data", "does not exist"),
    ({"grid": {}}, "grid", "is empty"),
    ({"grid": {"policy": ["rotate"], "k": ["two"], "T": [2]}}, "grid.k", "integer"),
    ({"grid": {"policy": ["rotate"], "k": [], "T": [2]}}, "grid.k", "is empty"),
    ({"grid": {"policy": ["rotate"], "k": [2], "T": [2], "estimator": ["nope"]}}, "grid.estimator", "unknown"),
    ({"grid": {"policy": ["rotate"], "k": [2], "T": [2], "steer": [-1]}}, "grid.steer", "at least 0"),
    ({"grid": {"policy": ["rotate"], "arm": ["fixed"], "k": [2], "T": [2]}}, "grid.arm", "either policy or arm"),
    ({"grid": {"policy": ["ascp(kappa=x)"], "k": [2], "T": [2]}}, "ascp(", "bad option value"),
    ({"grid": {"policy": ["ascp(nope=1)"], "k": [2], "T": [2]}}, "ascp(", "unknown option"),
    ({"tasks": [{"name": "toy", "data": "cases.jsonl", "format": "xml"}]}, "tasks[0].format", "unknown format"),
    ({"tasks": [{"name": "toy", "data": "cases.jsonl", "lmit": 2}]}, "tasks[0].lmit", "unknown key"),
    ({"tasks": [{"name": "toy", "data": "cases.jsonl", "limit": "3"}]}, "tasks[0].limit", "integer"),
    ({"seeds": ["zero"]}, "seeds[0]", "integer"),
    ({"sampling": {"temperature": "hot"}}, "sampling.temperature", "number"),
    ({"colour": "blue"}, "colour", "unknown key"),
    ({"grid": {"policy": ["rotate"], "k": [9], "T": [2]}}, "case 'c0'", "fewer than k=9"),
    ({"models": ["./no-such-model"]}, "models[0]", "does not exist"),
    ({"embedder": "no-such-embedder"}, "embedder", "not default, hashing"),
    ({"threshold": 1.5}, "spec field threshold", "must be a number in [0, 1]"),
    ({"threshold": "high"}, "spec field threshold", "must be a number in [0, 1]"),
]


@pytest.mark.parametrize(("override", "field", "message"), BAD_SPECS, ids=[b[1] + "-" + b[2] for b in BAD_SPECS])
def test_bad_spec_is_one_sentence_naming_the_field(tmp_path, tiny_model_dir, override, field, message):
    path = write_spec(tmp_path, tiny_model_dir, **override)
    with pytest.raises(AscpError) as info:
        make_plan(load_spec(path))
    text = str(info.value)
    assert field in text and message in text, text
    assert "\n" not in text and text.endswith(".")


@pytest.mark.parametrize("override", [b[0] for b in BAD_SPECS[:4]], ids=[b[1] for b in BAD_SPECS[:4]])
def test_cli_bad_spec_exits_2_before_any_work(tmp_path, tiny_model_dir, override):
    path = write_spec(tmp_path, tiny_model_dir, **override)
    result = invoke_cli(["experiment", "run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "spec field" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_cli_bad_spec_exit_code_in_a_real_process(tmp_path, tiny_model_dir):
    path = write_spec(tmp_path, tiny_model_dir, grid={"policy": ["rotate"], "k": ["two"], "T": [2]})
    proc = subprocess.run([sys.executable, "-m", "ascp.cli", "experiment", "run", str(path), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: spec field grid.k: expected an integer of at least 1, got 'two'."


def test_cli_bad_executor_options_exit_2(spec_path, tmp_path):
    for args, message in ((["--executor", "spark"], "unknown executor"), (["--workers", "2"], "applies to")):
        result = invoke_cli(["experiment", "run", str(spec_path), "--out", str(tmp_path / "o"), *args])
        assert result.exit_code == 2 and message in result.output


# ----- the store ----------------------------------------------------------------------------------

def fake_record(i: int) -> dict:
    return {"task": "t", "model": "m", "seed": 0, "case_id": f"c{i}", "condition": "rotate(k=1,T=1)",
            "response": "x" * (i % 7) + "\u00e9", "rounds": [{"round": 1, "response": "y" * i}]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, 6), cut=st.floats(0, 1))
def test_a_torn_last_line_is_dropped_and_the_rest_kept(tmp_path_factory, n, cut):
    folder = tmp_path_factory.mktemp("store")
    manifest = {"name": "x"}
    with RunStore(folder) as store:
        store.begin(manifest, "name: x\n")
        for i in range(n):
            store.write(fake_record(i))
    data = (folder / "units.jsonl").read_bytes()
    size = int(cut * len(data))
    (folder / "units.jsonl").write_bytes(data[:size])  # a kill at any byte
    complete = data[:size].count(b"\n")
    with RunStore(folder) as store:
        store.begin(manifest, "name: x\n")
        assert store.done == {UnitKey.of(fake_record(i)) for i in range(complete)}
        assert all(store.write(fake_record(i)) == (i >= complete) for i in range(n))
    assert (folder / "units.jsonl").read_bytes() == data
    assert parse_units(data, folder)[1] == len(data)


def test_store_refuses_a_different_spec_and_a_second_writer(tmp_path):
    with RunStore(tmp_path / "s") as store:
        store.begin({"name": "x", "seeds": [0]}, "")
        with pytest.raises(AscpError, match="being written by another"), RunStore(tmp_path / "s"):
            pass
    with pytest.raises(AscpError, match=r"different spec \(seeds\[0\] differs\)"), RunStore(tmp_path / "s") as s:
        s.begin({"name": "x", "seeds": [1]}, "")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(AscpError, match="not an experiment run store"), RunStore(tmp_path / "other"):
        pass


def test_a_unit_the_disk_refuses_mid_write_leaves_no_part_of_it(tmp_path, monkeypatch):
    import errno

    import ascp.jsonio as log_module

    folder = tmp_path / "s"
    with RunStore(folder) as store:
        store.begin({"name": "x"}, "name: x\n")
        store.write(fake_record(0))
        whole = (folder / "units.jsonl").read_bytes()
        real_write = os.write

        def half_then_full(fd, data):  # the disk fills in the middle of the second unit's line
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(log_module.os, "write", half_then_full)
        with pytest.raises(AscpError) as caught:
            store.write(fake_record(1))
        monkeypatch.undo()
        assert str(caught.value) == (f"could not write {folder / 'units.jsonl'}: no space is left on the device; free "
                                     "space and rerun the same command: the 1 finished units are kept and the run "
                                     "resumes after them.")
        assert (folder / "units.jsonl").read_bytes() == whole  # no torn line
        assert store.write(fake_record(1))  # space is back: the same unit is written whole
    assert [r["case_id"] for r in parse_units((folder / "units.jsonl").read_bytes(), folder)[0]] == ["c0", "c1"]


# ----- running ------------------------------------------------------------------------------------

def test_local_run_writes_one_record_per_unit(reference, spec_path):
    recs = units_by_key(reference)
    plan = make_plan(load_spec(spec_path))
    assert set(recs) == set(plan.unit_keys()) and len(recs) == 2 * N_CASES
    for key, rec in recs.items():
        assert rec["condition"] == key.condition and rec["k"] == 2 and rec["T"] == 2
        assert [r["round"] for r in rec["rounds"]] == [1, 2]
        assert all(len(r["context"]) == 2 for r in rec["rounds"])
        assert {"pr", "ecr", "offered", "used", "pool"} <= set(rec)
    rot = recs[UnitKey("toy", plan.spec.models[0].name, 0, "c0", Condition.parse("rotate(k=2,T=2)").name)]
    fix = recs[UnitKey("toy", plan.spec.models[0].name, 0, "c0", Condition.parse("fixed(k=2,T=2)").name)]
    assert (rot["arm"], fix["arm"], rot["offered"], fix["offered"]) == ("rotation", "fixed", 4.0, 2.0)
    # Paired by construction: round 1 shows both arms the same top-2 with the same seed.
    assert rot["rounds"][0]["response"] == fix["rounds"][0]["response"]
    assert rot["rounds"][1]["context"] != fix["rounds"][1]["context"]


def test_resume_after_a_torn_line_inside_a_half_written_chunk(reference, spec_path, tmp_path):
    out = tmp_path / "resumed"
    out.mkdir()
    for name in ("spec.yaml", "plan.json"):
        shutil.copy(reference / name, out / name)
    lines = (reference / "units.jsonl").read_bytes().splitlines(keepends=True)
    # Three whole units (the second chunk is half written), then half of the fourth line.
    (out / "units.jsonl").write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
    result = run_experiment(spec_path, out)
    assert (result.written, result.done) == (2 * N_CASES - 3, 2 * N_CASES)
    assert units_by_key(out) == units_by_key(reference)
    assert run_experiment(spec_path, out).written == 0  # nothing left: nothing rerun


def test_sigkill_at_any_moment_then_rerun_equals_an_uninterrupted_run(reference, spec_path, tmp_path):
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "ascp.cli", "experiment", "run", str(spec_path), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    units = out / "units.jsonl"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if units.exists() and b"\n" in units.read_bytes():  # the first unit is written whole
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    before = units.read_bytes().count(b"\n")
    assert 1 <= before < 2 * N_CASES  # killed mid-run
    rerun = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{before}/{2 * N_CASES} units done" in rerun.stderr
    assert units_by_key(out) == units_by_key(reference)  # same keys, none twice, same responses and readings


def test_status_and_parquet_export(reference):
    import pyarrow.parquet as pq

    info = status(reference)
    assert (info["done"], info["total"], info["writer_pid"]) == (2 * N_CASES, 2 * N_CASES, None)
    assert {g["done"] for g in info["groups"]} == {N_CASES}
    result = invoke_cli(["experiment", "status", str(reference)])
    assert result.exit_code == 0 and f"{2 * N_CASES}/{2 * N_CASES} units done" in result.output
    result = invoke_cli(["experiment", "export", str(reference)])
    assert result.exit_code == 0, result.output
    units = pq.read_table(reference / "units.parquet").to_pylist()
    rounds = pq.read_table(reference / "rounds.parquet").to_pylist()
    assert len(units) == 2 * N_CASES and len(rounds) == 2 * 2 * N_CASES
    assert {"task", "model", "seed", "case_id", "condition", "arm", "pr", "ecr", "pool"} <= set(units[0])
    assert {"condition", "round", "context", "response", "scores", "normalized", "used"} <= set(rounds[0])
    by_key = units_by_key(reference)
    row = rounds[0]
    rec = by_key[UnitKey(row["task"], row["model"], row["seed"], row["case_id"], row["condition"])]
    assert row["response"] == rec["rounds"][row["round"] - 1]["response"]
    assert dict(row["scores"]) == rec["rounds"][row["round"] - 1]["scores"]


def test_status_of_a_folder_that_is_no_store(tmp_path):
    result = invoke_cli(["experiment", "status", str(tmp_path)])
    assert result.exit_code == 2 and "not an experiment run store" in result.output


def test_ray_executor_missing_names_the_install_command(monkeypatch, spec_path, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(AscpError, match=r"pip install -e '\.\[ray\]'"):
        run_experiment(spec_path, tmp_path / "o", executor="ray", workers=2)
    assert not (tmp_path / "o").exists()


def test_ray_executor_writes_the_same_records_as_local(reference, spec_path, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = run_experiment(spec_path, tmp_path / "ray", executor="ray", workers=2)
    finally:
        ray.shutdown()
    assert result.written == 2 * N_CASES
    assert units_by_key(tmp_path / "ray") == units_by_key(reference)


def test_a_spec_with_the_users_own_prompt_runs_it(tmp_path, tiny_model_dir):
    from ascp.experiments.execute import loop_config

    path = write_spec(tmp_path, tiny_model_dir, template="Docs:\n{passages}Q: {question}", system="Be brief.")
    plan = make_plan(load_spec(path))
    config = loop_config(plan.spec.conditions[0], 0, plan.spec.settings)
    assert config.template.prefix == "Docs:\n" and config.template.system == "Be brief."
    plain = make_plan(load_spec(write_spec(tmp_path / "plain", tiny_model_dir)))
    assert "template" not in plain.manifest()["settings"]  # stores from before the option still resume


def test_the_backend_enters_the_plan_only_when_chosen(tmp_path, tiny_model_dir):
    """Stores made before the backend setting existed hold no `backend`: with `auto` they still resume."""
    auto = make_plan(load_spec(write_spec(tmp_path / "a", tiny_model_dir))).manifest()["settings"]
    chosen = make_plan(load_spec(write_spec(tmp_path / "b", tiny_model_dir, backend="hf"))).manifest()["settings"]
    assert "backend" not in auto and chosen["backend"] == "hf"
    with pytest.raises(AscpError, match="backend"):
        load_spec(write_spec(tmp_path / "c", tiny_model_dir, backend="vulkan"))


def test_a_disk_that_fills_mid_experiment_keeps_whole_units_and_the_rerun_equals_an_uninterrupted_run(
        reference, spec_path, small_disk):
    from conftest import fill_disk

    disk = small_disk("256k")
    out = disk / "store"
    units = (reference / "units.jsonl").read_bytes().splitlines(keepends=True)
    # room for the lock, the spec, the plan and about two units, not for all of them (tmpfs counts whole pages)
    pages = lambda n: -(-n // 4096) * 4096  # noqa: E731
    room = 4096 + sum(pages((reference / name).stat().st_size) for name in ("spec.yaml", "plan.json"))
    filler = fill_disk(disk, leave=room + pages(len(b"".join(units[:2]))) + 1024)
    result = invoke_cli(["experiment", "run", str(spec_path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    message = result.output.strip().splitlines()[-1]
    assert message.startswith(f"error: could not write {out / 'units.jsonl'}: no space is left on the device; "
                              "free space and rerun the same command: the "), message
    kept = (out / "units.jsonl").read_bytes()
    assert kept.endswith(b"\n") or kept == b""  # whole lines only
    assert 0 < len(kept.splitlines()) < len(units)
    filler.unlink()
    rerun = invoke_cli(["experiment", "run", str(spec_path), "--out", str(out)])
    assert rerun.exit_code == 0, rerun.output
    assert units_by_key(out) == units_by_key(reference)


def test_a_read_only_store_folder_is_refused_before_any_work(spec_path, small_disk):
    disk = small_disk("64k", read_only=True)
    result = invoke_cli(["experiment", "run", str(spec_path), "--out", str(disk / "store")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"error: cannot write into {disk}: its file system is read-only; choose another output folder (nothing was "
        "run).")

