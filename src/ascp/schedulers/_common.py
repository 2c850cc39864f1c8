"""Small helpers shared by the policies: id mapping, cyclic windows, and the base of the static
facet-diversification policies (xQuAD, PM-2). Responses are embedded through the one embedding
cache, `ascp.embed.cache.EmbeddingCache`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ascp.schedulers.base import PoolView, RoundFeedback, Scheduler, Selection


def positions(view: PoolView, ids: Iterable[str]) -> list[int]:
    """Pool positions of `ids`, skipping ids that are not in the pool."""
    index = view.index
    return [index[i] for i in ids if i in index]


def selection(view: PoolView, chosen: Sequence[int], earlier_outputs: Sequence[str] = ()) -> Selection:
    ids = view.ids
    return Selection(tuple(ids[int(i)] for i in chosen), tuple(earlier_outputs))


def cyclic_window(n: int, start: int, k: int) -> list[int]:
    """Positions start, start+1, ..., start+k-1 modulo n (the whole range 0..n-1 when k >= n)."""
    if k >= n:
        return list(range(n))
    return [(start + j) % n for j in range(k)]


class StaticFacetOrder(Scheduler):
    """A policy that orders the pool once over the induced facets (`order(relevance, W, pi, k, lam)`)
    and offers the same k passages every round; reads no feedback. Subclasses set `name`, `order`
    and the default `lam`."""

    reads_feedback = False
    default_lam = 0.5

    @staticmethod
    def order(relevance: np.ndarray, W: np.ndarray, pi: np.ndarray, m: int, lam: float) -> list[int]:
        raise NotImplementedError

    def __init__(self, view: PoolView, k: int, T: int, rng: np.random.Generator, lam: float | None = None,
                 name: str | None = None) -> None:
        super().__init__(view, k, T, rng, name)
        self.lam = float(self.default_lam if lam is None else lam)
        self._chosen: list[int] | None = None

    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        if self._chosen is None:
            from ascp.schedulers.facets import facets_of

            f = facets_of(self.view)
            self._chosen = self.order(self.view.relevance, f.W, f.pi, self.k, self.lam)
        return selection(self.view, self._chosen)
