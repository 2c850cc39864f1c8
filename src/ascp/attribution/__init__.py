"""Attribution estimators: the causal probe (`loo`) and the estimators it is validated against."""

from __future__ import annotations

from collections.abc import Callable

from ascp.attribution.base import Estimator
from ascp.attribution.reading import free_threshold, normalize, used_mask
from ascp.errors import AscpError
from ascp.params import Param, validate


def _registry() -> dict[str, Callable[..., Estimator]]:
    from ascp.attribution.contextcite import ContextCite
    from ascp.attribution.hierarchical import HierarchicalLOO
    from ascp.attribution.loo import LeaveOneOut, Replacement
    from ascp.attribution.proxies import BM25Proxy, CosineProxy

    return {
        "loo": LeaveOneOut,
        "replace": Replacement,
        "hierarchical": HierarchicalLOO,
        "contextcite": ContextCite,
        "bm25": BM25Proxy,
        "qd-cosine": lambda **kw: CosineProxy("question", **kw),
        "yd-cosine": lambda **kw: CosineProxy("response", **kw),
    }


ESTIMATOR_NAMES = ("loo", "replace", "hierarchical", "contextcite", "bm25", "qd-cosine", "yd-cosine")


def estimator_params(name: str) -> tuple[Param, ...]:
    """The declared parameters of an estimator."""
    from ascp.attribution.proxies import CosineProxy

    if name not in ESTIMATOR_NAMES:
        raise AscpError(f"unknown estimator {name!r}; choose one of {', '.join(ESTIMATOR_NAMES)}.")
    factory = _registry()[name]
    return CosineProxy.params if name.endswith("-cosine") else factory.params  # type: ignore[attr-defined]


def make_estimator(name: str, **options) -> Estimator:
    """Build an estimator by its canonical name; unknown names or options raise a one-sentence
    `AscpError` naming the field."""
    params = estimator_params(name)
    return _registry()[name](**validate(f"estimator {name!r}", params, options))


__all__ = ["ESTIMATOR_NAMES", "Estimator", "estimator_params", "free_threshold", "make_estimator", "normalize",
           "used_mask"]
