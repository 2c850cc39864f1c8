"""The Ray executor on a local two-worker cluster: the store it writes equals a single-process run's,
and a worker SIGKILLed mid-run loses nothing (the run completes, no unit twice). Tiny random model,
hashing embedder; CI-sized (about a minute)."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
import yaml
from conftest import units_by_key

from ascp.errors import AscpError
from ascp.experiments import run_experiment
from ascp.experiments.plan import UnitKey

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")

N_CASES = 6


def write_spec(folder: Path, model_dir: Path) -> Path:
    """Six inline cases x two conditions in chunks of one case: twelve chunks for two workers."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": f"c{i}", "question": f"when was author c{i} born?",
                         "pool": [{"id": f"d{j}", "title": "T", "text": f"born in {1850 + j} near the river c{i}"}
                                  for j in range(6)],
                         "answers": [["1850"], ["1853"]]}) for i in range(N_CASES)]
    (folder / "cases.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = {"name": "tiny-ray", "tasks": [{"name": "toy", "data": "cases.jsonl", "format": "jsonl"}],
            "models": [str(model_dir)], "seeds": [0], "conditions": ["rotate(k=2,T=2)", "ascp(k=2,T=2)"],
            "sampling": {"max_new_tokens": 5}, "embedder": "hashing", "batch_cases": 1}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory, tiny_model_dir) -> Path:
    return write_spec(tmp_path_factory.mktemp("ray-spec"), tiny_model_dir)


@pytest.fixture(scope="module")
def reference(spec_path, tmp_path_factory) -> Path:
    """An uninterrupted single-process run without a request cache."""
    out = tmp_path_factory.mktemp("ray-runs") / "local"
    assert run_experiment(spec_path, out).written == 2 * N_CASES
    return out


def assert_same_rows(got: dict[UnitKey, dict], want: dict[UnitKey, dict], rel: float = 1e-5) -> None:
    """The same units with the same fields: texts, contexts, used sets and counts exactly, probe scores and
    metrics to `rel`. With a shared request cache a score is either read back or computed afresh, through
    a different prefix-reuse path, depending on which worker got there first: equal up to float rounding."""
    assert got.keys() == want.keys()

    def same(a, b, where: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            assert a.keys() == b.keys(), where
            for k in a:
                same(a[k], b[k], f"{where}.{k}")
        elif isinstance(a, list) and isinstance(b, list):
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                same(x, y, f"{where}[{i}]")
        elif isinstance(a, float) and isinstance(b, float):
            assert a == pytest.approx(b, rel=rel, abs=1e-9), where
        else:
            assert a == b, where

    for key in want:
        same(got[key], want[key], f"{key.case_id} {key.condition}")


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of two CPUs, shared by this module's tests."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_store_equals_a_single_process_store(cluster, reference, spec_path, tmp_path):
    reported: dict[str, int] = {}
    result = run_experiment(spec_path, tmp_path / "ray", executor="ray", workers=2,
                            request_cache=tmp_path / "requests.sqlite",
                            on_worker=lambda label, units: reported.__setitem__(label, units))
    assert (result.done, result.written) == (2 * N_CASES, 2 * N_CASES)
    assert_same_rows(units_by_key(tmp_path / "ray"), units_by_key(reference))  # rows compared, `seconds` aside
    assert sum(reported.values()) == 2 * N_CASES  # units done per worker add up to the run
    assert all(label.startswith("worker ") and "(pid " in label for label in reported)
    assert (tmp_path / "requests.sqlite").stat().st_size > 0  # the workers' one shared request cache
    assert any("request cache" in line for line in result.savings)


@pytest.mark.slow
def test_a_worker_killed_mid_run_loses_nothing(cluster, reference, spec_path, tmp_path):
    killed: list[int] = []
    seen: list[tuple[int, int]] = []  # (worker index, pid) of every finished chunk

    def on_worker(label: str, units: int) -> None:
        index, pid = int(label.split()[1]), int(label.rsplit(" ", 1)[1].rstrip(")"))
        seen.append((index, pid))
        if not killed:  # SIGKILL the first worker that finishes a chunk, while the run goes on
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    result = run_experiment(spec_path, tmp_path / "ray", executor="ray", workers=2, on_worker=on_worker)
    assert killed and result.done == 2 * N_CASES
    assert units_by_key(tmp_path / "ray") == units_by_key(reference)  # complete, no unit twice, the same rows
    lines = (tmp_path / "ray" / "units.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 * N_CASES
    later = seen[seen.index(next(s for s in seen if s[1] == killed[0])) + 1:]
    assert killed[0] not in {pid for _, pid in later}  # the killed process returned nothing after its death


@pytest.mark.slow
def test_workers_the_cluster_cannot_hold_wait_and_the_run_finishes_without_them(cluster, reference, spec_path,
                                                                                 tmp_path):
    """Three workers of one CPU on two CPUs: the third stays pending. Chunks go only to placed workers,
    so the run ends (handing one to the pending worker would wait on it for ever)."""
    reported: dict[str, int] = {}

    def give_up(*_):
        raise TimeoutError("the run did not finish: a chunk waits on a worker the cluster cannot place")

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(300)
    try:
        result = run_experiment(spec_path, tmp_path / "ray", executor="ray", workers=3,
                                on_worker=lambda label, units: reported.__setitem__(label, units))
    finally:
        signal.alarm(0)
    assert result.done == 2 * N_CASES
    assert units_by_key(tmp_path / "ray") == units_by_key(reference)
    assert len(reported) == 2 and sum(reported.values()) == 2 * N_CASES


@pytest.mark.slow
def test_a_worker_no_node_of_a_local_cluster_can_hold_is_one_clear_error_before_any_unit(spec_path, tmp_path):
    """The user's shell: `ascp experiment run` starts its own local cluster (a joined cluster only
    warns: its autoscaler may add a node that holds the worker)."""
    from conftest import run_ascp

    done = run_ascp("experiment", "run", spec_path, "--out", tmp_path / "run", "--executor", "ray",
                    "--memory-per-worker", "100000", home=tmp_path / "home")
    assert done.returncode != 0
    assert re.search(r"no node of the Ray cluster can hold a worker that reserves 1 CPU, 100000\.0 GB memory "
                     r"\(the largest node offers [0-9.]+ CPU, [0-9.]+ GB memory\)", " ".join(done.stderr.split()))
    assert "Traceback" not in done.stderr
    units = tmp_path / "run" / "units.jsonl"
    assert not units.exists() or not units.read_text(encoding="utf-8").strip()


def test_worker_reservations_are_checked_against_every_node():
    from ascp.experiments.executors import check_placeable, worker_resources

    assert worker_resources(1, 0, 0) == {"CPU": 1.0}
    assert worker_resources(2, 1, 1.5) == {"CPU": 2.0, "GPU": 1.0, "memory": 1.5 * 2**30}
    nodes = [{"CPU": 16.0, "memory": 64 * 2**30}, {"CPU": 4.0, "GPU": 1.0, "memory": 16 * 2**30}]
    check_placeable({"CPU": 4.0, "GPU": 1.0}, nodes)  # the GPU node holds it
    check_placeable({"CPU": 8.0, "memory": 32 * 2**30}, nodes)  # the large CPU node holds it
    with pytest.raises(AscpError, match=r"reserves 8 CPU, 1 GPU \(the largest node offers 16 CPU, 1 GPU\)"):
        check_placeable({"CPU": 8.0, "GPU": 1.0}, nodes)  # no single node has both
    with pytest.raises(AscpError, match="--memory-per-worker must be a number at least 0, got -1"):
        worker_resources(1, 0, -1)


def test_a_negative_reservation_is_one_sentence_before_ray_starts(spec_path, tmp_path):
    from conftest import invoke_cli

    result = invoke_cli(["experiment", "run", spec_path, "--out", tmp_path / "run", "--executor", "ray",
                         "--memory-per-worker", "-2"])
    assert result.exit_code != 0
    assert "--memory-per-worker must be a number at least 0, got -2" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()
