"""Facet induction per pool, the relevance score r(d), and `PoolView` construction.

Definitions (docs/schedulers.md gives the reasoning from the paper):

- r(d) = 1 / log2(1 + i), i the 1-based rank of d in the pool (the DCG discount): in (0, 1],
  r = 1 at rank 1, monotone in the retriever's rank, independent of the embedder.
- Facets: Ward agglomerative clustering of the unit-normalised passage embeddings into
  Z = min(ceil(sqrt(N)), 20) clusters (Z <= N); deterministic (no random start). Facet ids are
  numbered by the rank of their best-ranked member (facet 0 holds rank 1).
- Centroid c_z: the normalised mean of facet z's members; s(d, z) = cos(e_d, c_z).
- W[d, z] (document-facet coverage, in [0, 1]): clip(s(d, z), 0, 1) for the facets d is a
  member of, else 0. d is a member of its own cluster's facet and of at most m_max - 1 further
  facets whose centroid cosine is at least gamma (the m_max largest such, ties to the lower
  facet id). Frozen values gamma = 0.6, m_max = 3 (Section 7.4).
- pi(z) (query-conditional facet importance): the facet's coverage-weighted relevance mass,
  pi(z) = sum_d W[d, z] r(d) / sum_{z'} sum_d W[d, z'] r(d); uniform if that mass is zero.

`build_pool_view` computes a case's view once per process: views are kept in one in-memory cache
keyed by (case id, pool ids, embedder, n_facets), so every policy, condition and seed of a run
(`ascp run`, `ascp demo`, the experiment executors, `ascp simulate`) shares the embeddings, facets
and similarities of a case. A hit is taken only when the cached view was built from an equal
`Case` by the same embedder object (the key holds the object itself, so two embedders never share
a view, even one created after the other was collected); the embedder is assumed deterministic, as
every ascp embedder is. `clear_pool_views()` empties the cache.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ascp.caching.lru import LRU
from ascp.schedulers.base import EmbedFn, Facets, PoolView
from ascp.types import Case

GAMMA = 0.6
M_MAX = 3
MAX_FACETS = 20


def rank_relevance(n: int) -> np.ndarray:
    """r(d) = 1 / log2(1 + rank), rank = pool position + 1."""
    return 1.0 / np.log2(np.arange(2, n + 2, dtype=np.float64))


def n_facets_rule(n: int, cap: int = MAX_FACETS) -> int:
    """Z = min(ceil(sqrt(N)), cap), and 0 for an empty pool."""
    return 0 if n <= 0 else min(math.ceil(math.sqrt(n)), cap, n)


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def cluster(embeddings: np.ndarray, n_facets: int) -> np.ndarray:
    """Ward clustering into `n_facets` labels, renumbered by first appearance in pool order."""
    n = embeddings.shape[0]
    if n_facets <= 1 or n <= 1:
        return np.zeros(n, dtype=np.int64)
    if n_facets >= n:
        raw = np.arange(n)
    else:
        from sklearn.cluster import AgglomerativeClustering

        raw = AgglomerativeClustering(n_clusters=n_facets, linkage="ward").fit_predict(embeddings)
    order: dict[int, int] = {}
    for lab in raw:
        order.setdefault(int(lab), len(order))
    return np.array([order[int(lab)] for lab in raw], dtype=np.int64)


def coverage(
    embeddings: np.ndarray, labels: np.ndarray, gamma: float = GAMMA, m_max: int = M_MAX
) -> tuple[np.ndarray, np.ndarray]:
    """(W, centroids): W[d, z] = clip(cos(e_d, c_z), 0, 1) on d's memberships (module docstring)."""
    n, z = embeddings.shape[0], int(labels.max()) + 1 if labels.size else 0
    onehot = np.zeros((n, z))
    onehot[np.arange(n), labels] = 1.0
    centroids = _unit(onehot.T @ embeddings)
    sim = np.clip(embeddings @ centroids.T, 0.0, 1.0)
    member = onehot.astype(bool)
    if m_max > 1 and z > 1:
        extra = np.where(member | (sim < gamma), -np.inf, sim)
        # the m_max - 1 best further facets per passage (stable: ties keep the lower facet id)
        top = np.argsort(-extra, axis=1, kind="stable")[:, : m_max - 1]
        rows = np.repeat(np.arange(n), top.shape[1])
        keep = np.isfinite(extra[rows, top.ravel()])
        member[rows[keep], top.ravel()[keep]] = True
    return np.where(member, sim, 0.0), centroids


def importance(W: np.ndarray, relevance: np.ndarray) -> np.ndarray:
    """pi(z) proportional to sum_d W[d, z] r(d); uniform when all zero."""
    mass = relevance @ W
    total = mass.sum()
    if W.shape[1] == 0:
        return mass
    return mass / total if total > 0 else np.full(W.shape[1], 1.0 / W.shape[1])


def induce_facets(
    embeddings: np.ndarray,
    relevance: np.ndarray,
    gamma: float = GAMMA,
    m_max: int = M_MAX,
    n_facets: int | None = None,
) -> Facets:
    """Cluster the pool, then derive W and pi (module docstring)."""
    e = np.asarray(embeddings, dtype=np.float64)
    z = n_facets_rule(e.shape[0]) if n_facets is None else max(0, min(int(n_facets), e.shape[0]))
    labels = cluster(e, z) if e.shape[0] else np.zeros(0, dtype=np.int64)
    W, centroids = coverage(e, labels, gamma, m_max)
    return Facets(labels, centroids, W, importance(W, np.asarray(relevance, dtype=np.float64)), gamma, m_max)


def facets_of(view: PoolView, gamma: float = GAMMA, m_max: int = M_MAX) -> Facets:
    """The view's facets when they were induced with (gamma, m_max), else freshly induced ones."""
    f = view.facets
    if f is not None and f.gamma == gamma and f.m_max == m_max:
        return f
    z = f.n_facets if f is not None else None
    return induce_facets(view.embeddings, view.relevance, gamma, m_max, z)


def pool_view_from_embeddings(
    case: Case,
    embeddings: np.ndarray,
    query_embedding: np.ndarray,
    embed_fn: EmbedFn | None = None,
    n_facets: int | None = None,
) -> PoolView:
    """A `PoolView` from precomputed unit-normalised embeddings (rows in pool order)."""
    e = np.asarray(embeddings, dtype=np.float64).reshape(len(case.pool), -1)
    q = np.asarray(query_embedding, dtype=np.float64).reshape(-1)
    r = rank_relevance(len(case.pool))
    view = PoolView(case, e, q, r, induce_facets(e, r, n_facets=n_facets), embed_fn)
    _ = view.similarity  # computed once here, so that no round pays for it
    return view


POOL_VIEW_CACHE_SIZE = 1024  # views kept per process, least recently used dropped first


@dataclass(frozen=True, eq=False)
class _SameObject:
    """A cache-key part equal only to the very same object; holding it, the key keeps the object
    alive, so its identity cannot pass to another (unlike `id(obj)`), and unhashable callables work."""

    obj: object

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SameObject) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


_VIEWS: LRU[tuple[_SameObject, str, tuple[str, ...], int | None], PoolView] = LRU(max_items=POOL_VIEW_CACHE_SIZE)
_VIEWS_LOCK = threading.Lock()  # the API may be called from threads; building happens outside it


def clear_pool_views() -> None:
    """Empty the per-process cache of `build_pool_view`."""
    with _VIEWS_LOCK:
        _VIEWS.clear()


def build_pool_view(case: Case, embed_fn: EmbedFn, n_facets: int | None = None) -> PoolView:
    """Embed the question and the pool in one batch call, then induce the facets; once per
    (case id, pool ids, embedder, n_facets) per process (module docstring).

    `embed_fn(texts)` returns unit-normalised rows (e.g. `ascp.embed.embedders.embed`); it is kept on the
    view for the policies that embed responses.
    """
    key = (_SameObject(embed_fn), case.id, tuple(p.id for p in case.pool), n_facets)
    with _VIEWS_LOCK:
        view = _VIEWS.peek(key)
        if view is not None and view.case == case:
            _VIEWS.get(key)  # now the most recent
            return view
    texts: Sequence[str] = [case.question, *(p.full_text for p in case.pool)]
    vectors = np.array(embed_fn(texts), dtype=np.float64)  # our copy: shared views are read-only
    view = pool_view_from_embeddings(case, vectors[1:], vectors[0], embed_fn, n_facets)
    for array in (vectors, view.embeddings, view.query_embedding, view.relevance, view.similarity):
        array.setflags(write=False)  # one policy cannot change what the next one reads
    with _VIEWS_LOCK:
        _VIEWS.max_items = POOL_VIEW_CACHE_SIZE  # read per call, so the bound can be changed at run time
        _VIEWS.put(key, view)
    return view
