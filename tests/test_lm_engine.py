"""The engine backend (`ascp.lm.engine`) against a real vLLM server, and its failure modes.

The vLLM tests start `.venv-vllm/bin/vllm serve` (built by `make vllm`; CI builds it) on the
embedded model's safetensors copy and compare the probe through the server with an independent
whole-string leave-one-out in transformers on the same weights. SGLang's API is exercised against
a stand-in server in this file that answers `/generate` from the tiny transformers model: it checks
ascp's side of the protocol (ids sent, log-probs read back), not SGLang itself, which does not run here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from ascp.errors import AscpError
from ascp.lm.resolve import embedded_gguf

ROOT = Path(__file__).resolve().parents[1]
VLLM = ROOT / ".venv-vllm" / "bin" / "vllm"
VLLM_READY = ROOT / ".venv-vllm" / ".ascp-installed"  # `make vllm` writes it last
QUESTION = "When was the Eiffel Tower built?"
PASSAGES = [
    {"id": "eiffel", "title": "Eiffel Tower", "text": "The Eiffel Tower was built from 1887 to 1889 in Paris."},
    {"id": "louvre", "title": "Louvre", "text": "The Louvre is the world's most-visited art museum."},
    {"id": "expo", "title": "Exposition Universelle", "text": "The 1889 World's Fair marked the centennial of the "
     "French Revolution; the tower was its entrance arch."},
]
RESPONSE = "The Eiffel Tower was built between 1887 and 1889."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


needs_vllm = pytest.mark.skipif(not VLLM_READY.exists() or embedded_gguf() is None,
                                reason="needs the vLLM server environment (`make vllm`) and the embedded model")


class VllmServer:
    """`vllm serve` on the embedded model's safetensors copy, on one port: started, killed, restarted."""

    def __init__(self, model_dir: str, port: int) -> None:
        self.model_dir = model_dir
        self.url = f"http://127.0.0.1:{port}"
        self.spec = f"vllm:{self.url}"
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(model_dir).parent / f"vllm-test-{port}.log"

    def start(self, port: int | None = None) -> None:
        """Start the server (on `port` instead of its own if given) and wait until it answers."""
        if port is not None:
            self.port, self.url, self.spec = port, f"http://127.0.0.1:{port}", f"vllm:http://127.0.0.1:{port}"
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        with open(self.log_path, "a") as log:
            # --no-enable-chunked-prefill: the CPU engine dies when it splits a seeded prompt (docs/engines.md)
            self.proc = subprocess.Popen([str(VLLM), "serve", self.model_dir, "--dtype", "float32", "--max-model-len",
                                          "2048", "--enforce-eager", "--no-enable-chunked-prefill", "--host",
                                          "127.0.0.1", "--port", str(self.port)],
                                         stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.time() + 420
        while True:
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=5):
                    return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    tail = self.log_path.read_text(errors="replace")[-3000:]
                    pytest.fail(f"vLLM did not start (exit {self.proc.poll()}):\n{tail}")
                time.sleep(2)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """`sig` to the server's whole process group (API server and engine core), then wait for it."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
        self.proc = None


@pytest.fixture(scope="module")
def vllm_server():
    """A vLLM server on the embedded model, started for this module (a test may kill and restart it)."""
    from ascp.lm.resolve import resolve_model_dir

    server = VllmServer(resolve_model_dir("default"), free_port())  # the safetensors copy of the embedded GGUF
    server.start()
    try:
        yield server
    finally:
        server.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def hf_reference(vllm_server):
    from ascp.lm.resolve import load_language_model

    return load_language_model(vllm_server.model_dir, backend="hf", device="cpu")


def naive_loo(lm, question: str, passages, response: str) -> np.ndarray:
    """Leave-one-out from whole strings: each prompt text tokenized on its own, scored from scratch."""
    from ascp.types import Passage

    items = [Passage(**p) for p in passages]
    resp = lm.encode(response)

    def mean_logp(ps) -> float:
        ids = list(lm.encode_prompt(question, ps).ids)
        return float(lm.score([ids], resp, reuse_prefix=False).logprobs[0].mean())

    full = mean_logp(items)
    return np.array([full - mean_logp(items[:i] + items[i + 1:]) for i in range(len(items))])


@pytest.mark.real_model
@needs_vllm
def test_loo_through_vllm_equals_a_naive_transformers_loo(vllm_server, hf_reference):
    import ascp

    engine = ascp.load_model(vllm_server.spec)
    assert engine.backend == "vllm" and engine.context_window == 2048
    att = ascp.attribute(QUESTION, PASSAGES, response=RESPONSE, model=engine)
    reference = naive_loo(hf_reference, QUESTION, PASSAGES, RESPONSE)
    got = np.array([att.scores[p["id"]] for p in PASSAGES])
    # fp32 on both sides; measured here: about 3e-6 nats per token (docs/engines.md)
    assert np.max(np.abs(got - reference)) < 1e-4, (got, reference)
    assert att.used == ascp.attribute(QUESTION, PASSAGES, response=RESPONSE, model=hf_reference).used


@pytest.mark.real_model
@needs_vllm
def test_generation_through_vllm_is_seeded_per_request(vllm_server):
    import ascp
    from ascp.lm.sampling import SamplingConfig

    engine = ascp.load_model(vllm_server.spec)
    ids = list(engine.encode_prompt(QUESTION, [ascp.Passage(**p) for p in PASSAGES]).ids)
    config = SamplingConfig(max_new_tokens=16)
    a, b, c = engine.generate([ids, ids, ids], config, [11, 11, 12])
    assert a.token_ids == b.token_ids and a.text == engine.decode(a.token_ids)
    assert 0 < len(a.token_ids) <= 16
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    assert engine.generate([ids], greedy, [0])[0].token_ids == engine.generate([ids], greedy, [5])[0].token_ids
    assert c.token_ids != a.token_ids or c.text == a.text  # another seed is another stream


@pytest.mark.real_model
@needs_vllm
def test_ascp_run_end_to_end_through_vllm_and_its_errors(vllm_server, tmp_path):
    spec = vllm_server.spec
    data = tmp_path / "cases.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": [{"id": "a1", "aliases": ["1889"]}],
                                "pool": PASSAGES}) + "\n")
    base = [sys.executable, "-m", "ascp.cli", "run", "--data", str(data), "--policy", "rotate", "--k", "1",
            "--T", "2", "--max-new-tokens", "12", "--embedder", "hashing"]
    done = subprocess.run([*base, "--model", spec, "--out", str(tmp_path / "run")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["config"]["backend"] == "vllm" and summary["config"]["model"] == spec
    rounds = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert [r["context"] for r in rounds] == [["eiffel"], ["louvre"]]
    # the server serves another model than asked; steering needs lockstep streams no engine API gives
    other = subprocess.run([*base, "--model", spec + "?model=Qwen/Qwen2.5-7B", "--out", str(tmp_path / "r2")],
                           capture_output=True, text=True)
    assert other.returncode == 2 and "not 'Qwen/Qwen2.5-7B'" in other.stderr and not (tmp_path / "r2").exists()
    steer = subprocess.run([*base, "--model", spec, "--steer", "--out", str(tmp_path / "r3")], capture_output=True,
                           text=True)
    assert steer.returncode == 2 and "cannot steer" in steer.stderr and "Traceback" not in steer.stderr
    assert not (tmp_path / "r3").exists()


def landmark_cases(n: int, passages: int) -> list[dict]:
    """`n` cases of `passages` passages of about 200 tokens each (2 of them make an ASQA-sized prompt),
    written for these tests: each passage states different years, so responses differ by context."""
    facts = ["was built between {y} and {z} for the World's Fair held in the city that year",
             "was designed by the engineering company of a man born in {y}, who also built bridges",
             "drew {y} visitors in its first year, and {z} people climbed its stairs in the opening week"]
    cases = []
    for i in range(n):
        pool = [{"id": f"c{i}p{j}", "title": f"Landmark {i}-{j}",
                 "text": f"Case {i}, record {j}. " + " ".join(f"Landmark {i}-{j} " + facts[(j + m) % 3].format(
                     y=1800 + 7 * i + m, z=1900 + 3 * j + m) + "." for m in range(7))} for j in range(passages)]
        cases.append({"id": f"case{i}", "question": f"When was landmark {i} built and who designed it?",
                      "answers": [[str(1800 + 7 * i)]], "pool": pool})
    return cases


@pytest.mark.real_model
@needs_vllm
def test_a_prompt_longer_than_the_servers_window_is_one_sentence(vllm_server, tmp_path):
    requests = tmp_path / "req.jsonl"
    long = [{"id": f"d{i}", "text": "word " * 400} for i in range(6)]  # about 2,400 tokens > 2,048
    requests.write_text(json.dumps({"id": "r1", "question": QUESTION, "passages": long, "response": "ok"}) + "\n")
    out = tmp_path / "scores.jsonl"
    done = subprocess.run([sys.executable, "-m", "ascp.cli", "attribute", "--input", str(requests), "--out", str(out),
                           "--model", vllm_server.spec], capture_output=True, text=True)
    assert done.returncode == 2 and "context window of 2048" in done.stderr and not out.exists()
    assert "Traceback" not in done.stderr


def experiment_spec(folder: Path, model: str, batch_cases: int = 6) -> Path:
    """6 units: 6 ASQA-sized cases (prompts of about 450 tokens) under rotate (k = 2, T = 1); with the
    6 cases in one chunk, their 6 seeded generations and then their 6 probes are in flight at once;
    48 new tokens. `batch_cases` = 3 stores the units in two chunks."""
    data = folder / "cases.jsonl"
    data.write_text("".join(json.dumps(case) + "\n" for case in landmark_cases(6, passages=2)))
    spec = folder / f"spec-{batch_cases}.json"
    spec.write_text(json.dumps({"name": "engine-load", "tasks": [{"name": "landmarks", "data": str(data)}],
                                "models": [{"name": "vllm", "path": model}], "seeds": [0],
                                "conditions": ["rotate(k=2,T=1)"], "embedder": "hashing",
                                "sampling": {"max_new_tokens": 48}, "batch_cases": batch_cases}))
    return spec


def store_rows(folder: Path, prompt_tokens: dict | None = None) -> dict:
    """(case, condition) -> each round's context, response and scores, from the store's units.jsonl;
    each round's prompt length goes into `prompt_tokens` (same key) when given."""
    rows = {}
    for line in (folder / "units.jsonl").read_text().splitlines():
        unit = json.loads(line)
        key = (unit["case_id"], unit["condition"])
        assert key not in rows, f"unit {key} stored twice"
        rows[key] = [(r["context"], r["response"], r["scores"]) for r in unit["rounds"]]
        if prompt_tokens is not None:
            prompt_tokens[key] = [r["prompt_tokens"] for r in unit["rounds"]]
    return rows


def experiment(spec: Path, out: Path) -> subprocess.Popen:
    """`ascp experiment run SPEC --out OUT` started in a subprocess."""
    return subprocess.Popen([sys.executable, "-m", "ascp.cli", "experiment", "run", str(spec), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def error_lines(stderr: str) -> list[str]:
    """The `error:` lines of a command's stderr (its progress lines aside)."""
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def finished_units(store: Path) -> int:
    """Whole lines in the store's units.jsonl so far (read while the run appends)."""
    units = store / "units.jsonl"
    return units.read_text().count("\n") if units.exists() else 0


def same_rows(a: list, b: list) -> bool:
    """Rounds equal: contexts and responses exactly (same seed, same text), scores within 1e-4 nats per
    token (the probe's batch neighbours on the server differ between runs)."""
    return len(a) == len(b) and all(
        (c1, r1) == (c2, r2) and s1.keys() == s2.keys() and all(abs(s1[d] - s2[d]) < 1e-4 for d in s1)
        for (c1, r1, s1), (c2, r2, s2) in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def reference_store(vllm_server, tmp_path_factory):
    """The rows of the 6-unit experiment run uninterrupted through the server (one chunk)."""
    folder = tmp_path_factory.mktemp("reference")
    done = experiment(experiment_spec(folder, vllm_server.spec), folder / "store")
    _, err = done.communicate(timeout=900)
    assert done.returncode == 0, err
    prompt_tokens: dict = {}
    rows = store_rows(folder / "store", prompt_tokens)
    # more prompt tokens in flight than one 2,048-token engine step: with chunked prefill the CPU engine
    # splits a seeded prompt across steps and dies rewinding its generator ("CPU Generator does not use
    # offset"); the fixture's flags (docs/engines.md) keep prompts whole
    assert sum(n for lengths in prompt_tokens.values() for n in lengths) > 2048, prompt_tokens
    return rows


@pytest.mark.real_model
@needs_vllm
def test_ascp_experiment_run_through_vllm_with_generations_and_probes_in_flight(reference_store):
    rows = reference_store
    assert len(rows) == 6
    for rounds in rows.values():
        assert len(rounds) == 1 and all(response and len(scores) == 2 for _, response, scores in rounds)
    assert len({rounds[0][1] for rounds in rows.values()}) == 6  # six cases, six different answers


class FaultyProxy:
    """An HTTP proxy in front of a server that cuts chosen POSTs' answers mid-body or answers them HTTP 500."""

    def __init__(self, upstream: str, port: int = 0) -> None:
        self.upstream = upstream
        self.faults: dict[int, str] = {}  # POST number (from 1) -> "drop" or "500"
        self.posts = 0
        self.injected: list[str] = []
        proxy, lock = self, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                return None

            def _relay(self, body: bytes | None) -> None:
                fault = None
                if body is not None:
                    with lock:
                        proxy.posts += 1
                        fault = proxy.faults.pop(proxy.posts, None)
                if fault == "500":
                    proxy.injected.append(fault)
                    self._answer(500, b'{"error": {"message": "Internal Server Error", "code": 500}}')
                    return
                req = urllib.request.Request(proxy.upstream + self.path, data=body, method=self.command,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=600) as resp:
                        status, data = resp.status, resp.read()
                except urllib.error.HTTPError as exc:
                    status, data = exc.code, exc.read()
                if fault == "drop":  # the whole answer's length announced, half of it sent, then closed
                    proxy.injected.append(fault)
                    self._answer(status, data, cut=len(data) // 2)
                    return
                self._answer(status, data)

            def _answer(self, status: int, data: bytes, cut: int | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data if cut is None else data[:cut])
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:
                self._relay(None)

            def do_POST(self) -> None:
                self._relay(self.rfile.read(int(self.headers["Content-Length"])))

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.real_model
@needs_vllm
def test_an_experiment_survives_the_server_killed_failing_and_cutting_answers(vllm_server, reference_store, tmp_path):
    """The real server is killed (SIGKILL) mid-experiment, restarted, then a proxy in front of it cuts one
    answer mid-body and answers another with HTTP 500: each stop is one sentence saying what happened,
    the store keeps every finished unit, and the resumed store equals an uninterrupted run's rows."""
    expected = reference_store
    store = tmp_path / "store"
    spec = experiment_spec(tmp_path, vllm_server.spec, batch_cases=3)  # the same 6 units in two chunks
    run = experiment(spec, store)
    deadline = time.time() + 600
    while finished_units(store) < 3:  # the first chunk is stored
        assert run.poll() is None and time.time() < deadline, run.communicate()[1]
        time.sleep(0.2)
    vllm_server.kill(signal.SIGKILL)
    try:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 2 and len(error_lines(err)) == 1, err
        assert f"the engine server at {vllm_server.url} went away during /v1/completions" in err, err
        assert "check that it serves" not in err and "Traceback" not in err
        kept = store_rows(store)  # every line whole, no unit twice
        assert 3 <= len(kept) < 6 and all(same_rows(expected[key], rounds) for key, rounds in kept.items())
    finally:  # back on another port: the proxy takes the store's URL, so the store resumes as the same spec
        url = vllm_server.url
        vllm_server.start(port=free_port())
    proxy = FaultyProxy(vllm_server.url, port=int(url.rsplit(":", 1)[1]))
    # POST 1 is the load check; then the second chunk's 3 generations (one cut mid-body, then retried),
    # then its probes (one answered 500)
    proxy.faults = {3: "drop", 7: "500"}
    failed = experiment(spec, store)
    _, err = failed.communicate(timeout=900)
    assert proxy.injected == ["drop", "500"], proxy.injected
    assert failed.returncode == 2 and len(error_lines(err)) == 1 and "Traceback" not in err, err
    assert f"the engine server at {url} failed on /v1/completions (HTTP 500: " in err, err
    assert len(store_rows(store)) >= len(kept)

    resumed = experiment(spec, store)
    _, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err
    got = store_rows(store)  # the cut answer was retried, never stored as a short response
    assert got.keys() == expected.keys() and all(same_rows(expected[key], got[key]) for key in expected)


# ----- failure modes without a real server ------------------------------------------------------

def test_engine_specs_parse_or_say_how_to_write_them():
    from ascp.lm.engine import EngineSpec, engine_of

    assert engine_of("vllm:http://h:8000") == "vllm" and engine_of("sglang:https://h") == "sglang"
    assert engine_of("default") is None and engine_of("vllm:/models/x") is None
    spec = EngineSpec.parse("vllm:http://h:8000/?tokenizer=/m/tok&model=served")
    assert (spec.url, spec.tokenizer, spec.model) == ("http://h:8000", "/m/tok", "served")
    with pytest.raises(AscpError, match="not the option 'foo'"):
        EngineSpec.parse("sglang:http://h:1?foo=1")


def test_an_unreachable_server_is_one_sentence_naming_it(tmp_path):
    requests = tmp_path / "req.jsonl"
    requests.write_text(json.dumps({"id": "r1", "question": QUESTION, "passages": PASSAGES,
                                    "response": RESPONSE}) + "\n")
    port = free_port()  # nothing listens there
    done = subprocess.run([sys.executable, "-m", "ascp.cli", "attribute", "--input", str(requests), "--out",
                           str(tmp_path / "s.jsonl"), "--model", f"vllm:http://127.0.0.1:{port}"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and f"http://127.0.0.1:{port} is unreachable" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "s.jsonl").exists()


class StandIn(BaseHTTPRequestHandler):
    """A local server speaking the engines' JSON: SGLang's /generate from the tiny model, or a vLLM
    that lists a model but returns no prompt log-probs."""

    lm = None
    folder = ""
    mode = "sglang"
    posts = 0  # POST requests answered (per server class)

    def log_message(self, *args) -> None:  # quiet
        return None

    def _send(self, obj, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send({"data": [{"id": self.folder, "root": self.folder, "max_model_len": 512}]})
        elif self.path == "/get_model_info":
            self._send({"model_path": self.folder, "tokenizer_path": self.folder})
        elif self.path == "/get_server_info":
            self._send({"context_length": 512})
        else:
            self._send({"error": "not found"}, 404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).posts += 1
        if self.mode == "vllm-no-logprobs":
            self._send({"choices": [{"index": i, "text": "x", "token_ids": [1]} for i, _ in enumerate(body["prompt"])]})
            return
        if self.mode == "vllm-engine-dead":  # vLLM's answer to every request once its engine core died
            self._send({"error": {"message": VLLM_ENGINE_DEAD, "type": "InternalServerError", "param": None,
                                  "code": 500}}, 500)
            return
        if self.mode == "vllm-drop":  # the connection drops mid-response: headers, half a body, closed
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "400")
            self.end_headers()
            self.wfile.write(b'{"choices": [{"index": 0, "text": "The Eif')
            self.wfile.flush()
            self.close_connection = True
            return
        if self.mode == "vllm-bad-request":
            self._send({"error": {"message": "The model `x` does not exist.", "code": 404}}, 404)
            return
        from ascp.lm.sampling import SamplingConfig

        ids, start = body["input_ids"], body.get("logprob_start_len", 0)
        if body.get("return_logprob"):
            lp = self.lm.score([ids[:start]], ids[start:], reuse_prefix=False).logprobs[0]
            self._send({"meta_info": {"input_token_logprobs": [[float(v), int(t), None]
                                                               for v, t in zip(lp, ids[start:], strict=True)]}})
            return
        params = body["sampling_params"]
        gen = self.lm.generate([ids], SamplingConfig(max_new_tokens=params["max_new_tokens"],
                                                     temperature=params["temperature"]), [params["sampling_seed"]])[0]
        self._send({"text": gen.text, "output_ids": list(gen.token_ids),
                    "meta_info": {"finish_reason": {"type": "stop" if gen.finished else "length"}}})


@pytest.fixture()
def stand_in(tiny_lm, tiny_model_dir):
    servers = []

    lock = threading.Lock()  # the tiny model serves one request at a time

    def start(mode: str) -> str:
        handler = type("Handler", (StandIn,), {"lm": tiny_lm, "folder": str(tiny_model_dir), "mode": mode})
        original = handler.do_POST

        def serialised(self) -> None:
            with lock:
                original(self)

        handler.do_POST = serialised
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        start.handlers.append(handler)
        return f"http://127.0.0.1:{server.server_address[1]}"

    start.handlers = []
    start.servers = servers
    yield start
    for server in servers:
        server.shutdown()


def test_sglang_protocol_scores_and_generates_like_the_model_it_serves(stand_in, tiny_lm):
    import ascp
    from ascp.lm.sampling import SamplingConfig
    from ascp.lm.sglang import SGLangModel

    engine = SGLangModel("sglang:" + stand_in("sglang"))
    assert engine.backend == "sglang" and engine.context_window == 512
    att = ascp.attribute(QUESTION, PASSAGES, response=RESPONSE, model=engine)
    ref = ascp.attribute(QUESTION, PASSAGES, response=RESPONSE, model=tiny_lm)
    assert att.scores == pytest.approx(ref.scores, abs=1e-6)
    ids = list(engine.encode_prompt(QUESTION, [ascp.Passage(**p) for p in PASSAGES]).ids)
    got = engine.generate([ids], SamplingConfig(max_new_tokens=6), [3])[0]
    assert got.token_ids == tiny_lm.generate([ids], SamplingConfig(max_new_tokens=6), [3])[0].token_ids


def test_a_server_without_prompt_logprobs_is_refused_at_load(stand_in):
    from ascp.lm.vllm import VLLMModel

    with pytest.raises(AscpError, match="returned no prompt log-probs") as info:
        VLLMModel("vllm:" + stand_in("vllm-no-logprobs"))
    assert "\n" not in str(info.value)


VLLM_ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def test_a_dead_engine_or_a_dropped_connection_says_so_not_check_the_model(stand_in):
    """vLLM answers HTTP 500 with EngineDeadError's message once its engine core died, and a server
    that goes away drops the connection: both name what happened, not a model mismatch."""
    from ascp.lm.engine import EngineClient
    from ascp.lm.vllm import VLLMModel

    with pytest.raises(AscpError, match="because its engine died") as info:
        VLLMModel("vllm:" + stand_in("vllm-engine-dead"))
    message = str(info.value)
    assert VLLM_ENGINE_DEAD in message and "HTTP 500" in message and "check that it serves" not in message
    assert "\n" not in message and "restart the server" in message
    drop = EngineClient(stand_in("vllm-drop"), retries=2)
    drop.request("/v1/models")  # it answered once, then drops mid-response
    with pytest.raises(AscpError, match="went away during /v1/completions") as info:
        drop.request("/v1/completions", {"prompt": [[1, 2]]})
    assert "its engine died or the server stopped" in str(info.value) and "\n" not in str(info.value)
    assert start_posts(stand_in) == 2  # retried (2 tries), never read as a short answer
    # a request the server refuses (4xx) keeps the model-mismatch sentence
    with pytest.raises(AscpError, match="HTTP 404.*check that it serves this model"):
        EngineClient(stand_in("vllm-bad-request")).request("/v1/completions", {"prompt": [[1]]})


def start_posts(stand_in) -> int:
    return sum(handler.posts for handler in stand_in.handlers if handler.mode == "vllm-drop")


def test_engine_specs_enter_experiment_specs(tmp_path):
    from ascp.experiments.spec import load_spec

    (tmp_path / "cases.jsonl").write_text(json.dumps({"id": "q", "question": "q?", "answers": [["a"]],
                                                      "pool": [{"id": "d", "text": "a"}]}) + "\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: e\ntasks: [{name: t, data: cases.jsonl}]\nmodels: ['vllm:http://127.0.0.1:9']\n"
                    "grid: {policy: [vanilla], k: [1], T: [1]}\nembedder: hashing\n")
    assert load_spec(spec).models[0].source == "vllm:http://127.0.0.1:9"
    spec.write_text(spec.read_text().replace("vllm:http://127.0.0.1:9", "vllm:http://127.0.0.1:9?bad=1"))
    with pytest.raises(AscpError, match=r"spec field models\[0\].*not the option 'bad'"):
        load_spec(spec)


def test_ray_workers_share_a_models_engine_replicas(stand_in, tmp_path):
    """Two servers of one model listed under one name: each Ray worker drives one of them, and the
    records equal a local run against one server."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install -e '.[ray]'")
    from ascp.experiments.run import run_experiment

    urls = [stand_in("sglang"), stand_in("sglang")]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps({"id": f"c{i}", "question": f"when was author c{i} born?",
                                         "answers": [["1850"]], "pool": [{"id": f"d{j}", "text": f"born in {1850 + j}"}
                                                                         for j in range(4)]}) + "\n"
                             for i in range(4)))

    def spec(path: list[str], name: str) -> Path:
        out = tmp_path / f"{name}.json"
        out.write_text(json.dumps({"name": "replicas", "tasks": [{"name": "toy", "data": str(cases)}],
                                   "models": [{"name": "tiny", "path": path}], "seeds": [0],
                                   "grid": {"policy": ["rotate"], "k": [2], "T": [2]},
                                   "sampling": {"max_new_tokens": 4}, "embedder": "hashing", "batch_cases": 1}))
        return out

    local = run_experiment(spec(["sglang:" + urls[0]], "local"), tmp_path / "local")
    for handler in stand_in.handlers:
        handler.posts = 0
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        spread = run_experiment(spec(["sglang:" + u for u in urls], "spread"), tmp_path / "spread", executor="ray",
                                workers=2)
    finally:
        ray.shutdown()
    assert local.written == spread.written == 4
    assert all(handler.posts > 0 for handler in stand_in.handlers)  # both replicas served

    def units(folder: Path) -> dict:
        out = {}
        for line in (folder / "units.jsonl").read_text().splitlines():
            rec = json.loads(line)
            out[rec["case_id"]] = [(r["context"], r["response"], r["scores"]) for r in rec["rounds"]]
        return out

    assert units(tmp_path / "spread") == units(tmp_path / "local")
    bad = spec(["sglang:" + urls[0], "/models/x"], "bad")
    from ascp.experiments.spec import load_spec

    with pytest.raises(AscpError, match=r"models\[0\]\.path: a list of paths must hold engine specs"):
        load_spec(bad)


def test_an_engine_counts_the_tokens_fed_as_a_pass_from_scratch_does(stand_in, tiny_lm):
    """One token-counting rule (`tokens_fed`): an engine's count of a call is what a from-scratch
    pass of the model it serves feeds (its server's own prefix cache is invisible to ascp)."""
    import ascp
    from ascp.lm.sglang import SGLangModel

    engine = SGLangModel("sglang:" + stand_in("sglang"))
    full = list(engine.encode_prompt(QUESTION, [ascp.Passage(**p) for p in PASSAGES]).ids)
    prompts, response = [full, full[:-3], full[5:]], engine.encode(RESPONSE)
    assert engine.score(prompts, response).tokens_processed == \
        tiny_lm.score(prompts, response, reuse_prefix=False).tokens_processed == \
        sum(len(p) + len(response) - 1 for p in prompts)
