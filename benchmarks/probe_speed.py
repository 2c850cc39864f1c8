"""Probe speed: ascp's exact leave-one-out against naive LOO, Captum and ContextCite, in one run.

What is measured. Real ASQA questions from `../shared/data/asqa/asqa_wikidpr_pools.json`; for each
k in `--ks` the context is the first k passages of the item's `docs` list, in that order. The
embedded default model (SmolLM2-135M-Instruct) samples one response per prompt (temperature 0.7,
fixed seed); that response is then the fixed target every method scores, token for token:

* `naive`     - ascp `LeaveOneOut(reuse_prefix=False)`: k+1 full teacher-forced passes.
* `loo`       - ascp `LeaveOneOut()`: the same numbers through a shared-prefix KV cache.
* `captum`    - Captum `LLMAttribution(FeatureAblation)` over a `TextTemplateInput` whose features
                are the k passage blocks of the same prompt text (baseline "" = deletion), with
                Captum's defaults (token-by-token decoding of the target with a KV cache). Captum
                tokenises the filled-in template as one string, as ascp does (canonical
                tokenization), so it is an independent implementation of the same numbers.
* `contextcite` - `context_cite.ContextCiter` with a partitioner whose sources are the k passage
                blocks, a prompt template that renders the same chat prompt text, the fixed
                response, and its default 64 random ablations (LASSO surrogate).

Columns: requests; mean seconds per request (time.perf_counter around one method scoring one
request); ratio to naive seconds; tokens fed to the model / the exact-LOO token floor of the
canonical prompts (`exact_loo_floor_tokens`: each ablated prompt, tokenized as a whole, re-fed
after its longest common token prefix with the full prompt); max |score - naive score| in nats
per response token (Captum's sequence attribution is a summed log-prob drop, so it is divided by the number of response
tokens first; "n/a" for ContextCite, a different estimator). Peer token counts come from a
forward pre-hook on the decoder stack that adds up the non-padding input tokens of every call.

    python benchmarks/probe_speed.py --requests 2 [--ks 5,10] [--skip-peers | --peers captum] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")  # ContextCite draws a tqdm bar per request
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

# Known noise from the peers on a CPU-only machine: ContextCite's `torch.cuda.amp.autocast()`
# (deprecated, disabled without CUDA) and Captum's pretty-printing of output tokens.
warnings.filterwarnings("ignore", message=r".*torch\.cuda\.amp\.autocast.*", category=FutureWarning)
warnings.filterwarnings("ignore", message="CUDA is not available", category=UserWarning)
warnings.filterwarnings("ignore", message=r"\(i=\d+, idx=\d+\) input_ids", category=UserWarning)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_POOLS = REPO.parent / "shared" / "data" / "asqa" / "asqa_wikidpr_pools.json"
BENCH_INSTALL = "pip install -e '.[bench]'"
TARGET_FLOOR_SHARE = 1.15


# ----- bookkeeping -------------------------------------------------------------------------
@dataclass
class MethodStats:
    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # -1: not counted
    max_diff: float | None = None  # None: not comparable

    def add_diff(self, diff: float) -> None:
        self.max_diff = diff if self.max_diff is None else max(self.max_diff, diff)


class TokenCounter:
    """Counts the (non-padding) tokens fed to a decoder stack, whoever calls it and however."""

    def __init__(self, module: Any) -> None:
        self.tokens = 0
        self.calls = 0
        self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        mask = kwargs.get("attention_mask")
        if mask is not None and mask.dim() == 2 and mask.shape == ids.shape:
            self.tokens += int(mask.sum())
        else:
            self.tokens += int(ids.numel())
        self.calls += 1

    def reset(self) -> None:
        self.tokens = 0
        self.calls = 0

    def close(self) -> None:
        self._handle.remove()


# ----- data --------------------------------------------------------------------------------
def load_requests(pools: Path, n: int, k: int) -> list[Any]:
    """The first `n` items of the pool file (file order), each with its first k docs."""
    from ascp.types import AttributionRequest, Passage

    items = json.loads(pools.read_text())
    requests = []
    for item in items:
        docs = item["docs"][:k]
        if len(docs) < k:
            continue
        passages = tuple(
            Passage(id=str(d["id"]), text=d["text"], title=d.get("title") or "", score=d.get("score"), rank=r + 1)
            for r, d in enumerate(docs)
        )
        requests.append(AttributionRequest(id=str(item["id"]), question=item["question"], passages=passages))
        if len(requests) == n:
            break
    return requests


# ----- peers -------------------------------------------------------------------------------
def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


@contextlib.contextmanager
def captum_cache_shim(model: Any) -> Iterator[None]:
    """Make Captum's cached token-by-token decoding correct on transformers 5.x.

    Captum 0.9 drives `prepare_inputs_for_generation` the transformers-4 way (it passes a
    `cache_position` that v5 no longer reads), so on v5 the whole growing sequence is fed again
    on top of the KV cache: wrong log-probs and quadratic cost. The shim slices the input to the
    tokens the cache has not seen, which is what `generate` does through `next_sequence_length`.
    """
    original = model.prepare_inputs_for_generation
    if "next_sequence_length" not in inspect.signature(original).parameters:
        yield  # transformers 4.x: Captum's own path is right
        return

    def patched(input_ids: Any, next_sequence_length: int | None = None, cache: Any = None, **kwargs: Any):
        kwargs.pop("cache_position", None)
        if next_sequence_length is None and cache is not None and cache.get_seq_length() > 0:
            next_sequence_length = input_ids.shape[1] - cache.get_seq_length()
        return original(input_ids, next_sequence_length=next_sequence_length, cache=cache, **kwargs)

    model.prepare_inputs_for_generation = patched
    try:
        yield
    finally:
        del model.prepare_inputs_for_generation


def make_captum_runner(lm: Any, forward_in_tokens: bool) -> Callable[[Any], np.ndarray]:
    """Captum LLMAttribution(FeatureAblation); returns per-token log-prob drops per passage."""
    import torch
    from captum.attr import FeatureAblation, LLMAttribution, TextTemplateInput

    attribution = LLMAttribution(FeatureAblation(lm.model), lm.tokenizer)

    def run(item: Any) -> np.ndarray:
        texts = item.prompt.segment_texts
        blocks = list(texts[1:-1])
        template = _escape(texts[0]) + "{}" * len(blocks) + _escape(texts[-1])
        inp = TextTemplateInput(template, values=blocks, baselines=[""] * len(blocks))
        target = torch.tensor(item.response_ids, dtype=torch.long)
        with captum_cache_shim(lm.model):
            result = attribution.attribute(inp, target=target, forward_in_tokens=forward_in_tokens)
        # seq_attr = log p(y|C) - log p(y|C without block), summed over tokens: make it per token.
        return result.seq_attr.detach().cpu().double().numpy() / len(item.response_ids)

    return run


def make_contextcite_runner(lm: Any, num_ablations: int) -> Callable[[Any], np.ndarray]:
    """ContextCite over document-level sources, scoring the fixed response."""
    import nltk

    # context_cite.utils calls nltk.download("punkt_tab") at import; this machine is offline and
    # the benchmark never splits sentences (sources are whole passage blocks), so skip it.
    download, nltk.download = nltk.download, lambda *args, **kwargs: True
    try:
        from context_cite import ContextCiter
        from context_cite.context_partitioner import BaseContextPartitioner
    finally:
        nltk.download = download

    from ascp.lm.prompts import PromptTemplate

    class BlockPartitioner(BaseContextPartitioner):
        """Sources = the passage blocks; ablating a source deletes its block."""

        def __init__(self, blocks: Sequence[str]) -> None:
            super().__init__("".join(blocks))
            self.blocks = list(blocks)

        @property
        def num_sources(self) -> int:
            return len(self.blocks)

        def split_context(self) -> None:
            return None

        def get_source(self, index: int) -> str:
            return self.blocks[index]

        def get_context(self, mask: Any = None) -> str:
            keep = [True] * len(self.blocks) if mask is None else list(mask)
            return "".join(b for b, kept in zip(self.blocks, keep, strict=True) if kept)

    class FixedResponseCiter(ContextCiter):
        """Scores the given response token ids (ContextCite would re-tokenise prompt + response)."""

        fixed_response_ids: list[int] = []

        @property
        def _response_ids(self) -> list[int]:
            return self.fixed_response_ids

    template = PromptTemplate()
    cc_template = (
        _escape(template.instruction_text()) + "{context}"
        + _escape(template.question_format).replace("{{question}}", "{query}")
    )

    def run(item: Any) -> np.ndarray:
        partitioner = BlockPartitioner(item.prompt.segment_texts[1:-1])
        citer = FixedResponseCiter(
            lm.model, lm.tokenizer, partitioner.context, item.question.strip(),
            num_ablations=num_ablations, prompt_template=cc_template, partitioner=partitioner,
        )
        citer.fixed_response_ids = list(item.response_ids)
        _ids, prompt_text = citer._get_prompt_ids(return_prompt=True)
        if prompt_text != item.prompt.text:
            raise RuntimeError("ContextCite's rendered prompt differs from the ascp prompt text")
        citer._cache["output"] = prompt_text + item.response_text  # the documented fixed-response hook
        # get_attributions() over the whole response == the surrogate fit on all response tokens.
        weights, _bias = citer._get_attributions_for_ids_range(0, len(item.response_ids))
        return np.asarray(weights, dtype=np.float64)

    return run


# ----- main --------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2, help="ASQA items per k (default 2)")
    parser.add_argument("--ks", default="5,10", help="comma-separated context sizes (default 5,10)")
    parser.add_argument("--skip-peers", action="store_true", help="only naive vs ascp loo")
    parser.add_argument("--peers", default="captum,contextcite", help="peers to run (default captum,contextcite)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="sampled response length cap")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed for the fixed responses")
    parser.add_argument("--cc-ablations", type=int, default=64, help="ContextCite ablations (its default: 64)")
    parser.add_argument(
        "--captum-forward", choices=("tokens", "seq"), default="tokens",
        help="Captum target scoring: token-by-token decoding (its default) or one pass per variant",
    )
    parser.add_argument("--pools", type=Path, default=DEFAULT_POOLS, help="ASQA pools JSON")
    return parser.parse_args(argv)


def preflight(args: argparse.Namespace) -> str | None:
    if not args.pools.is_file():
        return (
            f"The real data file {args.pools} is absent (this benchmark needs ../shared/data next to the "
            "repository), so there is nothing to measure."
        )
    if not args.skip_peers:
        wanted = {"captum": "captum", "contextcite": "context_cite"}
        missing = [module for peer, module in wanted.items()
                   if peer in args.peers and importlib.util.find_spec(module) is None]
        if missing:
            return (
                f"The peer package(s) {', '.join(missing)} are not installed; run `{BENCH_INSTALL}` "
                "or pass --skip-peers to compare naive LOO with ascp loo only."
            )
    return None


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    problem = preflight(args)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    ks = [int(k) for k in args.ks.split(",") if k.strip()]

    import torch
    import transformers

    from ascp.attribution.loo import LeaveOneOut
    from ascp.attribution.probe import ProbeConfig, prepare_inputs
    from ascp.errors import AscpError
    from ascp.lm.hf import SamplingConfig
    from ascp.lm.resolve import load_language_model
    from ascp.lm.scoring import exact_loo_floor_tokens
    from ascp.types import AttributionRequest, Passage

    try:
        lm = load_language_model("default", device="cpu", backend="hf")  # measures transformers internals
    except AscpError as exc:
        print(f"Cannot load the default model: {exc}", file=sys.stderr)
        return 2

    methods: dict[str, Callable[[Any], np.ndarray]] = {}
    naive_est, loo_est = LeaveOneOut(reuse_prefix=False), LeaveOneOut()
    own_tokens: dict[str, int] = {}

    def ascp_runner(name: str, est: Any) -> Callable[[Any], np.ndarray]:
        def run(item: Any) -> np.ndarray:
            out = est.score(lm, item)
            own_tokens[name] = out.tokens_processed  # ascp counts its own tokens
            return out.values

        return run

    methods["naive"] = ascp_runner("naive", naive_est)
    methods["loo"] = ascp_runner("loo", loo_est)
    peer_versions = ""
    if not args.skip_peers:
        from importlib.metadata import version

        forward_in_tokens = args.captum_forward == "tokens"
        if "captum" in args.peers:
            methods["captum"] = make_captum_runner(lm, forward_in_tokens=forward_in_tokens)
        if "contextcite" in args.peers:
            methods["contextcite"] = make_contextcite_runner(lm, args.cc_ablations)
        peer_versions = "".join(f", {dist} {version(dist)}" for peer, dist in (("captum", "captum"),
                                ("contextcite", "context-cite")) if peer in args.peers)
    counter = TokenCounter(lm.model.get_decoder())

    print(
        f"# probe_speed: model=default ({lm.model.config.architectures[0]}, {lm.model.dtype}), "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), transformers {transformers.__version__}"
        f"{peer_versions}, python {platform.python_version()}",
        flush=True,
    )
    print(
        f"# data={args.pools} requests/k={args.requests} ks={ks} max_new_tokens={args.max_new_tokens} "
        f"seed={args.seed} captum_forward={args.captum_forward} cc_ablations={args.cc_ablations} "
        f"loadavg(1m) at start={os.getloadavg()[0]:.2f}",
        flush=True,
    )

    # Warm-up: every method once on a small synthetic request (not timed).
    config = ProbeConfig(sampling=SamplingConfig(temperature=0.7, max_new_tokens=args.max_new_tokens), seed=args.seed)
    warm_passages = tuple(
        Passage(id=f"w{i}", title=f"Title {i}", text=f"Warm-up passage number {i}.") for i in range(3)
    )
    warm_request = AttributionRequest(id="warmup", question="What is this?", passages=warm_passages)
    warm_config = ProbeConfig(sampling=SamplingConfig(temperature=0.0, max_new_tokens=4))
    warm = prepare_inputs(lm, [warm_request], warm_config)[0]
    for name, run in methods.items():
        if name == "contextcite":
            make_contextcite_runner(lm, 4)(warm)
        else:
            run(warm)

    stats: dict[tuple[str, int], MethodStats] = {}
    floors: dict[int, list[int]] = {}
    for k in ks:
        requests = load_requests(args.pools, args.requests, k)
        items = prepare_inputs(lm, requests, config)
        floors[k] = []
        for req, item in zip(requests, items, strict=True):
            floor = exact_loo_floor_tokens(lm, item.prompt, len(item.response_ids))
            floors[k].append(floor)
            reference: np.ndarray | None = None
            line = [f"k={k} id={req.id} prompt={item.prompt.num_tokens} tok response={len(item.response_ids)} tok"]
            for name, run in methods.items():
                counter.reset()
                start = time.perf_counter()
                scores = run(item)
                seconds = time.perf_counter() - start
                st = stats.setdefault((name, k), MethodStats())
                st.seconds.append(seconds)
                st.tokens.append(own_tokens.get(name, counter.tokens))
                if name == "naive":
                    reference = scores
                elif name != "contextcite" and reference is not None:
                    st.add_diff(float(np.max(np.abs(np.asarray(scores) - reference))))
                line.append(f"{name}={seconds:.2f}s")
            line.append(f"loadavg={os.getloadavg()[0]:.1f}")
            print("  ".join(line), flush=True)
    counter.close()

    header = ["method", "k", "requests", "s/request", "x naive", "tokens/floor", "max|diff| vs naive"]
    rows = []
    for k in ks:
        naive = stats[("naive", k)]
        for name in methods:
            st = stats[(name, k)]
            ratio_tokens = sum(st.tokens) / sum(floors[k]) if all(t >= 0 for t in st.tokens) else None
            diff = "0 (reference)" if name == "naive" else fmt(st.max_diff, ".2e")
            rows.append([
                name, str(k), str(len(st.seconds)), f"{np.mean(st.seconds):.2f}",
                f"{np.mean(st.seconds) / np.mean(naive.seconds):.3f}", fmt(ratio_tokens, ".3f"), diff,
            ])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print()
    for k in ks:
        naive, loo = stats[("naive", k)], stats[("loo", k)]
        share = np.mean(naive.seconds) * sum(floors[k]) / sum(naive.tokens)
        ratio = np.mean(loo.seconds) / share
        verdict = "met" if ratio <= TARGET_FLOOR_SHARE else "NOT met"
        print(
            f"floor share k={k}: naive s x floor tokens / naive tokens = {share:.2f} s; "
            f"loo s / floor share = {ratio:.3f} (target <= {TARGET_FLOOR_SHARE}: {verdict})"
        )
    print(f"# loadavg(1m) at end={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
