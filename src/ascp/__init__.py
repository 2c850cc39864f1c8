"""ascp: evidence-aware multi-round (portfolio) retrieval-augmented generation.

    import ascp
    model = ascp.load_model("default")
    att = ascp.attribute(question, passages, model=model)
    pf = ascp.run_portfolio(question, pool, policy="ascp", k=5, T=5, model=model)

Every name in `__all__` is importable from here; editors and type checkers see the real
objects (the `TYPE_CHECKING` block below), while at run time heavy modules (torch,
transformers) load only when a name that needs them is first used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from typing import TYPE_CHECKING, Any

from ascp.errors import AscpError
from ascp.types import AnswerUnit, AttributionRequest, AttributionResult, Case, Passage, Portfolio, Round

if TYPE_CHECKING:
    from ascp.api import Probe, as_passages, attribute, cite, load_model, make_case, run_portfolio, run_portfolios
    from ascp.attribution import register_estimator
    from ascp.attribution.base import Estimator, ProbeInput, Scores
    from ascp.attribution.probe import ProbeSettings
    from ascp.lm.prompts import PromptTemplate
    from ascp.lm.protocol import LanguageModel
    from ascp.lm.sampling import SamplingConfig
    from ascp.lm.steering import SteerConfig
    from ascp.metrics.citations import check_citations
    from ascp.params import Param
    from ascp.schedulers import register_scheduler
    from ascp.schedulers.base import PoolView, RoundFeedback, Scheduler, Selection

__version__ = "0.1.0"

# name -> the module that defines it; loaded on first use
_LAZY = {
    "Probe": "ascp.api", "as_passages": "ascp.api", "attribute": "ascp.api", "cite": "ascp.api",
    "load_model": "ascp.api",
    "make_case": "ascp.api", "run_portfolio": "ascp.api", "run_portfolios": "ascp.api",
    "register_estimator": "ascp.attribution", "Estimator": "ascp.attribution.base",
    "ProbeInput": "ascp.attribution.base", "Scores": "ascp.attribution.base",
    "ProbeSettings": "ascp.attribution.probe",
    "register_scheduler": "ascp.schedulers", "Scheduler": "ascp.schedulers.base",
    "PoolView": "ascp.schedulers.base", "RoundFeedback": "ascp.schedulers.base",
    "Selection": "ascp.schedulers.base", "Param": "ascp.params",
    "PromptTemplate": "ascp.lm.prompts", "LanguageModel": "ascp.lm.protocol",
    "SamplingConfig": "ascp.lm.sampling", "SteerConfig": "ascp.lm.steering",
    "check_citations": "ascp.metrics.citations",
}

__all__ = ["__version__", "AnswerUnit", "as_passages", "AscpError", "attribute", "AttributionRequest",
           "AttributionResult", "Case", "check_citations", "cite", "Estimator", "LanguageModel", "load_model",
           "make_case", "Param", "Passage", "PoolView", "Portfolio", "Probe", "ProbeInput", "ProbeSettings",
           "PromptTemplate",
           "register_estimator", "register_scheduler", "Round", "RoundFeedback", "run_portfolio", "run_portfolios",
           "SamplingConfig", "Scheduler", "Scores", "Selection", "SteerConfig"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ascp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# Modules that moved into their stage's package; the old import paths keep working (with a
# DeprecationWarning) so code written against earlier releases and the docs of that time still runs.
MOVED_MODULES = {
    "ascp.attribution.attention_fit": "ascp.fitprobe.fit",
    "ascp.attribution.fit_readings": "ascp.fitprobe.readings",
    "ascp.calibration": "ascp.validation.calibration",
    "ascp.citations": "ascp.metrics.citations",
    "ascp.consumers": "ascp.loop.consumers",
    "ascp.data.density": "ascp.metrics.density",
    "ascp.data.matching": "ascp.metrics.attestation",
    "ascp.decoding": "ascp.lm.steering",
    "ascp.display": "ascp.render.console",
    "ascp.judge": "ascp.validation.judge",
    "ascp.lru": "ascp.caching.lru",
    "ascp.lm.generation": "ascp.lm.hf",
    "ascp.nli": "ascp.metrics.nli",
    "ascp.paths": "ascp.caching.files",
    "ascp.prompts": "ascp.lm.prompts",
    "ascp.report.reproduce": "ascp.reproduce",
    "ascp.requests": "ascp.attribution.requests",
    "ascp.results": "ascp.records",
    "ascp.results.reader": "ascp.records.reader",
    "ascp.results.records": "ascp.records.format",
    "ascp.runio": "ascp.loop.runfolder",
    "ascp.runner": "ascp.loop.runner",
    "ascp.simulate": "ascp.loop.simulate",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path as the module it moved to (one module object under both names)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED_MODULES else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        new = MOVED_MODULES[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there.", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: Any) -> None:
        """The module it stands for is already executed."""


if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())
