"""Declarative experiments: a YAML spec -> units (task x model x seed x case x condition) -> a
resumable run store -> Parquet. See docs/experiments.md.

    from ascp.experiments import load_spec, run_experiment, status, export
    run_experiment("grid.yaml", "runs/grid")        # rerun the same call to resume after a kill
"""

from ascp.experiments.condition import Condition
from ascp.experiments.plan import Plan, UnitKey, make_plan
from ascp.experiments.run import RunResult, export, load_records, prepare, run_experiment, status
from ascp.experiments.spec import ExperimentSpec, load_spec, parse_spec

__all__ = [
    "Condition",
    "ExperimentSpec",
    "Plan",
    "RunResult",
    "UnitKey",
    "export",
    "load_records",
    "load_spec",
    "make_plan",
    "parse_spec",
    "prepare",
    "run_experiment",
    "status",
]
