"""The scheduler contract: pick the k passages of round t from a case's ranked pool.

A scheduler is constructed once per (case, run) with the case's `PoolView` (precomputed
embeddings, relevance and facets) and asked once per round for a `Selection`. Feedback
policies read `history` (earlier rounds' contexts, normalised attributions, used passages and
responses); open-loop policies ignore it, which lets the loop batch their rounds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ascp.params import Param
from ascp.types import Case

EmbedFn = Callable[[Sequence[str]], np.ndarray]
"""texts -> unit-normalised embeddings, one row per text."""


@dataclass(frozen=True)
class Facets:
    """The induced facets of one pool (rows follow pool order)."""

    labels: np.ndarray  # (N,) own facet of each passage
    centroids: np.ndarray  # (Z, dim) unit-normalised
    W: np.ndarray  # (N, Z) coverage in [0, 1]
    pi: np.ndarray  # (Z,) importance, sums to 1
    gamma: float
    m_max: int

    @property
    def n_facets(self) -> int:
        return int(self.pi.shape[0])


@dataclass(frozen=True)
class RoundFeedback:
    """What the loop tells a scheduler after one round."""

    context: tuple[str, ...]
    normalized: dict[str, float]  # normalised probe scores a(d) of the context's passages
    used: tuple[str, ...]  # passages over the used threshold
    response: str


@dataclass(frozen=True)
class PoolView:
    """Per-case quantities every scheduler may read, computed once (pool order = rank order).

    embeddings: unit-normalised passage embeddings, shape (N, dim)
    query_embedding: unit-normalised question embedding, shape (dim,)
    relevance: r(d) in [0, 1] per passage (see schedulers/facets.py for its definition)
    facets: the induced facets (W, pi); None: induced on first use with the default settings
    embed_fn: the embedder that made `embeddings`, for policies that embed responses
        (carriage, ascp-similarity); None: those policies fall back or ask for it
    """

    case: Case
    embeddings: np.ndarray
    query_embedding: np.ndarray
    relevance: np.ndarray
    facets: Facets | None = None
    embed_fn: EmbedFn | None = None

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.case.pool]

    @cached_property
    def index(self) -> dict[str, int]:
        """Pool position of each passage id."""
        return {p.id: i for i, p in enumerate(self.case.pool)}

    @property
    def n(self) -> int:
        return len(self.case.pool)

    @cached_property
    def similarity(self) -> np.ndarray:
        """Passage-passage cosines E E^T, (N, N), computed once (`build_pool_view` computes it eagerly)."""
        e = np.asarray(self.embeddings, dtype=np.float64)
        return e @ e.T


@dataclass(frozen=True)
class Selection:
    """The passages of one round, in prompt order, plus optional extra prompt text.

    `earlier_outputs`: responses to list in the prompt (Carriage lists earlier outputs).
    """

    ids: tuple[str, ...]
    earlier_outputs: tuple[str, ...] = field(default_factory=tuple)


class Scheduler(ABC):
    """One policy. Subclasses set `name` (the family), `reads_feedback` and `params` (their
    options, declared once), and implement `select`. An instance's `name` is its canonical name,
    given by `make_scheduler` (e.g. `ascp(kappa=2)`)."""

    name: str = ""
    reads_feedback: bool = False
    params: tuple[Param, ...] = ()

    def __init__(self, view: PoolView, k: int, T: int, rng: np.random.Generator, name: str | None = None) -> None:
        self.name = name or type(self).name
        self.view = view
        self.k = k
        self.T = T
        self.rng = rng

    @abstractmethod
    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        """The context of `round` (1-based) given the feedback of rounds 1..round-1."""
