"""Open extension points: registration, plugins, the contract test bases, docs/extending.md.

Every built-in scheduler and estimator passes the contract a plugin author runs
(`SchedulerContract`, `EstimatorContract`); so do a policy and an estimator defined here. The
registrations of each test are undone after it (the registries are process-wide), so the
parametrised built-in tests elsewhere never see them.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from conftest import invoke_cli

import ascp
import ascp.attribution as attribution
import ascp.plugins as plugins
import ascp.schedulers as schedulers
from ascp.attribution import ESTIMATOR_NAMES, Estimator, estimator_params, make_estimator, register_estimator
from ascp.attribution.base import ProbeInput, Scores
from ascp.embed.embedders import embedded_minilm_dir
from ascp.errors import AscpError
from ascp.params import Param
from ascp.reading import Reading
from ascp.schedulers import (
    SCHEDULER_NAMES,
    Scheduler,
    Selection,
    check_scheduler,
    make_scheduler,
    parse_scheduler,
    register_scheduler,
    scheduler_params,
)
from ascp.testing.estimators import EstimatorContract
from ascp.testing.schedulers import SchedulerContract, synthetic_view

ROOT = Path(__file__).resolve().parents[1]
BUILTIN_SCHEDULERS = tuple(SCHEDULER_NAMES)
BUILTIN_ESTIMATORS = tuple(ESTIMATOR_NAMES)
needs_minilm = pytest.mark.skipif(embedded_minilm_dir() is None,
                                  reason="pools are embedded with the embedded MiniLM, which is not installed")


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch):
    """Undo this test's registrations, plugin loads and plugin module imports afterwards."""
    monkeypatch.delenv(plugins.ENV_VAR, raising=False)
    saved = (schedulers.SCHEDULERS.registrations(), attribution.ESTIMATORS.registrations(), set(plugins._done),
             plugins._entry_points)
    modules = set(sys.modules)
    yield
    schedulers.SCHEDULERS.restore(saved[0])
    attribution.ESTIMATORS.restore(saved[1])
    plugins._done.clear()
    plugins._done.update(saved[2])
    plugins._entry_points = saved[3]
    for name in set(sys.modules) - modules:
        if name.startswith("user_plugin"):
            del sys.modules[name]


# ----- a user's own policy and estimator ----------------------------------------------------------
class Stride(Scheduler):
    """Every `step`-th pool position from a start that moves one window per round."""

    params = (Param("step", int, 2, "pool positions between two picks"),)

    def __init__(self, view, k, T, rng, name=None, step=2):
        super().__init__(view, k, T, rng, name=name)
        if step < 1:
            raise ValueError("step must be at least 1")
        self.step = step

    def select(self, round, history):
        n = self.view.n
        order = [((round - 1) * self.k + j * self.step) % n for j in range(n)]
        picked = list(dict.fromkeys(order))
        picked += [i for i in range(n) if i not in picked]  # a step sharing a factor with n
        return Selection(tuple(self.view.ids[i] for i in picked[: self.k]))


class SoloGain(Estimator):
    """Mean log-probability of the response with only this passage kept, minus with none kept."""

    params = (Param("relative", bool, True, "subtract the no-passage baseline"),)

    def __init__(self, relative=True):
        self.relative = relative

    def score(self, lm, item: ProbeInput) -> Scores:
        k = len(item.passages)
        prompts = [lm.encode(item.prompt.edited_text(item.prompt.deletion(j for j in range(k) if j != i)))
                   for i in range(k)]
        prompts.append(lm.encode(item.prompt.edited_text(item.prompt.deletion(range(k)))))
        scored = lm.score(prompts, item.response_ids)
        means = np.array([float(np.mean(lp)) for lp in scored.logprobs])
        values = means[:k] - (means[k] if self.relative else 0.0)
        return Scores(values=values, tokens_processed=scored.tokens_processed)


# ----- the contract, for every built-in and for the user's own -----------------------------------
class TestBuiltinSchedulers(SchedulerContract):
    @pytest.fixture(autouse=True, params=[*BUILTIN_SCHEDULERS, "ascp(kappa=1)", "mmr(lam=0.3)", "fixed"])
    def _scheduler(self, request: pytest.FixtureRequest) -> None:
        self.scheduler_name = request.param


class TestBuiltinEstimators(EstimatorContract):
    @pytest.fixture(autouse=True, params=BUILTIN_ESTIMATORS)
    def _estimator(self, request: pytest.FixtureRequest) -> None:
        self.estimator_name = request.param


class TestUserPolicy(SchedulerContract):
    @pytest.fixture(autouse=True, params=["stride", "stride(step=3)", "stride-wide"])
    def _registered(self, registry, request: pytest.FixtureRequest) -> None:
        register_scheduler("stride", Stride)
        register_scheduler("stride-wide", Stride, step=5)
        self.scheduler_name = request.param


class TestUserEstimator(EstimatorContract):
    estimator_name = "solo-gain"

    @pytest.fixture(autouse=True)
    def _registered(self, registry) -> None:
        register_estimator("solo-gain", SoloGain)


def test_a_broken_policy_fails_the_contract(registry) -> None:
    class Repeats(Stride):
        def select(self, round, history):
            return Selection((self.view.ids[0],) * self.k)

    register_scheduler("repeats", Repeats)
    contract = SchedulerContract()
    contract.scheduler_name = "repeats"
    with pytest.raises(AssertionError, match="repeated ids"):
        contract.test_k_distinct_pool_ids_every_round()


# ----- registration ----------------------------------------------------------------------------
def test_a_registered_policy_gets_names_options_and_listings(registry) -> None:
    assert "stride" not in SCHEDULER_NAMES
    assert register_scheduler("stride", Stride) is Stride
    assert "stride" in schedulers.SCHEDULER_NAMES and schedulers.SCHEDULER_NAMES[: len(BUILTIN_SCHEDULERS)] == \
        BUILTIN_SCHEDULERS
    assert parse_scheduler("stride(step=3)") == ("stride", {"step": 3})
    assert check_scheduler("stride( step = 3 )") == "stride(step=3)"
    view = synthetic_view(10)
    sched = make_scheduler("stride(step=3)", view, 2, 2, np.random.default_rng(0))
    assert sched.name == "stride(step=3)" and sched.step == 3
    with pytest.raises(AscpError, match=r"bad option value for scheduler 'stride': step='x' must be int"):
        check_scheduler("stride(step=x)")
    with pytest.raises(AscpError, match="unknown option.*valid options: step"):
        make_scheduler("stride", view, 2, 2, np.random.default_rng(0), alpha=0.3)
    with pytest.raises(AscpError, match="bad option value for scheduler 'stride"):
        make_scheduler("stride(step=0)", view, 2, 2, np.random.default_rng(0))

    @register_scheduler("stride-wide", step=5)
    class Wide(Stride):
        pass

    assert make_scheduler("stride-wide", view, 2, 2, np.random.default_rng(0)).step == 5
    assert [(p.name, p.default) for p in scheduler_params("stride-wide")] == [("step", 5)]
    result = invoke_cli(["policies"])
    assert result.exit_code == 0 and "stride-wide" in result.output and "pool positions" in result.output


def test_a_registered_estimator_gets_names_options_and_listings(registry) -> None:
    assert "solo-gain" not in ESTIMATOR_NAMES
    assert register_estimator("solo-gain", SoloGain) is SoloGain
    names = attribution.ESTIMATOR_NAMES
    assert names == (*BUILTIN_ESTIMATORS, "solo-gain")
    assert make_estimator("solo-gain", relative=False).relative is False
    assert [p.name for p in estimator_params("solo-gain")] == ["relative"]
    with pytest.raises(AscpError, match="bad option value for estimator 'solo-gain': relative=3"):
        make_estimator("solo-gain", relative=3)

    @register_estimator("solo-gain-abs")
    def absolute(relative: bool = False) -> SoloGain:
        return SoloGain(relative=False)

    absolute.params = ()  # type: ignore[attr-defined]
    assert make_estimator("solo-gain-abs").name == "solo-gain-abs"
    result = invoke_cli(["estimators"])
    assert result.exit_code == 0 and "solo-gain" in result.output and "no-passage baseline" in result.output


def one_sentence(err: pytest.ExceptionInfo[AscpError]) -> str:
    text = str(err.value)
    assert "\n" not in text and text.endswith("."), text
    return text


@pytest.mark.parametrize(("name", "cls", "message"), [
    ("vanilla", Stride, "'vanilla' is taken \\(by a built-in policy\\)"),
    ("fixed", Stride, "'fixed' is taken \\(an alias of 'vanilla'\\)"),
    ("my policy", Stride, "malformed scheduler name 'my policy'"),
    ("-x", Stride, "malformed scheduler name '-x'"),
    ("mine", int, "not a subclass of ascp.Scheduler"),
    ("mine", Scheduler, "does not implement select"),
    ("mine", SoloGain, "not a subclass of ascp.Scheduler"),
])
def test_bad_scheduler_registrations_are_one_sentence_errors(registry, name, cls, message) -> None:
    with pytest.raises(AscpError, match=message) as err:
        register_scheduler(name, cls)
    one_sentence(err)
    assert schedulers.SCHEDULERS.registered(name) is None


def test_scheduler_registrations_refuse_bad_presets_constructors_and_taken_names(registry) -> None:
    with pytest.raises(AscpError, match="unknown option.*alpha.*valid options: step") as err:
        register_scheduler("mine", Stride, alpha=0.3)
    one_sentence(err)

    class NoName(Scheduler):
        params = (Param("alpha", float, 0.5, "weight"),)

        def __init__(self, view, k, T, rng):
            super().__init__(view, k, T, rng)

        def select(self, round, history):
            return Selection(tuple(self.view.ids[: self.k]))

    with pytest.raises(AscpError, match="constructor must take") as err:
        register_scheduler("mine", NoName)
    one_sentence(err)
    register_scheduler("mine", Stride)
    register_scheduler("mine", Stride)  # the same class again: a no-op

    class Stride2(Stride):
        pass

    with pytest.raises(AscpError, match="'mine' is taken \\(by test_contracts.Stride\\)") as err:
        register_scheduler("mine", Stride2)
    one_sentence(err)
    with pytest.raises(AscpError, match="'mine' is taken"):
        register_scheduler("mine", Stride, step=4)  # the same class, other presets
    assert schedulers.SCHEDULERS.registered("mine") == (Stride, {})


@pytest.mark.parametrize(("name", "factory", "message"), [
    ("loo", SoloGain, "'loo' is taken \\(by a built-in estimator\\)"),
    ("my estimator", SoloGain, "malformed estimator name"),
    ("mine", int, "not a subclass of ascp.Estimator"),
    ("mine", Stride, "not a subclass of ascp.Estimator"),
    ("mine", Estimator, "does not implement score"),
    ("mine", 3, "give an ascp.Estimator subclass"),
])
def test_bad_estimator_registrations_are_one_sentence_errors(registry, name, factory, message) -> None:
    with pytest.raises(AscpError, match=message) as err:
        register_estimator(name, factory)
    one_sentence(err)
    assert attribution.ESTIMATORS.registered(name) is None


def test_estimator_registrations_refuse_other_classes_under_a_taken_name(registry) -> None:
    register_estimator("mine", SoloGain)
    register_estimator("mine", SoloGain)

    class Other(SoloGain):
        pass

    with pytest.raises(AscpError, match="'mine' is taken"):
        register_estimator("mine", Other)

    def not_an_estimator():
        return "nope"

    register_estimator("nope", not_an_estimator)
    with pytest.raises(AscpError, match="returned a str, not an ascp.Estimator"):
        make_estimator("nope")


# ----- plugins -----------------------------------------------------------------------------------
PLUGIN = '''
import ascp
from test_contracts_policy import Stride

ascp.register_scheduler("{name}", Stride)
'''


def write_plugin(folder: Path, module: str, name: str) -> None:
    (folder / f"{module}.py").write_text(PLUGIN.format(name=name), encoding="utf-8")


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path with the user's policy importable as `test_contracts_policy`."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "test_contracts_policy", sys.modules[__name__])
    return tmp_path


def test_ascp_plugins_modules_load_once_before_a_name_is_resolved(registry, plugin_path, monkeypatch) -> None:
    write_plugin(plugin_path, "user_plugin_a", "from-env-a")
    write_plugin(plugin_path, "user_plugin_b", "from-env-b")
    monkeypatch.setenv("ASCP_PLUGINS", " user_plugin_a, ,user_plugin_b ")
    assert "user_plugin_a" not in sys.modules  # nothing is loaded at import or registration time
    view = synthetic_view(8)
    assert make_scheduler("from-env-a", view, 2, 2, np.random.default_rng(0)).name == "from-env-a"
    assert check_scheduler("from-env-b") == "from-env-b"
    assert {"from-env-a", "from-env-b"} <= set(schedulers.SCHEDULER_NAMES)
    make_scheduler("from-env-b", view, 2, 2, np.random.default_rng(0))  # loaded once: no "taken" error


@pytest.mark.parametrize(("source", "message"), [
    ("", "plugin module 'user_plugin_missing' in ASCP_PLUGINS failed to load "
         "\\(ModuleNotFoundError: No module named 'user_plugin_missing'\\); make it importable"),
    ("raise RuntimeError('no GPU here.')", "plugin module 'user_plugin_missing' in ASCP_PLUGINS failed to load "
                                           "\\(RuntimeError: no GPU here\\)"),
    ("import ascp\nascp.register_scheduler('vanilla', ascp.Scheduler)",
     "plugin module 'user_plugin_missing' in ASCP_PLUGINS: cannot register"),
])
def test_a_plugin_that_fails_is_one_sentence_naming_it(registry, plugin_path, monkeypatch, source, message) -> None:
    if source:
        (plugin_path / "user_plugin_missing.py").write_text(source, encoding="utf-8")
    monkeypatch.setenv("ASCP_PLUGINS", "user_plugin_missing")
    for _ in range(2):  # reported again on the next resolution, not swallowed
        with pytest.raises(AscpError, match=message) as err:
            make_estimator("loo")
        one_sentence(err)
    result = invoke_cli(["policies"])
    assert result.exit_code == 2 and "user_plugin_missing" in result.output and "Traceback" not in result.output


def test_entry_points_name_a_module_or_a_callable_called_once(registry, plugin_path, monkeypatch) -> None:
    write_plugin(plugin_path, "user_plugin_ep", "from-entry-point")
    calls = []

    def register() -> None:
        calls.append(1)
        register_estimator("from-callable", SoloGain)

    monkeypatch.setitem(sys.modules, "user_plugin_hooks", type(sys)("user_plugin_hooks"))
    sys.modules["user_plugin_hooks"].register = register  # type: ignore[attr-defined]
    found = [metadata.EntryPoint("mod", "user_plugin_ep", plugins.ENTRY_POINT_GROUP),
             metadata.EntryPoint("hook", "user_plugin_hooks:register", plugins.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: found if group == "ascp.plugins" else [])
    plugins._entry_points = None
    assert "from-entry-point" in schedulers.SCHEDULER_NAMES
    assert make_estimator("from-callable").name == "from-callable"
    assert "from-callable" in attribution.ESTIMATOR_NAMES and calls == [1]

    broken = [metadata.EntryPoint("broken", "user_plugin_nowhere:register", plugins.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: broken)
    plugins._entry_points = None
    with pytest.raises(AscpError, match="plugin entry point 'broken' \\(user_plugin_nowhere:register\\)") as err:
        check_scheduler("vanilla")
    one_sentence(err)


# ----- docs/extending.md, run as written -----------------------------------------------------------
DOC = ROOT / "docs" / "extending.md"


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture
def doc_plugin(registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """docs/extending.md's plugin module written to tmp_path (on sys.path), as the user saves it."""
    (module,) = [b for b in doc_blocks("python") if b.startswith("# my_plugins.py")]
    (tmp_path / "my_plugins.py").write_text(module, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_plugins", None)


@needs_minilm
def test_the_documented_python_example_runs(doc_plugin, tiny_lm, monkeypatch) -> None:
    (usage,) = [b for b in doc_blocks("python") if "ascp.run_portfolio" in b]
    monkeypatch.setattr(ascp, "load_model", lambda *args, **kwargs: tiny_lm)  # the tiny model for "default"
    namespace: dict = {}
    exec(compile(usage, "docs/extending.md example", "exec"), namespace)  # noqa: S102 - the documented code
    pf, att = namespace["pf"], namespace["att"]
    assert pf.policy == "fresh(penalty=1.0)" and len(pf.rounds) == 3
    assert all(len(r.context) == 2 for r in pf.rounds)
    assert att.estimator == "overlap" and list(att.scores) == ["canberra", "parliament", "sydney", "melbourne"]
    assert att.scores["canberra"] == 1.0 and att.scores["sydney"] == 0.5 and att.used == ("canberra", "sydney")


def test_the_documented_contract_tests_pass(doc_plugin) -> None:
    (tests,) = [b for b in doc_blocks("python") if b.startswith("# test_my_plugins.py")]
    namespace: dict = {}
    exec(compile(tests, "docs/extending.md contract tests", "exec"), namespace)  # noqa: S102
    classes = [v for k, v in namespace.items() if k.startswith("Test") and isinstance(v, type)]
    assert len(classes) == 3
    for cls in classes:  # what pytest does with them: every test_* method on a fresh instance
        for method in sorted(m for m in dir(cls) if m.startswith("test_")):
            getattr(cls(), method)()


@needs_minilm
def test_the_documented_command_line_runs_with_ascp_plugins(doc_plugin, tiny_model_dir, monkeypatch) -> None:
    (cases,) = doc_blocks("json")
    (doc_plugin / "cases.jsonl").write_text(cases, encoding="utf-8")
    (shell,) = [b for b in doc_blocks("bash") if "ascp run" in b]
    lines = shell.splitlines()
    exports = [w.split("=", 1) for w in shlex.split(lines[0])[1:]]
    assert lines[0].startswith("export ") and dict(exports) == {"ASCP_PLUGINS": "my_plugins", "PYTHONPATH": "."}
    monkeypatch.setenv("ASCP_PLUGINS", "my_plugins")
    monkeypatch.chdir(doc_plugin)  # PYTHONPATH=. : the folder is on sys.path (doc_plugin)
    listed = invoke_cli(["policies"])
    assert listed.exit_code == 0 and "fresh-strict" in listed.output and "penalty" in listed.output
    listed = invoke_cli(["estimators"])
    assert listed.exit_code == 0 and "overlap" in listed.output
    (run_line,) = [line for line in lines if line.startswith("ascp run ")]
    args = shlex.split(run_line.split("#")[0])[1:]
    result = invoke_cli([*args, "--model", str(tiny_model_dir), "--max-new-tokens", "4"])
    assert result.exit_code == 0, result.output
    out = doc_plugin / "fresh-run"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["policy"] == "fresh(penalty=1.0)" and summary["config"]["estimator"] == "overlap"
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) == 3 and all(len(r["context"]) == 2 for r in rounds)


# ----- the package root ------------------------------------------------------------------------------
def test_every_public_name_of_the_package_resolves() -> None:
    assert set(ascp.__all__) <= set(dir(ascp))
    for name in ascp.__all__:
        assert getattr(ascp, name) is not None, name
    assert ascp.register_scheduler is schedulers.register_scheduler
    assert ascp.register_estimator is attribution.register_estimator
    assert ascp.Scheduler is Scheduler and ascp.Estimator is Estimator
    with pytest.raises(AttributeError):
        ascp.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):
        schedulers.NO_SUCH_NAME  # noqa: B018


# ----- facts declared by the estimator, read by every later stage ---------------------------------
def _same_facts(base: type[Estimator], name: str) -> type[Estimator]:
    """A user's copy of a built-in estimator class: the same declarations under another name."""
    return type(f"Copy{base.__name__}", (base,), {"name": name, "__module__": "user_estimators"})


def _unit_record(estimator: str, k: int, case_id: str, used_share: float) -> dict:
    from ascp.types import Round

    ids = tuple(f"d{i}" for i in range(k))
    n_used = max(1, round(used_share * k))
    scores = {pid: (1.0 / n_used if i < n_used else 0.0) for i, pid in enumerate(ids)}
    rnd = Round(round=1, context=ids, response="r", response_tokens=3,
                reading=Reading(scores, scores, ids[:n_used], None), seconds=0.1, prompt_tokens=50,
                generation_seconds=0.05)
    return {"task": "toy", "model": "m", "seed": 0, "case_id": case_id, "condition": f"rotate(k={k},T=1)",
            "policy": "rotate", "scheduler": "rotate", "k": k, "T": 1, "arm": None, "estimator": estimator,
            "instruction": "commit", "steer": None, "eta": None, "pr": 0.5, "rounds": [rnd.to_json()]}


@pytest.mark.parametrize("builtin", ["loo", "contextcite", "bm25", "yd-cosine"])
def test_a_registered_estimator_is_reported_rendered_and_tabled_as_the_builtin(registry, builtin) -> None:
    """Reports, views and the validation read an estimator's declarations, never its name: a copy of a
    built-in's class registered under another name is treated exactly as the built-in."""
    from ascp.attribution import estimator_facts
    from ascp.report.frame import unit_frame
    from ascp.report.tables import elasticity_groups
    from ascp.validation.analysis import query_proxies

    base = type(make_estimator(builtin))
    register_estimator("my-copy", _same_facts(base, "my-copy"))
    facts, copy = estimator_facts(builtin), estimator_facts("my-copy")
    assert {**facts.__dict__, "name": "my-copy"} == copy.__dict__
    assert copy.unit == facts.unit == ("nats/token" if facts.nats_per_token else "score")
    assert query_proxies([builtin, "my-copy"]) == ((builtin, "my-copy") if not facts.reads_response else ())

    def frame(name):
        records = [_unit_record(name, k, f"q{i}", share) for i in range(3) for k, share in ((2, 1.0), (4, 0.5))]
        return unit_frame(records, used_threshold=0.2)

    mine, theirs = frame("my-copy"), frame(builtin)
    cols = ["ecr_thresholded", "used_thresholded", "used_fraction", "used_fraction_invariant"]
    assert mine[cols].equals(theirs[cols])
    assert mine["ecr_thresholded"].notna().all() == facts.nats_per_token
    assert len(elasticity_groups(mine)) == len(elasticity_groups(theirs)) == (1 if facts.causal else 0)


def test_a_seeded_estimator_gets_its_seed_from_the_probe_settings(registry) -> None:
    """`needs_seed` (not the name contextcite) decides who receives the caller's seed."""
    from ascp.attribution.contextcite import ContextCite
    from ascp.attribution.probe import ProbeSettings

    register_estimator("my-cc", _same_facts(ContextCite, "my-cc"))
    assert ProbeSettings("my-cc").build(seed=7).seed == 7
    assert ProbeSettings("my-cc", {"seed": 3}).build(seed=7).seed == 3  # an explicit option wins
    assert ProbeSettings("contextcite").build(seed=7).seed == 7
    assert not hasattr(ProbeSettings("loo").build(seed=7), "seed")
    with pytest.raises(AscpError, match="unknown option"):
        ProbeSettings("loo", {"num_ablations": 3})
