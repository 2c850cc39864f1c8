"""Hand-computed checks of every metric in ascp.metrics.portfolio (arithmetic in the comments)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascp.metrics import (
    METRIC_KEYS,
    STOPWORDS,
    auc,
    best_single_recall,
    case_metrics,
    cover_at_m,
    distinct_n,
    diversity_tokens,
    evidence_coverage_rate,
    lexical_groundedness,
    normalize_answer,
    offered_count,
    portfolio_recall,
    recovered,
    self_bleu,
    semantic_diversity,
    unit_recovered,
    used_count,
    utilisation_concentration,
)
from ascp.reading import Reading
from ascp.types import AnswerUnit, Case, Passage, Portfolio, Round


def rnd(t: int, context: dict[str, float], used: tuple[str, ...] = (), response: str = "") -> Round:
    return Round(
        round=t,
        context=tuple(context),
        response=response,
        response_tokens=len(response.split()),
        reading=Reading(dict(context), dict(context), used, None),
        seconds=0.0,
    )


def unit(uid: str, *aliases: str, claim: str | None = None) -> AnswerUnit:
    return AnswerUnit(id=uid, aliases=aliases, claim=claim)


# ------------------------------------------------------------------------------------------ normalize_answer


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),  # case, article, punctuation
        ("  A  quick,   brown\tfox.\n", "quick brown fox"),  # whitespace collapsed, article removed
        ("U.S. Open", "us open"),  # punctuation deleted without a space
        ("1,850", "1850"),
        ("state-of-the-art", "stateoftheart"),  # hyphens deleted, so "the" is no longer a word
        ("Theatre and an Anne", "theatre and anne"),  # only whole-word articles go
        ("the", ""),
        ("", ""),
        ("Café «déjà»", "café «déjà»"),  # only ASCII punctuation (string.punctuation) is removed
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_stopwords_are_normalised() -> None:
    # "don't" -> "dont"; articles normalise to "" and are dropped
    assert "dont" in STOPWORDS and "is" in STOPWORDS
    assert "" not in STOPWORDS and "the" not in STOPWORDS


# ------------------------------------------------------------------------------------------ alias matching


@pytest.mark.parametrize(
    ("aliases", "response", "expected"),
    [
        (("1850",), "It was built in 18501.", False),  # token boundary: 1850 is not 18501
        (("1850",), "It was built in 18500 or 11850", False),
        (("1850",), "It was built in 1850.", True),
        (("1850",), "in 1,850 days", True),  # "1,850" normalises to "1850" (SQuAD)
        (("New York City",), "I love new   YORK city!", True),  # multi-word, case, spacing
        (("New York City",), "I love new york.", False),  # only part of the alias
        (("New York City",), "new yorkcity", False),
        (("york",), "Yorkshire pudding", False),
        (("U.S. Open",), "He won the US Open twice", True),  # punctuation in the alias
        (("Dr. Who",), "dr who?", True),
        (("The Beatles",), "beatles songs", True),  # article stripped on both sides
        (("the",), "the cat", False),  # an alias normalising to "" never matches
        (("Lyon", "Lugdunum"), "Roman Lugdunum", True),  # any alias
    ],
)
def test_unit_recovered_token_boundaries(aliases: tuple[str, ...], response: str, expected: bool) -> None:
    assert unit_recovered(unit("u", *aliases), response) is expected


def test_claim_units_need_a_matcher() -> None:
    claim = unit("c", claim="Water boils at 100 C")
    with pytest.raises(NotImplementedError, match="matcher"):
        unit_recovered(claim, "anything")
    with pytest.raises(NotImplementedError):
        portfolio_recall([claim], ["anything"])

    def matcher(u: AnswerUnit, r: str) -> bool:
        return u.claim is not None and u.claim.lower() in r.lower()

    assert recovered(claim, "Fact: water boils at 100 C.", matcher=matcher)
    assert not recovered(claim, "Water freezes.", matcher=matcher)
    # aliases take precedence: the matcher is not consulted for alias units
    assert recovered(unit("a", "Paris"), "Paris", matcher=lambda u, r: False)
    assert portfolio_recall([claim, unit("a", "x")], ["water boils at 100 c", "y"], matcher) == 0.5
    with pytest.raises(ValueError, match="neither"):
        unit_recovered(unit("e"), "x")


# ------------------------------------------------------------------------------------------ PR@T / best single

CITIES = [unit("u1", "Paris"), unit("u2", "Lyon"), unit("u3", "Nice"), unit("u4", "Lille")]


def test_portfolio_and_best_single_recall() -> None:
    responses = ["Paris and Lyon.", "Lyon, then Nice", "nothing"]
    # recovered: y1 {u1,u2}, y2 {u2,u3}, y3 {} -> union {u1,u2,u3}: 3/4; best single 2/4
    assert portfolio_recall(CITIES, responses) == 0.75
    assert best_single_recall(CITIES, responses) == 0.5


def test_recall_edge_cases() -> None:
    assert portfolio_recall(CITIES, ["Paris"]) == best_single_recall(CITIES, ["Paris"]) == 0.25  # T=1: 1/4
    assert portfolio_recall(CITIES, []) == 0.0
    assert best_single_recall(CITIES, []) == 0.0
    with pytest.raises(ValueError):
        portfolio_recall([], ["Paris"])
    with pytest.raises(ValueError):
        best_single_recall([], ["Paris"])


WORDS = ["paris", "lyon", "nice", "lille", "the", "of", "new", "york"]
units_st = st.lists(
    st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=2).map(" ".join), min_size=1, max_size=2),
    min_size=1,
    max_size=4,
).map(lambda als: [unit(f"u{i}", *a) for i, a in enumerate(als)])
responses_st = st.lists(st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join), max_size=4)


@settings(max_examples=150, deadline=None)
@given(units=units_st, responses=responses_st, extra=st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join))
def test_recall_properties(units: list[AnswerUnit], responses: list[str], extra: str) -> None:
    pr = portfolio_recall(units, responses)
    best = best_single_recall(units, responses)
    assert 0.0 <= best <= pr <= 1.0
    # adding a response never loses a unit
    assert portfolio_recall(units, [*responses, extra]) >= pr
    assert best_single_recall(units, [*responses, extra]) >= best
    # PR@T is the union of the per-response recovered sets
    hit = {u.id for u in units for r in responses if unit_recovered(u, r)}
    assert pr == len(hit) / len(units)


# ------------------------------------------------------------------------------------------ ECR / offered / used


def example_rounds() -> list[Round]:
    return [
        rnd(1, {"a": 0.6, "b": 0.35, "c": 0.05}, used=("a", "b")),
        rnd(2, {"c": 0.0, "d": 0.9, "e": 0.1}, used=("d",)),
        rnd(3, {"f": 0.0, "g": 0.0}),  # all-zero reading
    ]


def test_ecr_hand_computed() -> None:
    rounds = example_rounds()
    # O_T = {a,b,c,d,e,f,g}: 7
    # round 1: max .6, cut .06 -> a (.6), b (.35); c (.05) < .06
    # round 2: max .9, cut .09 -> d (.9), e (.1); c is 0
    # round 3: all zero -> nothing
    assert evidence_coverage_rate(rounds, theta=0.1) == pytest.approx(4 / 7)
    assert evidence_coverage_rate(rounds, theta=0.0) == pytest.approx(5 / 7)  # every a > 0: a b c d e
    assert evidence_coverage_rate(rounds, theta=1.0) == pytest.approx(2 / 7)  # only each round's max: a, d
    assert offered_count(rounds) == 7
    assert used_count(rounds) == 3  # a, b, d


def test_ecr_edge_cases() -> None:
    # a tie with the threshold counts: max .5, cut .1 * .5 = .05
    assert evidence_coverage_rate([rnd(1, {"a": 0.5, "b": 0.05, "c": 0.45})]) == 1.0
    # all-zero rounds only: no passage counts, denominator is still |O_T| = 2
    assert evidence_coverage_rate([rnd(1, {"a": 0.0, "b": 0.0})]) == 0.0
    # a passage missing from `normalized` reads as 0
    r = Round(1, ("a", "b"), "", 0, Reading({"a": 1.0}, {"a": 1.0}, ("a",), None), 0.0)
    assert evidence_coverage_rate([r]) == 0.5
    # nothing offered: undefined
    assert math.isnan(evidence_coverage_rate([]))
    assert math.isnan(evidence_coverage_rate([rnd(1, {})]))
    assert offered_count([]) == used_count([]) == 0
    # a passage shown twice is offered once: {a} covered out of {a, b}
    assert evidence_coverage_rate([rnd(1, {"a": 1.0, "b": 0.0}), rnd(2, {"a": 1.0})]) == 0.5
    with pytest.raises(ValueError):
        evidence_coverage_rate(example_rounds(), theta=1.5)
    with pytest.raises(ValueError):
        evidence_coverage_rate([rnd(1, {"a": -0.1, "b": 1.1})])


# ------------------------------------------------------------------------------------------ concentration


def test_concentration_hand_computed() -> None:
    # mass: a .6, b .35, c .05 + 0, d .9, e .1, f 0, g 0; M = 2
    # p = .3, .175, .025, .45, .05, 0, 0
    # H = .09 + .030625 + .000625 + .2025 + .0025 = .32625
    # (H - 1/7) / (1 - 1/7) = (7 * .32625 - 1) / 6 = 1.28375 / 6
    assert utilisation_concentration(example_rounds()) == pytest.approx(1.28375 / 6)


def test_concentration_edge_cases() -> None:
    even = [rnd(1, {"a": 0.5, "b": 0.5}), rnd(2, {"a": 0.5, "b": 0.5})]
    assert utilisation_concentration(even) == pytest.approx(0.0)  # H = 1/2 = 1/n
    one = [rnd(1, {"a": 1.0, "b": 0.0, "c": 0.0}), rnd(2, {"a": 1.0, "c": 0.0})]
    assert utilisation_concentration(one) == pytest.approx(1.0)  # H = 1
    assert utilisation_concentration([rnd(1, {"a": 1.0})]) == 0.0  # n = 1
    assert math.isnan(utilisation_concentration([rnd(1, {"a": 0.0, "b": 0.0})]))  # no mass
    assert math.isnan(utilisation_concentration([]))
    # two rounds, disjoint contexts, each all on one passage: p = (.5, 0, .5, 0)
    # H = .5; (.5 - .25) / (1 - .25) = 1/3
    two = [rnd(1, {"a": 1.0, "b": 0.0}), rnd(2, {"c": 1.0, "d": 0.0})]
    assert utilisation_concentration(two) == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------------------ groundedness


def test_lexical_groundedness_hand_computed() -> None:
    responses = ["The Eiffel Tower is in Paris, France.", "Paris Paris London", "It is what it is."]
    contexts: list[list[Passage | str]] = [
        [Passage("p1", "A tower in Paris.", title="Eiffel Tower")],
        ["London is big"],
        ["anything"],
    ]
    # y1: "eiffel tower is in paris france" - stopwords {is, in} -> [eiffel, tower, paris, france]
    #     context vocab {eiffel, tower, in, paris} (title included) -> 3/4
    # y2: [paris, paris, london]; vocab {london, is, big} -> 1/3 (each occurrence counts)
    # y3: only stopwords -> skipped
    # mean(3/4, 1/3) = 13/24
    assert lexical_groundedness(responses, contexts) == pytest.approx(13 / 24)


def test_lexical_groundedness_edge_cases() -> None:
    assert math.isnan(lexical_groundedness(["it is", ""], [["x"], ["y"]]))  # no content token anywhere
    assert math.isnan(lexical_groundedness([], []))
    assert lexical_groundedness(["Paris"], [[]]) == 0.0  # empty context
    with pytest.raises(ValueError):
        lexical_groundedness(["a"], [])


# ------------------------------------------------------------------------------------------ distinct-n


def test_distinct_n_hand_computed() -> None:
    responses = ["The cat sat", "the CAT ran."]
    # tokens: [the, cat, sat], [the, cat, ran, .]
    # unigrams: 7 total, distinct {the, cat, sat, ran, .} = 5
    # bigrams: (the cat)(cat sat) | (the cat)(cat ran)(ran .) = 5 total, 4 distinct
    # trigrams: (the cat sat) | (the cat ran)(cat ran .) = 3 total, 3 distinct
    assert diversity_tokens("the CAT ran.") == ["the", "cat", "ran", "."]
    assert distinct_n(responses, 1) == pytest.approx(5 / 7)
    assert distinct_n(responses, 2) == pytest.approx(4 / 5)
    assert distinct_n(responses, 3) == 1.0


def test_distinct_n_edge_cases() -> None:
    assert distinct_n([], 1) == 0.0
    assert distinct_n(["word"], 2) == 0.0
    assert distinct_n(["a", "b"], 2) == 0.0  # n-grams do not cross responses
    assert distinct_n(["x x x x"], 1) == 0.25
    with pytest.raises(ValueError):
        distinct_n(["a"], 0)


# ------------------------------------------------------------------------------------------ Self-BLEU


def test_self_bleu_hand_computed() -> None:
    # y1 "a b c d" vs y2 "a b c e": p1 = 3/4, p2 = 2/3, p3 = 1/2, p4 = 0/1 -> exp smoothing 1/(2*1)
    # BP = 1 (equal lengths); BLEU = (3/4 * 2/3 * 1/2 * 1/2)^(1/4) = (1/8)^(1/4) = 2^-0.75; symmetric
    assert self_bleu(["a b c d", "a b c e"]) == pytest.approx(2**-0.75, abs=1e-6)
    # adding "w x y z" (no shared unigram): y1, y2 keep 2^-0.75 (clipped counts: best ref), y3 scores 0
    assert self_bleu(["a b c d", "a b c e", "w x y z"]) == pytest.approx(2 * 2**-0.75 / 3, abs=1e-6)


def test_self_bleu_brevity_and_effective_order() -> None:
    # y1 "a b" vs "a b c d": p1 = 2/2, p2 = 1/1, no 3-grams -> effective order 2; BP = exp(1 - 4/2)
    # y2 "a b c d" vs "a b": p1 = 2/4, p2 = 1/3, p3 = 0/2 -> 1/(2*2), p4 = 0/1 -> 1/(4*1); BP = 1
    #    BLEU = (1/2 * 1/3 * 1/4 * 1/4)^(1/4) = (1/96)^(1/4)
    expected = (math.exp(-1) + (1 / 96) ** 0.25) / 2
    assert self_bleu(["a b", "a b c d"]) == pytest.approx(expected, abs=1e-6)


def test_self_bleu_edge_cases() -> None:
    assert self_bleu(["x y z", "X Y Z"]) == pytest.approx(1.0)  # lowercased, effective order 3
    assert self_bleu(["a b", "c d"]) == 0.0  # no matching unigram
    assert self_bleu(["", "a b"]) == 0.0  # empty hypothesis / no match
    assert math.isnan(self_bleu(["only one"]))  # T = 1
    assert math.isnan(self_bleu([]))


# ------------------------------------------------------------------------------------------ semantic diversity


def test_semantic_diversity_hand_computed() -> None:
    # unit rows (1,0), (0,1), (1,1)/sqrt2: cosines 0, 1/sqrt2, 1/sqrt2 -> mean sqrt2/3
    e = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    assert semantic_diversity(e) == pytest.approx(1 - math.sqrt(2) / 3)
    assert semantic_diversity([[1.0, 2.0], [2.0, 4.0]]) == pytest.approx(0.0)  # same direction
    assert semantic_diversity([[1.0, 0.0], [-1.0, 0.0]]) == pytest.approx(2.0)  # opposite


def test_semantic_diversity_edge_cases() -> None:
    assert semantic_diversity([[1.0, 2.0]]) == 0.0  # T = 1
    assert semantic_diversity(np.zeros((0, 4))) == 0.0  # T = 0
    with pytest.raises(ValueError):
        semantic_diversity([[0.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError):
        semantic_diversity([1.0, 2.0])


# ------------------------------------------------------------------------------------------ cover@m, AUC


def test_cover_at_m() -> None:
    ranked = ["d3", "d1", "d2", "d4"]
    bearing = {"d1": {"u1"}, "d2": {"u1", "u2"}, "d3": {"other"}, "d4": {"u3"}}
    units = ["u1", "u2", "u3"]
    assert cover_at_m(ranked, bearing, 0, units) == 0.0
    assert cover_at_m(ranked, bearing, 1, units) == 0.0  # d3 attests only a non-gold unit
    assert cover_at_m(ranked, bearing, 2, units) == pytest.approx(1 / 3)  # {u1}
    assert cover_at_m(ranked, bearing, 3, units) == pytest.approx(2 / 3)  # {u1, u2}
    assert cover_at_m(ranked, bearing, 10, [unit("u1", "x"), unit("u2", "y"), unit("u3", "z")]) == 1.0
    assert cover_at_m(["zz"], bearing, 1, units) == 0.0  # unknown document attests nothing
    with pytest.raises(ValueError):
        cover_at_m(ranked, bearing, 1, [])
    with pytest.raises(ValueError):
        cover_at_m(ranked, bearing, -1, units)


def test_auc_hand_computed() -> None:
    # pos {.9, .7}, neg {.8, .6}: (.9>.8) (.9>.6) (.7<.8) (.7>.6) -> 3/4
    assert auc([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0]) == 0.75
    # tie: pos {.5}, neg {.5, .2}: 0.5 + 1 -> 1.5/2
    assert auc([0.5, 0.5, 0.2], [True, False, False]) == 0.75
    assert auc([1.0, 1.0, 1.0], [1, 0, 0]) == 0.5
    assert auc([3.0, 1.0], [1, 0]) == 1.0
    assert auc([1.0, 3.0], [1, 0]) == 0.0


def test_auc_edge_cases() -> None:
    assert math.isnan(auc([0.1, 0.2], [1, 1]))
    assert math.isnan(auc([], []))
    with pytest.raises(ValueError):
        auc([0.1, 0.2], [1, 2])
    with pytest.raises(ValueError):
        auc([0.1], [1, 0])
    with pytest.raises(ValueError):
        auc([float("nan"), 0.2], [1, 0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=2, max_size=12))
def test_auc_equals_pair_count(pairs: list[tuple[int, bool]]) -> None:
    pos = [s for s, y in pairs if y]
    neg = [s for s, y in pairs if not y]
    result = auc([float(s) for s, _ in pairs], [y for _, y in pairs])
    if not pos or not neg:
        assert math.isnan(result)
        return
    brute = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (len(pos) * len(neg))
    assert result == pytest.approx(brute)


# ------------------------------------------------------------------------------------------ case_metrics


def example_case() -> tuple[Case, Portfolio]:
    pool = (
        Passage("p1", "Paris is the capital.", title="France"),
        Passage("p2", "Lyon is a city.", title="Lyon"),
        Passage("p3", "Nice is on the coast.", title="Nice"),
    )
    case = Case("q1", "Which French cities?", pool, (unit("u1", "Paris"), unit("u2", "Lyon"), unit("u3", "Nice")))
    rounds = (
        rnd(1, {"p1": 0.8, "p2": 0.2}, used=("p1",), response="Paris is the capital"),
        rnd(2, {"p2": 1.0, "p3": 0.0}, used=("p2",), response="Lyon is a city"),
    )
    return case, Portfolio("q1", "rotate", rounds)


def test_case_metrics() -> None:
    case, portfolio = example_case()
    m = case_metrics(case, portfolio, response_embeddings=[[1.0, 0.0], [0.0, 1.0]])
    assert list(m) == list(METRIC_KEYS)
    assert all(isinstance(v, float) for v in m.values())
    assert m["pr"] == pytest.approx(2 / 3)  # Paris, Lyon of {Paris, Lyon, Nice}
    assert m["best_single"] == pytest.approx(1 / 3)
    # O_T = {p1, p2, p3}; round 1: p1 .8, p2 .2 >= .08; round 2: p2 -> {p1, p2}: 2/3
    assert m["ecr"] == pytest.approx(2 / 3)
    assert m["offered"] == 3.0 and m["used"] == 2.0
    # y1 content [paris, capital] both in "france paris is the capital"; y2 [lyon, city] both in context -> 1
    assert m["groundedness"] == 1.0
    # tokens [paris, is, the, capital], [lyon, is, a, city]: 8 unigrams, 7 distinct ("is" twice)
    assert m["distinct_1"] == pytest.approx(7 / 8)
    assert m["distinct_2"] == 1.0 and m["distinct_3"] == 1.0
    assert m["self_bleu"] == pytest.approx(self_bleu([r.response for r in portfolio.rounds]))
    assert m["semantic_diversity"] == pytest.approx(1.0)  # orthogonal
    # mass p1 .8, p2 1.2, p3 0 over M = 2: p = .4, .6, 0; H = .52; (.52 - 1/3) / (2/3) = .28
    assert m["concentration"] == pytest.approx(0.28)


def test_case_metrics_without_embeddings_and_errors() -> None:
    case, portfolio = example_case()
    m = case_metrics(case, portfolio)
    assert list(m) == list(METRIC_KEYS)
    assert math.isnan(m["semantic_diversity"])
    with pytest.raises(ValueError):
        case_metrics(case, Portfolio("other", "rotate", portfolio.rounds))
    with pytest.raises(ValueError):
        case_metrics(case, portfolio, response_embeddings=[[1.0, 0.0]])


def test_answer_rule_sensitivities():
    """ALCE's STR-EM counts a plain substring (never below PR@T); a yes/no question gets no credit under the
    strict rule when the portfolio says both words, and only yes/no questions are affected."""
    from ascp.metrics.portfolio import strict_yes_no_recall, substring_recall, yes_no_answer

    year = [AnswerUnit("u", ("1850",))]
    assert portfolio_recall(year, ["in 18501"]) == 0.0 and substring_recall(year, ["in 18501"]) == 1.0
    assert substring_recall([AnswerUnit("u", ("orange",))], ["an orangeflavoured drink"]) == 1.0
    yes = [AnswerUnit("u", ("Yes",))]
    assert yes_no_answer(yes) == "yes" and yes_no_answer(year) is None
    assert yes_no_answer([AnswerUnit("u", ("yes", "no"))]) is None and yes_no_answer(yes + year) is None
    assert strict_yes_no_recall(yes, ["Yes, it is.", "No."]) == 0.0  # both said: no credit
    assert portfolio_recall(yes, ["Yes, it is.", "No."]) == 1.0  # the paper's rule gives full credit
    assert strict_yes_no_recall(yes, ["Yes.", "It is."]) == 1.0
    assert strict_yes_no_recall(yes, ["Nobody knows."]) == 0.0  # "nobody" is not the token "no"
    assert strict_yes_no_recall(year, ["yes 1850", "no"]) == 1.0  # not a yes/no question
    with pytest.raises(ValueError):
        substring_recall([AnswerUnit("c", (), claim="a claim")], ["x"])
