"""Readings per response sentence (`spans="sentences"`): from the passes the probe already ran, equal to
a naive leave-one-out over each sentence's tokens, partitioning the response, in the records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ascp
from ascp.attribution.spans import assign_tokens, sentence_spans
from ascp.errors import AscpError
from ascp.types import AttributionResult, Passage

PASSAGES = [Passage("a", "Mary Shelley wrote the novel, published in 1818.", "Mary Shelley"),
            Passage("b", "The quick brown fox jumps over the lazy dog."),
            Passage("c", "The first edition of 1899 names the author.", "Edition")]
QUESTION = "Who wrote the novel and when was it published?"
RESPONSE = "The novel was written by Mary Shelley. It was published in 1818! The dog is lazy."


def request_file(folder: Path) -> Path:
    """The one request of these tests as an `ascp attribute` input file."""
    path = folder / "requests.jsonl"
    path.write_text(json.dumps({"id": "r1", "question": QUESTION, "response": RESPONSE,
                                "passages": [{"id": p.id, "title": p.title, "text": p.text} for p in PASSAGES]}) + "\n")
    return path


def naive_sentence_loo(lm, passages, response: str, tokens: list[int]) -> np.ndarray:
    """Leave-one-out over `tokens` of the response, each deletion's prompt encoded and scored from
    scratch through the model seam (no ablation machinery, no prefix reuse)."""
    ids = lm.encode(response)
    full = lm.score([lm.encode_prompt(QUESTION, passages).ids], ids, reuse_prefix=False).logprobs[0]
    out = []
    for i in range(len(passages)):
        without = [p for j, p in enumerate(passages) if j != i]
        ablated = lm.score([lm.encode_prompt(QUESTION, without).ids], ids, reuse_prefix=False).logprobs[0]
        out.append(float(np.mean(np.asarray(full)[tokens]) - np.mean(np.asarray(ablated)[tokens])))
    return np.array(out)


def test_sentences_split_the_response_in_order():
    spans = sentence_spans(RESPONSE)
    assert [RESPONSE[a:b] for a, b in spans] == ["The novel was written by Mary Shelley.", "It was published in 1818!",
                                                 "The dog is lazy."]
    assert sentence_spans("no boundary here") == [(0, 16)] and sentence_spans("   ") == []
    # every token goes to the sentence its first character lies in (or the whitespace after it)
    text = "Paris is big. It is in France. Yes."
    # byte-level BPE offsets (SmolLM2, Llama 3, Qwen): the space before a word belongs to the word's token
    tokens = [(0, 5), (5, 8), (8, 12), (12, 13), (13, 16), (16, 19), (19, 22), (22, 29), (29, 30), (30, 34), (34, 35)]
    assert [text[a:b] for a, b in tokens][4] == " It"
    groups = assign_tokens(sentence_spans(text), tokens, text)
    assert groups == [[0, 1, 2, 3], [4, 5, 6, 7, 8], [9, 10]]  # " It" opens the second sentence, " Yes" the third


@pytest.mark.parametrize("estimator", ["loo", "replace", "hierarchical(group_size=2, refine_top=1)"])
def test_sentence_readings_come_from_the_same_passes(tiny_lm, estimator):
    whole = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator=estimator)
    split = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator=estimator, spans="sentences")
    assert split.scores == whole.scores and split.used == whole.used  # the whole reading is unchanged
    assert split.tokens_processed == whole.tokens_processed > 0  # and no token more was fed
    assert [s.text for s in split.spans] == [RESPONSE[a:b] for a, b in sentence_spans(RESPONSE)]
    assert sum(s.tokens for s in split.spans) == split.response_tokens  # the spans partition the tokens
    for pid, score in split.scores.items():  # so the whole score is the token-weighted mean of the sentences'
        weighted = sum(s.tokens * s.reading.scores[pid] for s in split.spans) / split.response_tokens
        assert weighted == pytest.approx(score, abs=1e-9)
    token_spans = tiny_lm.response_token_spans(RESPONSE)
    first = 0
    for span in split.spans:  # each sentence's first token is its first word, whatever the space before it
        a, b = token_spans[first]
        assert RESPONSE[a:b].strip() and span.text.startswith(RESPONSE[a:b].strip())
        first += span.tokens
    for span in split.spans:
        assert RESPONSE[span.start:span.end] == span.text
        assert span.reading.threshold == split.threshold and set(span.reading.used) <= set(span.reading.scores)


def test_sentence_loo_equals_a_naive_leave_one_out(tiny_lm):
    result = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, spans="sentences")
    token_spans = tiny_lm.response_token_spans(RESPONSE)
    groups = assign_tokens(sentence_spans(RESPONSE), token_spans, RESPONSE)
    for span, tokens in zip(result.spans, groups, strict=True):
        expected = naive_sentence_loo(tiny_lm, PASSAGES, RESPONSE, tokens)
        np.testing.assert_allclose([span.reading.scores[p.id] for p in PASSAGES], expected, atol=5e-3)


def test_hierarchical_reads_each_sentence_from_its_own_deletions(tiny_lm):
    """Per sentence, `hierarchical` reads the deletions it ran over the sentence's tokens: a refined
    passage as a naive leave-one-out, an unrefined one as its group's naive deletion shared; groups of
    one passage give `loo`'s sentences."""
    passages = [*PASSAGES[:2], Passage("d", "Frankenstein is a novel about a scientist.", "Frankenstein"),
                PASSAGES[2]]  # on the tiny model the group (a, b) is refined and (d, c) shared
    result = ascp.attribute(QUESTION, passages, RESPONSE, model=tiny_lm, spans="sentences",
                            estimator="hierarchical(group_size=2, refine_top=1)")
    loo = ascp.attribute(QUESTION, passages, RESPONSE, model=tiny_lm, spans="sentences")
    ones = ascp.attribute(QUESTION, passages, RESPONSE, model=tiny_lm, spans="sentences",
                          estimator="hierarchical(group_size=1)")
    for a, b in zip(ones.spans, loo.spans, strict=True):
        assert a.reading.scores == pytest.approx(b.reading.scores, abs=1e-9)
    groups = assign_tokens(sentence_spans(RESPONSE), tiny_lm.response_token_spans(RESPONSE), RESPONSE)
    ids = tiny_lm.encode(RESPONSE)

    def logprobs(kept):
        return np.asarray(tiny_lm.score([tiny_lm.encode_prompt(QUESTION, kept).ids], ids,
                                        reuse_prefix=False).logprobs[0])

    full = logprobs(passages)
    refined = {pid for pid in result.scores if result.scores[pid] == pytest.approx(loo.scores[pid], abs=1e-6)}
    assert 0 < len(refined) < len(passages)  # one group of two refined, the other shared
    for span, tokens in zip(result.spans, groups, strict=True):
        for g in (["a", "b"], ["d", "c"]):
            if set(g) <= refined:
                continue
            without = logprobs([p for p in passages if p.id not in g])
            shared = (full[tokens].mean() - without[tokens].mean()) / 2
            assert [span.reading.scores[pid] for pid in g] == pytest.approx([shared, shared], abs=5e-3)
        for pid in refined:
            without = logprobs([p for p in passages if p.id != pid])
            assert span.reading.scores[pid] == pytest.approx(full[tokens].mean() - without[tokens].mean(), abs=5e-3)


def test_the_record_holds_the_spans_and_reads_back(tiny_lm, tmp_path, cli, tiny_model_dir):
    result = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, spans="sentences", threshold=0.3)
    record = json.loads(json.dumps(result.to_json()))
    assert [set(s) for s in record["spans"]] == [{"start", "end", "text", "tokens", "scores", "normalized", "used"}] * 3
    again = AttributionResult.from_json(record)
    assert again.spans == result.spans and again.tokens_processed == result.tokens_processed
    requests = request_file(tmp_path)
    out = tmp_path / "out.jsonl"
    done = cli("attribute", "--input", requests, "--out", out, "--model", tiny_model_dir, "--backend", "hf",
               "--spans", "sentences")
    assert done.exit_code == 0, done.output
    written = json.loads(out.read_text())
    assert len(written["spans"]) == 3 and written["tokens_processed"] > 0


class WholeOnly(ascp.Estimator):
    """An estimator of one's own that reads the whole response only (it declares no `token_readings`)."""

    uses_model = False

    def score(self, lm, item):
        return ascp.Scores(values=np.ones(len(item.passages)))


def test_spans_bad_input_is_one_sentence(tiny_lm):
    from ascp import attribution

    with pytest.raises(AscpError, match="spans must be sentences"):
        ascp.Probe(tiny_lm, "loo", spans="words")
    saved = attribution.ESTIMATORS.registrations()
    try:
        ascp.register_estimator("whole-only", WholeOnly)
        with pytest.raises(AscpError, match="estimator 'whole-only' cannot read a part of the response.*use loo or "
                           "replace or hierarchical or contextcite or bm25"):
            ascp.Probe(tiny_lm, "whole-only", spans="sentences")
    finally:
        attribution.ESTIMATORS.restore(saved)
    with pytest.raises(AscpError, match="inside the ProbeSettings"):
        ascp.Probe(tiny_lm, ascp.ProbeSettings("loo"), spans="sentences")


@pytest.mark.parametrize("option,message", [("--spans", "spans must be sentences"),
                                            ("--sources", "sources must be passages or sentences")])
def test_a_bad_spans_or_sources_value_is_one_sentence_and_no_file(tmp_path, cli, option, message):
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"id": "r1", "question": QUESTION, "response": RESPONSE,
                                    "passages": [{"id": "a", "text": "x y z"}]}) + "\n")
    out = tmp_path / "out.jsonl"
    done = cli("attribute", "--input", requests, "--out", out, option, "words")
    assert done.exit_code == 2 and message in done.output and not out.exists()


def test_proxies_read_each_sentence_by_its_own_text(tiny_lm):
    """Per sentence, BM25 ranks the passages for the sentence and the cosines compare the sentence with
    each passage: checked against bm25s and the embedder called on the sentence text directly."""
    from ascp.data.ranking import bm25_scores
    from ascp.embed.embedders import embed

    passages = [ascp.Passage(id="a", text="Mary Shelley wrote Frankenstein in 1818."),
                ascp.Passage(id="b", text="The first edition was printed in London."),
                ascp.Passage(id="c", text="Volcanoes erupted that summer.")]
    response = "Mary Shelley wrote it. It was printed in London."
    for name in ("bm25", "yd-cosine", "qd-cosine"):
        result = ascp.Probe(tiny_lm, f"{name}(embedder=hashing)" if "cosine" in name else name,
                            spans="sentences").attribute("Who wrote Frankenstein?", passages, response)
        assert [s.text for s in result.spans] == ["Mary Shelley wrote it.", "It was printed in London."]
        for span in result.spans:
            if name == "bm25":
                expected = bm25_scores(span.text, passages)
            else:
                vectors = embed([span.text, *(p.full_text for p in passages)], "hashing")
                expected = vectors[1:] @ vectors[0]
            assert list(span.reading.scores.values()) == pytest.approx(list(expected), abs=1e-9), (name, span.text)
        best = [max(s.reading.scores, key=s.reading.scores.get) for s in result.spans]
        assert best == ["a", "b"], (name, best)


def test_bm25_reads_a_sentence_of_stopwords_as_matching_nothing(tiny_lm):
    """A response sentence with no term left after stopwords ("It was.", met in a real response) gets
    BM25 0 from every passage, as BM25's sum over no query term is; the other sentences read as alone."""
    import bm25s

    passages = [ascp.Passage(id="a", text="Mary Shelley wrote Frankenstein in 1818."),
                ascp.Passage(id="b", text="The first edition was printed in London.")]
    assert bm25s.tokenize(["It was."], stopwords="en", show_progress=False, return_ids=False)[0] == []
    result = ascp.Probe(tiny_lm, "bm25", spans="sentences").attribute(
        "Who wrote Frankenstein?", passages, "Mary Shelley wrote it. It was. In London.")
    assert [s.text for s in result.spans] == ["Mary Shelley wrote it.", "It was.", "In London."]
    assert list(result.spans[1].reading.scores.values()) == [0.0, 0.0]
    assert result.spans[1].reading.used == ()
    assert result.spans[0].reading.scores["a"] > 0 == result.spans[0].reading.scores["b"]


def test_causal_citations_follow_each_sentences_reading(tiny_lm):
    """Each sentence is followed by the passages its own reading used, strongest first; the markers read
    back through check_citations as those passages; a sentence that used nothing is unsupported."""
    from ascp.metrics.citations import check_citations

    cited = ascp.cite(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, threshold=0.3)
    result = cited.attribution
    ids = [p.id for p in PASSAGES]
    rebuilt, cursor = "", 0
    for sentence, span in zip(cited.sentences, result.spans, strict=True):
        expected = sorted(span.reading.used, key=lambda pid: -span.reading.normalized[pid])
        assert list(sentence.sources) == expected and sentence.supported == bool(expected)
        rebuilt += RESPONSE[cursor:span.end] + "".join(f"[{ids.index(pid) + 1}]" for pid in expected)
        cursor = span.end
    assert cited.text == rebuilt + RESPONSE[cursor:]
    assert cited.text.replace("[1]", "").replace("[2]", "").replace("[3]", "") == RESPONSE
    union = {pid for s in cited.sentences for pid in s.sources}
    assert set(check_citations(result, cited.text).cited) == union
    by_id = ascp.cite(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, threshold=0.3, markers="ids")
    assert all(f"[{pid}]" in by_id.text for pid in union)
    from dataclasses import replace

    from ascp.metrics.citations import cite_response

    quiet = tuple(replace(span, reading=replace(span.reading, used=())) for span in result.spans)
    silent = replace(result, spans=quiet)
    nothing = cite_response(silent)  # no sentence used a passage: no marker, every sentence unsupported
    assert nothing.text == RESPONSE and len(nothing.unsupported) == 3
    record = cited.to_json()
    assert record["cited"] == cited.text and [s["supported"] for s in record["sentences"]] == [
        s.supported for s in cited.sentences]


def test_ascp_cite_writes_cited_responses(tmp_path, cli, tiny_model_dir):
    requests = request_file(tmp_path)
    out = tmp_path / "cited.jsonl"
    done = cli("cite", "--input", requests, "--out", out, "--model", tiny_model_dir, "--backend", "hf",
               "--threshold", "0.3")
    assert done.exit_code == 0, done.output
    record = json.loads(out.read_text())
    assert record["id"] == "r1" and len(record["sentences"]) == 3 and record["threshold"] == 0.3
    assert all(set(s) == {"start", "end", "text", "sources", "supported"} for s in record["sentences"])
    bad = cli("cite", "--input", requests, "--out", tmp_path / "x.jsonl", "--markers", "letters")
    assert bad.exit_code == 2 and "--markers must be positions or ids" in bad.output
    assert not (tmp_path / "x.jsonl").exists()
    with pytest.raises(AscpError, match="markers must be positions or ids"):
        ascp.cite(QUESTION, PASSAGES, RESPONSE, markers="letters")


def test_portfolio_rounds_carry_sentence_readings(tiny_lm):
    """`run_portfolio(..., spans="sentences")`: every round with a response holds its sentences' readings,
    whose token-weighted mean is the round's own score, and the records read them back."""
    from ascp.types import Round

    pool = [{"id": p.id, "title": p.title, "text": p.text} for p in PASSAGES]
    pf = ascp.run_portfolio(QUESTION, pool, policy="rotate", k=2, T=2, model=tiny_lm, max_new_tokens=12,
                            spans="sentences", answers=[["1818"]])
    plain = ascp.run_portfolio(QUESTION, pool, policy="rotate", k=2, T=2, model=tiny_lm, max_new_tokens=12,
                               answers=[["1818"]])
    for rnd, same in zip(pf.rounds, plain.rounds, strict=True):
        assert rnd.scores == same.scores and rnd.probe_tokens == same.probe_tokens  # no pass more
        if not rnd.response.strip():
            assert rnd.spans == ()
            continue
        assert rnd.spans and sum(s.tokens for s in rnd.spans) == rnd.response_tokens
        for pid, score in rnd.scores.items():
            assert sum(s.tokens * s.reading.scores[pid] for s in rnd.spans) / rnd.response_tokens == pytest.approx(
                score, abs=1e-9)
        assert Round.from_json(json.loads(json.dumps(rnd.to_json()))).spans == rnd.spans
    assert any(rnd.spans for rnd in pf.rounds)  # the tiny model said something to read


def test_specs_take_spans_with_the_probes_sentence(tmp_path):
    from ascp.experiments.spec import parse_spec

    base = {"name": "x", "tasks": [{"name": "t", "data": str(tmp_path / "d.jsonl")}], "models": ["default"],
            "conditions": ["rotate(k=2,T=2)"]}
    (tmp_path / "d.jsonl").write_text("{}\n")
    assert parse_spec({**base, "spans": "sentences"}, base=tmp_path).settings.spans == "sentences"
    with pytest.raises(AscpError, match="spec field spans: spans must be sentences"):
        parse_spec({**base, "spans": "words"}, base=tmp_path)


def test_cite_takes_ready_settings(tiny_lm):
    settings = ascp.ProbeSettings("replace", threshold=0.3)
    cited = ascp.cite(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator=settings)
    assert cited.attribution.estimator == "replace" and cited.attribution.threshold == 0.3 and cited.sentences


def test_contextcite_refits_its_surrogate_per_sentence(tiny_lm):
    """ContextCite reads a sentence as the original's `get_attributions(start, end)` does: the same masks,
    each mask's logit-probability of the sentence's tokens, a Lasso per sentence. Checked against the
    recipe rebuilt by hand, each mask's prompt encoded and scored from scratch."""
    from sklearn.linear_model import Lasso
    from sklearn.preprocessing import StandardScaler

    from ascp.attribution.contextcite import logit_prob

    result = ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm, estimator="contextcite(num_ablations=12)",
                            seed=0, spans="sentences")
    seed = ascp.ProbeSettings("contextcite(num_ablations=12)").estimator_for(0, "request").seed
    masks = np.random.default_rng(seed).random((12, len(PASSAGES))) < 0.5
    ids = tiny_lm.encode(RESPONSE)
    rows = [np.asarray(tiny_lm.score([tiny_lm.encode_prompt(QUESTION, [p for p, keep in zip(PASSAGES, m, strict=True)
                                                                       if keep]).ids], ids,
                                     reuse_prefix=False).logprobs[0]) for m in masks]
    groups = assign_tokens(sentence_spans(RESPONSE), tiny_lm.response_token_spans(RESPONSE), RESPONSE)
    x = masks.astype(float)
    scaler = StandardScaler().fit(x)
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    for span, tokens in zip(result.spans, groups, strict=True):
        target = np.array([logit_prob(float(row[tokens].sum())) for row in rows]) / len(tokens)
        lasso = Lasso(alpha=0.01, random_state=0).fit((x - scaler.mean_) / scale, target)
        np.testing.assert_allclose([span.reading.scores[p.id] for p in PASSAGES], lasso.coef_ / scale, atol=1e-4)
    assert result.tokens_processed == ascp.attribute(QUESTION, PASSAGES, RESPONSE, model=tiny_lm,
                                                     estimator="contextcite(num_ablations=12)").tokens_processed


def test_check_citations_reads_each_sentences_citations_against_its_own_reading(tiny_lm):
    """A response that carries its own citations, attributed per sentence: each citation belongs to the
    sentence it follows, and each sentence's citations are compared with that sentence's used set."""
    from ascp.metrics.citations import check_citations

    passages = [ascp.Passage(id="a", text="Mary Shelley wrote Frankenstein."),
                ascp.Passage(id="b", text="The first edition appeared in 1818."),
                ascp.Passage(id="c", text="It was printed in London.")]
    response = "Mary Shelley wrote it.[1] The first edition came in 1818 [3][b]. Nothing else is known."
    result = ascp.Probe(tiny_lm, spans="sentences").attribute("Who wrote Frankenstein?", passages, response)
    check = check_citations(result)
    assert [s.text for s in check.sentences][1:] == ["The first edition came in 1818 [3][b].",
                                                     "Nothing else is known."]
    assert [s.check.cited for s in check.sentences] == [("a",), ("c", "b"), ()]
    for sentence, span in zip(check.sentences, result.spans, strict=True):
        used = set(span.reading.used)
        assert set(sentence.check.cited_and_used) == set(sentence.check.cited) & used
        assert set(sentence.check.used_not_cited) == used - set(sentence.check.cited)
    assert check.cited == ("a", "c", "b")  # the whole response's check is unchanged
    assert check_citations(result, "Another text [2].").sentences == ()  # other text: no sentence readings
