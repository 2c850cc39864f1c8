"""The closed loop and what drives it: `portfolios` (schedule -> generate -> probe -> feed back for
T rounds), `runner` (one policy over cases, with per-case metrics), `simulate` with its model-free
`consumers`, and `runfolder` (the run folder, written and read in one place)."""

from ascp.loop.portfolios import LoopConfig, run_loop

__all__ = ["LoopConfig", "run_loop"]
