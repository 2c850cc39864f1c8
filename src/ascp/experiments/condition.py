"""An experimental condition: a frozen value with a canonical name that round-trips through `parse`.

    rotate(k=2,T=12,arm=rotation,estimator=loo,instruction=commit)
    ascp(k=5,T=5,estimator=loo,instruction=commit,steer=0.5,eta=0.1,kappa=1)

The name is `<scheduler>(<fields>)`: the condition fields in the fixed order k, T, arm (only for
the two factorial arms), estimator, instruction, budget (only when set), steer and eta (only for
steered decoding), followed by the scheduler's own options sorted by key. `Condition.parse`
accepts short forms (defaults filled in, any order, the alias `fixed` for `vanilla`);
`Condition.parse(c.name) == c` for every condition. Names contain no `/`, so they are usable as
file names as well as DataFrame keys.

Arms (the k x T factorial's controls, Sec. 8.1-8.2): `arm=rotation` *is* the `rotate`
scheduler (disjoint rank windows) and `arm=fixed` *is* the `vanilla` scheduler (the same top-k
every round). The arm is a label derived from the scheduler, never a modifier of another
policy: giving only the arm picks the scheduler, giving both requires them to agree, and the
other policies carry no arm.

Steering (Eq. 5 + APC, `ascp.lm.steering.SteerConfig`): `steer` is the strength alpha, or None for
ordinary decoding in every round (the default); `eta` is the plausibility cutoff, used only when
steering (alpha=0 with eta>0 is APC only; eta=0 is the contrast only).

Structured single response (Appendix D.2, Table 17): `budget` B gives one generation (T=1) the
decode-token budget of a B-round portfolio, max_new_tokens = the spec's max_new_tokens x B, under a
structured instruction (`commit+structured`, `integrate+structured`: list the distinct supported
interpretations with grounding, stop rather than pad). Budget is None (one round's tokens) for every
other condition and then absent from the name, so names of earlier conditions are unchanged.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ascp.errors import AscpError
from ascp.params import canonical_name, format_value, is_number, is_whole, parse_name, parse_value

ARMS: dict[str, str] = {"rotation": "rotate", "fixed": "vanilla"}  # arm -> scheduler
ARM_OF: dict[str, str] = {v: k for k, v in ARMS.items()}  # scheduler -> arm
FIELDS = ("k", "T", "arm", "estimator", "instruction", "steer", "eta", "budget")

_BARE = re.compile(r"^[A-Za-z0-9_.+-]+$")


class ConditionError(AscpError):
    """A bad condition field; `field` names it, `body` says what is wrong (one sentence, no prefix)."""

    def __init__(self, field: str, body: str) -> None:
        super().__init__(f"condition field {field}: {body}")
        self.field = field
        self.body = body


def _check_int(field: str, value: Any) -> int:
    if not is_whole(value) or value < 1:
        raise ConditionError(field, f"expected an integer of at least 1, got {value!r}.")
    return int(value)


@dataclass(frozen=True)
class Condition:
    """One cell of an experiment: scheduler (with options), k, T, arm, estimator, instruction, steering,
    and the decode budget of a structured single response."""

    policy: str  # registered scheduler name (aliases resolved), without options
    k: int
    T: int
    arm: str | None = None
    estimator: str = "loo"
    instruction: str = "commit"
    steer: float | None = None  # steering strength alpha; None = ordinary decoding
    eta: float | None = None  # APC cutoff when steering (default `lm.steering.DEFAULT_ETA`); None when not
    options: tuple[tuple[str, Any], ...] = ()  # scheduler options, sorted by key
    budget: int | None = None  # rounds' worth of max_new_tokens for one structured response; None = one round

    def __post_init__(self) -> None:
        from ascp.attribution import ESTIMATOR_NAMES
        from ascp.lm.prompts import INSTRUCTIONS, is_structured
        from ascp.lm.steering import DEFAULT_ALPHA, DEFAULT_ETA
        from ascp.schedulers import ALIASES, SCHEDULER_NAMES

        policy = ALIASES.get(self.policy, self.policy)
        if policy not in SCHEDULER_NAMES:
            raise ConditionError("policy", f"unknown scheduler {self.policy!r}; "
                                 f"choose one of {', '.join(SCHEDULER_NAMES)}.")
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "k", _check_int("k", self.k))
        object.__setattr__(self, "T", _check_int("T", self.T))
        if self.arm is not None and self.arm not in ARMS:
            raise ConditionError("arm", f"unknown arm {self.arm!r}; choose rotation or fixed.")
        derived = ARM_OF.get(policy)
        if self.arm is None:
            object.__setattr__(self, "arm", derived)
        elif ARMS[self.arm] != policy:
            raise ConditionError("arm", f"arm {self.arm} means the {ARMS[self.arm]} scheduler, not {policy}; "
                                 "give only one of policy and arm.")
        if self.estimator not in ESTIMATOR_NAMES:
            raise ConditionError("estimator", f"unknown estimator {self.estimator!r}; "
                                 f"choose one of {', '.join(ESTIMATOR_NAMES)}.")
        if self.instruction not in INSTRUCTIONS:
            raise ConditionError("instruction", f"unknown instruction {self.instruction!r}; "
                                 f"choose one of {', '.join(INSTRUCTIONS)}.")
        if self.budget is not None:
            object.__setattr__(self, "budget", _check_int("budget", self.budget))
            if self.T != 1:
                raise ConditionError("budget", f"a budgeted structured response is one generation, got T={self.T}; "
                                     "set T=1 or drop budget.")
            if not is_structured(self.instruction):
                # with commit/integrate it would be the same cell as the unbudgeted condition in every table
                raise ConditionError("budget", f"applies to a structured instruction, got {self.instruction}; "
                                     "use commit+structured or integrate+structured, or drop budget.")
        steer = self.steer
        if steer is False or (isinstance(steer, str) and steer.lower() in ("none", "off")):
            steer = None
        elif steer is True:
            steer = DEFAULT_ALPHA  # `steer: true`
        if steer is not None and (not is_number(steer) or steer < 0):
            raise ConditionError("steer", f"expected a steering strength of at least 0 or none, got {steer!r}.")
        object.__setattr__(self, "steer", None if steer is None else float(steer))
        eta = self.eta
        if eta is not None and (not is_number(eta) or not 0 <= eta < 1):
            raise ConditionError("eta", f"expected a plausibility cutoff in [0, 1), got {eta!r}.")
        object.__setattr__(self, "eta", None if steer is None else float(DEFAULT_ETA if eta is None else eta))
        options = []
        for key, value in sorted(dict(self.options).items()):
            if key in FIELDS or key == "policy" or not _BARE.match(key):
                raise ConditionError("policy", f"scheduler option name {key!r} is not allowed.")
            text = format_value(value)
            finite = not isinstance(value, float) or math.isfinite(value)
            if not finite or not _BARE.match(text) or format_value(parse_value(text)) != text:
                raise ConditionError("policy", f"value {value!r} of option {key} cannot be written in a condition "
                                     "name; use a number, true/false, none or a bare word.")
            options.append((key, parse_value(text)))
        object.__setattr__(self, "options", tuple(options))

    @property
    def scheduler(self) -> str:
        """The scheduler spec for `LoopConfig.policy`: `ascp` or `ascp(kappa=1)`."""
        return canonical_name(self.policy, dict(self.options))

    @property
    def name(self) -> str:
        parts = [f"k={self.k}", f"T={self.T}"]
        if self.arm is not None:
            parts.append(f"arm={self.arm}")
        parts += [f"estimator={self.estimator}", f"instruction={self.instruction}"]
        if self.budget is not None:
            parts.append(f"budget={self.budget}")
        if self.steer is not None:
            parts += [f"steer={format_value(self.steer)}", f"eta={format_value(self.eta)}"]
        parts += [f"{k}={format_value(v)}" for k, v in self.options]
        return f"{self.policy}({','.join(parts)})"

    def __str__(self) -> str:
        return self.name

    def fields(self) -> dict[str, Any]:
        """The condition as flat record fields (for tidy rows); `budget` only when set, so the records of
        every other condition are unchanged."""
        out = {"condition": self.name, "policy": self.policy, "scheduler": self.scheduler, "k": self.k,
               "T": self.T, "arm": self.arm, "estimator": self.estimator, "instruction": self.instruction,
               "steer": self.steer, "eta": self.eta}
        return out if self.budget is None else {**out, "budget": self.budget}

    @classmethod
    def parse(cls, text: str) -> Condition:
        """`rotate(k=2,T=12)` or a full canonical name -> Condition; malformed names raise AscpError."""
        policy, pairs = parse_name(text, "condition", "rotate(k=2,T=12,estimator=loo)")
        values: dict[str, Any] = {}
        options: dict[str, Any] = {}
        for key, val in pairs:
            target = values if key in FIELDS else options
            if key in target:
                raise AscpError(f"condition {text!r} gives {key} twice.")
            numeric = key in ("k", "T", "steer", "eta", "budget")
            target[key] = parse_value(val) if numeric or target is options else val.strip()
        if values.get("arm") in ("none", ""):
            values["arm"] = None
        for key in ("k", "T"):
            if key not in values:
                raise AscpError(f"condition {text!r} lacks {key}; write e.g. {policy}(k=2,T=12).")
        return cls(policy=policy, options=tuple(options.items()), **values)

    @classmethod
    def from_mapping(cls, where: str, raw: dict[str, Any]) -> Condition:
        """A condition from spec fields: policy (a scheduler spec, may carry options) and/or arm, k, T, ..."""
        from ascp.schedulers import parse_scheduler

        unknown = sorted(set(raw) - {"policy", *FIELDS})
        if unknown:
            raise AscpError(f"spec field {where}.{unknown[0]}: unknown key; valid keys: policy, {', '.join(FIELDS)}.")
        values = dict(raw)
        policy = values.pop("policy", None)
        arm = values.get("arm")
        if policy is None:
            if arm is None:
                raise AscpError(f"spec field {where}: give a policy (or an arm: rotation or fixed).")
            if not isinstance(arm, str) or arm not in ARMS:
                raise AscpError(f"spec field {where}.arm: unknown arm {arm!r}; choose rotation or fixed.")
            policy = ARMS[arm]
        if not isinstance(policy, str):
            raise AscpError(f"spec field {where}.policy: expected a scheduler name, got {policy!r}.")
        for key in ("k", "T"):
            if key not in values:
                raise AscpError(f"spec field {where}.{key}: missing; give a positive integer.")
        for key in ("arm", "estimator", "instruction"):
            if key in values and values[key] is not None and not isinstance(values[key], str):
                raise AscpError(f"spec field {where}.{key}: expected a name, got {values[key]!r}.")
        try:
            base, options = parse_scheduler(policy)
        except AscpError as exc:
            raise AscpError(f"spec field {where}.policy: {exc}") from None
        try:
            return cls(policy=base, options=tuple(options.items()), **values)
        except ConditionError as exc:
            raise AscpError(f"spec field {where}.{exc.field}: {exc.body}") from None
