"""Pages a person reads, checked in a real browser: headless Chromium renders each page, and the
test reads the rendered DOM (after the page's script ran), not the HTML source, and saves a
screenshot. Skips where Chromium is absent (CI installs Debian's `chromium`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import run_ascp

import ascp
from ascp.loop.consumers import Toy
from ascp.loop.simulate import compare, pool_views, simulate_portfolios, write_simulation
from ascp.records import read_results
from ascp.render.pages import attribution_page, run_page
from ascp.types import AnswerUnit, Case, Passage

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (Debian package `chromium`)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def browse(page: Path, tmp_path: Path, screenshot: Path | None = None) -> str:
    """The DOM Chromium rendered for `page` (and a screenshot when asked)."""
    profile = ["--user-data-dir=" + str(tmp_path / "chromium-profile")]
    dom = subprocess.run([CHROMIUM, *FLAGS, *profile, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    if screenshot is not None:
        shot = subprocess.run([CHROMIUM, *FLAGS, *profile, "--window-size=1200,900", f"--screenshot={screenshot}",
                               page.as_uri()], capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0 and screenshot.stat().st_size > 5000, shot.stderr[-2000:]
    return dom.stdout


PASSAGES = [
    {"id": "a", "title": "Mary Shelley", "text": "Mary Shelley wrote the novel, published in 1818."},
    {"id": "b", "text": "The quick brown fox jumps over the lazy dog."},
    {"id": "c", "title": "Edition", "text": "The first edition of 1899 names the author."},
]


@needs_chromium
def test_attribution_page_renders_shaded_passages_and_used_marks(tiny_lm, tmp_path):
    questions = {"q1": "Who wrote the novel?", "q2": "When was the first edition?"}
    results = [ascp.Probe(tiny_lm, threshold=0.2).attribute(q, PASSAGES, "The author was born in 1850.", id=rid)
               for rid, q in questions.items()]
    page = tmp_path / "attribute.html"
    page.write_text(attribution_page(results, questions, "test page"), encoding="utf-8")
    dom = browse(page, tmp_path, tmp_path / "attribute.png")
    assert "data-ready=\"1\"" in dom  # the page's script ran: this is the rendered DOM
    blocks = re.findall(r"<div class=\"p[^\"]*\" data-passage=\"([^\"]+)\" data-used=\"(\d)\" "
                        r"data-normalized=\"([0-9.]+)\"[^>]*data-shade=\"([^\"]*)\"", dom)
    assert len(blocks) == 6
    used = sum(len(r.used) for r in results)
    assert sum(flag == "1" for _, flag, _, _ in blocks) == used >= 1
    for _, _, norm, shade in blocks:  # drawn shaded exactly when the normalised score is positive
        assert shade.startswith("rgba(255, 170, 0") == (float(norm) > 0), shade
    assert dom.count("class=\"case\"") == 2 and "2 shown" in dom


def fake_embed(texts):
    v = np.array([np.random.default_rng(zlib.crc32(t.encode())).normal(size=8) for t in texts])
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@needs_chromium
def test_view_page_renders_rounds_with_used_passages_and_recovered_units(tmp_path):
    cases = [Case(id=f"c{c}", question=f"question {c}?",
                  pool=tuple(Passage(id=f"c{c}p{i}", text=f"passage {i} answer{i % 2}") for i in range(8)),
                  units=(AnswerUnit("0", ("answer0",)), AnswerUnit("1", ("answer1",))))
             for c in range(3)]
    views = pool_views(cases, fake_embed)
    results = {p[0].policy: p for p in (simulate_portfolios(cases, name, 2, 3, Toy(q=0.5), views)
                                         for name in ("vanilla", "rotate"))}
    write_simulation(tmp_path / "sim", cases, results, {"data": "absent.jsonl", "k": 2, "T": 3},
                     compare(results, n_boot=100))
    runs = read_results(tmp_path / "sim")
    assert runs.kind == "simulation" and list(runs.groups()) == ["vanilla", "rotate"]  # the simulation's order
    page = tmp_path / "view.html"
    page.write_text(run_page(runs, {c.id: c for c in cases}, "view test"), encoding="utf-8")
    dom = browse(page, tmp_path, tmp_path / "view.png")
    assert "data-ready=\"1\"" in dom and dom.count("class=\"case\"") == 3
    used = sum(len(r.used) for ps in results.values() for p in ps for r in p.rounds)
    shown = sum(len(r.context) for ps in results.values() for p in ps for r in p.rounds)
    assert dom.count("data-used=\"1\"") == used and dom.count("data-used=\"0\"") == shown - used
    assert "question 1?" in dom


def test_view_and_html_commands_refuse_bad_input(tmp_path):

    (tmp_path / "empty").mkdir()
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.json").write_text(json.dumps({"config": {"policy": "rotate"}, "mean": {}}))
    (old / "cases.jsonl").write_text(json.dumps({"case_id": "c1"}) + "\n")
    (old / "rounds.jsonl").write_text(json.dumps({"case_id": "c1", "round": 1, "passages": ["a"]}) + "\n")
    for args, message in [(["view", str(tmp_path / "nope")], "is not a folder"),
                          (["view", str(tmp_path / "empty")], "holds no run"),
                          (["view", str(old)], "is not a run folder this version of ascp reads")]:
        proc = run_ascp(*args, home=tmp_path, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@needs_chromium
def test_selecting_a_sentence_of_an_attribution_page_reads_the_passages_by_it(tiny_lm, tmp_path):
    """`ascp attribute --html` with per-sentence readings, clicked in Chromium: each sentence marks
    the passages its own reading used, with its scores; selecting it again restores the whole."""
    from conftest import chromium_page

    result = ascp.Probe(tiny_lm, spans="sentences").attribute(
        "Who wrote the novel?", PASSAGES, "Mary Shelley wrote it. The first edition came in 1818.", id="q1")
    assert len(result.spans) == 2
    page_path = tmp_path / "attribute.html"
    page_path.write_text(attribution_page([result], {"q1": "Who wrote the novel?"}, "sentences"), encoding="utf-8")
    with chromium_page() as page:
        page.goto(page_path.as_uri())
        page.wait_for_selector("body[data-ready='1']")
        passages = page.locator("[data-passage]")

        def used() -> set[str]:
            return {passages.nth(i).get_attribute("data-passage") for i in range(passages.count())
                    if passages.nth(i).get_attribute("data-used") == "1"}

        assert used() == set(result.used)
        for i, span in enumerate(result.spans):
            page.click(f"[data-sentence='{i}']")
            assert used() == set(span.reading.used)
            for pid, score in span.reading.scores.items():
                assert f"sentence {i + 1}: {score:+.4f}" in page.inner_text(f"[data-passage='{pid}'] .score")
        page.click(f"[data-sentence='{len(result.spans) - 1}']")
        assert used() == set(result.used) and page.inner_text("[data-passage='a'] .score") == ""


@needs_chromium
def test_selecting_a_sentence_of_a_round_in_the_view_page_marks_its_passages(tiny_model_dir, tmp_path, cli):
    """`ascp view` of a run read per sentence, clicked in Chromium: a round's response sentence marks the
    context passages its own reading used, with their scores; selecting it again restores the round's."""
    from conftest import chromium_page

    cases = [{"id": f"c{c}", "question": "when was the author born?", "answers": [["1850"]],
              "pool": [{"id": f"c{c}d{i}", "title": "T", "text": f"The author was born in {1850 + i}. He wrote books."}
                       for i in range(6)]} for c in range(2)]
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    run = tmp_path / "run"
    done = cli("run", "--data", data, "--policy", "rotate", "--k", "3", "--T", "2", "--model", tiny_model_dir,
               "--backend", "hf", "--max-new-tokens", "24", "--embedder", "hashing", "--out", run, "--spans",
               "sentences")
    assert done.exit_code == 0, done.output
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    done = cli("view", run, "--out", tmp_path / "view.html")
    assert done.exit_code == 0, done.output
    with chromium_page() as page:
        page.goto((tmp_path / "view.html").as_uri())
        page.wait_for_selector("body[data-ready='1']")
        checked = 0
        for r in rounds:
            row = page.locator(f"tr[data-attribution='{r['case_id']}/rotate/{r['round']}']")
            items = row.locator("[data-passage]")

            def used(items=items) -> set[str]:
                return {items.nth(i).get_attribute("data-passage") for i in range(items.count())
                        if items.nth(i).get_attribute("data-used") == "1"}

            assert used() == set(r["used"])
            for i, span in enumerate(r.get("spans", [])):
                row.locator(f"[data-sentence='{i}']").click()
                assert used() == set(span["used"])
                first = r["context"][0]
                assert f"sentence {i + 1}: {span['scores'][first]:+.4f}" in row.locator(
                    f"[data-passage='{first}'] .score").inner_text()
                checked += 1
            if r.get("spans"):
                row.locator(f"[data-sentence='{len(r['spans']) - 1}']").click()
                assert used() == set(r["used"])
        assert checked >= 2
