"""`vanilla`: the top-k of the ranking, every round (the paper's fixed-context control)."""

from __future__ import annotations

from ascp.schedulers._common import selection
from ascp.schedulers.base import RoundFeedback, Scheduler, Selection


class Vanilla(Scheduler):
    """C_t = ranks 1..k for every t (the whole pool when k >= N); prompt order = rank order."""

    name = "vanilla"
    reads_feedback = False

    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        return selection(self.view, range(min(self.k, self.view.n)))
