"""The typer app, the consoles, one-sentence error handling, progress bars and shared options."""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from ascp.errors import AscpError

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Evidence-aware portfolio RAG: probe, schedule, steer.",
)
err = Console(stderr=True)
# Tables are wide; when output is not a terminal (CI logs, pipes) give rich room for them.
out = Console() if sys.stdout.isatty() else Console(width=160)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn an `AscpError` (or a disk that refuses a write) into one sentence on stderr and exit code 2
    (no traceback)."""
    try:
        yield
    except AscpError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print("interrupted; nothing was written.")
        raise typer.Exit(130) from None
    except OSError as exc:  # a disk that refused a write outside ascp's own writers (they say more)
        from ascp.jsonio import disk_error, is_disk_error

        if not is_disk_error(exc):
            raise
        sentence = disk_error(exc, exc.filename or "an output file", "free space or choose another output folder, "
                              "then rerun")
        err.print(f"error: {sentence}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


class LineProgress:
    """Progress as plain lines, for a stderr that is not a terminal (a log file, CI, `nohup`), where
    rich draws no bar: one line per task at most every `every` seconds, and one when it completes."""

    def __init__(self, every: float = 30.0) -> None:
        self.every = every
        self.tasks: list[dict] = []

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: int) -> int:
        now = time.monotonic()
        self.tasks.append({"description": description, "total": total, "done": 0, "start": now, "shown": now})
        return len(self.tasks) - 1

    def advance(self, task: int | None, n: float = 1) -> None:
        if task is None:
            return
        t = self.tasks[task]
        t["done"] += n
        now = time.monotonic()
        finished = t["done"] >= t["total"]
        if not t.get("finished") and (finished or now - t["shown"] >= self.every):
            t["shown"], t["finished"] = now, finished
            err.print(f"{t['description']}: {t['done']:g}/{t['total']} ({now - t['start']:.0f} s)", markup=False,
                      highlight=False)


def _progress():
    """A rich bar on a terminal; plain lines (`LineProgress`) anywhere else."""
    if not err.is_terminal:
        return LineProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True,
    )


def _experiment_progress(label: str):
    """(bar, on_start, progress) for `run_experiment`: a rounds bar that starts once the store is open."""
    bar = _progress()
    state: dict = {}

    def on_start(rounds: int, done: int, total: int) -> None:
        err.print(f"{label}: {done}/{total} units done; {total - done} to run", markup=False, highlight=False)
        state["task"] = bar.add_task("rounds", total=rounds)

    def progress(rounds: int, units: int) -> None:
        if "task" in state:
            bar.advance(state["task"], rounds)

    return bar, on_start, progress



Input = Annotated[Path, typer.Option("--input", help="JSONL of requests: id, question, passages, response (or null).")]
EstimatorOpt = Annotated[str | None, typer.Option(
    "--estimator", help="The probe's estimator, with options as the schedulers take them, e.g. "
    "'contextcite(num_ablations=64)' (default: loo, the causal leave-one-out probe; `ascp estimators` lists every "
    "registered one with its options).")]
InstructionOpt = Annotated[str, typer.Option("--instruction", help="commit, integrate, commit+structured or "
                                           "integrate+structured (docs/experiments.md).")]
TemperatureOpt = Annotated[float, typer.Option("--temperature")]
TopPOpt = Annotated[float, typer.Option("--top-p")]
FreeTokensOpt = Annotated[int, typer.Option("--max-new-tokens", help="Generation limit (free protocol).")]
OutOpt = Annotated[Path, typer.Option("--out", help="Output JSONL, one result per request (written atomically).")]
ModelOpt = Annotated[
    str,
    typer.Option("--model", help="'default' (embedded SmolLM2-135M), a model folder, a .gguf file or a cached hub id."),
]
BackendOpt = Annotated[
    str,
    typer.Option("--backend", help="auto (transformers for the default model, measured faster; llama.cpp for "
                 "another GGUF file on the CPU where installed; else transformers), "
                 "hf (transformers) or llamacpp."),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")]


def _seed(meaning: str) -> Any:
    return typer.Option("--seed", help=meaning)


# `--seed`, with what the seed decides in each command.
AttributeSeedOpt = Annotated[int, _seed("Seed of free-protocol generation and of a seeded estimator's draws "
                                        "(ContextCite masks).")]
RunSeedOpt = Annotated[int, _seed("Run seed: each round samples from (seed, case, round), the same under every "
                                  "policy; also the schedulers' tie-breaks.")]
PoolsSeedOpt = Annotated[int, _seed("Seed of the padding draws and the context shuffle.")]
ValidationSeedOpt = Annotated[int, _seed("Seed of the pools, the fixed targets, free responses and ContextCite "
                                         "masks.")]
BootstrapSeedOpt = Annotated[int, _seed("Seed of the bootstrap replicates.")]
SimulateSeedOpt = Annotated[int, _seed("Seed of the consumer's use draws and the schedulers' tie-breaks.")]
DataOpt = Annotated[Path, typer.Option("--data", help="Cases: generic JSONL, an ALCE (ASQA, QAMPARI, ELI5), "
                                      "HotpotQA or recipe file (docs/data.md).")]
KOpt = Annotated[int, typer.Option("--k", help="Passages per context.")]
TOpt = Annotated[int, typer.Option("--T", help="Rounds (generations) per case.")]
TemplateOpt = Annotated[str | None, typer.Option(
    "--template", help="Your own prompt: a format string with {passages} then {question}, or @FILE holding one.")]
SystemOpt = Annotated[str, typer.Option("--system", help="A system message for the chat.")]
_EMBEDDER_HELP = ("default or minilm (the embedded all-MiniLM-L6-v2), mpnet (all-mpnet-base-v2, the paper's facet "
                  "embedder; run `make mpnet` first), hashing (tests only) or a sentence-transformers folder")
EmbedderOpt = Annotated[str, typer.Option(
    "--embedder", help=f"Sentence embedder of facets, dense re-ranking and diversity: {_EMBEDDER_HELP}.")]
EmbedderOverrideOpt = Annotated[str | None, typer.Option(
    "--embedder", help=f"Replace the spec's embedder (facets, dense re-ranking, diversity): {_EMBEDDER_HELP}.")]
ProxyEmbedderOpt = Annotated[str | None, typer.Option(
    "--embedder", help=f"Embedder of the estimators that embed text, qd-cosine and yd-cosine (default: default): "
    f"{_EMBEDDER_HELP}.")]


def read_template(value: str | None) -> str | None:
    """`--template`: the text itself, or the contents of @FILE."""
    if value is None or not value.startswith("@"):
        return value
    path = Path(value[1:])
    if not path.is_file():
        raise AscpError(f"--template {value}: {path} does not exist; give a template string or @FILE.")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AscpError(f"--template {value}: {path} is not UTF-8 text; save the template as UTF-8.") from None


RequestCacheOpt = Annotated[
    str | None,
    typer.Option("--request-cache", help="Remember every generation and scored prompt in this SQLite file (or "
                 "'default': $ASCP_HOME/requests.sqlite; 'off': none), so a rerun, an added condition or a "
                 "resumed run feeds no pass already fed (docs/request-cache.md)."),
]


PrefixCacheOpt = Annotated[
    float | None,
    typer.Option("--prefix-cache-mb", help="Megabytes of prompt keys and values kept for reuse in this run (a "
                 "prompt prefilled once for every round, policy and probe that shows it; 0: none; default "
                 "$ASCP_PREFIX_CACHE_MB or 2048)."),
]


def cache_summary(lm: LanguageModel | None, label: str | None = None) -> None:
    """What the request cache and the prefix store saved, one line each, after a run; `label` names
    the cache (default: its path)."""
    from ascp.lm.request_cache import savings

    for line in savings(lm, label) if lm is not None else []:
        err.print(line, markup=False, highlight=False)


ThresholdOpt = Annotated[
    float | None,
    typer.Option("--threshold", help="Fixed 'used' threshold on normalised scores, a number in [0, 1]; default "
                 "tau(k) = 0.555 k^-0.633."),
]




def _params_table(title: str, entries: list[tuple[str, list[tuple[str, str, str, str]]]]):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in ("name", "option", "type", "default", "meaning"):
        table.add_column(column)
    for name, params in entries:
        if not params:
            table.add_row(name, "", "", "", "(no options)")
        for i, (option, kind, default, meaning) in enumerate(params):
            table.add_row(name if i == 0 else "", option, kind, default, meaning)
    return table


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """ascp's own warnings as one line on stderr (`warning: ...`); others keep Python's format."""
    if filename.startswith(str(Path(__file__).resolve().parents[1])):
        err.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def main() -> None:
    """Console-script entry point (typer handles usage errors with exit code 2)."""
    warnings.showwarning = _one_line_warning
    app()
