"""ELI5 end to end: claim recall by NLI entailment (ALCE; paper Sec. 7.1) through the metric, `ascp run`,
the library and experiment specs, with tiny random BERT classifiers whose classifier bias fixes the answer.

No NLI model ships offline, so every model here is built in tmp_path: a 1-layer BERT with a local
WordPiece vocabulary. A huge bias on one label makes that label the argmax for every input (known
answers: entailment -> every claim recalled, PR@T = 1; contradiction -> PR@T = 0).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import invoke_cli

from ascp.errors import AscpError
from ascp.metrics import portfolio_recall
from ascp.metrics.nli import (
    LexicalClaimMatcher,
    NLIClaimMatcher,
    check_nli_model,
    entailment_index,
    load_nli_matcher,
    remove_citations,
    require_matcher,
)
from ascp.types import AnswerUnit, Case, Passage

LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}
WORDS = ["the", "sky", "is", "blue", "air", "scatters", "light", "sunlight", "has", "colours", "why", "because",
         "red", "sun", "sets", "water", "cold", "warm", "rain", "clouds", "a", "of", "and", "in"]


def tiny_nli(directory: Path, labels: dict[int, str] = LABELS, bias: dict[int, float] | None = None,
             seed: int = 0) -> Path:
    """A random 1-layer BERT sequence classifier saved with its tokenizer. `bias`: classifier bias per label
    (the weights are then zeroed, so the decision is the same for every input); None: random classifier."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    directory.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=64, num_labels=len(labels),
                        id2label=labels, label2id={v: k for k, v in labels.items()},
                        initializer_range=0.5 if bias is None else 0.02)  # wide weights: decisions vary
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    if bias is not None:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.zero_()
            for label, value in bias.items():
                model.classifier.bias[label] = value
    model.save_pretrained(directory)
    BertTokenizerFast(vocab_file=str(directory / "vocab.txt")).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def entailing(tmp_path_factory) -> Path:
    return tiny_nli(tmp_path_factory.mktemp("nli") / "entail", bias={0: 50.0})


@pytest.fixture(scope="module")
def contradicting(tmp_path_factory) -> Path:
    return tiny_nli(tmp_path_factory.mktemp("nli") / "contra", bias={2: 50.0})


CLAIMS = (AnswerUnit("c0", claim="Air scatters blue light."), AnswerUnit("c1", claim="Sunlight has colours."))
RESPONSES = ["The sky is blue because air scatters light [1].", "Clouds of water [2]."]


# ------------------------------------------------------------------------------------------ the matcher


def test_entailment_label_and_one_sentence_errors():
    assert entailment_index({0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"}, 3) == 1
    assert entailment_index({"0": "entailment", "1": "not_entailment"}, 2) == 0  # a negated label is not it
    assert entailment_index({"0": "LABEL_0"}, 1) is None  # one logit: sigmoid rule
    for labels in ({0: "LABEL_0", 1: "LABEL_1"}, {0: "entailment", 1: "entailment_2"}):
        with pytest.raises(AscpError, match="--nli-model: .*no single entailment label") as info:
            entailment_index(labels, 2)
        assert "\n" not in str(info.value) and str(info.value).endswith(".")


def test_remove_citations_is_alces():
    assert remove_citations("Paris [1][2] is big [3].") == "Paris is big."
    assert remove_citations("No citations here.") == "No citations here."


def test_biased_models_give_known_recall(entailing, contradicting, tmp_path):
    yes, no = load_nli_matcher(str(entailing)), load_nli_matcher(str(contradicting))
    assert isinstance(yes, NLIClaimMatcher) and yes.entail == 0 and yes.name == str(entailing.resolve())
    assert portfolio_recall(CLAIMS, RESPONSES, yes) == 1.0
    assert portfolio_recall(CLAIMS, RESPONSES, no) == 0.0
    assert portfolio_recall(CLAIMS, [], yes) == 0.0
    # a one-logit (CrossEncoder num_labels=1) model: entailed iff sigmoid(logit) > 0.5
    up = load_nli_matcher(str(tiny_nli(tmp_path / "up", {0: "LABEL_0"}, bias={0: 20.0})))
    down = load_nli_matcher(str(tiny_nli(tmp_path / "down", {0: "LABEL_0"}, bias={0: -20.0})))
    assert isinstance(up, NLIClaimMatcher) and up.entail is None
    assert up(CLAIMS[0], RESPONSES[0]) and not down(CLAIMS[0], RESPONSES[0])


def test_batched_and_cached_decisions_equal_one_at_a_time(tmp_path):
    folder = tiny_nli(tmp_path / "random", bias=None, seed=1)  # 10 of 32 pairs entailed, top-2 margins >= 0.3
    premises = ["the sky is blue", "air scatters light and the sun sets", "rain", "warm water in clouds",
                "red sun", "why is the sky blue because of light", "cold rain and clouds", "sunlight has colours"]
    claims = ["the sky is blue", "air scatters light", "sunlight has colours", "the sun sets red"]
    pairs = [(p, c) for p in premises for c in claims]
    batched = load_nli_matcher(str(folder), batch_size=5)
    assert isinstance(batched, NLIClaimMatcher)
    decisions = batched.entails(pairs)
    assert batched.pairs_scored == len(pairs)
    assert batched.entails(pairs[::-1]) == decisions[::-1] and batched.pairs_scored == len(pairs)  # all cached
    single = load_nli_matcher(str(folder), batch_size=1)
    assert [single(AnswerUnit("u", claim=c), p) for p, c in pairs] == decisions
    assert 0 < sum(decisions) < len(decisions), "test precondition: the random model decides both ways"
    # citations are stripped before the model sees the premise (ALCE), so these share a cache entry
    assert batched.entails([(premises[0] + " [4]", claims[0])]) == [decisions[0]]
    assert batched.pairs_scored == len(pairs)


def test_bad_nli_folders_are_one_sentence_naming_the_flag(tmp_path):
    (tmp_path / "empty").mkdir()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"id2label": {"0": "LABEL_0", "1": "LABEL_1"}}))
    for folder, message in ((tmp_path / "missing", "is not a folder"), (tmp_path / "empty", "no readable config"),
                            (plain, "no single entailment label")):
        with pytest.raises(AscpError, match=message) as info:
            load_nli_matcher(str(folder))
        text = str(info.value)
        assert text.startswith(f"--nli-model {folder}") and "\n" not in text and text.endswith("."), text
    assert check_nli_model("lexical") == "lexical"


def test_lexical_fallback_only_by_name():
    lexical = load_nli_matcher("lexical")
    assert isinstance(lexical, LexicalClaimMatcher) and lexical.name == "lexical(share=0.5)"
    claim = CLAIMS[0]  # content tokens: air, scatters, blue, light
    assert lexical(claim, "The air scatters the light.")  # 3 of 4 >= 0.5
    assert not lexical(claim, "A blue sky.")  # 1 of 4
    assert LexicalClaimMatcher(share=1.0)(claim, "Blue light: air scatters it.")
    assert not LexicalClaimMatcher(share=1.0)(claim, "The air scatters the light.")


def test_claim_units_without_a_matcher_fail_naming_the_flag():
    case = Case("q1", "Why is the sky blue?", (Passage("d0", "Air scatters light."),), CLAIMS, "eli5")
    with pytest.raises(AscpError, match="case 'q1' has claim units .* pass --nli-model PATH") as info:
        require_matcher([case], False)
    assert "\n" not in str(info.value) and str(info.value).endswith(".")
    require_matcher([case], True)
    require_matcher([Case("q2", "q", (), (AnswerUnit("a", ("x",)),))], False)  # aliases need no matcher


# ---------------------------------------------------------------------- one rule for density, run, calibrate

# e^1 / (e^1 + 2 e^0.8) = 0.379: entailment is the argmax but its softmax is under 0.5, so the former
# CrossEncoder rule of `ascp density` (softmax >= 0.5) said "not entailed" where `ascp run` said "entailed".
BELOW_HALF = {0: 1.0, 1: 0.8, 2: 0.8}
AGREE_PREMISES = ["the sky is blue because air scatters light [1]", "rain and cold clouds", "red sun sets",
                  "sunlight has colours [2][3]", "why is the sky blue"]
AGREE_CLAIMS = ["the sky is blue", "air scatters light", "sunlight has colours"]


def _density_decisions(folder: Path, pairs: list[tuple[str, str]], tmp_path: Path) -> list[bool]:
    """`ascp density --nli-model FOLDER` over one ELI5 file per pair (one passage, one claim): rho(1) of a
    file is 1 exactly when its passage attests its claim."""
    args = ["density", "--format", "eli5", "--rank-by", "given", "--max-rank", "5", "--nli-model", str(folder),
            "--out", str(tmp_path / "density.json")]
    for n, (premise, claim) in enumerate(pairs):
        path = tmp_path / f"pair{n}.json"
        item = {"question": f"q{n}", "claims": [claim], "docs": [{"title": "", "text": premise}]}
        path.write_text(json.dumps([item]), encoding="utf-8")
        args += ["--data", str(path)]
    result = invoke_cli(args)
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "density.json").read_text())
    assert [r["support"][0] for r in rows] == [1] * len(pairs)
    return [r["rho"][0] == 1.0 for r in rows]


def _run_decisions(folder: Path, pairs: list[tuple[str, str]]) -> list[bool]:
    """`ascp run` / `run_portfolios` / experiments: the matcher `resolve_matcher` loads, prefetched per case as
    the loop does, then claim recall (PR@T of the claim with the premise as the only response)."""
    from ascp.metrics.nli import prefetch, resolve_matcher

    matcher = resolve_matcher(str(folder))
    out = []
    for n, (premise, claim) in enumerate(pairs):
        unit = AnswerUnit(f"c{n}", claim=claim)
        prefetch(matcher, [unit], [premise])
        out.append(portfolio_recall([unit], [premise], matcher) == 1.0)
    return out


def _calibrate_decisions(folder: Path, pairs: list[tuple[str, str]]) -> list[bool]:
    """`ascp calibrate --nli-model`: `load_nli_matcher(...).entails` into `redundancy`, over a two-passage pool
    (premise, claim) per pair; the decisions `redundancy` asked for are recorded on their way back."""
    from ascp.validation.calibration import redundancy

    entails = load_nli_matcher(str(folder)).entails
    seen: dict[tuple[str, str], bool] = {}

    def recording(batch):
        decisions = entails(batch)
        seen.update(zip(batch, decisions, strict=True))
        return decisions

    cases = [Case(f"q{n}", "q", (Passage("p", premise), Passage("c", claim)), (AnswerUnit("a", ("x",)),))
             for n, (premise, claim) in enumerate(pairs)]
    rows = redundancy(cases, None, recording)
    for case, (premise, claim) in zip(cases, pairs, strict=True):  # ordered pairs (p, c) and (c, p)
        assert rows[case.id]["entailment"] == (seen[(premise, claim)] + seen[(claim, premise)]) / 2
    return [seen[pair] for pair in pairs]


@pytest.mark.parametrize("kind", ["argmax-below-half", "random", "one-logit"])
def test_density_run_and_calibrate_decide_a_pair_alike(kind, tmp_path):
    import math

    if kind == "argmax-below-half":
        folder = tiny_nli(tmp_path / kind, bias=BELOW_HALF)
        assert math.exp(1.0) / (math.exp(1.0) + 2 * math.exp(0.8)) < 0.5  # the former density rule: "no"
    elif kind == "random":
        folder = tiny_nli(tmp_path / kind, bias=None, seed=1)
    else:  # one logit: the former density matcher refused it; now sigmoid(logit) > 0.5 everywhere
        folder = tiny_nli(tmp_path / kind, {0: "LABEL_0"}, bias=None, seed=2)
    pairs = [(p, c) for p in AGREE_PREMISES for c in AGREE_CLAIMS]
    density = _density_decisions(folder, pairs, tmp_path)
    run = _run_decisions(folder, pairs)
    calibrate = _calibrate_decisions(folder, pairs)
    assert density == run == calibrate
    if kind == "argmax-below-half":
        assert all(run)  # argmax = entailment decides, never a probability threshold
    else:
        assert 0 < sum(run) < len(run), "test precondition: the random model decides both ways"


# ------------------------------------------------------------------------------------------ end to end


def eli5_file(path: Path, n: int = 2) -> Path:
    """An ALCE ELI5 retrieval file: question, claims and docs with title/text (no ids, no scores)."""
    items = [{"question": f"Why is the sky blue {i}?", "claims": ["Air scatters blue light.", "Sunlight has colours."],
              "docs": [{"title": f"Doc {j}", "text": f"the sky is blue because air scatters light {j}"}
                       for j in range(4)]}
             for i in range(n)]
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


@pytest.fixture
def fast_cli(monkeypatch):
    """`ascp run` in process with the hashing embedder in place of MiniLM (schedulers, diversity)."""
    from ascp.experiments.embedders import hashing_embed

    monkeypatch.setattr("ascp.embed.embedders.embed", lambda texts, *args, **kwargs: hashing_embed(texts))
    monkeypatch.setenv("COLUMNS", "200")


def _run_args(data: Path, out: Path, model_dir: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(data), "--format", "eli5", "--rank-by", "given", "--policy", "rotate", "--k", "2",
            "--T", "2", "--model", str(model_dir), "--estimator", "bm25", "--max-new-tokens", "4", "--device", "cpu",
            "--out", str(out), *extra]


def test_cli_eli5_runs_with_an_nli_model(fast_cli, tmp_path, tiny_model_dir, entailing, contradicting):
    data = eli5_file(tmp_path / "eli5.json")
    for folder, pr in ((entailing, 1.0), (contradicting, 0.0)):
        out = tmp_path / folder.name
        result = invoke_cli(_run_args(data, out, tiny_model_dir, "--nli-model", str(folder)))
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in (out / "cases.jsonl").read_text().splitlines()]
        assert [r["pr"] for r in rows] == [pr, pr] and [r["ceiling"] for r in rows] == [pr, pr]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["config"]["nli_model"] == str(folder.resolve()) and summary["mean"]["pr"] == pr
    out = tmp_path / "lexical"
    result = invoke_cli(_run_args(data, out, tiny_model_dir, "--nli-model", "lexical"))
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["config"]["nli_model"] == "lexical(share=0.5)"


def test_cli_eli5_without_an_nli_model_fails_before_any_generation(fast_cli, tmp_path, tiny_model_dir, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the generator must not load")

    monkeypatch.setattr("ascp.lm.resolve.load_language_model", never)
    data = eli5_file(tmp_path / "eli5.json")
    out = tmp_path / "out"
    result = invoke_cli(_run_args(data, out, tiny_model_dir))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--nli-model PATH" in lines[0] and "claim units" in lines[0], result.output
    assert not out.exists()
    result = invoke_cli(_run_args(data, out, tiny_model_dir, "--nli-model", str(tmp_path / "nope")))
    assert result.exit_code == 2 and "--nli-model" in result.output and "is not a folder" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_library_run_portfolios_takes_nli_model(tmp_path, tiny_lm, entailing):
    import ascp
    from ascp.data import load_cases
    from ascp.experiments.embedders import hashing_embed

    cases = load_cases(eli5_file(tmp_path / "eli5.json", n=1), format="eli5", rank_by="given")
    with pytest.raises(AscpError, match="nli_model= in the API"):
        ascp.run_portfolios(cases, policy="rotate", k=2, T=1, model=tiny_lm, embed_fn=hashing_embed)
    (pf,) = ascp.run_portfolios(cases, policy="rotate", k=2, T=1, model=tiny_lm, embed_fn=hashing_embed,
                                max_new_tokens=3, estimator="bm25", nli_model=str(entailing))
    assert pf.metrics["pr"] == 1.0


def eli5_spec(folder: Path, model_dir: Path, **extra) -> Path:
    """A one-condition experiment over an ELI5 file in `folder`; `extra`: more top-level fields."""
    if not (folder / "eli5.json").exists():
        eli5_file(folder / "eli5.json", n=2)
    raw = {"name": "eli5-grid", "tasks": [{"name": "eli5", "data": "eli5.json", "format": "eli5", "rank_by": "given"}],
           "models": [str(model_dir)], "grid": {"policy": ["rotate"], "k": [2], "T": [2], "estimator": ["bm25"]},
           "sampling": {"max_new_tokens": 4}, "embedder": "hashing", **extra}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_experiment_spec_nli_model(tmp_path, tiny_model_dir, entailing):
    from ascp.experiments import load_spec, make_plan, run_experiment

    def spec(**extra) -> Path:
        return eli5_spec(tmp_path, tiny_model_dir, **extra)

    with pytest.raises(AscpError, match="spec field nli_model: task eli5: case '0' has claim units .*--nli-model"):
        make_plan(load_spec(spec()))
    with pytest.raises(AscpError, match="spec field nli_model: .* is not a folder"):
        load_spec(spec(nli_model="no-such-model"))
    local = tmp_path / "models" / "nli"
    shutil.copytree(entailing, local)
    plan = make_plan(load_spec(spec(nli_model="models/nli")))  # relative to the spec's folder
    assert plan.manifest()["settings"]["nli_model"] == str(local.resolve())
    result = run_experiment(plan.spec, tmp_path / "store", plan=plan)
    assert result.written == 2
    units = [json.loads(line) for line in (tmp_path / "store" / "units.jsonl").read_text().splitlines()]
    assert [u["pr"] for u in units] == [1.0, 1.0]
    assert json.loads((tmp_path / "store" / "plan.json").read_text())["settings"]["nli_model"] == str(local.resolve())


def test_ray_workers_load_the_nli_model(tmp_path, tiny_model_dir, contradicting):
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")
    from ascp.experiments import run_experiment

    path = eli5_spec(tmp_path, tiny_model_dir, nli_model=str(contradicting))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        result = run_experiment(path, tmp_path / "ray", executor="ray", workers=1)
    finally:
        ray.shutdown()
    units = [json.loads(line) for line in (tmp_path / "ray" / "units.jsonl").read_text().splitlines()]
    assert result.written == 2 and [u["pr"] for u in units] == [0.0, 0.0]


def test_the_decision_cache_is_the_one_lru_bounded_by_cache_size(entailing):
    from ascp.caching.lru import LRU

    matcher = NLIClaimMatcher(entailing, cache_size=2)
    assert isinstance(matcher._cache, LRU)
    pairs = [("p1", "h"), ("p2", "h"), ("p3", "h")]
    assert matcher.entails(pairs) == [True, True, True] and matcher.pairs_scored == 3
    assert len(matcher._cache) == 2  # the two most recent pairs kept
    matcher.entails([("p3", "h")])
    assert matcher.pairs_scored == 3  # p3 was kept
    matcher.entails([("p1", "h")])
    assert matcher.pairs_scored == 4  # p1 was the least recently used: dropped, scored again
