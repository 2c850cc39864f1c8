"""`ascp reproduce --preset NAME`: a packaged experiment spec, run into a store, then reported with the
paper's signs checked (`ascp.report.claims`).

Presets live in `ascp/resources/presets/<name>.yaml`; `{data_root}` in a preset is replaced by the
data folder (`--data-root`, else `$ASCP_DATA`, else `../shared/data`). The run store is the output
folder itself, so rerunning the same command resumes a killed run; the report goes to `OUT/report`.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from ascp.errors import AscpError
from ascp.report.claims import Claim


def _grid(policy: str, k: int, T: int) -> str:
    """A cpu-small grid cell (open-loop, probed with leave-one-out like every cell)."""
    return f"{policy}(k={k},T={T})"


PRESET_CLAIMS: dict[str, tuple[Claim, ...]] = {
    "cpu-small": (
        Claim("budget-matched: many narrow rounds beat one wide generation", _grid("rotate", 2, 12),
              _grid("rotate", 24, 1), "pr", "+0.144 [+0.119, +0.170] (Sec. 8.1)", +1),
        Claim("rotation beats the fixed context at k=2, T=12", _grid("rotate", 2, 12), _grid("vanilla", 2, 12),
              "pr", "+0.140 [+0.113, +0.169] (Table 4)", +1),
        Claim("rotation beats the fixed context at k=2, T=5", _grid("rotate", 2, 5), _grid("vanilla", 2, 5), "pr",
              "+0.090 [+0.068, +0.113] (Table 4)", +1),
        Claim("more generations help: T=12 over T=1 at k=2", _grid("rotate", 2, 12), _grid("rotate", 2, 1), "pr",
              "+0.229 / +0.289 on ASQA (Table 5)", +1),
        Claim("width helps a single generation a little: k=24 over k=2 at T=1", _grid("rotate", 24, 1),
              _grid("rotate", 2, 1), "pr", "+0.043 / +0.023 on ASQA, n.s. (Table 5)", +1),
        Claim("Ascp beats vanilla RAG (scheduler only)", "ascp(k=5,T=5)", "vanilla(k=5,T=5)", "pr",
              "+0.063, q < .001 (Table 11)", +1),
        Claim("Ascp beats MMR (scheduler only)", "ascp(k=5,T=5)", "mmr(k=5,T=5)", "pr",
              "+0.061, q < .001 (Table 11)", +1),
        Claim("Ascp and deep rotation reach the same recall", "ascp(k=5,T=5)", "rotate(k=5,T=5)", "pr",
              "-0.003, q = 0.717 (Table 11)", 0),
        Claim("Ascp offers fewer passages than deep rotation", "ascp(k=5,T=5)", "rotate(k=5,T=5)", "offered",
              "10.55 vs 25.00 (Sec. 8.4)", -1),
        Claim("Ascp has a higher evidence coverage rate than deep rotation", "ascp(k=5,T=5)", "rotate(k=5,T=5)",
              "ecr_thresholded", "+0.307 (Table 10, steered Ascp)", +1),
    ),
}
PRESETS = tuple(PRESET_CLAIMS)


def default_data_root() -> Path:
    env = os.environ.get("ASCP_DATA")
    return Path(env) if env else Path("../shared/data")


def preset_spec(name: str, data_root: Path, limit: int | None = None, model: str | None = None,
                backend: str | None = None, embedder: str | None = None, request_cache: str | None = None):
    """The preset's `ExperimentSpec`, its data paths resolved under `data_root` (checked to exist);
    `model` replaces the preset's generator (a model spec as `--model` takes), `backend` its backend,
    `embedder` its embedder (a name or folder as `--embedder` takes)."""
    import yaml

    from ascp.experiments.spec import parse_spec

    if name not in PRESET_CLAIMS:
        raise AscpError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}.")
    if embedder is not None:
        from ascp.embed.embedders import EMBEDDER_NAMES, check_embedder

        checked = check_embedder(embedder, "--embedder")  # names `--embedder` (not the spec field) when wrong
        embedder = embedder if embedder in EMBEDDER_NAMES else checked
    if not data_root.is_dir():
        raise AscpError(f"data folder {data_root} does not exist; pass --data-root (the folder holding asqa/), "
                        "or set ASCP_DATA.")
    text = (resources.files("ascp") / "resources" / "presets" / f"{name}.yaml").read_text(encoding="utf-8")
    text = text.replace("{data_root}", str(data_root.resolve()))
    raw = yaml.safe_load(text)
    if limit is not None:
        if limit < 1:
            raise AscpError(f"--limit must be at least 1, got {limit}.")
        for task in raw["tasks"]:
            task["limit"] = limit
    if model is not None:
        path = Path(model).expanduser()
        raw["models"] = [model if model == "default" or not path.exists()
                         else {"name": path.stem, "path": str(path.resolve())}]
    if backend is not None:
        raw["backend"] = backend
    if embedder is not None:
        raw["embedder"] = embedder
    if limit is not None or model is not None or backend is not None or embedder is not None:
        text = yaml.safe_dump(raw, sort_keys=False)
    return parse_spec(raw, base=data_root, text=text)


def reproduce(name: str, out: str | Path, data_root: str | Path | None = None, limit: int | None = None,
              progress=None, on_start=None, n_boot: int = 10_000, model: str | None = None,
              backend: str | None = None, embedder: str | None = None, request_cache: str | Path | None = None):
    """Run (or resume) the preset into `out`, then write `out/report` with the paper's signs checked.

    `request_cache`: the request cache file (`ascp.lm.request_cache`); None keeps it in the run store,
    `out/requests.sqlite`, so the preset's conditions compute each shared request once and a resumed
    or repeated run feeds nothing already fed; `"off"` runs without one."""
    from ascp.experiments.run import prepare, run_experiment
    from ascp.experiments.store import check_out_location
    from ascp.report import write_report

    check_out_location(Path(out))
    root = Path(data_root) if data_root is not None else default_data_root()
    spec = preset_spec(name, root, limit, model=model, backend=backend, embedder=embedder)
    plan = prepare(spec)
    if request_cache is None:
        request_cache = Path(out) / "requests.sqlite"
    result = run_experiment(spec, out, plan=plan, progress=progress, on_start=on_start, request_cache=request_cache)
    report = write_report(out, n_boot=n_boot, claims=PRESET_CLAIMS[name],
                          title=f"ascp reproduce --preset {name}")
    return result, report
