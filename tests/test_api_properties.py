"""Property-based tests of every bad input at the front door (`ascp.api`) and in the request parser
(`ascp.attribution.requests`): random Unicode (unpaired surrogates, control characters), empty and
huge fields, wrong types, NaN and infinite numbers, thresholds, k and T out of range.

The property: a call either returns a valid result or raises one `AscpError` whose message is one
sentence (non-empty, no newline, ends with a period); never another exception. Most tests hand
the API a model that raises `_Touched` on first use, so they also show that the checks run before
any model work, and stay fast; the rest run the tiny random model end to end on fewer examples.
"""

from __future__ import annotations

import json
import math
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ascp
from ascp.attribution.requests import load_requests, parse_passages, parse_request
from ascp.errors import AscpError
from ascp.loop.portfolios import MAX_ROUNDS
from ascp.types import AttributionResult, Case, Passage, Portfolio

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODEL = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class _Touched(Exception):
    """The model was used: every check before it passed."""


class _Untouchable:
    """A stand-in model that refuses any use, so a call that reaches it has passed validation."""

    def __getattr__(self, name: str) -> Any:
        raise _Touched(name)


TOUCHED = object()


def outcome(call, *args: Any, **kwargs: Any) -> Any:
    """The call's result, its `AscpError` (checked to be one sentence) or TOUCHED."""
    try:
        return call(*args, **kwargs)
    except AscpError as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message, repr(message)
        assert message.endswith("."), repr(message)
        return exc
    except _Touched:
        return TOUCHED


def noted(result: Any) -> Any:
    """`result`, counted by kind in hypothesis' statistics (pytest --hypothesis-show-statistics)."""
    event("refused" if isinstance(result, AscpError) else "reached the model" if result is TOUCHED else "valid result")
    return result


def _embed(texts):
    v = np.array([np.random.default_rng(zlib.crc32(t.encode("utf-8", "replace"))).normal(size=8) for t in texts])
    return v / np.linalg.norm(v, axis=1, keepdims=True)


POOL = ["The author was born in 1850.", "A river runs near the small town.", "The first edition is of 1899."]


# ----- strategies ---------------------------------------------------------------------------
# Any code point, surrogates (Cs) and control characters (Cc) included.
ANY_CHAR = st.characters(exclude_categories=())
SPECIAL = st.sampled_from(["\ud800", "\udfff", "\udc80", "\x00", "\x1b", "\u202e", "\ufeff", "\n", "\r", "\t",
                           "\u0085", "\u2028", "🦊", "\U0010ffff"])
SHORT_TEXT = st.text(alphabet=st.one_of(ANY_CHAR, SPECIAL), max_size=12)
WORDS = st.sampled_from(["The author was born in 1850.", "A river runs near the small town.",
                         "The first edition is of 1899.", "who wrote the novel"])
HUGE_TEXT = st.builds(lambda c, n: c * n, st.sampled_from(["a", "fox ", "\x00", "é", "🦊"]),
                      st.integers(5_000, 60_000))
TEXT = st.one_of(WORDS, SHORT_TEXT, st.just(""), st.just("   \n\t"), HUGE_TEXT,
                 st.builds(lambda w, c: w + c, WORDS, SPECIAL))
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                 st.binary(max_size=4), st.just(object()))
TEXT_OR_JUNK = st.one_of(TEXT, TEXT, JUNK)
PASSAGE_ID = st.one_of(st.text(max_size=4), st.integers(-3, 10**40), JUNK)
PASSAGE_DICT = st.fixed_dictionaries({}, optional={"id": PASSAGE_ID, "title": TEXT_OR_JUNK, "text": TEXT_OR_JUNK})
PASSAGE = st.one_of(PASSAGE_DICT, TEXT, JUNK, st.builds(Passage, st.text(min_size=1, max_size=3), WORDS))
# Valid passages: strings (ids "1".."n" by position), Passages and dicts with letter ids, ids unique.
GOOD_ID = st.text("abcxyz-_", min_size=1, max_size=3)
GOOD_PASSAGE = st.one_of(WORDS, st.builds(Passage, GOOD_ID, WORDS),
                         st.fixed_dictionaries({"id": GOOD_ID, "text": WORDS}, optional={"title": WORDS}))
GOOD_PASSAGES = st.lists(GOOD_PASSAGE, min_size=1, max_size=3, unique_by=lambda p: p if isinstance(p, str) else (
    p.id if isinstance(p, Passage) else p["id"]))
PASSAGES = st.one_of(GOOD_PASSAGES, st.lists(st.one_of(GOOD_PASSAGE, PASSAGE), max_size=4), JUNK, TEXT, PASSAGE_DICT)
NUMBER = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.integers(10**6, 10**30),
                   st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 0.2, 1.0, -1.0, math.nan]),
                   st.text(max_size=3), st.lists(st.integers(), max_size=2))
COUNT = st.one_of(st.integers(-3, 6), st.integers(10**6, 10**30), st.floats(allow_nan=True, allow_infinity=True),
                  st.booleans(), st.text(max_size=2), st.none())


def one_bad(valid: dict[str, st.SearchStrategy], bad: dict[str, st.SearchStrategy]) -> st.SearchStrategy:
    """(which, kwargs): every argument drawn valid (which is None, half the examples) or exactly one,
    `which`, drawn from its bad values (which may by chance be valid too)."""

    @st.composite
    def draw(data):
        which = data(st.one_of(st.none(), st.sampled_from(sorted(bad))))
        kwargs = {name: data(strategy) for name, strategy in valid.items()}
        if which is not None:
            kwargs[which] = data(bad[which])
        return which, kwargs

    return draw()


def _valid_text(value: Any) -> bool:
    if not isinstance(value, str) or not value.strip():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _valid_threshold(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and math.isfinite(value) and 0 <= value <= 1)


def _surrogate(value: Any) -> bool:
    return isinstance(value, str) and any("\ud800" <= c <= "\udfff" for c in value)


def _whole(value: Any, low: int | None = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)


# ----- the request parser -------------------------------------------------------------------
@FAST
@given(raw=PASSAGES)
def test_parse_passages_refuses_in_one_sentence_or_returns_passages(raw):
    result = noted(outcome(parse_passages, "requests.jsonl:1", raw))
    if isinstance(result, AscpError):
        return
    assert isinstance(result, tuple) and result and all(isinstance(p, Passage) for p in result)
    assert len({p.id for p in result}) == len(result)
    assert all(_valid_text(p.text) for p in result)
    assert all(isinstance(p.title, str) and not _surrogate(p.title) for p in result)


@FAST
@given(obj=st.one_of(st.fixed_dictionaries({}, optional={"id": PASSAGE_ID, "question": TEXT_OR_JUNK,
                                                       "passages": PASSAGES, "response": TEXT_OR_JUNK}), JUNK))
def test_parse_request_refuses_in_one_sentence_or_returns_a_request(obj):
    result = noted(outcome(parse_request, "requests.jsonl:1", obj))
    if isinstance(result, AscpError):
        return
    assert _valid_text(result.question) and result.passages
    assert result.response is None or _valid_text(result.response)
    for field in ("question", "response"):
        if _surrogate(obj.get(field)):
            raise AssertionError(f"a {field} with an unpaired surrogate was accepted")


def _passages_json(obj: Any) -> Any:
    """The JSON-safe form of a drawn value (objects and bytes become their repr)."""
    if isinstance(obj, dict):
        return {str(k): _passages_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_passages_json(v) for v in obj]
    if isinstance(obj, Passage):
        return {"id": obj.id, "text": obj.text}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)


LINE = st.one_of(
    st.builds(lambda obj: json.dumps(_passages_json(obj)), st.fixed_dictionaries(
        {}, optional={"id": PASSAGE_ID, "question": TEXT_OR_JUNK, "passages": PASSAGES, "response": TEXT_OR_JUNK})),
    st.builds(json.dumps, st.lists(st.integers(), max_size=2)), st.sampled_from(["{", "NaN", "null", "", "  "]),
    st.just('{"id": "a", "question": "q\\ud800?", "passages": [{"id": "1", "text": "x"}], "response": null}'),
    st.just('{"id": "a", "question": "q?", "passages": [{"id": "1", "text": "x"}], "response": NaN}'),
)


@FAST
@given(lines=st.lists(st.one_of(LINE, st.builds(lambda p: json.dumps({"id": "p", "question": "q?", "passages":
                                                                       _passages_json(p)}), PASSAGES)),
                      max_size=4),
       raw=st.one_of(st.none(), st.binary(max_size=16)))
def test_load_requests_refuses_in_one_sentence_or_returns_requests(lines, raw):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "requests.jsonl"
        path.write_bytes(raw if raw is not None else "\n".join(lines).encode("utf-8", "surrogatepass"))
        result = noted(outcome(load_requests, path))
    if not isinstance(result, AscpError):
        assert result and len({r.id for r in result}) == len(result)
        assert all(_valid_text(r.question) for r in result)


# ----- the front door: checks before the model ----------------------------------------------
@FAST
@given(raw=PASSAGES)
def test_as_passages(raw):
    result = noted(outcome(ascp.as_passages, raw))
    if not isinstance(result, AscpError):
        assert all(isinstance(p, Passage) and _valid_text(p.text) for p in result)


ESTIMATORS = st.sampled_from(["loo", "bm25", "contextcite", "replace"])
ATTRIBUTE_VALID = {"question": WORDS, "passages": GOOD_PASSAGES, "response": st.one_of(st.none(), WORDS),
                   "threshold": st.one_of(st.none(), st.floats(0, 1), st.sampled_from([0, 1])),
                   "seed": st.integers(-10**6, 10**12), "estimator": ESTIMATORS}
ATTRIBUTE_BAD = {"question": TEXT_OR_JUNK, "passages": PASSAGES, "response": TEXT_OR_JUNK, "threshold": NUMBER,
                 "seed": NUMBER, "estimator": TEXT_OR_JUNK}
ATTRIBUTE_OK = {"question": _valid_text, "response": lambda r: r is None or _valid_text(r),
                "threshold": _valid_threshold, "seed": lambda v: _whole(v, None)}


@FAST
@given(case=one_bad(ATTRIBUTE_VALID, ATTRIBUTE_BAD))
def test_attribute_checks_every_input_before_the_model(case):
    which, kwargs = case
    question, passages, response = kwargs.pop("question"), kwargs.pop("passages"), kwargs.pop("response")
    result = noted(outcome(ascp.attribute, question, passages, response, model=_Untouchable(), **kwargs))
    assert isinstance(result, AscpError) or result is TOUCHED
    if which is None:
        assert result is TOUCHED, f"valid inputs were refused: {result}"
    elif which in ATTRIBUTE_OK and not ATTRIBUTE_OK[which]({**kwargs, "question": question,
                                                             "response": response}[which]):
        assert isinstance(result, AscpError), f"a bad {which} reached the model"


SURROGATE = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])


@FAST
@given(field=st.sampled_from(["question", "response", "text", "title", "id"]), lone=SURROGATE,
       at=st.integers(0, 30), many=st.booleans())
def test_an_unpaired_surrogate_is_named_where_it_is(field, lone, at, many):
    fields = {"question": "When was the author born?", "response": "The author was born in 1850.",
              "text": "The first edition is of 1899.", "title": "Edition", "id": "b"}
    value = fields[field]
    fields[field] = value[:at] + lone + value[at:]
    passages = [{"id": "a", "text": "The author was born in 1850."},
                {"id": fields["id"], "title": fields["title"], "text": fields["text"]}]
    if many:
        result = noted(outcome(ascp.Probe(_Untouchable()).attribute_many, [{"id": "r1", "question": fields["question"],
                               "passages": passages,
                               "response": fields["response"]}]))
    else:
        result = noted(outcome(ascp.attribute, fields["question"], passages, fields["response"], model=_Untouchable()))
    message = str(result)
    assert isinstance(result, AscpError) and "holds an unpaired surrogate (invalid Unicode)" in message
    assert f"at character {min(at, len(value))}" in message
    assert (f"field {field!r}" if field != "id" else "passage 1's id") in message


PROBE_VALID = {"threshold": ATTRIBUTE_VALID["threshold"], "batch_size": st.integers(1, 64),
               "system": st.one_of(st.just(""), WORDS), "template": st.one_of(st.none(), st.just(
                   "Passages:\n{passages}\nQuestion: {question}")),
               "instruction": st.sampled_from(["commit", "integrate"]),
               "sampling": st.one_of(st.none(), st.builds(ascp.SamplingConfig, max_new_tokens=st.integers(1, 8)))}
PROBE_BAD = {"threshold": NUMBER, "batch_size": NUMBER, "system": TEXT_OR_JUNK, "template": TEXT_OR_JUNK,
             "instruction": TEXT_OR_JUNK, "sampling": JUNK}


@FAST
@given(case=one_bad(PROBE_VALID, PROBE_BAD))
def test_probe_settings(case):
    which, kwargs = case
    if kwargs["template"] is not None and kwargs["instruction"] != "commit":
        kwargs["instruction"] = "commit"  # a template replaces the instruction (refused together)
    result = noted(outcome(ascp.Probe, _Untouchable(), "loo", **kwargs))
    assert isinstance(result, (AscpError, ascp.Probe))
    if which is None:
        assert isinstance(result, ascp.Probe), f"valid settings were refused: {result}"
    if not _valid_threshold(kwargs["threshold"]) or not _whole(kwargs["batch_size"]):
        assert isinstance(result, AscpError)
    if isinstance(result, ascp.Probe):
        touched = outcome(result.attribute, "When was the author born?", ["The author was born in 1850."],
                          "In 1850.")
        assert touched is TOUCHED


@FAST
@given(requests=st.one_of(JUNK, st.lists(st.one_of(JUNK, st.fixed_dictionaries(
    {}, optional={"id": PASSAGE_ID, "question": TEXT_OR_JUNK, "passages": PASSAGES, "response": TEXT_OR_JUNK})),
    max_size=3)))
def test_attribute_many(requests):
    result = noted(outcome(ascp.Probe(_Untouchable()).attribute_many, requests))
    # an empty list needs no model; anything else is refused or reaches it
    assert isinstance(result, AscpError) or result is TOUCHED or result == []


@FAST
@given(question=TEXT_OR_JUNK, pool=PASSAGES,
       answers=st.one_of(st.none(), TEXT_OR_JUNK, st.lists(st.one_of(TEXT_OR_JUNK, st.lists(TEXT_OR_JUNK, max_size=2)),
                                                           max_size=3)),
       id=st.one_of(st.just("question"), PASSAGE_ID))
def test_make_case(question, pool, answers, id):
    result = noted(outcome(ascp.make_case, question, pool, answers, id=id))
    if isinstance(result, AscpError):
        return
    assert isinstance(result, Case) and _valid_text(result.question) and isinstance(result.id, str)
    assert all(_valid_text(a) for u in result.units for a in u.aliases)


PORTFOLIO_VALID = {"k": st.integers(1, 3), "T": st.one_of(st.integers(1, 5), st.just(MAX_ROUNDS)),
                   "threshold": ATTRIBUTE_VALID["threshold"], "seed": ATTRIBUTE_VALID["seed"],
                   "max_new_tokens": st.one_of(st.integers(1, 64), st.integers(10**6, 10**9)),
                   "policy": st.sampled_from(["ascp", "rotate", "vanilla", "mmr", "ascp(kappa=2)"]),
                   "estimator": ESTIMATORS}
PORTFOLIO_BAD = {"k": COUNT, "T": COUNT, "threshold": NUMBER, "seed": NUMBER, "max_new_tokens": COUNT,
                 "policy": st.one_of(st.sampled_from(["nope(", "rotate(x=1)", "ascp(kappa=-1)", "", "mmr(lambda=nan)"]),
                                     TEXT_OR_JUNK),
                 "estimator": TEXT_OR_JUNK}
PORTFOLIO_OK = {"k": lambda k: _whole(k) and k <= len(POOL), "T": lambda t: _whole(t) and t <= MAX_ROUNDS,
                "max_new_tokens": _whole, "threshold": _valid_threshold, "seed": lambda v: _whole(v, None)}


@FAST
@given(case=one_bad(PORTFOLIO_VALID, PORTFOLIO_BAD))
def test_run_portfolio_checks_every_input_before_the_model(case):
    which, kwargs = case
    result = noted(outcome(ascp.run_portfolio, "When was the author born?", POOL, model=_Untouchable(),
                           embed_fn=_embed, **kwargs))
    assert isinstance(result, AscpError) or result is TOUCHED
    if which is None:
        assert result is TOUCHED, f"valid inputs were refused: {result}"
    elif which in PORTFOLIO_OK and not PORTFOLIO_OK[which](kwargs[which]):
        assert isinstance(result, AscpError), f"a bad {which} reached the model"


@FAST
@given(cases=st.one_of(JUNK, st.lists(JUNK, min_size=1, max_size=2), TEXT),
       steer=st.one_of(st.none(), JUNK), embed_fn=st.one_of(st.none(), JUNK), nli_model=st.one_of(st.none(), JUNK))
def test_run_portfolios_arguments(cases, steer, embed_fn, nli_model):
    case = ascp.make_case("When was the author born?", POOL, ["1850"])
    for given_cases in (cases, [case]):
        result = noted(outcome(ascp.run_portfolios, given_cases, k=2, T=2, model=_Untouchable(), steer=steer,
                               embed_fn=embed_fn if embed_fn is not None else _embed, nli_model=nli_model))
        assert isinstance(result, AscpError) or result is TOUCHED or result == []


def test_the_four_misses_of_issue_24(tiny_lm):
    """The inputs the issue measured: each one AscpError sentence that says what and where."""
    q, r = "When was the author born?", "The author was born in 1850."
    assert "not None" in str(outcome(ascp.attribute, q, None, r, model=tiny_lm))
    for bad in (-1, math.nan, math.inf, 1.5):
        for call in (lambda t: ascp.attribute(q, POOL, r, model=tiny_lm, threshold=t),
                     lambda t: ascp.Probe(tiny_lm, threshold=t),
                     lambda t: ascp.run_portfolio(q, POOL, k=2, T=1, model=tiny_lm, threshold=t, embed_fn=_embed)):
            assert "threshold must be a number in [0, 1]" in str(outcome(call, bad))
    message = str(outcome(ascp.attribute, q, [POOL[0], "The first\ud800 edition."], r, model=tiny_lm))
    assert "passage '2'" in message and "unpaired surrogate (invalid Unicode)" in message
    assert "character offsets" not in message
    # Past the front door (a model's own encode_prompt), the tokenizer check names the passage too.
    encoded = outcome(tiny_lm.encode_prompt, q, (Passage("a", "fine"), Passage("b", "bro\udc80ken")))
    assert "passage 'b' holds an unpaired surrogate" in str(encoded)
    assert "the question" in str(outcome(tiny_lm.encode_prompt, "wh\ud800o?", (Passage("a", "fine"),)))


@pytest.mark.parametrize("value", ["nan", "-1", "1.5", "inf"])
def test_the_command_line_refuses_a_bad_threshold_before_the_model(cli, tmp_path, value):
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"id": "r", "question": "q?", "passages": [{"id": "a", "text": "x"}],
                                    "response": "y"}) + "\n")
    result = cli("attribute", "--input", requests, "--out", tmp_path / "out.jsonl", "--threshold", value,
                 "--model", "no/such-model-xyz")
    lines = result.stderr.strip().splitlines() if result.stderr else result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1
    assert lines[0].startswith("error: threshold must be a number in [0, 1]") and lines[0].endswith(".")


def test_used_threshold_refuses_non_positive_and_non_finite():
    from ascp.reading import resolve_used_threshold

    for bad in ("-1", "0", "nan", "inf", "-inf"):
        assert "--used-threshold must be a positive number" in str(outcome(resolve_used_threshold, bad))
    assert resolve_used_threshold("0.08")[0] == pytest.approx(0.08)


# ----- end to end on the tiny model ---------------------------------------------------------
@MODEL
@given(question=st.one_of(WORDS, SHORT_TEXT), passages=st.lists(st.one_of(WORDS, SHORT_TEXT), min_size=1, max_size=3),
       response=st.one_of(st.none(), WORDS, SHORT_TEXT), threshold=st.one_of(st.none(), st.floats(0, 1), NUMBER))
def test_attribute_on_the_tiny_model(tiny_lm, question, passages, response, threshold):
    result = noted(outcome(ascp.attribute, question, passages, response, model=tiny_lm, threshold=threshold,
                           sampling=ascp.SamplingConfig(max_new_tokens=4)))
    if isinstance(result, AscpError):
        return
    assert isinstance(result, AttributionResult)
    assert list(result.scores) == [str(i) for i in range(1, len(passages) + 1)]
    assert set(result.used) <= set(result.scores) and 0 <= result.threshold <= 1


@MODEL
@given(case=one_bad({"question": WORDS, "k": st.integers(1, 3), "T": st.integers(1, 2),
                     "threshold": ATTRIBUTE_VALID["threshold"],
                     "policy": st.sampled_from(["rotate", "ascp", "vanilla"])},
                    {"question": SHORT_TEXT, "k": COUNT, "T": st.one_of(st.integers(-1, 0), st.booleans(),
                                                                         st.floats(allow_nan=True)),
                     "threshold": NUMBER, "policy": TEXT_OR_JUNK}))
def test_run_portfolio_on_the_tiny_model(tiny_lm, case):
    which, kwargs = case
    question, k, T = kwargs.pop("question"), kwargs["k"], kwargs["T"]
    result = noted(outcome(ascp.run_portfolio, question, POOL, model=tiny_lm, max_new_tokens=3, embed_fn=_embed,
                           answers=["1850"], **kwargs))
    if which is None:
        assert isinstance(result, Portfolio), f"valid inputs were refused: {result}"
    if isinstance(result, AscpError):
        return
    assert isinstance(result, Portfolio) and len(result.rounds) == T
    assert all(len(r.context) == k and set(r.used) <= set(r.context) for r in result.rounds)
