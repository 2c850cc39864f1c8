"""`ascp`: greedy maximisation of Eq. (6) each round, discounted by causal feedback (Section 6.2, A.1).

F_t(C) = sum_z pi(z) beta^{n_t(z)} [1 - prod_{d in C} (1 - v_t(d) W[d, z])]
         + lam sum_{d in C} r(d) / (k (1 + u_t(d))),        v_t(d) = beta_doc^{u_t(d)}.

W, pi, r: facets.py. u_t, n_t: feedback.py. Frozen values (Section 7.4): beta = 0.3,
beta_doc = 0.3, lam = 0.25, kappa = 0, gamma = 0.6, m_max = 3 (gamma and m_max shape W).
kappa > 0 pins the top-kappa ranked passages and greedily maximises the residual
F_t(K u S) - F_t(K) (Appendix A.1, the Table 15 guardrail). submodular=False ranks passages by
their singleton value F_t({d}) instead (the "- submodular selection" ablation).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ascp.embed.cache import EmbeddingCache
from ascp.errors import AscpError
from ascp.params import Param
from ascp.schedulers._common import selection
from ascp.schedulers.base import EmbedFn, PoolView, RoundFeedback, Scheduler, Selection
from ascp.schedulers.facets import GAMMA, M_MAX, facets_of
from ascp.schedulers.feedback import FEEDBACKS, SIGNALS, feedback_state, history_contexts

BETA = 0.3
BETA_DOC = 0.3
LAMBDA = 0.25
KAPPA = 0


def ascp_objective(
    C: Iterable[int],
    W: np.ndarray,
    pi: np.ndarray,
    r: np.ndarray,
    u: np.ndarray,
    n: np.ndarray,
    beta: float = BETA,
    beta_doc: float = BETA_DOC,
    lam: float = LAMBDA,
    k: int | None = None,
) -> float:
    """Eq. (6) for the set of pool positions C (duplicates count once); k defaults to |C| (1 if empty)."""
    idx = np.unique(np.asarray(list(C), dtype=np.int64))
    k = max(len(idx), 1) if k is None else k
    w = (beta_doc ** u[idx])[:, None] * W[idx]
    cover = float((pi * beta**n) @ (1.0 - np.prod(1.0 - w, axis=0)))
    return cover + lam * float(np.sum(r[idx] / (k * (1.0 + u[idx]))))


def ascp_greedy(
    W: np.ndarray,
    pi: np.ndarray,
    r: np.ndarray,
    u: np.ndarray,
    n: np.ndarray,
    k: int,
    beta: float = BETA,
    beta_doc: float = BETA_DOC,
    lam: float = LAMBDA,
    pinned: Sequence[int] = (),
    submodular: bool = True,
) -> list[int]:
    """min(k, N) positions: `pinned` first, then greedy picks of the largest marginal gain of Eq. (6).

    Marginal gain of d given C: sum_z c_z w_z(d) prod_{e in C} (1 - w_z(e)) + lam r(d) / (k (1 + u(d)))
    (Eq. 7), with c_z = pi(z) beta^{n(z)}, w_z(d) = v(d) W[d, z]. Ties go to the better rank.
    submodular=False: the rest by singleton value F({d}) (stable, better rank first).
    """
    N = W.shape[0]
    m = min(k, N)
    c = pi * beta**n
    w = (beta_doc**u)[:, None] * W
    modular = lam * r / (k * (1.0 + u))
    chosen = list(dict.fromkeys(int(i) for i in pinned))[:m]
    avail = np.ones(N, dtype=bool)
    avail[chosen] = False
    if not submodular:
        score = np.where(avail, w @ c + modular, -np.inf)
        return chosen + [int(i) for i in np.argsort(-score, kind="stable")[: m - len(chosen)]]
    remaining = np.prod(1.0 - w[chosen], axis=0) if chosen else np.ones(W.shape[1])
    while len(chosen) < m:
        gain = np.where(avail, w @ (c * remaining) + modular, -np.inf)
        j = int(np.argmax(gain))
        chosen.append(j)
        avail[j] = False
        remaining = remaining * (1.0 - w[j])
    return chosen


# The options of Eq. (6) itself, shared by every scheduler built on its objective (Ascp, AscpExposure).
EQ6_PARAMS: tuple[Param, ...] = (
    Param("beta", float, BETA, "facet discount per use: pi(z) * beta^n(z)"),
    Param("beta_doc", float, BETA_DOC, "passage discount per use: beta_doc^u(d)"),
    Param("lam", float, LAMBDA, "weight of relevance against facet coverage"),
    Param("gamma", float, GAMMA, "facet membership sharpness of W[d, z]"),
    Param("m_max", int, M_MAX, "most facets a passage may belong to"),
    Param("signal", str, "count", "how use is counted per facet", choices=SIGNALS),
)


class Ascp(Scheduler):
    """The feedback-driven submodular scheduler; see the module docstring and docs/schedulers.md."""

    name = "ascp"
    reads_feedback = True
    params = (
        *EQ6_PARAMS[:3],
        Param("kappa", int, KAPPA, "top-ranked passages pinned into every context"),
        *EQ6_PARAMS[3:5],
        Param("feedback", str, "probe", "where consumption comes from", choices=FEEDBACKS),
        EQ6_PARAMS[5],
        Param("submodular", bool, True, "the submodular facet term (false: modular)"),
        Param("sim_threshold", float, None, "response-passage cosine that counts as use (similarity feedback)",
              optional=True),
    )

    def __init__(
        self,
        view: PoolView,
        k: int,
        T: int,
        rng: np.random.Generator,
        beta: float = BETA,
        beta_doc: float = BETA_DOC,
        lam: float = LAMBDA,
        kappa: int = KAPPA,
        gamma: float = GAMMA,
        m_max: int = M_MAX,
        feedback: str = "probe",
        signal: str = "count",
        submodular: bool = True,
        sim_threshold: float | None = None,
        embed_fn: EmbedFn | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(view, k, T, rng, name)
        if feedback not in FEEDBACKS:
            raise AscpError(f"unknown ascp feedback {feedback!r}; choose one of {', '.join(FEEDBACKS)}.")
        if signal not in SIGNALS:
            raise AscpError(f"unknown ascp signal {signal!r}; choose one of {', '.join(SIGNALS)}.")
        if int(kappa) < 0 or int(m_max) < 1:
            raise AscpError(f"ascp needs kappa >= 0 and m_max >= 1, got kappa={kappa}, m_max={m_max}.")
        self.beta, self.beta_doc, self.lam = float(beta), float(beta_doc), float(lam)
        self.kappa, self.feedback, self.signal = int(kappa), feedback, signal
        self.submodular = bool(submodular)
        self.sim_threshold = sim_threshold
        self.facets = facets_of(view, float(gamma), int(m_max))
        self._embed: EmbeddingCache | None = None
        if feedback == "similarity":
            fn = embed_fn if embed_fn is not None else view.embed_fn
            if fn is None:
                raise AscpError(
                    "ascp with similarity feedback needs a response embedder; pass embed_fn=... or build the "
                    "PoolView with build_pool_view(case, embed_fn)."
                )
            self._embed = EmbeddingCache(fn)
        # open-loop variants read only their own earlier contexts, so they ignore `history`
        self.reads_feedback = feedback in ("probe", "similarity")
        self._own: list[list[int]] = []

    def _choose(self, contexts: Sequence[Sequence[int]], history: Sequence[RoundFeedback | None]) -> list[int]:
        u, n = feedback_state(
            self.view, self.facets.W, contexts, history, self.feedback, self.signal, self._embed, self.sim_threshold
        )
        pinned = range(min(self.kappa, self.view.n))
        return ascp_greedy(
            self.facets.W,
            self.facets.pi,
            self.view.relevance,
            u,
            n,
            self.k,
            self.beta,
            self.beta_doc,
            self.lam,
            pinned,
            self.submodular,
        )

    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        if self.reads_feedback:
            earlier = history[: round - 1]
            return selection(self.view, self._choose(history_contexts(self.view, earlier), earlier))
        while len(self._own) < round:
            self._own.append(self._choose(self._own, [None] * len(self._own)))
        return selection(self.view, self._own[round - 1])
