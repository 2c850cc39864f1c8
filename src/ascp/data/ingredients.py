"""Spanish ingredient lines -> ingredient names, for the recipe gold units (docs/data.md).

`ingredient_names(line)` turns one ingredient line ("2 cucharadas soperas de Azúcar (opcional)")
into zero or more names ("azúcar"):

1. lowercase (Unicode NFC); drop parenthesised text; cut at the first comma, semicolon, ':' or
   sentence end (". ") and at an alternative (" o ", "u otro"): "caldo de pescado o agua" -> "caldo de pescado";
2. split coordinated ingredients at " y " / " e ": "sal y pimienta" -> "sal", "pimienta";
3. per part, strip leading quantities (digits, fractions such as ½ 1/2 1,5, number words un,
   una, medio, dos, ...), then a unit word (gramos, g, cucharada(s), taza, lata, diente, pizca,
   ...) with its modifiers (sopera, postre, grande, ...) and a following "de"/"del", repeatedly
   ("1 frasco de 32 onzas de salsa" -> "salsa"); a unit word is stripped only after a quantity
   or before "de" ("hojas para tamal" stays whole); drop trailing one-letter size marks
   ("huevo L"); strip trailing fillers ("al gusto", "opcional", "cantidad necesaria", "para decorar", ...);
4. keep the part when it has a word of 3+ letters that is not a bare descriptor (rojo,
   picado, fresco, ...) or a unit/filler word: that is what "valid ingredient" means here.

Names keep their accents (they are the surface forms that aliases match against).
`ingredient_key(name)` is the identity used to merge surface forms and to test absence from the
source recipe: `normalize_answer`, accents stripped (NFKD, so "ñ" -> "n"), and a light plural
stem per token of 4+ letters (drop a final "s", then a final "e" after l, n, r, d, z or j, in
singular and plural alike: "limón", "limones" -> "limon"; "verde", "verdes" -> "verd";
"huevos" -> "huevo").
"""

from __future__ import annotations

import re
import unicodedata

from ascp.metrics.answers import normalize_answer


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_UNITS = _words("""
g gr grs gramo gramos kg kgs kilo kilos kilogramo kilogramos mg l lt lts litro litros ml mililitro mililitros
cl dl cc cucharada cucharadas cuchara cucharas cda cdas cdta cdtas cdita cditas cucharadita cucharaditas
cucharilla cucharillas taza tazas tz vaso vasos copa copas copita copitas chorro chorros chorrito chorritos
pizca pizcas puñado puñados pellizco unidad unidades ud uds pieza piezas trozo trozos trocito trocitos rodaja
rodajas rebanada rebanadas loncha lonchas lata latas bote botes frasco frascos paquete paquetes sobre sobres
sobrecito sobrecitos barra barras rama ramas ramita ramitas manojo manojos hoja hojas diente dientes cabeza
cabezas tallo tallos filete filetes lámina láminas gota gotas docena docenas bolsa bolsas tarro tarros cubito
cubitos pastilla pastillas onza onzas oz libra libras lb lbs porción porciones pedazo pedazos tableta tabletas
vasito vasitos tacita tacitas medida medidas
""")
_UNIT_MODIFIERS = _words("""
sopera soperas postre café cafe grande grandes pequeña pequeño pequeñas pequeños mediana mediano medianas medianos
colmada colmadas colmado rasa rasas raso generosa generoso generosas abundante s
""")
_QUANTITY_WORDS = _words("un una uno unos unas medio media dos tres cuatro cinco seis siete ocho nueve diez "
                         "once doce quince veinte y a o al aprox aproximadamente")
_DESCRIPTORS = _words("""
rojo roja rojos rojas verde verdes amarillo amarilla amarillos blanco blanca blancos blancas negro negra negros negras
grande grandes pequeño pequeña pequeños pequeñas mediano mediana medianos medianas fresco fresca frescos frescas seco
seca secos secas picado picada picados picadas molido molida molidos rallado rallada cocido cocida cocidos cocidas
maduro madura maduros maduras dulce dulces entero entera enteros enteras cortado cortada troceado troceada extra
virgen natural tierno tierna limpio limpia pelado pelada al gusto opcional cantidad necesaria para decorar servir
del las los con sin por otro otra otros otras tipo
""")
_FILLERS = re.compile(
    r"\s+(al gusto|a gusto|opcional|c/n|c/s|cantidad necesaria|cantidad suficiente|lo que admita|"
    r"para (decorar|servir|freír|freir|untar|espolvorear|pincelar|acompañar|el molde|la masa|rebozar))\b.*$"
)
_QUANTITY = re.compile(r"^[\d½¼¾⅓⅔⅛⅜⅝⅞.,/\-–x]+$")
_STEM_E = re.compile(r"(?<=[lnrdzj])e$")


def strip_accents(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))


def _strip_measure(tokens: list[str]) -> list[str]:
    """Drop one leading [quantity] [unit [modifiers] de]; the caller repeats until nothing changes."""
    i, had_quantity = 0, False
    while i < len(tokens) and (_QUANTITY.match(tokens[i]) or tokens[i] in _QUANTITY_WORDS):
        i, had_quantity = i + 1, True
    unit = tokens[i].removesuffix("(s)").rstrip(".") if i < len(tokens) else ""
    if unit in _UNITS and (had_quantity or (i + 1 < len(tokens) and tokens[i + 1] in ("de", "del"))):
        i += 1
        while i < len(tokens) and (tokens[i] in _UNIT_MODIFIERS or tokens[i] in ("de", "del")):
            i += 1
    return tokens[i:]


def _part_name(part: str) -> str | None:
    tokens = part.split()
    while (rest := _strip_measure(tokens)) != tokens:  # "1 frasco de 32 onzas de salsa" -> "salsa"
        tokens = rest
    while tokens and len(tokens[-1]) == 1:  # size letters: "huevo L"
        tokens = tokens[:-1]
    name = _FILLERS.sub("", " " + " ".join(tokens)).strip(" .-")
    words = re.findall(r"\w+", name)
    if not any(len(w) >= 3 and not w.isdigit() and w not in _DESCRIPTORS | _UNITS | _QUANTITY_WORDS for w in words):
        return None
    return name


def ingredient_names(line: str) -> list[str]:
    """The ingredient names in one ingredient line (see the module docstring); [] when none is valid."""
    text = unicodedata.normalize("NFC", line).lower()
    text = re.sub(r"\([^)]*\)?", " ", text)
    text = re.split(r"[,;:]|\.\s", text, maxsplit=1)[0]
    text = re.split(r"\s+(?:o|u)\s+", " ".join(text.split()), maxsplit=1)[0]
    names = []
    for part in re.split(r"\s+(?:y|e)\s+", text):
        name = _part_name(part.strip())
        if name and name not in names:
            names.append(name)
    return names


def ingredient_key(name: str) -> str:
    """Accent-free, plural-stemmed identity of an ingredient name (merges surface forms)."""
    tokens = strip_accents(normalize_answer(name)).split()
    stems = []
    for t in tokens:
        if len(t) > 3 and t.endswith("s"):
            t = t[:-1]
        stems.append(_STEM_E.sub("", t) if len(t) > 3 else t)
    return " ".join(stems)


def surface_forms(name: str) -> tuple[str, ...]:
    """Aliases for a name: its normalised form, and the accent-free variant when it differs."""
    norm = normalize_answer(name)
    return tuple(dict.fromkeys((norm, strip_accents(norm))))
