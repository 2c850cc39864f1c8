"""How every table writes a number, an interval and a p-value: the reports, the calibration page and
the probe validation's page share these, each choosing its digits and its missing-value mark."""

from __future__ import annotations

import math
import numbers

from ._common import Estimate

MISSING = "-"


def _finite(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def num(x: float | None, digits: int = 3, missing: str = MISSING) -> str:
    """`x` with `digits` decimals; `missing` for None, NaN or an infinity."""
    return f"{x:.{digits}f}" if _finite(x) else missing


def signed(x: float | None, digits: int = 3, missing: str = MISSING) -> str:
    """`num` with the sign always written (+0.012, -0.340)."""
    return f"{x:+.{digits}f}" if _finite(x) else missing


def interval(lo: float | None, hi: float | None, digits: int = 3, signed_bounds: bool = False,
             missing: str = MISSING) -> str:
    """`[lo, hi]`; `missing` when either bound is not a finite number."""
    if not (_finite(lo) and _finite(hi)):
        return missing
    write = signed if signed_bounds else num
    return f"[{write(lo, digits)}, {write(hi, digits)}]"


def estimate_interval(est: Estimate | None, digits: int = 3) -> str:
    """An estimate's interval with signed bounds, as the paper's tables write differences."""
    return MISSING if est is None else interval(est.lo, est.hi, digits, signed_bounds=True)


def pvalue(p: float | None, missing: str = MISSING, floor: str = "<.001") -> str:
    """A p- or q-value with three decimals, `floor` below 0.001."""
    if not _finite(p):
        return missing
    assert p is not None
    return floor if p < 0.001 else f"{p:.3f}"


def marker(p: float | None) -> str:
    """The tables' significance marker: † below 0.01, * below 0.05."""
    return "" if not _finite(p) else "†" if p < 0.01 else "*" if p < 0.05 else ""  # type: ignore[operator]


__all__ = ["MISSING", "estimate_interval", "interval", "marker", "num", "pvalue", "signed"]
