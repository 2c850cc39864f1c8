"""The fitted map from one-pass features to exact leave-one-out, one small JSON file per model.

A map is a linear function of one passage block's features (`ascp.lm.attention`):
its (layer, head) attention masses and its knockout score, onto that passage's exact `loo` score,
in nats per response token, so the probe's reading (normalised scores, tau(k), `used`) means what
it means for `loo`. It also carries the gated estimator's band (nats per response token: how far
an exact score may lie from the map's prediction), sized on the fit's development split.

The file is keyed by the model it was fitted on: the model's declared `fingerprint` and, because
that names a file by its path and modification time, a digest of the model's parameters (the
portable identity: the shipped map of the embedded model matches its weights on any machine).
Loading it for another model, another feature version or a damaged file is one sentence.

File layout (`FORMAT`, `VERSION`): {"format", "version", "feature", "model": {"name",
"fingerprint", "digest", "layers", "heads"}, "map": {"weights": [layers x heads], "knockout",
"intercept"},
"band" (nats per response token; null: infinite, every passage verified), "fit": {what it was
fitted on and how well it did}, "sha256": of the rest}.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ascp.errors import AscpError

if TYPE_CHECKING:
    from ascp.lm.protocol import LanguageModel

FORMAT = "ascp-attention-map"
VERSION = 2
FEATURE = "at2-response-rows+knockout-v2"
"""The features the map reads: per (layer, head), the attention mass (mean over the rows predicting
the response, sum over a block's tokens, softmax over all keys, the first token's sink included),
and the block's knockout score (nats per response token)."""
SHIPPED = Path(__file__).resolve().parent.parent / "resources" / "attention_maps"
"""Where the maps fitted for the embedded model ship."""


@dataclass(frozen=True)
class AttentionMap:
    """A fitted linear map for one model: raw(d) = features(d) . weights + knockout(d) * knockout_weight
    + intercept."""

    weights: np.ndarray  # shape (layers, heads)
    knockout_weight: float
    intercept: float
    band: float
    model_name: str
    fingerprint: str
    digest: str
    fit: Mapping[str, Any] = field(default_factory=dict)

    @property
    def layers(self) -> int:
        return int(self.weights.shape[0])

    @property
    def heads(self) -> int:
        return int(self.weights.shape[1])

    def predict(self, features: np.ndarray, knockout: np.ndarray) -> np.ndarray:
        """Predicted exact-LOO score per passage from attention features of shape (k, layers, heads)
        and knockout scores of shape (k,)."""
        features = np.asarray(features, dtype=np.float64)
        knockout = np.asarray(knockout, dtype=np.float64)
        if features.shape[1:] != self.weights.shape:
            raise AscpError(f"the attention map holds {self.layers} x {self.heads} (layer, head) weights but the model "
                            f"gives {features.shape[1]} x {features.shape[2]}; fit a map for this model "
                            "(ascp fit-probe).")
        return (features.reshape(len(features), -1) @ self.weights.reshape(-1) + knockout * self.knockout_weight
                + self.intercept)

    def with_band(self, band: float, fit: Mapping[str, Any] | None = None) -> AttentionMap:
        return AttentionMap(self.weights, self.knockout_weight, self.intercept, float(band), self.model_name,
                            self.fingerprint, self.digest, {**self.fit, **(fit or {})})

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "feature": FEATURE,
            "model": {"name": self.model_name, "fingerprint": self.fingerprint, "digest": self.digest,
                      "layers": self.layers, "heads": self.heads},
            "map": {"weights": self.weights.tolist(), "knockout": float(self.knockout_weight),
                    "intercept": float(self.intercept)},
            "band": float(self.band) if np.isfinite(self.band) else None,  # None: every passage verified
            "fit": dict(self.fit),
        }
        return {**body, "sha256": _digest(body)}

    def save(self, path: str | Path) -> Path:
        """Write the file all or nothing."""
        from ascp.jsonio import atomic_writer

        path = Path(path)
        with atomic_writer(path, "w") as handle:
            json.dump(self.payload(), handle, indent=1)
            handle.write("\n")
        return path

    def check_model(self, lm: LanguageModel, where: str) -> None:
        """One sentence unless this map was fitted on `lm` (same fingerprint, or same parameters)."""
        if self.fingerprint and getattr(lm, "fingerprint", None) == self.fingerprint:
            return
        if self.digest and model_digest(lm) == self.digest:
            return
        raise AscpError(f"{where} was fitted on model {self.model_name!r}, not on {getattr(lm, 'name', '?')!r} (its "
                        "weights differ), so its scores would not be exact-LOO scores of this model; fit one with "
                        "ascp fit-probe --model ... --out FILE and pass weights=FILE.")


def _digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def model_digest(lm: LanguageModel) -> str:
    """The portable identity of a model whose attention can be read (its class and a digest of every
    parameter, `AttentionModel.parameter_digest`); "" for any other model."""
    from ascp.lm.protocol import reads_attention

    return lm.parameter_digest if reads_attention(lm) else ""


def load_map(path: str | Path) -> AttentionMap:
    """Read a map file; a missing, damaged or foreign file, or another version, is one sentence naming it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AscpError(f"attention map {path} does not exist; fit one with ascp fit-probe --out {path}.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AscpError(f"attention map {path} is damaged (not readable JSON: {exc}); fit it again with "
                        "ascp fit-probe.") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise AscpError(f"{path} is not an ascp attention map (no format {FORMAT!r}); give a file ascp fit-probe "
                        "wrote.")
    if data.get("version") != VERSION or data.get("feature") != FEATURE:
        raise AscpError(f"attention map {path} is version {data.get('version')!r} of feature {data.get('feature')!r}; "
                        f"this ascp reads version {VERSION} of {FEATURE!r}: fit it again with ascp fit-probe.")
    body = {key: value for key, value in data.items() if key != "sha256"}
    if data.get("sha256") != _digest(body):
        raise AscpError(f"attention map {path} is damaged (its checksum does not match its content); fit it again "
                        "with ascp fit-probe.")
    try:
        model, fitted = data["model"], data["map"]
        weights = np.asarray(fitted["weights"], dtype=np.float64)
        if weights.shape != (int(model["layers"]), int(model["heads"])) or not np.isfinite(weights).all():
            raise ValueError("weights do not match the model's layers x heads")
        knockout, intercept = float(fitted["knockout"]), float(fitted["intercept"])
        band = float("inf") if data["band"] is None else float(data["band"])
        if not all(np.isfinite([knockout, intercept])) or not band >= 0:
            raise ValueError("the knockout weight, intercept or band is not a finite number")
        return AttentionMap(weights, knockout, intercept, band, str(model["name"]), str(model["fingerprint"]),
                            str(model["digest"]), dict(data.get("fit") or {}))
    except (KeyError, TypeError, ValueError) as exc:
        raise AscpError(f"attention map {path} is damaged ({exc}); fit it again with ascp fit-probe.") from None


def map_for(lm: LanguageModel, weights: str | None, estimator: str) -> AttentionMap:
    """The map an attention estimator reads: the file `weights`, or else the shipped map fitted on
    `lm`; either is checked against `lm` (one sentence when it belongs to another model)."""
    if weights:
        fitted = load_map(weights)
        fitted.check_model(lm, f"attention map {weights}")
        return fitted
    shipped = [load_map(p) for p in sorted(SHIPPED.glob("*.json"))] if SHIPPED.is_dir() else []
    fingerprint = getattr(lm, "fingerprint", None)
    for fitted in shipped:
        if fingerprint and fitted.fingerprint == fingerprint:
            return fitted
    if shipped:
        digest = model_digest(lm)
        for fitted in shipped:
            if digest and fitted.digest == digest:
                return fitted
    names = ", ".join(sorted({m.model_name for m in shipped})) or "none"
    raise AscpError(f"estimator {estimator!r}: no attention map ships for model {getattr(lm, 'name', '?')!r} (the "
                    f"shipped maps fit: {names}); fit one with ascp fit-probe --model ... --out FILE and pass "
                    "weights=FILE.")


__all__ = ["FEATURE", "FORMAT", "SHIPPED", "VERSION", "AttentionMap", "load_map", "map_for", "model_digest"]
