"""DeepEval: the causal context-use metric as a DeepEval `BaseMetric` (`pip install 'ascp[deepeval]'`).

    from deepeval import evaluate
    from deepeval.test_case import LLMTestCase
    from ascp.integrations.deepeval import CausalContextUseMetric
    metric = CausalContextUseMetric(threshold=0.5)   # the embedded default model; or probe=ascp.Probe(model)
    evaluate([LLMTestCase(input=q, actual_output=answer, retrieval_context=contexts)], [metric])

Each test case's `retrieval_context` is read by ascp's causal probe (leave-one-out by default)
against its fixed `actual_output`. `score` is the fraction of contexts the output really used
(`aggregate="utilization"`: RAGAS's rank-weighted ContextUtilization formula of the same
verdicts); `score_breakdown` keeps the per-context reading; `reason` names the used contexts.
No evaluation LLM is involved. A test case without contexts or with an empty output raises
DeepEval's `MissingTestCaseParamsError`; a prompt longer than the model's window raises a
`DeepEvalError`; both name the test case and set `metric.error`, so `deepeval.evaluate` with
`ErrorConfig(ignore_errors=True)` (or `skip_on_missing_params=True`) goes on with the others.
"""

from __future__ import annotations

from typing import Any

from ascp.errors import AscpError
from ascp.integrations import require, sentence_readings
from ascp.integrations.metric import AGGREGATES, aggregate, bound_probe, read_sample, sample_label, used_flags

require("deepeval", "deepeval")

from deepeval.errors import DeepEvalError, MissingTestCaseParamsError  # noqa: E402
from deepeval.metrics import BaseMetric  # noqa: E402
from deepeval.test_case import LLMTestCase, SingleTurnParams  # noqa: E402


def _shorten(text: str, limit: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CausalContextUseMetric(BaseMetric):
    """The share of `retrieval_context` the `actual_output` really used, by ascp's causal probe.

    probe: an `ascp.Probe` (any model and estimator); None loads the embedded default model on
    first use. threshold: `is_successful()` is score >= threshold; strict_mode: threshold 1 and a
    score of 0 below it (DeepEval's convention). aggregate: `used_fraction` or `utilization`.
    """

    _required_params = [SingleTurnParams.INPUT, SingleTurnParams.ACTUAL_OUTPUT,
                        SingleTurnParams.RETRIEVAL_CONTEXT]
    error: str | None = None
    threshold: float = 0.5
    score: float | None = None

    def __init__(self, probe: Any = None, threshold: float = 0.5, *, aggregate: str = "used_fraction",
                 include_reason: bool = True, strict_mode: bool = False, verbose_mode: bool = False) -> None:
        if aggregate not in AGGREGATES:
            raise AscpError(f"unknown aggregate {aggregate!r}; use one of {', '.join(AGGREGATES)}.")
        self.probe = probe
        self.threshold = 1.0 if strict_mode else float(threshold)
        self.aggregate = aggregate
        self.include_reason = include_reason
        self.strict_mode = strict_mode
        self.verbose_mode = verbose_mode
        self.evaluation_model = "ascp causal probe (no LLM judge)"
        self.evaluation_cost = 0.0

    def _probe(self) -> Any:
        self.probe = bound_probe(self.probe)
        return self.probe

    def _check(self, test_case: LLMTestCase) -> None:
        name = sample_label(getattr(test_case, "input", ""))
        if not isinstance(test_case, LLMTestCase):
            self.error = f"{self.__name__} scores LLMTestCase objects, got {type(test_case).__name__}."
            raise ValueError(self.error)
        missing = [p.value for p in self._required_params
                   if not getattr(test_case, p.value, None) or (isinstance(getattr(test_case, p.value), str)
                                                              and not getattr(test_case, p.value).strip())]
        if missing:
            self.error = (f"test case {name}: {', '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} missing or empty; {self.__name__} needs the "
                          "input, the actual_output and its retrieval_context.")
            raise MissingTestCaseParamsError(self.error)

    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        """Score one test case; sets score, success, reason and score_breakdown."""
        self.error = None
        self._check(test_case)
        # a context is a string or a RetrievedContextData (its `context` text; its `source` is not prompt text)
        contexts = [str(getattr(c, "context", c)) for c in test_case.retrieval_context or []]
        try:
            result = read_sample(test_case.input, test_case.actual_output, contexts, probe=self._probe())
        except AscpError as err:
            self.error = str(err).replace("sample ", "test case ", 1)
            raise DeepEvalError(self.error) from None
        score = aggregate(result, self.aggregate)
        score = 0.0 if self.strict_mode and score < self.threshold else score
        self.score = score
        flags = used_flags(result)
        self.score_breakdown = {
            f"context {i}": {"score": result.scores[pid], "normalized": result.normalized[pid], "used": used,
                             **({"sentences": sentence_readings(result, pid)} if result.spans else {})}
            for i, (pid, used) in enumerate(zip(result.scores, flags, strict=True), start=1)}
        used = [f"#{i} ({_shorten(c)!r})" for i, (c, u) in enumerate(zip(contexts, flags, strict=True), start=1) if u]
        unsupported = [s.text for s in result.spans if not s.reading.used]
        per_sentence = (f" {len(unsupported)} of {len(result.spans)} output sentences used none"
                        + (f": {', '.join(repr(_shorten(t)) for t in unsupported)}." if unsupported else ".")
                        if result.spans else "")
        self.reason = (f"The output used {len(used)} of {len(contexts)} retrieval contexts by ascp's causal "
                       f"probe ({result.estimator}): {', '.join(used) if used else 'none'}.{per_sentence}"
                       if self.include_reason else None)
        self.success = score >= self.threshold
        if self.verbose_mode:
            self.verbose_logs = f"Score: {score:.3f}\nReason: {self.reason}"
        return score

    async def a_measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        """The same as `measure` (the probe runs in-process; there is no remote call to await)."""
        return self.measure(test_case)

    def is_successful(self) -> bool:
        score = self.score
        self.success = self.error is None and score is not None and score >= self.threshold
        return bool(self.success)

    @property
    def __name__(self) -> str:
        return "Causal Context Use"
