"""`ascp.params`: the one `name(key=value)` parser (round-trips `canonical_name`) and the one typed-value check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ascp.errors import AscpError
from ascp.params import Param, canonical_name, format_value, parse_name, parse_value, validate

OPTIONS = [
    {},
    {"kappa": 1},
    {"lam": 0.5, "feedback": "uniform"},
    {"submodular": False, "learn": True, "tau": None},
    {"eps": 1e-05, "big": 12345678901234567890, "neg": -3, "word": "commit+structured"},
]


@pytest.mark.parametrize("options", OPTIONS)
def test_parse_name_reads_back_what_canonical_name_writes(options):
    name = canonical_name("ascp", options)
    base, pairs = parse_name(name, "scheduler", "ascp(kappa=1)")
    assert base == "ascp"
    parsed = {key: parse_value(text) for key, text in pairs}
    assert parsed == options and all(type(parsed[k]) is type(v) for k, v in options.items())
    assert canonical_name(base, parsed) == name


def test_canonical_text_of_values():
    assert canonical_name("mmr", {"b": True, "a": None}) == "mmr(a=none,b=true)"
    assert format_value(np.float64(0.25)) == "0.25" and format_value(2.0) == "2.0"
    assert parse_value(" TRUE ") is True and parse_value("none") is None and parse_value("2.0") == 2.0


@pytest.mark.parametrize("text, message", [
    ("two words", "malformed scheduler 'two words'; write e.g. ascp(kappa=1)."),
    ("ascp(kappa)", "malformed option 'kappa' in scheduler 'ascp(kappa)'; write key=value."),
    ("ascp(=1)", "malformed option '=1' in scheduler 'ascp(=1)'; write key=value."),
])
def test_malformed_names_are_one_sentence(text, message):
    with pytest.raises(AscpError) as err:
        parse_name(text, "scheduler", "ascp(kappa=1)")
    assert str(err.value) == message


def test_scheduler_specs_and_condition_names_use_the_one_parser():
    from ascp.experiments import condition
    from ascp.experiments.condition import Condition
    from ascp.schedulers import check_scheduler, parse_scheduler

    assert condition.parse_name is parse_name
    assert parse_scheduler("ascp(kappa=1, feedback=uniform)") == ("ascp", {"kappa": 1, "feedback": "uniform"})
    assert check_scheduler("ascp(submodular=false)") == "ascp(submodular=false)"
    cond = Condition.parse("ascp(k=2,T=3,submodular=false,kappa=1)")
    assert cond.scheduler == check_scheduler(cond.scheduler) == "ascp(kappa=1,submodular=false)"
    assert Condition.parse(cond.name) == cond
    with pytest.raises(AscpError, match="malformed option 'k' in condition"):
        Condition.parse("ascp(k,T=3)")
