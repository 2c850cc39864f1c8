"""Model-free consumers: what `ascp simulate` puts in place of the generator and the probe.

A consumer reads one round's context and says which passages were used, as a probe reading
(normalised scores over the context and the used set). Consumers:

- `toy(q)` (Sec. 5.1): every shown passage is used independently with probability q, seeded per
  (run seed, case, round, passage), so the same passage shown in the same round under two
  policies gets the same draw (common random numbers).
- `oracle`: uses exactly the answer-bearing passages of the context (those attesting at least one
  gold unit by the PR@T rule).
- `replay(RUN_DIR)`: the readings a real run's probe gave, looked up per case, round and passage
  in `RUN_DIR/rounds.jsonl` (or, for an `ascp simulate` output or an experiment store, the rounds
  of one policy or condition: `replay(run=STORE,condition=NAME)`; read by `ascp.records`). A
  passage the recorded run showed in that round keeps its recorded reading; a passage it did not
  show then takes its reading from the nearest round in which the recorded run showed it
  (earlier round on a tie); a passage the recorded run never showed for the case is not used
  (normalised score 0).
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
from typing import Any

from ascp.errors import AscpError
from ascp.loop.consumers.base import Consumer, Consumption, answer_bearing, uniform_reading
from ascp.loop.consumers.fit import FIT_FEATURES, Fit, fit_features, fit_logistic
from ascp.loop.consumers.replay import Replay
from ascp.loop.consumers.synthetic import Oracle, Toy
from ascp.params import parse_value, validate
from ascp.plugins.registry import Registry

_BUILTINS: dict[str, type[Toy] | type[Oracle] | type[Replay] | type[Fit]] = {
    "toy": Toy, "oracle": Oracle, "replay": Replay, "fit": Fit}
CONSUMERS: Registry[type[Toy] | type[Oracle] | type[Replay] | type[Fit]] = Registry(
    "consumer", "consumer", "toy(q=0.5)", tuple(_BUILTINS), lambda: _BUILTINS, plugins=False)
"""The simulator's consumers by name (`ascp.plugins.registry`, the one registry mechanism); replay and fit
take a folder, which may hold ',' and '=', so their specs are split here before the registry reads
the rest."""


def make_consumer(spec: str, seed: int = 0) -> Consumer:
    """`toy`, `toy(q=0.3)`, `oracle`, `replay(run=DIR)` (`replay(DIR)` also works) or `fit(run=DIR)` (`fit(DIR)`)."""
    name, _, rest = spec.strip().partition("(")
    name = name.strip()
    cls = CONSUMERS.get(name)
    if rest and not rest.endswith(")"):
        raise AscpError(f"malformed consumer {spec!r}; write e.g. toy(q=0.5) or replay(run=runs/asqa).")
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
    options = CONSUMERS.parse(spec.strip())[1]
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
           "answer_bearing", "fit_logistic", "make_consumer", "uniform_reading"]
