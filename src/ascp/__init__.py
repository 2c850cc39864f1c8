"""ascp: evidence-aware multi-round (portfolio) retrieval-augmented generation.

    import ascp
    model = ascp.load_model("default")
    att = ascp.attribute(question, passages, model=model)
    pf = ascp.run_portfolio(question, pool, policy="ascp", k=5, T=5, model=model)

Heavy modules (torch, transformers) load only when a function that needs them is called.
"""

from __future__ import annotations

from typing import Any

from ascp.errors import AscpError
from ascp.types import AttributionRequest, AttributionResult, Passage, Portfolio, Round

_API = ("Probe", "as_passages", "attribute", "load_model", "make_case", "run_portfolio", "run_portfolios")

__all__ = ["AscpError", "AttributionRequest", "AttributionResult", "Passage", "Portfolio", "Round",
           "__version__", *_API]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _API:
        from ascp import api

        return getattr(api, name)
    raise AttributeError(f"module 'ascp' has no attribute {name!r}")
