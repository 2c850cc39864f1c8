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


@pytest.mark.parametrize("value, whole, number", [
    (3, True, True), (np.int64(3), True, True), (True, False, False), (2.5, False, True),
    (np.float32(2.5), False, True), (math.inf, False, False), (math.nan, False, False), ("3", False, False),
    (None, False, False),
])
def test_the_type_rules(value, whole, number):
    from ascp.params import is_number, is_whole

    assert is_whole(value) is whole and is_number(value) is number
    assert is_number(math.inf, finite=False)


def test_validate_applies_the_type_rules_with_one_sentence():
    params = [Param("n", int, 1, "count"), Param("x", float, 0.5, "weight")]
    assert validate("policy 'p'", params, {"n": np.int64(4), "x": 1}) == {"n": 4, "x": 1.0}
    assert validate("policy 'p'", params, {"n": 2.0}) == {"n": 2}
    for bad in ({"n": math.inf}, {"n": math.nan}, {"n": 2.5}, {"n": True}, {"x": "1"}, {"x": False}):
        with pytest.raises(AscpError, match="bad option value for policy 'p'"):
            validate("policy 'p'", params, bad)


def test_every_hand_check_uses_the_type_rules():
    import ascp.api
    import ascp.reading
    from ascp import params
    from ascp.experiments import condition, run, spec

    for module in (condition, spec, ascp.reading):
        assert module.is_number is params.is_number
    for module in (condition, spec, run, ascp.api):
        assert module.is_whole is params.is_whole
    assert ascp.api._whole("k", np.int64(3), 1) == 3
    with pytest.raises(AscpError, match="must be a whole number of at least 1"):
        ascp.api._whole("k", 0, 1)
    ascp.reading.check_threshold(np.float64(0.5))
    with pytest.raises(AscpError):
        ascp.reading.check_threshold(math.nan)
    assert condition.Condition("ascp", np.int64(2), 3).k == 2
