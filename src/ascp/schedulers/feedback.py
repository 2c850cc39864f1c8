"""Feedback state (u_t, n_t) of Eq. (6) from earlier rounds, for each evidence-use signal.

u_t(d): how often d was used in rounds 1..t-1 (binary counts, the paper's "live scheduling
matrix", Section 4.1); with signal="mass" the sum of its normalised attributions a_s(d) instead.
n_t(z): facet use, the sum over the same rounds and used passages of W[d, z] (with "mass":
sum_s sum_d a_s(d) W[d, z]).

Which passages count as used in a round:
- "probe": `RoundFeedback.used` (the probe's threshold decision; "mass" reads `normalized`);
- "similarity": a(d) = [cos(e_y, e_d)]_+ normalised over the context (the yd-cosine proxy),
  used when a(d) >= tau_free(|C|) = 0.555 |C|^-0.633, the probe's own operating rule;
- "uniform": every offered passage, a(d) = 1 / |C|;
- "none": nothing (u = n = 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ascp.embed.cache import EmbeddingCache
from ascp.reading import normalize, used_cut, used_mask
from ascp.schedulers._common import positions
from ascp.schedulers.base import PoolView, RoundFeedback

FEEDBACKS = ("probe", "similarity", "uniform", "none")
SIGNALS = ("count", "mass")


def round_use(
    view: PoolView,
    context: Sequence[int],
    fb: RoundFeedback | None,
    feedback: str,
    embedder: EmbeddingCache | None = None,
    sim_threshold: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(used mask over `context`, attribution mass a(d) over `context`) for one round."""
    m = len(context)
    if feedback == "none" or m == 0:
        return np.zeros(m, dtype=bool), np.zeros(m)
    if feedback == "uniform":
        return np.ones(m, dtype=bool), np.full(m, 1.0 / m)
    assert fb is not None
    if feedback == "probe":
        ids = view.ids
        used = set(fb.used)
        return (
            np.array([ids[i] in used for i in context], dtype=bool),
            np.array([max(0.0, float(fb.normalized.get(ids[i], 0.0))) for i in context]),
        )
    assert embedder is not None
    y = embedder([fb.response])[0]
    a = normalize(view.embeddings[list(context)] @ y)
    return used_mask(a, used_cut(m, sim_threshold)), a


def feedback_state(
    view: PoolView,
    W: np.ndarray,
    contexts: Sequence[Sequence[int]],
    history: Sequence[RoundFeedback | None],
    feedback: str,
    signal: str = "count",
    embedder: EmbeddingCache | None = None,
    sim_threshold: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(u, n) accumulated over earlier rounds (contexts[s] with feedback history[s])."""
    u = np.zeros(view.n)
    n = np.zeros(W.shape[1])
    for ctx, fb in zip(contexts, history, strict=True):
        used, mass = round_use(view, ctx, fb, feedback, embedder, sim_threshold)
        idx = np.asarray(ctx, dtype=np.int64)
        weight = used.astype(np.float64) if signal == "count" else mass
        np.add.at(u, idx, weight)
        n += weight @ W[idx] if idx.size else 0.0
    return u, n


def history_contexts(view: PoolView, history: Sequence[RoundFeedback]) -> list[list[int]]:
    return [positions(view, fb.context) for fb in history]
