"""RAGAS: the causal context-use metric as a RAGAS single-turn metric (`pip install 'ascp[ragas]'`).

    from ragas import EvaluationDataset, evaluate
    from ascp.integrations.ragas import CausalContextUse, CausalContextUtilization
    use = CausalContextUse()                      # the embedded default model; or probe=ascp.Probe(model)
    result = evaluate(dataset, metrics=[use, CausalContextUtilization(probe=use.probe)])
    use.reading(sample)                           # the per-context reading behind a sample's score
    use.chunk_readings(sample)                    # per context (and per response sentence with a probe
                                                  # that reads sentences: ascp.Probe(model, spans="sentences"))

Each sample's `retrieved_contexts` are read by ascp's causal probe (leave-one-out by default)
against its fixed `response`: `causal_context_use` is the fraction of contexts the response
really used; `causal_context_utilization` is RAGAS's ContextUtilization formula (rank-weighted
average precision of per-context verdicts) with the probe's verdicts in place of an LLM judge's.
No LLM, embeddings or API key is configured for RAGAS: like RAGAS's own non-LLM metrics, these
are plain `SingleTurnMetric`s. A bad sample (no contexts, an empty response, a prompt longer
than the model's window) raises one sentence naming it; `ragas.evaluate` then records NaN for
that sample and goes on (its `raise_exceptions=False` default).
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass, field

from ascp.integrations import require, sentence_readings
from ascp.integrations.metric import aggregate, bound_probe, read_sample, used_flags

require("ragas", "ragas")

from ragas.dataset_schema import SingleTurnSample  # noqa: E402
from ragas.metrics.base import MetricOutputType, MetricType, SingleTurnMetric  # noqa: E402

if t.TYPE_CHECKING:
    from ragas.run_config import RunConfig

    from ascp.api import Probe
    from ascp.types import AttributionResult

ReadingKey = tuple[str, str, tuple[str, ...]]


@dataclass
class CausalContextUse(SingleTurnMetric):
    """The fraction of `retrieved_contexts` the `response` really used (ascp's causal probe).

    probe: an `ascp.Probe` (any model and estimator); None loads the embedded default model on
    first use. `readings` keeps each scored sample's `AttributionResult` (per-context raw and
    normalised scores, the used set), keyed by (user_input, response, contexts).
    """

    name: str = "causal_context_use"
    probe: t.Any = None
    _required_columns: dict[MetricType, set[str]] = field(
        default_factory=lambda: {MetricType.SINGLE_TURN: {"user_input", "response", "retrieved_contexts"}})
    output_type: MetricOutputType | None = MetricOutputType.CONTINUOUS
    readings: dict[ReadingKey, AttributionResult] = field(default_factory=dict, repr=False)
    _aggregate: t.ClassVar[str] = "used_fraction"

    def init(self, run_config: RunConfig) -> None:
        """Nothing to set up from RAGAS's run config (no LLM, no embeddings)."""

    def bound_probe(self) -> Probe:
        """The probe, the embedded default model's if none was given (loaded once)."""
        self.probe = bound_probe(self.probe)
        return self.probe

    def reading(self, sample: SingleTurnSample | t.Mapping[str, t.Any]) -> AttributionResult:
        """The probe's reading of a sample (computed once; later calls and the other metric reuse it)."""
        row = sample.model_dump() if isinstance(sample, SingleTurnSample) else dict(sample)
        question, response = row.get("user_input"), row.get("response")
        contexts = row.get("retrieved_contexts")
        key = (str(question), str(response), tuple(str(c) for c in contexts or ()))
        if key not in self.readings:
            self.readings[key] = read_sample(question, response, contexts, probe=self.bound_probe())
        return self.readings[key]

    def chunk_readings(self, sample: SingleTurnSample | t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
        """One dict per retrieved context: its text, raw and normalised score, and the used verdict; with a
        probe that reads sentences (`ascp.Probe(model, spans="sentences")`), also `sentences`: the
        context's reading by each response sentence."""
        result = self.reading(sample)
        row = sample.model_dump() if isinstance(sample, SingleTurnSample) else dict(sample)
        return [{"context": text, "score": result.scores[pid], "normalized": result.normalized[pid], "used": used,
                 **({"sentences": sentence_readings(result, pid)} if result.spans else {})}
                for text, pid, used in zip(row["retrieved_contexts"], result.scores, used_flags(result),
                                           strict=True)]

    async def _single_turn_ascore(self, sample: SingleTurnSample, callbacks: t.Any) -> float:
        return aggregate(self.reading(sample), self._aggregate)

    async def _ascore(self, row: dict, callbacks: t.Any) -> float:
        return await self._single_turn_ascore(SingleTurnSample(**row), callbacks)


@dataclass
class CausalContextUtilization(CausalContextUse):
    """RAGAS's ContextUtilization (rank-weighted precision of used contexts) with causal verdicts.

    Share one probe with `CausalContextUse(probe=...)` to read each sample once for both; pass
    `readings=use.readings` as well to share the readings themselves.
    """

    name: str = "causal_context_utilization"
    _aggregate: t.ClassVar[str] = "utilization"
