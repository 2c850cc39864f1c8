"""Shared fixtures: a tiny random Llama (real BPE tokenizer, no downloads) and helpers around it.

Nothing here touches the network: the hub is forced offline before transformers is imported.
Tests that do not need the real embedded model get a private, empty `ASCP_HOME`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

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
