"""Cross-cultural recipe adaptation (paper Appendix D.1): Latin-American query recipes, Spanish pools.

Files (`../shared/data/recipes/`; the loader is given the retrieved file, the others are found
beside it unless passed explicitly):
- retrieved (`carriage_spanish_top5_naive.out`, or `..._carrot.out`): one retrieved recipe a line,
  `query_idx \\t Nombre: \\t title \\t Ingredientes: \\t list \\t Pasos: \\t list`, best first;
  Carriage's log lines `recipe=... not found` are skipped;
- queries (`carriage_queries_latam.tsv`): `title \\t ingredients \\t steps`, line i = query_idx i;
- corpus (`recetasabuela_es.csv`: `Nombre, Ingredientes, Pasos`), read only for deeper pools.
A list field is a Python list literal (read with `ast.literal_eval`) or, in some rows, plain
comma-separated text (split at commas).

One case per query (task `recipes`, id `recipe-<query_idx>`); question = an instruction to adapt
the source recipe (title and ingredients; the steps are left out) to Spanish cuisine. Pool = the
retrieved recipes in retrieved order (passage: id = slug of the name, title = name, text =
"Ingredientes: ...\\nPasos: ..."). `depth` > the retrieved count extends the pool with BM25
(bm25s, Spanish stopwords, accent-free) hits from the corpus for the query's title +
ingredients, skipping recipes already in the pool (by slug) and hits with score 0, so a pool
can stay shorter than `depth`; `depth` below the retrieved count keeps the top `depth`.

Gold units (Appendix D.1: valid Spanish ingredients attested by the retrieved pool and absent
from the source recipe): every ingredient name (`ascp.data.ingredients`) of the retrieved
recipes (the retrieval file's, within depth) whose key neither occurs in nor contains any source
ingredient's key (as a contiguous token subsequence: "azúcar blanco" and "harina" are not new
beside a source "azúcar" and "harina para tamal"), merged by key; aliases = the normalised
surface forms seen (accented and accent-free); a unit is kept only when some retrieved passage
attests it (`ascp.metrics.attestation.attests`). Deeper corpus passages add no gold (taking every
ingredient of a 30-recipe pool gives ~146 units a query, each attested by the passage it came
from, so rho would be 1 by construction); they can only attest it, which is what their relevance
density measures. Corpus recipes list ingredients without separators; their passage text splits
them before each quantity. Queries absent from the retrieval file, or left with no gold
ingredient, are skipped.
"""

from __future__ import annotations

import ast
import csv
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascp.data.ingredients import ingredient_key, ingredient_names, strip_accents, surface_forms
from ascp.errors import AscpError
from ascp.metrics.attestation import attestation_matrix
from ascp.types import AnswerUnit, Case, Passage

QUERIES_FILE = "carriage_queries_latam.tsv"
CORPUS_FILE = "recetasabuela_es.csv"
_NOT_FOUND = re.compile(r"^recipe=.* not found$")
QUESTION = ("Adapta esta receta latinoamericana a la cocina española, usando ingredientes españoles. "
            "Receta: {title}. Ingredientes: {ingredients}.")


@dataclass(frozen=True)
class Recipe:
    title: str
    ingredients: tuple[str, ...]
    steps: tuple[str, ...]

    def passage(self) -> Passage:
        text = f"Ingredientes: {'; '.join(self.ingredients)}\nPasos: {' '.join(self.steps)}"
        return Passage(id=slug(self.title), title=self.title, text=text)


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", strip_accents(title.lower())).strip("-")[:60] or "receta"


def parse_list(value: str, where: str) -> tuple[str, ...]:
    """A list literal (safely, `ast.literal_eval`) or comma-separated text, as stripped strings."""
    value = value.strip()
    if value.startswith("["):
        try:
            items = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise AscpError(f"{where}: a list field is not a valid list literal ({exc.__class__.__name__}).") from exc
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            raise AscpError(f"{where}: a list field must be a list of strings.")
    else:
        items = value.split(",")
    return tuple(x.strip() for x in items if x.strip())


def read_queries(path: Path) -> list[Recipe]:
    out = []
    for n, line in enumerate(_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise AscpError(f"{path}:{n} has {len(fields)} tab-separated fields; expected title, ingredients, steps.")
        where = f"{path}:{n}"
        out.append(Recipe(fields[0].strip(), parse_list(fields[1], where), parse_list(fields[2], where)))
    return out


def read_retrieved(path: Path) -> dict[int, list[Recipe]]:
    out: dict[int, list[Recipe]] = {}
    for n, line in enumerate(_lines(path), start=1):
        if _NOT_FOUND.match(line.strip()):
            continue
        f = line.split("\t")
        if len(f) != 7 or not f[0].strip().isdigit() or (f[1], f[3], f[5]) != ("Nombre:", "Ingredientes:", "Pasos:"):
            raise AscpError(f"{path}:{n} is not 'query_idx, Nombre:, title, Ingredientes:, list, Pasos:, list' "
                            "separated by tabs; is this a Carriage retrieval (.out) file?")
        recipe = Recipe(f[2].strip(), parse_list(f[4], f"{path}:{n}"), parse_list(f[6], f"{path}:{n}"))
        out.setdefault(int(f[0]), []).append(recipe)
    return out


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise AscpError(f"recipe file {path} not found; the recipe loader needs it (see docs/data.md).")
    try:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise AscpError(f"cannot read {path} as UTF-8 text ({exc.__class__.__name__}).") from exc


_BEFORE_QUANTITY = re.compile(r"\s(?=(?:\d+(?:[.,/]\d+)?|[½¼¾⅓⅔]|\d+[½¼¾])\s)")


def split_flat_ingredients(text: str) -> tuple[str, ...]:
    """The corpus lists ingredients without separators: split before each quantity token
    ("1 rama de puerro 1 zanahoria ½ berenjena" -> three lines); an ingredient without a quantity
    stays joined to the line before it."""
    return tuple(x.strip() for x in _BEFORE_QUANTITY.split(" ".join(text.split())) if x.strip())


class CorpusIndex:
    """BM25 over the recipe corpus (name + ingredients), accent-free, Spanish stopwords."""

    def __init__(self, path: Path) -> None:
        import bm25s

        if not path.is_file():
            raise AscpError(f"recipe corpus {path} not found; deeper recipe pools (depth > 5) need it.")
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        if not rows or not {"Nombre", "Ingredientes", "Pasos"} <= set(rows[0]):
            raise AscpError(f"{path} must be a CSV with columns Nombre, Ingredientes, Pasos.")
        self.recipes = [Recipe(r["Nombre"].strip(), split_flat_ingredients(r["Ingredientes"]), (r["Pasos"].strip(),))
                        for r in rows]
        docs = [strip_accents(f"{r['Nombre']} {r['Ingredientes']}".lower()) for r in rows]
        self._bm25s = bm25s
        self.retriever = bm25s.BM25(k1=1.5, b=0.75)
        self.retriever.index(bm25s.tokenize(docs, stopwords="es", show_progress=False), show_progress=False)

    def search(self, query: str) -> list[tuple[Recipe, float]]:
        tokens = self._bm25s.tokenize([strip_accents(query.lower())], stopwords="es", show_progress=False,
                                      return_ids=False)[0]
        vocab = self.retriever.vocab_dict
        scores = np.asarray(self.retriever.get_scores([t for t in tokens if t in vocab]), dtype=np.float64)
        order = np.argsort(-scores, kind="stable")
        return [(self.recipes[i], float(scores[i])) for i in order if scores[i] > 0]


def gold_units(source: Recipe, recipes: list[Recipe], pool: tuple[Passage, ...]) -> tuple[AnswerUnit, ...]:
    """Appendix D.1 gold: ingredients of the pool's recipes absent from the source (module doc)."""
    source_keys = [f" {ingredient_key(n)} " for line in source.ingredients for n in ingredient_names(line)]
    forms: dict[str, dict[str, None]] = {}
    for recipe in recipes:
        for line in recipe.ingredients:
            for name in ingredient_names(line):
                key = f" {ingredient_key(name)} "
                if key.strip() and not any(key in s or s in key for s in source_keys):
                    forms.setdefault(key.strip(), {}).update(dict.fromkeys(surface_forms(name)))
    units = [AnswerUnit(id=key, aliases=tuple(f for f in aliases if f)) for key, aliases in forms.items()]
    units = [u for u in units if u.aliases]
    attested = attestation_matrix(pool, units).any(axis=0) if units else np.zeros(0, dtype=bool)
    return tuple(u for u, ok in zip(units, np.atleast_1d(attested).tolist(), strict=True) if ok)


def _add(pool: list[Passage], members: list[Recipe], recipe: Recipe, score: float | None) -> None:
    passage = recipe.passage()
    if all(p.id != passage.id for p in pool):  # the same recipe (by slug) enters a pool once
        pool.append(Passage(id=passage.id, title=passage.title, text=passage.text, score=score))
        members.append(recipe)


def load_recipes(path: Path, limit: int | None = None, require_pool: bool = True, depth: int | None = None,
                 queries: Path | None = None, corpus: Path | None = None) -> list[Case]:
    """Cases from a Carriage retrieval file; `queries`/`corpus` default to the files beside it.
    (`require_pool` is accepted for a uniform loader signature: every case here has a pool.)"""
    if depth is not None and depth < 1:
        raise AscpError(f"depth must be at least 1, got {depth}.")
    retrieved = read_retrieved(path)
    sources = read_queries(queries or path.parent / QUERIES_FILE)
    unknown = sorted(set(retrieved) - set(range(len(sources))))
    if unknown:
        raise AscpError(f"{path} retrieves for query_idx {unknown[0]}, which has no line in the queries file; "
                        "pass the queries file that belongs to this retrieval run.")
    index = None
    cases = []
    for idx, source in enumerate(sources):
        if idx not in retrieved:  # a retrieval file may cover only some queries (e.g. the CARROT run)
            continue
        pool: list[Passage] = []
        members: list[Recipe] = []
        for recipe in retrieved[idx][: depth or None]:
            _add(pool, members, recipe, None)
        n_retrieved = len(pool)
        if depth is not None and depth > len(pool):
            index = index or CorpusIndex(corpus or path.parent / CORPUS_FILE)
            for recipe, score in index.search(f"{source.title} {' '.join(source.ingredients)}"):
                if len(pool) >= depth:
                    break
                _add(pool, members, recipe, score)
        units = gold_units(source, members[:n_retrieved], tuple(pool[:n_retrieved]))
        if not units:
            continue
        ingredients = "; ".join(" ".join(line.split()) for line in source.ingredients)
        cases.append(Case(id=f"recipe-{idx}", question=QUESTION.format(title=source.title, ingredients=ingredients),
                          pool=tuple(pool), units=units, task="recipes"))
        if limit is not None and len(cases) >= limit:
            break
    return cases
