"""`carriage` / `carriage-narrow`: output-aware MMR, earlier outputs listed, sliding window.

Carriage (ref. 41 of the paper; Section 7.2) diversifies the pool with an MMR whose redundancy
term also counts similarity to the responses already generated, lists those responses in the
prompt, and slides a window down the diversified list across rounds.
"""

from __future__ import annotations

import numpy as np

from ascp.embed.cache import EmbeddingCache
from ascp.errors import AscpError
from ascp.params import Param
from ascp.schedulers._common import cyclic_window, positions, selection
from ascp.schedulers.base import EmbedFn, PoolView, RoundFeedback, Scheduler, Selection
from ascp.schedulers.mmr import MMR_LAMBDA, mmr_order

CARRIAGE_STRIDE = 1


class Carriage(Scheduler):
    """Round t: L_t = output-aware MMR ranking of the pool; C_t = L_t[(t-1) stride : (t-1) stride + k].

    Output-aware MMR: argmax_d lam cos(q, d) - (1 - lam) max(p_t(d), max_{s in S} cos(d, s)) with
    p_t(d) = max over earlier responses y of cos(e_y, e_d) (responses embedded with `embed_fn`, the
    option or the view's). Without an embedder p_t(d) falls back to passage level: the largest
    cosine between d and any passage offered in an earlier round (offered passages get p = 1).
    The window wraps around to the head of L_t when it runs past the end (as in rotate).
    `earlier_outputs` lists the earlier responses when `list_outputs` (default).
    Defaults: lam = 0.5, stride = 1 (carriage); carriage-narrow sets stride = 0, i.e. the window
    does not slide and only the output-aware penalty moves the context.
    """

    name = "carriage"
    reads_feedback = True
    params = (
        Param("lam", float, MMR_LAMBDA, "relevance weight against the output-aware redundancy penalty"),
        Param("stride", int, CARRIAGE_STRIDE, "pool positions the window slides per round (0: no sliding)"),
        Param("list_outputs", bool, True, "list earlier outputs in the prompt"),
    )

    def __init__(
        self,
        view: PoolView,
        k: int,
        T: int,
        rng: np.random.Generator,
        lam: float = MMR_LAMBDA,
        stride: int = CARRIAGE_STRIDE,
        list_outputs: bool = True,
        embed_fn: EmbedFn | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(view, k, T, rng, name)
        if int(stride) < 0:
            raise AscpError(f"carriage stride must be >= 0, got {stride}.")
        self.lam = float(lam)
        self.stride = int(stride)
        self.list_outputs = bool(list_outputs)
        fn = embed_fn if embed_fn is not None else view.embed_fn
        self._embed = EmbeddingCache(fn) if fn is not None else None
        self._rel = view.embeddings @ view.query_embedding

    def _penalty(self, history: tuple[RoundFeedback, ...]) -> np.ndarray | None:
        if not history:
            return None
        if self._embed is not None:
            outputs = self._embed([fb.response for fb in history])
            # one matrix-vector product per response: small GEMMs are slow under multi-threaded BLAS
            return np.max([self.view.embeddings @ y for y in outputs], axis=0)
        offered = sorted({i for fb in history for i in positions(self.view, fb.context)})
        return self.view.similarity[:, offered].max(axis=1) if offered else None

    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        n = self.view.n
        start = (round - 1) * self.stride
        depth = n if start + self.k > n else start + self.k
        order = mmr_order(self._rel, self.view.similarity, depth, self.lam, self._penalty(history))
        window = [order[i] for i in cyclic_window(len(order), start, self.k)] if order else []
        outputs = tuple(fb.response for fb in history) if self.list_outputs else ()
        return selection(self.view, window, outputs)
