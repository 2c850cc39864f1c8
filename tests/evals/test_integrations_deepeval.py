"""The DeepEval metric (src/ascp/integrations/deepeval.py) inside the real `deepeval.evaluate`.

Runs in .venv-evals (`make evals`; `make test` runs this folder there), telemetry off (conftest),
no evaluation LLM and no API key.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("deepeval", reason="needs deepeval: run `make evals` and this folder with .venv-evals/bin/pytest")

from deepeval import evaluate  # noqa: E402
from deepeval.errors import DeepEvalError, MissingTestCaseParamsError  # noqa: E402
from deepeval.evaluate import DisplayConfig, ErrorConfig  # noqa: E402
from deepeval.metrics import BaseMetric  # noqa: E402
from deepeval.test_case import LLMTestCase  # noqa: E402

import ascp  # noqa: E402
from ascp.integrations.deepeval import CausalContextUseMetric  # noqa: E402

QUESTION = "who wrote the novel and when was it published?"
ANSWER = "The author was born in 1850; the first edition is of 1899."
CONTEXTS = ["passage one says the author was born in 1850 near the river.",
            "The quick brown fox jumps over the lazy dog.",
            "passage two names the first edition of 1899."]
QUIET = DisplayConfig(print_results=False, show_indicator=False, verbose_mode=False)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # deepeval.evaluate writes a .deepeval folder into the working directory
    for key in ("OPENAI_API_KEY", "CONFIDENT_API_KEY"):
        monkeypatch.delenv(key, raising=False)


def test_measure_reads_the_retrieval_context_like_the_probe(tiny_lm) -> None:
    probe = ascp.Probe(tiny_lm, threshold=0.3)
    direct = probe.attribute(QUESTION, CONTEXTS, ANSWER)
    flags = [pid in direct.used for pid in direct.scores]
    assert 0 < sum(flags) < len(flags), "test bug: pick a threshold that separates the contexts"

    metric = CausalContextUseMetric(probe=probe, threshold=0.5)
    assert isinstance(metric, BaseMetric)
    case = LLMTestCase(input=QUESTION, actual_output=ANSWER, retrieval_context=CONTEXTS)
    assert metric.measure(case) == pytest.approx(sum(flags) / len(flags))
    assert metric.is_successful() == (sum(flags) / len(flags) >= 0.5)
    assert [b["used"] for b in metric.score_breakdown.values()] == flags
    assert [b["score"] for b in metric.score_breakdown.values()] == pytest.approx(list(direct.scores.values()))
    for i, (context, used) in enumerate(zip(CONTEXTS, flags, strict=True), start=1):
        assert (f"#{i} ('{context[:20]}" in metric.reason) == used
    assert metric.reason.startswith(f"The output used {sum(flags)} of 3 retrieval contexts")
    assert asyncio.run(metric.a_measure(case)) == metric.score

    util = CausalContextUseMetric(probe=probe, aggregate="utilization", strict_mode=True)
    score = util.measure(case)
    assert util.threshold == 1.0 and (score == 1.0 or score == 0.0)


def test_evaluate_runs_offline_and_goes_on_past_bad_test_cases(tiny_lm, small_window_model_dir) -> None:
    metric = CausalContextUseMetric(probe=ascp.Probe(tiny_lm, threshold=0.3), threshold=0.3)
    cases = [LLMTestCase(input=QUESTION, actual_output=ANSWER, retrieval_context=CONTEXTS),
             LLMTestCase(input="no contexts?", actual_output="An answer.", retrieval_context=[]),
             LLMTestCase(input="an empty answer?", actual_output="", retrieval_context=["a passage."])]
    result = evaluate(cases, [metric], error_config=ErrorConfig(ignore_errors=True), display_config=QUIET)
    by_input = {r.input: r.metrics_data[0] for r in result.test_results}
    good = by_input[QUESTION]
    assert good.error is None and good.score is not None and good.reason.startswith("The output used")
    assert by_input["no contexts?"].error == (
        "test case 'no contexts?': retrieval_context is missing or empty; Causal Context Use needs the input, "
        "the actual_output and its retrieval_context.")
    assert by_input["an empty answer?"].error.startswith("test case 'an empty answer?': actual_output is missing")

    with pytest.raises(MissingTestCaseParamsError):
        metric.measure(cases[1])
    long = LLMTestCase(input="a long context?", actual_output="Yes.", retrieval_context=["word " * 200])
    short = CausalContextUseMetric(probe=ascp.Probe(ascp.load_model(str(small_window_model_dir))))
    with pytest.raises(DeepEvalError, match=r"^test case 'a long context\?': the prompt \(\d+ tokens\) plus the "
                                            r"response \(\d+ tokens\) exceed the model's context window of 64"):
        short.measure(long)
    assert short.error.startswith("test case 'a long context?'") and short.is_successful() is False


def test_an_unknown_aggregate_is_one_sentence() -> None:
    with pytest.raises(ascp.AscpError, match="unknown aggregate 'mean'; use one of used_fraction, utilization"):
        CausalContextUseMetric(probe=None, aggregate="mean")


def test_retrieved_context_data_is_read_as_its_text(tiny_lm) -> None:
    from deepeval.test_case.llm_test_case import RetrievedContextData

    probe = ascp.Probe(tiny_lm, threshold=0.3)
    plain = CausalContextUseMetric(probe=probe)
    plain.measure(LLMTestCase(input=QUESTION, actual_output=ANSWER, retrieval_context=CONTEXTS))
    rich = CausalContextUseMetric(probe=probe)
    rich.measure(LLMTestCase(input=QUESTION, actual_output=ANSWER, retrieval_context=[
        RetrievedContextData(context=c, source=f"doc-{i}.txt") for i, c in enumerate(CONTEXTS)]))
    assert rich.score_breakdown == plain.score_breakdown


@pytest.mark.real_model
def test_the_documented_example_runs() -> None:
    """docs/deepeval.md's example, verbatim, on the embedded model; the reason is the one the doc quotes."""
    import re

    from conftest import run_documented_example

    namespace = run_documented_example("deepeval.md")
    data = namespace["data"]
    assert (data.score, data.success) == (0.5, True)
    quoted = re.search(r"e\.g\. `(The output used.*?)`", namespace["__doc_text__"], flags=re.S).group(1)
    assert data.reason == " ".join(quoted.split())


def test_a_sentence_probe_breaks_the_score_down_per_output_sentence(tiny_lm) -> None:
    """With `Probe(model, spans="sentences")` each context's breakdown holds its reading by each output
    sentence, and the reason counts the sentences that used no context."""
    probe = ascp.Probe(tiny_lm, threshold=0.3, spans="sentences")
    answer = "The author was born in 1850. The first edition is of 1899."
    direct = probe.attribute(QUESTION, CONTEXTS, answer)
    metric = CausalContextUseMetric(probe=probe)
    metric.measure(LLMTestCase(input=QUESTION, actual_output=answer, retrieval_context=CONTEXTS))
    for (pid, breakdown) in zip(direct.scores, metric.score_breakdown.values(), strict=True):
        assert [s["text"] for s in breakdown["sentences"]] == [s.text for s in direct.spans]
        assert [s["score"] for s in breakdown["sentences"]] == pytest.approx(
            [s.reading.scores[pid] for s in direct.spans])
        assert [s["used"] for s in breakdown["sentences"]] == [pid in s.reading.used for s in direct.spans]
    unsupported = sum(not s.reading.used for s in direct.spans)
    assert f"{unsupported} of {len(direct.spans)} output sentences used none" in metric.reason
