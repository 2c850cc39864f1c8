"""The synthetic consumers: `toy(q)` (Sec. 5.1) and `oracle`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ascp.errors import AscpError
from ascp.lm.sampling import derive_seed
from ascp.loop.consumers.base import Consumption, bearing_ids, uniform_reading
from ascp.params import Param
from ascp.schedulers.base import RoundFeedback
from ascp.types import Case


class Toy:
    """Uses each shown passage independently with probability q (Sec. 5.1, Eq. 4)."""

    params = (Param("q", float, 0.5, "probability that a shown passage is used, independently"),
              Param("seed", int, 0, "seed of the draws"))

    def __init__(self, q: float = 0.5, seed: int = 0) -> None:
        if not 0.0 <= q <= 1.0:
            raise AscpError(f"toy consumer: q must lie in [0, 1], got {q}.")
        self.q, self.seed = q, seed
        self.name = f"toy(q={q:g})"

    def consume(self, case: Case, round: int, context: Sequence[str],
                history: Sequence[RoundFeedback]) -> Consumption:
        used = [d for d in context
                if np.random.default_rng(derive_seed(self.seed, case.id, round, d)).random() < self.q]
        return uniform_reading(context, used)


class Oracle:
    """Uses exactly the answer-bearing passages of each context."""

    name = "oracle"
    params: tuple[Param, ...] = ()

    def __init__(self) -> None:
        self._bearing: dict[str, set[str]] = {}

    def consume(self, case: Case, round: int, context: Sequence[str],
                history: Sequence[RoundFeedback]) -> Consumption:
        if case.id not in self._bearing:
            self._bearing[case.id] = bearing_ids(case)
        return uniform_reading(context, [d for d in context if d in self._bearing[case.id]])
