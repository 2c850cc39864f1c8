"""Model-free consumers: what `ascp simulate` puts in place of the generator and the probe.

A consumer reads one round's context and says which passages were used, as a probe reading
(normalised scores over the context and the used set). Consumers:

- `toy(q)` (Sec. 5.1): every shown passage is used independently with probability q, seeded per
  (run seed, case, round, passage), so the same passage shown in the same round under two
  policies gets the same draw (common random numbers).
- `oracle`: uses exactly the answer-bearing passages of the context (those attesting at least one
  gold unit by the PR@T rule).
- `replay(RUN_DIR)`: the readings a real run's probe gave, looked up per case, round and passage
  in `RUN_DIR/rounds.jsonl` (or, for an experiment store, the rounds of one condition:
  `replay(run=STORE,condition=NAME)`). A passage the recorded run showed in that round keeps its recorded
  reading; a passage it did not show then takes its reading from the nearest round in which the
  recorded run showed it (earlier round on a tie); a passage the recorded run never showed for the
  case is not used (normalised score 0).
- `fit(run=RUN_DIR)`: a logistic model of a real run's use decisions, P(used) =
  sigmoid(b0 + b_rank log(rank) + b_bearing [answer-bearing] + b_shown log(1 + times shown
  before)), fitted to every recorded (case, round, shown passage) of the run whose case is among
  the simulated ones; each shown passage is then used with its fitted probability, drawn like
  `toy` (seeded per run seed, case, round, passage). It generalises a run to pools, rounds and
  policies the run never saw.

Normalised scores: used passages share the mass equally (1/|U_t| each; all zeros when nothing is
used), except `replay`, which keeps the recorded scores. Your own consumer: any object with
`name` and `consume(case, round, context, history) -> Consumption`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ascp.errors import AscpError
from ascp.lm.sampling import derive_seed
from ascp.params import Param, validate
from ascp.schedulers.base import RoundFeedback
from ascp.types import Case


@dataclass(frozen=True)
class Consumption:
    """One round's reading by a consumer: normalised scores over the context and the used ids."""

    normalized: dict[str, float]
    used: tuple[str, ...]


@runtime_checkable
class Consumer(Protocol):
    name: str

    def consume(self, case: Case, round: int, context: Sequence[str],
                history: Sequence[RoundFeedback]) -> Consumption:
        """Which passages of `context` (round `round`, 1-based) are used, given the earlier rounds."""
        ...


def uniform_reading(context: Sequence[str], used: Sequence[str]) -> Consumption:
    share = 1.0 / len(used) if used else 0.0
    chosen = set(used)
    return Consumption({d: share if d in chosen else 0.0 for d in context}, tuple(d for d in context if d in chosen))


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
            from ascp.metrics.attestation import attestation_matrix

            hits = np.atleast_1d(attestation_matrix(case.pool, case.units).any(axis=1)).tolist()
            self._bearing[case.id] = {p.id for p, hit in zip(case.pool, hits, strict=True) if hit}
        return uniform_reading(context, [d for d in context if d in self._bearing[case.id]])


class Replay:
    """The readings of a real run's probe (see the module docstring for unseen passages).

    `run`: an `ascp run` folder (its `rounds.jsonl`), or an experiment store (`units.jsonl` of
    `ascp experiment run` / `ascp reproduce`), whose rounds of one `condition` are replayed (the
    condition is needed when the store holds several).
    """

    params = (Param("run", str, "", "run folder of `ascp run`, or experiment store, to replay"),
              Param("condition", str, "", "the store's condition whose rounds are replayed"))

    def __init__(self, run: str, condition: str = "") -> None:
        folder = Path(run)
        self.name = f"replay({run}{', ' + condition if condition else ''})"
        # case -> passage -> [(round, normalised score, used)]
        self.readings: dict[str, dict[str, list[tuple[int, float, bool]]]] = {}
        self.rounds: dict[str, set[int]] = {}
        if (folder / "rounds.jsonl").is_file():
            for where, rec in _records(folder / "rounds.jsonl"):
                self._add(where, rec, str(rec.get("case_id")))
        elif (folder / "units.jsonl").is_file():
            units = _records(folder / "units.jsonl")
            names = sorted({str(u.get("condition")) for _, u in units})
            if not condition and len(names) == 1:
                condition = names[0]
            if condition not in names:
                raise AscpError(f"replay consumer: give one of the store's conditions, e.g. "
                                f"replay(run={run},condition={names[0]}); it holds: {'; '.join(names)}.")
            for where, unit in units:
                if unit.get("condition") == condition:
                    for rec in unit.get("rounds", []):
                        self._add(where, rec, str(unit.get("case_id")))
        else:
            raise AscpError(f"replay consumer: {folder} holds neither rounds.jsonl (`ascp run`) nor units.jsonl "
                            "(an experiment store); give the folder of a run.")

    def _add(self, where: str, rec: dict, case_id: str) -> None:
        try:
            t, used = int(rec["round"]), set(rec["used"])
            readings = {d: float(rec["normalized"].get(d, 0.0)) for d in rec["context"]}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise AscpError(f"replay consumer: {where} is not a round record of a run.") from None
        if t in self.rounds.get(case_id, set()):
            raise AscpError(f"replay consumer: {where} repeats round {t} of case {case_id!r} (the run holds several "
                            "seeds, models or tasks for it); replay a run with one reading per case and round.")
        self.rounds.setdefault(case_id, set()).add(t)
        for d, a in readings.items():
            self.readings.setdefault(case_id, {}).setdefault(d, []).append((t, a, d in used))

    def check(self, cases: Sequence[Case], T: int) -> None:
        """The replayed run must cover these cases and rounds 1..T (else one sentence)."""
        missing = [c.id for c in cases if c.id not in self.rounds]
        if missing:
            raise AscpError(f"{self.name}: the recorded run has no rounds for case {missing[0]!r}; replay a run "
                            "made on the same data file.")
        short = [c.id for c in cases if not set(range(1, T + 1)) <= self.rounds[c.id]]
        if short:
            raise AscpError(f"{self.name}: the recorded run lacks some of rounds 1..{T} for case {short[0]!r}; "
                            f"replay a run with at least T={T} rounds.")

    def consume(self, case: Case, round: int, context: Sequence[str],
                history: Sequence[RoundFeedback]) -> Consumption:
        normalized, used = {}, []
        for d in context:
            seen = self.readings.get(case.id, {}).get(d)
            if not seen:
                normalized[d] = 0.0
                continue
            _, a, was_used = min(seen, key=lambda r: (abs(r[0] - round), r[0]))
            normalized[d] = a
            if was_used:
                used.append(d)
        return Consumption(normalized, tuple(used))


FIT_FEATURES = ("intercept", "log_rank", "bearing", "log1p_shown")


def fit_features(rank: np.ndarray, bearing: np.ndarray, shown_before: np.ndarray) -> np.ndarray:
    """The design matrix of `fit`: 1, log(rank) (rank 1-based), answer-bearing (0/1), log(1 + earlier showings)."""
    rank = np.asarray(rank, dtype=float)
    return np.column_stack([np.ones_like(rank), np.log(rank), np.asarray(bearing, dtype=float),
                            np.log1p(np.asarray(shown_before, dtype=float))])


def answer_bearing(case: Case) -> set[str]:
    """Ids of the pool passages that attest at least one gold unit (the PR@T rule)."""
    from ascp.metrics.attestation import attestation_matrix

    if not case.units or not all(u.aliases for u in case.units):
        return set()
    hits = np.atleast_1d(attestation_matrix(case.pool, case.units).any(axis=1)).tolist()
    return {p.id for p, hit in zip(case.pool, hits, strict=True) if hit}


class Fit:
    """Per-passage use probabilities fitted to a real run's readings (see the module docstring).

    `run`: an `ascp run` folder or an experiment store; in a store, `condition` (exact name) and
    `estimator` restrict the units fitted (empty: all). The fit needs the cases (passage ranks and
    gold units), so it happens in `prepare(cases)`, which `simulate_portfolios` calls; the
    coefficients are then in `coef` (by `FIT_FEATURES`) and the number of readings in `n_readings`.
    """

    params = (Param("run", str, "", "run folder of `ascp run`, or experiment store, whose readings are fitted"),
              Param("condition", str, "", "the store's condition to fit (empty: all)"),
              Param("estimator", str, "", "the store's estimator to fit (empty: all)"),
              Param("seed", int, 0, "seed of the draws"))

    def __init__(self, run: str, condition: str = "", estimator: str = "", seed: int = 0) -> None:
        folder = Path(run)
        extra = "".join(f",{key}={value}" for key, value in (("condition", condition), ("estimator", estimator))
                        if value)
        self.name = f"fit(run={run}{extra})"
        self.seed = seed
        # case -> [(round, context, used)] of the recorded run
        self.recorded: dict[str, list[tuple[int, tuple[str, ...], set[str]]]] = {}
        if (folder / "rounds.jsonl").is_file():
            for where, rec in _records(folder / "rounds.jsonl"):
                self._add(where, str(rec.get("case_id")), rec)
        elif (folder / "units.jsonl").is_file():
            units = [(where, u) for where, u in _records(folder / "units.jsonl")
                     if (not condition or u.get("condition") == condition)
                     and (not estimator or u.get("estimator") == estimator)]
            if not units:
                raise AscpError(f"fit consumer: {folder}/units.jsonl holds no unit with condition {condition!r} and "
                                f"estimator {estimator!r}; drop or correct the filter.")
            for where, unit in units:
                for rec in unit.get("rounds", []):
                    self._add(where, str(unit.get("case_id")), rec)
        else:
            raise AscpError(f"fit consumer: {folder} holds neither rounds.jsonl (`ascp run`) nor units.jsonl "
                            "(an experiment store); give the folder of a run.")
        self.coef: np.ndarray | None = None
        self.n_readings = 0
        self._bearing: dict[str, set[str]] = {}

    def _add(self, where: str, case_id: str, rec: dict) -> None:
        try:
            item = (int(rec["round"]), tuple(str(d) for d in rec["context"]), {str(d) for d in rec["used"]})
        except (ValueError, KeyError, TypeError):
            raise AscpError(f"fit consumer: {where} is not a round record of a run.") from None
        self.recorded.setdefault(case_id, []).append(item)

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


def _records(path: Path) -> list[tuple[str, dict]]:
    """(where, record) for every JSON line of `path` (the run folder's reader); a line that does not
    parse is one sentence."""
    from ascp.loop.runfolder import read_records

    try:
        return [(f"{path}:{n}", rec) for n, rec in read_records(path)]
    except AscpError as exc:
        raise AscpError(f"replay consumer: {exc}") from None


CONSUMERS: dict[str, type[Toy] | type[Oracle] | type[Replay] | type[Fit]] = {
    "toy": Toy, "oracle": Oracle, "replay": Replay, "fit": Fit}


def make_consumer(spec: str, seed: int = 0) -> Consumer:
    """`toy`, `toy(q=0.3)`, `oracle`, `replay(run=DIR)` (`replay(DIR)` also works) or `fit(run=DIR)` (`fit(DIR)`)."""
    from ascp.schedulers import parse_value

    name, _, rest = spec.strip().partition("(")
    name = name.strip()
    if name not in CONSUMERS:
        raise AscpError(f"unknown consumer {name!r}; choose one of {', '.join(CONSUMERS)} (e.g. toy(q=0.5)).")
    if rest and not rest.endswith(")"):
        raise AscpError(f"malformed consumer {spec!r}; write e.g. toy(q=0.5) or replay(run=runs/asqa).")
    options: dict = {}
    if name == "replay" and rest:  # a folder may hold '=' or ',': take it whole unless written run=...
        inner = rest[:-1].strip()
        condition = ""
        if inner.startswith("run="):
            inner, sep, condition = inner[len("run="):].partition(",condition=")
        folder = inner.strip()
        return Replay(folder, condition.strip()) if folder else make_consumer("replay")
    if name == "fit" and rest[:-1].strip():
        # fit(DIR): the folder whole; fit(run=DIR,...): the folder up to ",estimator=" / ",seed=" /
        # ",condition=" (condition last: a store's condition names hold commas and '=')
        inner = rest[:-1].strip()
        if not inner.startswith("run="):
            return Fit(inner, seed=seed)
        head, sep, cond = inner[len("run="):].partition(",condition=")
        run, *pairs = re.split(r",(?=(?:seed|estimator)=)", head)
        fit_options: dict[str, Any] = {"condition": cond.strip()} if sep else {}
        for pair in pairs:
            key, _, value = pair.partition("=")
            fit_options[key] = parse_value(value) if key == "seed" else value.strip()
        checked = validate("consumer 'fit'", Fit.params, {"run": run.strip(), **fit_options})
        checked.setdefault("seed", seed)
        if not checked.get("run"):
            raise AscpError("fit consumer: give the run folder, e.g. fit(run=runs/asqa-ascp).")
        return Fit(**checked)
    for part in filter(str.strip, rest[:-1].split(",") if rest else []):
        key, sep, value = part.partition("=")
        if not sep:
            raise AscpError(f"malformed option {part.strip()!r} in consumer {spec!r}; write key=value.")
        options[key.strip()] = parse_value(value)
    cls = CONSUMERS[name]
    checked = validate(f"consumer {name!r}", cls.params, options)
    if name == "toy":
        checked.setdefault("seed", seed)
    if name == "fit":
        checked.setdefault("seed", seed)
        if not checked.get("run"):
            raise AscpError("fit consumer: give the run folder, e.g. fit(run=runs/asqa-ascp).")
    if name == "replay" and not checked.get("run"):
        raise AscpError("replay consumer: give the run folder, e.g. replay(run=runs/asqa-ascp).")
    return cls(**checked)


__all__ = ["CONSUMERS", "Consumer", "Consumption", "FIT_FEATURES", "Fit", "Oracle", "Replay", "Toy", "fit_features",
           "fit_logistic", "make_consumer"]
