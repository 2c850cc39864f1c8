"""The `ascp` command line: the edge where files and flags become library calls.

Every error a user can cause is printed as one sentence on stderr with exit code 2; no
traceback, and no partial output file. One module per group of commands: `probe` (attribute,
pools, validate-probe, estimators), `runs` (run, demo, simulate, view, policies) and
`experiments` (experiment, density, report, reproduce), `serve` (the HTTP service);
`common` holds the app and the shared
options.
"""

# Each module registers its commands on `app`; imported in the order `ascp --help` lists them.
from ascp.cli import probe  # noqa: I001, F401
from ascp.cli import runs  # noqa: F401
from ascp.cli import experiments  # noqa: F401
from ascp.cli import judge  # noqa: F401
from ascp.cli import fastprobe  # noqa: F401
from ascp.cli import serve  # noqa: F401
from ascp.cli.common import app, main

__all__ = ["app", "main"]
