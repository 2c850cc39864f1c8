"""Loaders for every format, format detection, answer matching (string + NLI), relevance density.

Fixtures are tiny inline files written to tmp_path; the real files under ../shared/data are
read where present (marked real_data) and skipped with a reason otherwise.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import invoke_cli

from ascp.data import FORMATS, detect_format, load_cases
from ascp.data.ingredients import ingredient_key, ingredient_names
from ascp.data.recipes import parse_list, split_flat_ingredients
from ascp.errors import AscpError
from ascp.metrics import unit_recovered
from ascp.metrics.attestation import NLIMatcher, attestation_matrix, attests, lexically_attestable
from ascp.metrics.density import loglog_slope, relevance_density
from ascp.metrics.nli import entailment_index
from ascp.types import AnswerUnit, Case, Passage

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def real(relative: str) -> Path:
    path = SHARED / relative
    if not path.is_file():
        pytest.skip(f"real data file {path} not found (../shared/data is absent here)")
    return path


def dump(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def lines(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


DOCS = [{"id": "7", "title": "Heat (manga)", "text": "Heat is a manga drawn by Ryoichi Ikegami.", "score": 1.0},
        {"id": "8", "title": "Other", "text": "Nothing relevant here.", "score": 3.0},
        {"id": "7", "title": "dup", "text": "duplicate id is dropped"}]
ASQA = [{"sample_id": "s1", "question": "Who drew it?", "docs": DOCS,
         "qa_pairs": [{"short_answers": ["Ikegami", "Ryoichi Ikegami"]}, {"short_answers": []}]}]
QAMPARI = [{"id": "q1", "question": "What manga was drawn by Ryoichi Ikegami?", "docs": DOCS,
            "answers": [["Heat"], ["Crying Freeman", "Crying-Freeman"], []]}]
ELI5 = [{"question": "Why is the sky blue?", "claims": ["Air scatters blue light.", "Sunlight has colours."],
         "docs": [{"title": "Sky", "text": "Rayleigh scattering of sunlight."}]}]
OFFICIAL = [{"_id": "h1", "question": "Which band was formed first?", "answer": "The Beatles", "type": "comparison",
             "supporting_facts": [["The Beatles", 0], ["Oasis (band)", 1]],
             "context": [["Oasis (band)", ["Oasis were an English rock band.", " They formed in 1991."]],
                         ["Blur", ["Blur are a band."]],
                         ["The Beatles", ["The Beatles formed in 1960.", " In Liverpool."]]]}]
IRCOT = [{"question_id": "h2", "question_text": "Where was the author born?",
          "answers_objects": [{"number": "", "spans": ["Paris", "Paris, France"]}],
          "contexts": [{"id": "0", "title": "A", "paragraph_text": "Unrelated.", "is_supporting": False},
                       {"id": "1", "title": "Author", "paragraph_text": "She was born in Paris.",
                        "is_supporting": True},
                       {"id": "2", "title": "B", "paragraph_text": "", "is_supporting": False}]}]
JSONL = [{"id": "c", "question": "q?", "pool": [{"id": "b", "text": "x"}, {"id": "a", "text": "y"}],
          "answers": [["x"]]}]

QUERIES_TSV = (
    "tamales de dulce\t['500 gramos de harina para tamal', '50 gramos de azúcar', 'Pasas (opcional)']\t"
    "['Bate la manteca.', 'Mezcla todo.']\n"
    "arepas\t2 tazas de harina de maíz, 1 cucharadita de sal\tAmasar, cocinar\n"
)
RETRIEVED_OUT = (
    "0\tNombre:\tgachas dulces\tIngredientes:\t['100 gramos de harina de trigo', '1 rama de canela', "
    "'200 gramos de azúcar blanco']\tPasos:\t['Calienta la leche con la canela.']\n"
    "recipe=bizcocho not found\n"
    "0\tNombre:\tpestiños\tIngredientes:\t['1 chorro de aceite de oliva', '2 cucharadas de miel', 'canela']\t"
    "Pasos:\t['Fríe la masa en aceite de oliva.']\n"
    "1\tNombre:\ttortilla de patatas\tIngredientes:\t4 patatas, 3 huevos, sal\tPasos:\tPela las patatas, bate\n"
)
CORPUS_CSV = (
    "Nombre,Ingredientes,Pasos\n"
    "gachas dulces,100 gramos de harina de trigo 1 rama de canela,Calienta\n"
    "torrijas,1 barra de pan 1 rama de canela miel azúcar,Fríe el pan con miel y canela\n"
    "paella,arroz azafrán,Sofríe\n"
)


def recipe_files(tmp_path: Path) -> Path:
    (tmp_path / "carriage_queries_latam.tsv").write_text(QUERIES_TSV, encoding="utf-8")
    (tmp_path / "recetasabuela_es.csv").write_text(CORPUS_CSV, encoding="utf-8")
    out = tmp_path / "retrieved.out"
    out.write_text(RETRIEVED_OUT, encoding="utf-8")
    return out


FIXTURES = {
    "asqa": lambda d: dump(d / "asqa.json", ASQA),
    "qampari": lambda d: dump(d / "qampari.json", QAMPARI),
    "eli5": lambda d: dump(d / "eli5.json", ELI5),
    "hotpotqa": lambda d: dump(d / "hotpot.json", OFFICIAL),
    "hotpotqa-ircot": lambda d: lines(d / "ircot.jsonl", IRCOT),
    "jsonl": lambda d: lines(d / "cases.jsonl", JSONL),
    "recipes": recipe_files,
}


# ---------------------------------------------------------------------------------------- detection


@pytest.mark.parametrize("fmt", sorted(FIXTURES))
def test_auto_detection_finds_every_format(tmp_path, fmt):
    path = FIXTURES[fmt](tmp_path)
    assert detect_format(path) == fmt
    assert set(FORMATS) >= {fmt, "auto", "alce"}


def test_detection_reads_a_first_item_larger_than_the_first_chunk(tmp_path):
    big = [{"question": "q", "docs": [{"text": "w " * 50_000}], "claims": ["c"]}]
    assert detect_format(dump(tmp_path / "big.json", big)) == "eli5"


def test_unknown_and_undetectable_formats(tmp_path):
    path = dump(tmp_path / "x.json", [{"foo": 1}])
    with pytest.raises(AscpError, match="cannot tell the format"):
        load_cases(path)
    with pytest.raises(AscpError, match="unknown format"):
        load_cases(path, format="csv")
    with pytest.raises(AscpError, match="unknown ranker"):
        load_cases(FIXTURES["jsonl"](tmp_path), rank_by="random")


@pytest.mark.parametrize(("fixture", "fmt", "message"), [
    ("hotpotqa", "asqa", "has no 'qa_pairs' field; this looks like a hotpotqa file"),
    ("asqa", "hotpotqa", "has no 'context' field; this looks like a asqa file"),
    ("qampari", "eli5", "has no 'claims' field; this looks like a qampari file"),
    ("jsonl", "hotpotqa-ircot", "has no 'contexts' field; this looks like a jsonl file"),
    ("hotpotqa", "recipes", "is not 'query_idx, Nombre:"),
])
def test_a_file_of_another_format_is_a_clear_error(tmp_path, fixture, fmt, message):
    with pytest.raises(AscpError, match=message):
        load_cases(FIXTURES[fixture](tmp_path), format=fmt)


@pytest.mark.parametrize(("path_name", "obj", "message"), [
    ("a.json", [{"_id": "h", "question": "q", "supporting_facts": [["t", 0]], "context": []}],
     r"item 0 \(h\) has no 'answer' field"),
    ("b.json", [{"qa_pairs": [{"short_answers": ["x"]}], "docs": DOCS}], "item 0 has no 'question' field"),
    ("c.json", [{"question": "q", "answers": [[]], "docs": DOCS}], r"item 0 \(0\) has no gold units"),
    ("d.jsonl", [{"question_id": "z", "contexts": [], "answers_objects": [{"spans": ["a"]}]}],
     r":1 \(z\) has no 'question_text' field"),
])
def test_missing_fields_name_the_field_and_the_item(tmp_path, path_name, obj, message):
    path = (dump if path_name.endswith(".json") else lines)(tmp_path / path_name, obj)
    with pytest.raises(AscpError, match=message):
        load_cases(path, rank_by="given")


# ---------------------------------------------------------------------------------------- ALCE


def test_alce_asqa_qampari_eli5_round_trip(tmp_path):
    (asqa,) = load_cases(FIXTURES["asqa"](tmp_path), rank_by="given")
    assert asqa.id == "s1" and asqa.task == "asqa"
    assert [u.aliases for u in asqa.units] == [("Ikegami", "Ryoichi Ikegami")]
    assert [p.id for p in asqa.pool] == ["7", "8"] and [p.rank for p in asqa.pool] == [1, 2]
    (qam,) = load_cases(FIXTURES["qampari"](tmp_path), rank_by="bm25")
    assert qam.task == "qampari" and [u.aliases for u in qam.units] == [("Heat",), ("Crying Freeman", "Crying-Freeman")]
    assert qam.pool[0].id == "7" and qam.pool[0].rank == 1  # BM25 puts the matching doc first
    (eli5,) = load_cases(FIXTURES["eli5"](tmp_path), rank_by="given")
    assert eli5.id == "0" and eli5.task == "eli5" and eli5.pool[0].id == "d0"
    assert [(u.aliases, u.claim) for u in eli5.units] == [((), "Air scatters blue light."),
                                                          ((), "Sunlight has colours.")]


def test_generic_alce_decides_the_task_per_item(tmp_path):
    path = dump(tmp_path / "mixed.json", ASQA + QAMPARI + ELI5)
    cases = load_cases(path, format="alce", rank_by="given")
    assert [c.task for c in cases] == ["asqa", "qampari", "eli5"]


def test_gold_only_alce_needs_require_pool_false(tmp_path):
    gold = [{k: v for k, v in item.items() if k != "docs"} for item in QAMPARI + QAMPARI[:0]]
    path = dump(tmp_path / "gold.json", gold)
    with pytest.raises(AscpError, match=r"has no passages \('docs'\); ALCE gold-only files need retrieved docs"):
        load_cases(path)
    (case,) = load_cases(path, require_pool=False)
    assert case.pool == () and len(case.units) == 2


def test_asqa_module_entry_point_still_works(tmp_path):
    from ascp.data.asqa import load_asqa

    (case,) = load_asqa(FIXTURES["asqa"](tmp_path))
    assert case.task == "asqa" and len(case.pool) == 2


# ---------------------------------------------------------------------------------------- HotpotQA


def test_hotpotqa_official_and_ircot(tmp_path):
    (case,) = load_cases(FIXTURES["hotpotqa"](tmp_path), rank_by="given")
    assert case.id == "h1" and case.task == "hotpotqa" and case.units == (AnswerUnit("answer", ("The Beatles",)),)
    assert [(p.id, p.title, p.supporting) for p in case.pool] == [
        ("0", "Oasis (band)", True), ("1", "Blur", False), ("2", "The Beatles", True)]
    assert case.pool[0].text == "Oasis were an English rock band. They formed in 1991."
    (ir,) = load_cases(FIXTURES["hotpotqa-ircot"](tmp_path), rank_by="given")
    assert ir.id == "h2" and ir.units[0].aliases == ("Paris", "Paris, France")
    assert [(p.id, p.supporting) for p in ir.pool] == [("0", False), ("1", True)]  # the empty paragraph is dropped
    (ranked,) = load_cases(FIXTURES["hotpotqa-ircot"](tmp_path), rank_by="bm25", depth=1)
    assert [p.id for p in ranked.pool] == ["1"] and ranked.pool[0].rank == 1


# ---------------------------------------------------------------------------------------- recipes


def test_ingredient_normalisation():
    assert ingredient_names("500 gramos de harina para tamal") == ["harina para tamal"]
    assert ingredient_names("1 pizca de Sal y Pimienta") == ["sal", "pimienta"]
    assert ingredient_names("1 frasco de 32 onzas de salsa KETCHUP") == ["salsa ketchup"]
    assert ingredient_names("Pasas (opcional)") == ["pasas"]
    assert ingredient_names("Hojas para tamal") == ["hojas para tamal"]
    assert ingredient_names("caldo de pescado o agua, al gusto") == ["caldo de pescado"]
    assert ingredient_names("al gusto") == [] and ingredient_names("2 rojos") == []
    assert ingredient_key("Limones") == ingredient_key("limón") == "limon"
    assert ingredient_key("Azúcar blanco") == "azucar blanco"
    assert parse_list("['a', 'b, c']", "x") == ("a", "b, c") and parse_list("a, b ,", "x") == ("a", "b")
    assert split_flat_ingredients("1 rama de puerro 1 zanahoria ½ berenjena 1,5 kg de arroz sal") == (
        "1 rama de puerro", "1 zanahoria", "½ berenjena", "1,5 kg de arroz sal")
    with pytest.raises(AscpError, match="not a valid list literal"):
        parse_list("['a', __import__('os')]", "x")


def _only_query_1(tmp_path: Path) -> Path:
    out = tmp_path / "only1.out"
    out.write_text(RETRIEVED_OUT.split("recipe=bizcocho not found\n")[1].split("\n", 1)[1], encoding="utf-8")
    return out


def test_recipes_pool_gold_and_deeper_pools(tmp_path):
    path = recipe_files(tmp_path)
    first, second = load_cases(path)
    assert first.id == "recipe-0" and first.task == "recipes" and "tamales de dulce" in first.question
    assert [p.id for p in first.pool] == ["gachas-dulces", "pestinos"] and [p.rank for p in first.pool] == [1, 2]
    assert first.pool[0].title == "gachas dulces" and first.pool[0].text.startswith("Ingredientes: 100 gramos")
    # "azúcar blanco" contains the source's "azúcar": not new; "harina de trigo" is new beside "harina para
    # tamal" (neither contains the other); the two "canela" lines merge into one unit.
    assert [u.id for u in first.units] == ["harina de trigo", "canela", "aceite de oliva", "miel"]
    assert first.units[2].aliases == ("aceite de oliva",) and first.units[1].aliases == ("canela",)
    assert all(any(attests(p, u) for p in first.pool) for u in first.units)
    assert [u.id for u in second.units] == ["patata", "huevo"]  # "sal" is in the source
    deep, _ = load_cases(path, depth=4)
    # BM25 over the corpus: gachas dulces is already in the pool, paella shares no word with the query (score 0).
    assert [p.id for p in deep.pool] == ["gachas-dulces", "pestinos", "torrijas"]
    assert [p.rank for p in deep.pool] == [1, 2, 3] and deep.pool[2].score > 0
    assert [u.id for u in deep.units] == [u.id for u in first.units]  # corpus passages add no gold
    assert deep.pool[2].text.startswith("Ingredientes: 1 barra de pan; 1 rama de canela miel azúcar\nPasos:")
    assert [c.id for c in load_cases(path, limit=1)] == ["recipe-0"]
    (only_second,) = load_cases(_only_query_1(tmp_path), format="recipes")
    assert only_second.id == "recipe-1"  # queries absent from the retrieval file are skipped
    shallow, _ = load_cases(path, depth=1)
    assert [p.id for p in shallow.pool] == ["gachas-dulces"]
    assert [u.id for u in shallow.units] == ["harina de trigo", "canela"]


# ---------------------------------------------------------------------------------------- matching


def test_string_attestation_reuses_the_metric_rule():
    unit = AnswerUnit("u", ("U.S. Army", "1850"))
    titled = Passage("p", "It served in the war.", title="US Army")
    assert attests(titled, unit)  # title counts; punctuation normalised away
    assert not attests(Passage("q", "In 18501 nothing happened."), unit)  # token boundaries
    assert attests(Passage("r", "Founded in 1850."), unit)
    pool = (titled, Passage("q", "18501"), Passage("r", "Founded in 1850."))
    units = (unit, AnswerUnit("v", ("war",)))
    matrix = attestation_matrix(pool, units)
    assert matrix.tolist() == [[unit_recovered(u, p.full_text) for u in units] for p in pool]
    assert lexically_attestable(unit) and not lexically_attestable(AnswerUnit("y", ("Yes", "no.")))
    with pytest.raises(NotImplementedError):
        attests(titled, AnswerUnit("c", claim="A claim."))


def _tiny_nli(directory: Path, labels: dict[int, str], favoured: int) -> Path:
    """A random 1-layer BERT cross-encoder whose classifier always favours label `favoured`."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    directory.mkdir(parents=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "sky", "is", "blue", "air", "scatters", "light"]
    (directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    config = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=len(labels),
                        id2label=labels, label2id={v: k for k, v in labels.items()})
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.bias[favoured] = 3.0  # p(favoured) = e^3 / (e^3 + 2) = 0.909
    model.save_pretrained(directory)
    BertTokenizerFast(vocab_file=str(directory / "vocab.txt")).save_pretrained(directory)
    return directory


def test_nli_matcher_reads_the_entailment_label_from_the_config(tmp_path):
    pool = (Passage("a", "The sky is blue."), Passage("b", "Air scatters light."))
    claim = AnswerUnit("c", claim="The sky is blue.")
    yes = NLIMatcher(str(_tiny_nli(tmp_path / "yes", {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"}, 1)))
    assert yes.entailment_index == 1 and attests(pool[0], claim, yes)
    assert attestation_matrix(pool, (claim, AnswerUnit("s", ("light",))), yes).tolist() == [[True, False],
                                                                                          [True, True]]
    no = NLIMatcher(str(_tiny_nli(tmp_path / "no", {0: "entailment", 1: "neutral", 2: "contradiction"}, 2)))
    assert no.entailment_index == 0 and not attests(pool[0], claim, no)
    # NLIMatcher is the one matcher of ascp.metrics.nli: argmax = entailment, no probability threshold
    # (the rule every command shares; tests/test_nli.py checks density, run and calibrate agree)
    for labels in ({0: "LABEL_0", 1: "LABEL_1"}, {0: "entailment", 1: "entailment_2"}):
        with pytest.raises(AscpError, match="no single entailment label"):
            entailment_index(labels, len(labels))
    with pytest.raises(AscpError, match="is not a folder"):
        NLIMatcher(str(tmp_path / "missing"))


# ---------------------------------------------------------------------------------------- density


def _ranked(texts: list[str]) -> tuple[Passage, ...]:
    return tuple(Passage(f"p{i}", t, rank=i) for i, t in enumerate(texts, start=1))


def test_density_on_a_hand_computed_example():
    a = Case("a", "q", _ranked(["alpha", "alpha", "beta", "x", "y", "delta"]),
             (AnswerUnit("1", ("alpha",)), AnswerUnit("2", ("beta",)), AnswerUnit("3", ("delta",))), "t")
    b = Case("b", "q", _ranked(["z", "gamma", "w"]), (AnswerUnit("1", ("gamma",)),), "t")
    yes_no = Case("c", "q", _ranked(["yes"]), (AnswerUnit("1", ("yes",)),), "t")
    gold_only = Case("d", "q", (), (AnswerUnit("1", ("x",)),), "t")
    d = relevance_density([a, b, yes_no, gold_only], max_rank=6)
    assert (d.cases, d.used, d.skipped) == (4, 2, 2)
    assert d.rho == (0.5, 1.0, 0.5, 0.0, 0.0, 1.0) and d.support == (2, 2, 2, 1, 1, 1)
    assert d.bands["1-5"] == 0.5 and d.bands["6-10"] == 1.0 and math.isnan(d.bands["11+"])  # 1-5: 4 of 8
    # any: attesting passages a = ranks 1, 2, 3, 6 and b = rank 2 -> (3 + 1) / (4 + 1);
    # new: a's units are first attested at ranks 1, 3, 6 and b's at 2 -> (2 + 1) / (3 + 1).
    assert d.head5_any == pytest.approx(4 / 5) and d.head5_new == pytest.approx(3 / 4)
    assert d.head5_mass == pytest.approx(4 / 5)
    assert d.gold_units == 1.5 and d.attested_units == 2.0 and d.mean_pool == 4.5
    x, y = np.log([1, 2, 3, 6]), np.log([0.5, 1.0, 0.5, 1.0])
    assert d.slope == pytest.approx(np.polyfit(x, y, 1)[0])
    assert loglog_slope([i ** -0.5 for i in range(1, 31)]) == pytest.approx(-0.5)
    assert json.dumps(d.to_json())  # nan -> null, serialisable
    multi = relevance_density([Case("m", "q", _ranked(["alpha beta", "alpha"]),
                                    (AnswerUnit("1", ("alpha",)), AnswerUnit("2", ("beta",))), "t")], max_rank=5)
    assert multi.head5_mass == 1.0 and multi.head5_any == 1.0 and multi.attested_units == 2.0


def test_density_command_prints_one_row_per_task(tmp_path):


    out = tmp_path / "density.json"
    result = invoke_cli(["density", "--data", str(FIXTURES["hotpotqa-ircot"](tmp_path)),
                                      "--data", str(FIXTURES["qampari"](tmp_path)), "--rank-by", "given",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "hotpotqa" in result.output and "qampari" in result.output
    rows = json.loads(out.read_text())
    assert [r["task"] for r in rows] == ["hotpotqa", "qampari"] and rows[0]["rho"][:2] == [0.0, 1.0]
    bad = invoke_cli(["density", "--data", str(tmp_path / "nope.json")])
    assert bad.exit_code == 2 and "does not exist" in bad.output


# ---------------------------------------------------------------------------------------- real files


@pytest.mark.real_data
@pytest.mark.parametrize(("relative", "fmt"), [
    ("asqa/asqa_wikidpr_pools.json", "asqa"), ("asqa/asqa_dev_gold.json", "asqa"),
    ("alce/qampari_gold.json", "qampari"), ("alce/eli5_gold.json", "eli5"),
    ("hotpotqa/hotpotqa_dev_distractor_ircot.jsonl", "hotpotqa-ircot"),
    ("hotpotqa/hotpot_dev_distractor_official_53.json", "hotpotqa"),
    ("recipes/carriage_spanish_top5_naive.out", "recipes"), ("recipes/carriage_spanish_top5_carrot.out", "recipes"),
])
def test_real_files_are_detected(relative, fmt):
    assert detect_format(real(relative)) == fmt


@pytest.mark.real_data
def test_real_gold_only_alce_files():
    qampari, eli5 = real("alce/qampari_gold.json"), real("alce/eli5_gold.json")
    with pytest.raises(AscpError, match="gold-only files need retrieved docs"):
        load_cases(qampari, limit=2)
    q = load_cases(qampari, require_pool=False)
    assert len(q) == 1000 and all(c.pool == () and c.units for c in q)
    assert q[0].units[0].aliases == ("Heat",)
    e = load_cases(eli5, require_pool=False, limit=5)
    assert all(len(c.units) == 3 and all(u.claim and not u.aliases for u in c.units) for c in e)


@pytest.mark.real_data
def test_real_hotpotqa_files():
    ircot = load_cases(real("hotpotqa/hotpotqa_dev_distractor_ircot.jsonl"), rank_by="given")
    assert len(ircot) == 392 and all(sum(bool(p.supporting) for p in c.pool) == 2 for c in ircot)
    official = load_cases(real("hotpotqa/hotpot_dev_distractor_official_53.json"), rank_by="given")
    assert len(official) == 53 and official[0].id == "5a8b57f25542995d1e6f1371"
    assert all(any(p.supporting for p in c.pool) for c in official)


@pytest.mark.real_data
def test_real_recipes():
    cases = load_cases(real("recipes/carriage_spanish_top5_naive.out"), limit=20)
    assert len(cases) == 20 and all(1 <= len(c.pool) <= 5 and c.units for c in cases)
    assert all(any(attests(p, u) for p in c.pool) for c in cases for u in c.units)


def test_min_pool_filters_before_limit(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps({
        "id": f"c{n}", "question": "q?", "answers": [["x"]],
        "pool": [{"id": f"d{i}", "text": f"passage {i}"} for i in range(n)]}) + "\n" for n in (3, 5, 2, 7)),
        encoding="utf-8")
    assert [c.id for c in load_cases(path, format="jsonl", rank_by="given", min_pool=5)] == ["c5", "c7"]
    assert [c.id for c in load_cases(path, format="jsonl", rank_by="given", min_pool=5, limit=1)] == ["c5"]
    with pytest.raises(AscpError, match="min_pool must be at least 1"):
        load_cases(path, format="jsonl", min_pool=0)
