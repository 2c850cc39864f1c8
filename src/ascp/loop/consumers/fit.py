"""`fit(run=...)`: a logistic model of a real run's use decisions, simulated on new pools, rounds and
policies."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ascp.errors import AscpError
from ascp.lm.sampling import derive_seed
from ascp.loop.consumers.base import Consumption, answer_bearing, recorded_run, uniform_reading
from ascp.params import Param
from ascp.schedulers.base import RoundFeedback
from ascp.types import Case

FIT_FEATURES = ("intercept", "log_rank", "bearing", "log1p_shown")


def fit_features(rank: np.ndarray, bearing: np.ndarray, shown_before: np.ndarray) -> np.ndarray:
    """The design matrix of `fit`: 1, log(rank) (rank 1-based), answer-bearing (0/1), log(1 + earlier showings)."""
    rank = np.asarray(rank, dtype=float)
    return np.column_stack([np.ones_like(rank), np.log(rank), np.asarray(bearing, dtype=float),
                            np.log1p(np.asarray(shown_before, dtype=float))])




class Fit:
    """Per-passage use probabilities fitted to a real run's readings (see the module docstring).

    `run`: an `ascp run` folder, an `ascp simulate` output or an experiment store; in a store,
    `condition` (exact name) and `estimator` restrict the units fitted (empty: all). The fit needs
    the cases (passage ranks and gold units), so it happens in `prepare(cases)`, which
    `simulate_portfolios` calls; the coefficients are then in `coef` (by `FIT_FEATURES`) and the
    number of readings in `n_readings`.
    """

    params = (Param("run", str, "", "run folder of `ascp run`, or experiment store, whose readings are fitted"),
              Param("condition", str, "", "the store's condition to fit (empty: all)"),
              Param("estimator", str, "", "the store's estimator to fit (empty: all)"),
              Param("seed", int, 0, "seed of the draws"))

    def __init__(self, run: str, condition: str = "", estimator: str = "", seed: int = 0) -> None:
        extra = "".join(f",{key}={value}" for key, value in (("condition", condition), ("estimator", estimator))
                        if value)
        self.name = f"fit(run={run}{extra})"
        self.seed = seed
        # case -> [(round, context, used)] of the recorded run
        self.recorded: dict[str, list[tuple[int, tuple[str, ...], set[str]]]] = {}
        results = recorded_run("fit", run)
        units = list(results.units)
        if results.kind == "store":
            units = [u for u in units if (not condition or u.condition == condition)
                     and (not estimator or u.record.get("estimator") == estimator)]
            if not units:
                raise AscpError(f"fit consumer: {run} holds no unit with condition {condition!r} and estimator "
                                f"{estimator!r}; drop or correct the filter.")
        for unit in units:
            self.recorded.setdefault(unit.case_id, []).extend(
                (r.round, tuple(r.context), set(r.used)) for r in unit.rounds)
        self.coef: np.ndarray | None = None
        self.n_readings = 0
        self._bearing: dict[str, set[str]] = {}

    def _bearing_of(self, case: Case) -> set[str]:
        if case.id not in self._bearing:
            self._bearing[case.id] = answer_bearing(case)
        return self._bearing[case.id]

    def prepare(self, cases: Sequence[Case]) -> None:
        """Fit the model on the recorded rounds of those `cases` the run holds (once; later calls keep it)."""
        if self.coef is not None:
            return
        rows: list[tuple[int, bool, int]] = []
        used: list[bool] = []
        for case in cases:
            rank = {p.id: i + 1 for i, p in enumerate(case.pool)}
            bearing = self._bearing_of(case)
            # several recorded units of one case (conditions) are separate sequences of rounds: count
            # earlier showings within each, in the order they were recorded
            shown: dict[str, int] = {}
            last_round = 0
            for t, context, hit in self.recorded.get(case.id, []):
                if t <= last_round:
                    shown = {}
                last_round = t
                for d in context:
                    if d in rank:
                        rows.append((rank[d], d in bearing, shown.get(d, 0)))
                        used.append(d in hit)
                for d in context:
                    shown[d] = shown.get(d, 0) + 1
        if not rows:
            raise AscpError(f"{self.name}: the recorded run has no rounds for any of the {len(cases)} cases; fit a run "
                            "made on the same data file.")
        y = np.array(used)
        if y.all() or not y.any():
            raise AscpError(f"{self.name}: the recorded run {'used every' if y.all() else 'used no'} shown passage, "
                            "so there is nothing to fit; fit a run whose probe used some passages and not others.")
        X = fit_features(*(np.array(col) for col in zip(*rows, strict=True)))
        self.coef = fit_logistic(X, y)
        self.n_readings = len(y)

    def probability(self, case: Case, context: Sequence[str], history: Sequence[RoundFeedback]) -> np.ndarray:
        """The fitted use probability of each passage of `context` given the earlier rounds."""
        if self.coef is None:
            raise AscpError(f"{self.name}: the consumer is not fitted; call prepare(cases) first "
                            "(simulate_portfolios does).")
        rank = {p.id: i + 1 for i, p in enumerate(case.pool)}
        bearing = self._bearing_of(case)
        shown = [sum(d in fb.context for fb in history) for d in context]
        X = fit_features(np.array([rank[d] for d in context]), np.array([d in bearing for d in context]),
                         np.array(shown))
        return 1.0 / (1.0 + np.exp(-(X @ self.coef)))

    def consume(self, case: Case, round: int, context: Sequence[str],
                history: Sequence[RoundFeedback]) -> Consumption:
        p = self.probability(case, context, history)
        used = [d for d, pd in zip(context, p, strict=True)
                if np.random.default_rng(derive_seed(self.seed, case.id, round, d)).random() < pd]
        return uniform_reading(context, used)


def fit_logistic(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Maximum-likelihood logistic coefficients (a tiny ridge keeps separable data finite).

    Constant columns other than the intercept (say, no passage was shown twice) get coefficient 0.
    """
    from sklearn.linear_model import LogisticRegression

    varying = np.ptp(X, axis=0) > 0
    varying[0] = False  # the intercept is the model's own
    coef = np.zeros(X.shape[1])
    model = LogisticRegression(C=1e4, max_iter=1000)
    if varying.any():
        model.fit(X[:, varying], y)
        coef[0] = float(model.intercept_[0])
        coef[varying] = model.coef_[0]
    else:
        rate = float(np.clip(y.mean(), 1e-6, 1 - 1e-6))
        coef[0] = float(np.log(rate / (1 - rate)))
    return coef
