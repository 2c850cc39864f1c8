"""`rotate`: disjoint rank windows 1..k, k+1..2k, ... (Section 6.1), cycling when the pool runs out."""

from __future__ import annotations

from ascp.schedulers._common import cyclic_window, selection
from ascp.schedulers.base import RoundFeedback, Scheduler, Selection


class Rotate(Scheduler):
    """Round t shows pool positions (t-1)k, ..., (t-1)k + k - 1, taken modulo N.

    When the pool runs out the rotation wraps around to the head: a partial last window is
    topped up from ranks 1, 2, ... and later windows continue cyclically (so with N = 30, k = 24
    round 2 shows ranks 25..30 and 1..18). Each window is listed in rank order. k >= N shows the
    whole pool every round.
    """

    name = "rotate"
    reads_feedback = False

    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        window = cyclic_window(self.view.n, (round - 1) * self.k, self.k)
        return selection(self.view, sorted(window))
