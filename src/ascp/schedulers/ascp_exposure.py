"""`ascp-exposure`: Eq. (6) plus an exposure discount learnt online from the case's own rounds.

Eq. (6) (`ascp`) discounts only what the probe saw *used*; a passage that was offered and
ignored keeps its full value and is offered again. With a selective generator (one that never
uses a passage it ignored once) that stalls the loop on a few ignored passages. This policy
scales every passage's weight in Eq. (6) by rho^{x_t(d)}, x_t(d) = the number of earlier rounds
that offered d and did not use it:

    F_t(C) = sum_z pi(z) beta^{n_t(z)} [1 - prod_{d in C} (1 - s_t(d) v_t(d) W[d, z])]
             + lam sum_{d in C} s_t(d) r(d) / (k (1 + u_t(d))),     s_t(d) = rho_t^{x_t(d)},

which is Eq. (6) with W[d, :] and r(d) replaced by s_t(d) W[d, :] and s_t(d) r(d), so it is
monotone submodular for fixed (u, n, x, rho) and `ascp_greedy` maximises it. rho_t is how much
less likely a passage is to be used when offered again after being ignored than a fresh passage
is at its first offer, estimated from the case's rounds 1..t-1:

    p_fresh = (U_f + 1) / (S_f + 2),
    rho_t   = clip((U_r + m * prior * p_fresh) / ((S_r + m) * p_fresh), 0, 1),

S_f / U_f the offers / uses of passages offered for the first time, S_r / U_r those of passages
offered again after at least one ignored offer, `prior` the ratio assumed before any re-offer and
`strength` = m its weight in pseudo re-offers. A consumer that uses each offered passage
independently with one probability (the paper's toy model, Sec. 5.1) has ratio 1, so rho -> 1
and the policy is Eq. (6); one that never returns to an ignored passage (the oracle, a probe
whose reading of a passage does not change) has ratio 0, so ignored passages lose their value and
fresh ones are offered. `learn=False` keeps rho = prior (a fixed exposure discount).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ascp.errors import AscpError
from ascp.params import Param
from ascp.schedulers._common import positions, selection
from ascp.schedulers.ascp import BETA, BETA_DOC, EQ6_PARAMS, LAMBDA, ascp_greedy, ascp_objective
from ascp.schedulers.base import PoolView, RoundFeedback, Scheduler, Selection
from ascp.schedulers.facets import GAMMA, M_MAX, facets_of
from ascp.schedulers.feedback import SIGNALS, feedback_state

PRIOR = 0.75
STRENGTH = 4.0


@dataclass(frozen=True)
class ExposureState:
    """What the case's earlier rounds say about re-offers: ignored-offer counts x(d) and the counts
    behind rho (fresh offers S_f / uses U_f, re-offers after an ignored offer S_r / uses U_r)."""

    ignored: np.ndarray
    fresh_shown: int
    fresh_used: int
    again_shown: int
    again_used: int

    def rho(self, prior: float = PRIOR, strength: float = STRENGTH) -> float:
        """The estimated use ratio of an ignored passage offered again to a fresh one (in [0, 1])."""
        p_fresh = (self.fresh_used + 1.0) / (self.fresh_shown + 2.0)
        ratio = (self.again_used + strength * prior * p_fresh) / ((self.again_shown + strength) * p_fresh)
        return float(min(1.0, max(0.0, ratio)))


def exposure_state(n: int, contexts: Sequence[Sequence[int]], used: Sequence[Sequence[int]]) -> ExposureState:
    """Walk rounds in order: each offer of d is fresh (never offered before), a re-offer after an
    ignored offer (x(d) >= 1), or neither (offered before and used every time); then x(d) grows by
    one if the round offered d and did not use it."""
    ignored = np.zeros(n)
    shown = np.zeros(n, dtype=bool)
    fs = fu = ags = agu = 0
    for ctx, use in zip(contexts, used, strict=True):
        hit = set(use)
        for d in ctx:
            was_used = d in hit
            if not shown[d]:
                fs, fu = fs + 1, fu + was_used
            elif ignored[d] >= 1:
                ags, agu = ags + 1, agu + was_used
        for d in ctx:
            shown[d] = True
            if d not in hit:
                ignored[d] += 1
    return ExposureState(ignored, fs, fu, ags, agu)


def exposure_scale(state: ExposureState, rho: float) -> np.ndarray:
    """s(d) = rho^{x(d)} (1 for a passage never ignored, also when rho = 0)."""
    return np.where(state.ignored > 0, float(rho) ** state.ignored, 1.0)


def facet_scale(state: ExposureState, W: np.ndarray, rho: float) -> np.ndarray:
    """rho^{m(z)}, m(z) = sum_d x(d) W[d, z]: the coverage-weighted count of ignored offers of facet z."""
    m = state.ignored @ W
    return np.where(m > 0, float(rho) ** m, 1.0)


def exposure_objective(C: Sequence[int], W: np.ndarray, pi: np.ndarray, r: np.ndarray, u: np.ndarray,
                       n: np.ndarray, s: np.ndarray, beta: float = BETA, beta_doc: float = BETA_DOC,
                       lam: float = LAMBDA, k: int | None = None) -> float:
    """F_t(C) of the module docstring: Eq. (6) with W and r scaled per passage by s."""
    return ascp_objective(C, s[:, None] * W, pi, s * r, u, n, beta, beta_doc, lam, k)


def exposure_greedy(W: np.ndarray, pi: np.ndarray, r: np.ndarray, u: np.ndarray, n: np.ndarray, s: np.ndarray,
                    k: int, beta: float = BETA, beta_doc: float = BETA_DOC, lam: float = LAMBDA) -> list[int]:
    """Greedy maximisation of F_t (ties to the better rank), through Eq. (6)'s greedy."""
    return ascp_greedy(s[:, None] * W, pi, s * r, u, n, k, beta, beta_doc, lam)


class AscpExposure(Scheduler):
    """Eq. (6) with an online-estimated discount of offered-and-ignored passages (module docstring)."""

    name = "ascp-exposure"
    reads_feedback = True
    params = (
        *EQ6_PARAMS,
        Param("prior", float, PRIOR, "assumed use ratio of an ignored passage offered again (0: never, 1: as fresh)"),
        Param("strength", float, STRENGTH, "weight of the prior, in pseudo re-offers"),
        Param("learn", bool, True, "estimate the ratio from the case's rounds (false: keep the prior)"),
        Param("facet_exposure", bool, True, "ignored offers also discount their facets: pi(z) rho^{m(z)}"),
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
        gamma: float = GAMMA,
        m_max: int = M_MAX,
        signal: str = "count",
        prior: float = PRIOR,
        strength: float = STRENGTH,
        learn: bool = True,
        facet_exposure: bool = True,
        name: str | None = None,
    ) -> None:
        super().__init__(view, k, T, rng, name)
        if signal not in SIGNALS:
            raise AscpError(f"unknown ascp-exposure signal {signal!r}; choose one of {', '.join(SIGNALS)}.")
        if not 0.0 <= float(prior) <= 1.0 or float(strength) < 0.0 or int(m_max) < 1:
            raise AscpError(f"ascp-exposure needs prior in [0, 1], strength >= 0 and m_max >= 1, got prior={prior}, "
                            f"strength={strength}, m_max={m_max}.")
        self.beta, self.beta_doc, self.lam = float(beta), float(beta_doc), float(lam)
        self.signal, self.prior, self.strength, self.learn = signal, float(prior), float(strength), bool(learn)
        self.facet_exposure = bool(facet_exposure)
        self.facets = facets_of(view, float(gamma), int(m_max))
        self.last_rho = self.prior  # the rho of the latest select (for inspection)

    def select(self, round: int, history: tuple[RoundFeedback, ...]) -> Selection:
        earlier = history[: round - 1]
        contexts = [positions(self.view, fb.context) for fb in earlier]
        used = [positions(self.view, fb.used) for fb in earlier]
        u, n = feedback_state(self.view, self.facets.W, contexts, earlier, "probe", self.signal)
        state = exposure_state(self.view.n, contexts, used)
        rho = state.rho(self.prior, self.strength) if self.learn else self.prior
        self.last_rho = rho
        W = self.facets.W
        pi = self.facets.pi * facet_scale(state, W, rho) if self.facet_exposure else self.facets.pi
        chosen = exposure_greedy(W, pi, self.view.relevance, u, n, exposure_scale(state, rho), self.k, self.beta,
                                 self.beta_doc, self.lam)
        return selection(self.view, chosen)
