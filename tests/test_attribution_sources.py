"""Sources at sentence granularity (`sources="sentences"`): the same prompt cut finer, each passage's
sentences deleted on their own, checked against deletions written by hand on the prompt's text."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ascp
from ascp.attribution.sources import sentence_pieces, sentence_sources
from ascp.errors import AscpError
from ascp.lm.prompts import PromptTemplate
from ascp.lm.scoring import exact_floor_tokens
from ascp.types import AttributionResult, Passage

PASSAGES = [Passage("a", "Mary Shelley wrote the novel. It was published in 1818.", "Mary Shelley"),
            Passage("b", "The quick brown fox jumps over the lazy dog."),
            Passage("c", "The first edition names no author.  Reviews came later. Sales were poor!", "Edition")]
QUESTION = "Who wrote the novel and when was it published?"
RESPONSE = "The novel was written by Mary Shelley. It was published in 1818."
SOURCES = ["a#1", "a#2", "b#1", "c#1", "c#2", "c#3"]


def logprobs(lm, prompt_text: str) -> np.ndarray:
    """The response's per-token log-probabilities after `prompt_text`, encoded and scored from scratch."""
    return np.asarray(lm.score([lm.encode(prompt_text)], lm.encode(RESPONSE), reuse_prefix=False).logprobs[0])


def test_the_cut_keeps_the_prompt_and_names_each_sentence(tiny_lm):
    prompt = tiny_lm.encode_prompt(QUESTION, PASSAGES)
    cut, sources = sentence_sources(prompt, PASSAGES, PromptTemplate(), "request 'r'")
    assert cut.text == prompt.text and cut.ids == prompt.ids  # the model reads the very same prompt
    assert [s.id for s in sources] == SOURCES == list(cut.passage_ids)
    assert cut.source_passages == ("a", "a", "b", "c", "c", "c")
    spans = cut.passage_char_spans()
    assert [prompt.text[a:b] for a, b in spans.values()] == [
        "Mary Shelley wrote the novel. ", "It was published in 1818.", "The quick brown fox jumps over the lazy dog.",
        "The first edition names no author.  ", "Reviews came later. ", "Sales were poor!"]
    assert [s.text for s in sources][3] == "The first edition names no author."
    # deleting a sentence keeps its block's identifier and title
    without = cut.edited_text(cut.deletion([1]))
    assert "[a] Mary Shelley\nMary Shelley wrote the novel. \n\n[b]" in without
    assert sentence_pieces("One. Two.  Three") == ["One. ", "Two.  ", "Three"] and sentence_pieces("  ") == []


def test_loo_over_sentences_equals_deletions_written_on_the_text(tiny_lm):
    """Each sentence's score is the drop in mean log-probability when its characters (with the space
    after it) are cut out of the prompt text by hand, encoded and scored from scratch."""
    result = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, sources="sentences")
    assert list(result.scores) == SOURCES and result.sources == "sentences"
    text = result.prompt
    full = logprobs(tiny_lm, text)
    for sid, (a, b) in result.passage_spans.items():
        expected = full.mean() - logprobs(tiny_lm, text[:a] + text[b:]).mean()
        assert result.scores[sid] == pytest.approx(expected, abs=5e-3), sid
    assert result.passage_text("c#2") == "Reviews came later. "


def test_the_prefix_store_keeps_sentence_loo_at_its_floor(tiny_lm):
    """Exact loo over sentence sources feeds each deletion's tail only: exactly the floor of the prefix
    store (the full prompt, then each deletion after its longest common prefix with it)."""
    result = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, sources="sentences")
    ids = tiny_lm.encode(RESPONSE)
    text = result.prompt
    variants = [tiny_lm.encode(text[:a] + text[b:]) for a, b in result.passage_spans.values()]
    assert result.tokens_processed == exact_floor_tokens(tiny_lm.encode(text), variants, len(ids))
    naive = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, sources="sentences",
                           estimator="loo(reuse_prefix=false)")
    assert naive.tokens_processed > 1.5 * result.tokens_processed
    assert naive.scores == pytest.approx(result.scores, abs=1e-4)


@pytest.mark.parametrize("estimator", ["replace", "contextcite(num_ablations=8)", "bm25", "qd-cosine(embedder=hashing)",
                                       "yd-cosine(embedder=hashing)", "attention", "gated(band=0.05)"])
def test_every_estimator_attributes_over_sentences(tiny_lm, estimator):
    from ascp.attribution.attention_map import SHIPPED

    options = {"weights": str(SHIPPED / "tiny-random-0.json")} if estimator.startswith(("attention", "gated")) else {}
    result = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, sources="sentences", estimator=estimator,
                            spans="sentences", **options)
    assert list(result.scores) == SOURCES and all(np.isfinite(list(result.scores.values())))
    assert [list(s.reading.scores) for s in result.spans] == [SOURCES] * len(result.spans)
    if estimator == "bm25":  # a proxy reads each sentence's own text
        from ascp.data.ranking import bm25_scores

        sources = [Passage(s, p.text, p.title) for s, p in zip(SOURCES, sentence_sources(
            tiny_lm.encode_prompt(QUESTION, PASSAGES), PASSAGES, PromptTemplate(), "r")[1], strict=True)]
        assert list(result.scores.values()) == pytest.approx(list(bm25_scores(QUESTION, sources)))


def test_hierarchical_deletes_passages_then_the_sentences_of_the_strongest(tiny_lm):
    """Over sentence sources the groups are the passages: every passage deleted whole, then each sentence
    of the `refine_top` passages with the largest positive drop; the others' sentences share their passage's
    drop. With every passage refined it is loo's reading."""
    loo = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, sources="sentences")
    one = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, sources="sentences",
                         estimator="hierarchical(refine_top=1)")
    text = loo.prompt
    full = logprobs(tiny_lm, text).mean()
    drops = {}
    for passage in PASSAGES:
        ids = [s for s in SOURCES if s.split("#")[0] == passage.id]
        lo, hi = loo.passage_spans[ids[0]][0], loo.passage_spans[ids[-1]][1]
        drops[passage.id] = (full - logprobs(tiny_lm, text[:lo] + text[hi:]).mean(), ids)
    multi = [pid for pid, (_, ids) in drops.items() if len(ids) > 1]
    refined = max(multi, key=lambda pid: drops[pid][0])
    assert drops[refined][0] > 0
    for pid, (drop, ids) in drops.items():
        for sid in ids:
            expected = loo.scores[sid] if pid == refined else drop / len(ids)
            assert one.scores[sid] == pytest.approx(expected, abs=5e-3), sid
    assert one.extra["deletions"] == len(PASSAGES) + len(drops[refined][1])
    positive = [pid for pid in multi if drops[pid][0] > 0]  # a passage whose deletion costs nothing is settled
    every = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, sources="sentences",
                           estimator="hierarchical(refine_top=3)")
    assert every.extra["deletions"] == len(PASSAGES) + sum(len(drops[pid][1]) for pid in positive)
    ones = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, sources="sentences",
                          estimator="hierarchical(group_size=1)")
    assert ones.scores == pytest.approx(loo.scores, abs=1e-9)


def test_the_record_the_cli_and_citations_name_sentences(tiny_lm, tmp_path, cli, tiny_model_dir):
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"id": "r1", "question": QUESTION, "response": RESPONSE,
                                    "passages": [{"id": p.id, "title": p.title, "text": p.text}
                                                 for p in PASSAGES]}) + "\n")
    out = tmp_path / "out.jsonl"
    done = cli("attribute", "--input", requests, "--out", out, "--model", tiny_model_dir, "--backend", "hf",
               "--sources", "sentences", "--spans", "sentences")
    assert done.exit_code == 0, done.output
    record = json.loads(out.read_text())
    assert record["sources"] == "sentences" and list(record["scores"]) == SOURCES
    assert list(record["passage_spans"]) == SOURCES and len(record["spans"]) == 2
    again = AttributionResult.from_json(record)
    assert again.sources == "sentences" and again.passage_text("a#2") == "It was published in 1818."
    cited = tmp_path / "cited.jsonl"
    done = cli("cite", "--input", requests, "--out", cited, "--model", tiny_model_dir, "--backend", "hf",
               "--sources", "sentences", "--markers", "ids", "--threshold", "0.2")
    assert done.exit_code == 0, done.output
    line = json.loads(cited.read_text())
    assert all(set(s["sources"]) <= set(SOURCES) for s in line["sentences"])
    assert any(s["sources"] for s in line["sentences"])
    for s in line["sentences"]:
        assert all(f"[{sid}]" in line["cited"] for sid in s["sources"])
    page = tmp_path / "page.html"
    done = cli("attribute", "--input", requests, "--out", tmp_path / "again.jsonl", "--html", page, "--model",
               tiny_model_dir, "--backend", "hf", "--sources", "sentences")
    assert done.exit_code == 0, done.output
    assert "data-passage='c#3'" in page.read_text() and "[c#3] Sales were poor!" in page.read_text()


def test_any_spans_of_the_response_read_at_once(tiny_lm):
    """`AttributionResult.read_spans`: any character spans, overlapping or not, from the passes already run,
    for every estimator that reads parts of the response; equal to `for_span` where both exist."""
    result = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm)
    spans = [(0, 10), (4, 38), (39, len(RESPONSE))]
    read = result.read_spans(spans)
    assert [s.text for s in read] == [RESPONSE[a:b] for a, b in spans]
    for span, (a, b) in zip(read, spans, strict=True):
        assert span.reading.scores == pytest.approx(result.for_span(a, b).scores, abs=1e-12)
    whole = result.read_spans([(0, len(RESPONSE))])[0]
    assert whole.reading.scores == pytest.approx(result.scores, abs=1e-12)
    cc = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator="contextcite(num_ablations=8)",
                        spans="sentences")
    last = cc.spans[-1]  # the last sentence has no whitespace token after it, which `spans` would give it
    assert cc.read_spans([(last.start, last.end)])[0].reading.scores == last.reading.scores
    for bad, message in [((5, 2), "is not inside the response"), ((0, 999), "is not inside the response"),
                         ((True, 3), "must be a pair"), ("ab", "must be a pair")]:
        with pytest.raises(AscpError, match=message):
            result.read_spans([(0, 4), bad])
    with pytest.raises(AscpError, match="keeps no span scorer"):
        AttributionResult.from_json(result.to_json()).read_spans([(0, 4)])


def test_sentence_sources_bad_input_is_one_sentence(tiny_lm):
    # the command line's --sources words: test_attribution_spans.py's bad-value test
    with pytest.raises(AscpError, match="sources must be passages or sentences, got 'words'"):
        ascp.Probe(tiny_lm, sources="words")
    no_text = PromptTemplate.from_format("Context:\n{passages}\nQ: {question}", passage_format="[{id}] {title}\n")
    probe = ascp.Probe(tiny_lm, sources="sentences", template=no_text)
    with pytest.raises(AscpError, match="request 'request': passage 'a': its block does not hold its text once"):
        probe.attribute(QUESTION, PASSAGES, RESPONSE)
    with pytest.raises(AscpError, match="the closed loop schedules passages.*ascp attribute and ascp cite only"):
        ascp.run_portfolio(QUESTION, PASSAGES, policy="rotate", k=2, T=1, model=tiny_lm,
                           estimator=ascp.ProbeSettings("loo", sources="sentences"))
