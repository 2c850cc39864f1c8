"""`ascp serve` (src/ascp/serve/): the HTTP service against the command line it must equal, its
limits, key and root, its queue, and its faults. In-process tests drive the app with Starlette's
test client on the tiny model; the server tests start a real `ascp serve` process and talk to it
over sockets (32 requests in flight, SIGTERM mid-load, SIGKILL and a restart on one request cache)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import chromium_page, cli_env, needs_chromium, run_ascp

pytest.importorskip("fastapi", reason="needs the serve extra (FastAPI, uvicorn): pip install -e '.[serve]'")
import test_lm_engine  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from ascp.errors import AscpError  # noqa: E402
from ascp.serve.app import create_app  # noqa: E402
from ascp.serve.jobs import Job, QueueFull, Worker  # noqa: E402
from ascp.serve.service import ServeDefaults, ServeLimits, Service  # noqa: E402

stand_in = test_lm_engine.stand_in  # the stand-in engine server (an SGLang API answered by the tiny model)
QUESTION, PASSAGES = test_lm_engine.QUESTION, test_lm_engine.PASSAGES  # the Eiffel Tower context of the engine tests
RESPONSE = "The Eiffel Tower was built between 1887 and 1889. It was the entrance arch of the fair."


def request(i: int, response: str | None = RESPONSE, **extra) -> dict:
    """Request i: the passages rotated by i, so that requests differ in context order."""
    rotated = PASSAGES[i % 3:] + PASSAGES[:i % 3]
    return {"id": f"r{i}", "question": QUESTION, "passages": rotated, "response": response, **extra}


NUMBERS = ("scores", "normalized")
# Prompt prefixes are shared by the requests of one model call (`fresh_prefixes`): the command line
# shares them across its whole file, the service across the requests it batches. Reused keys and
# values move scores in the last bits (~1e-7 here) and change the tokens fed; nothing else may differ.
LAST_BITS = 1e-6


def same_record(served: dict, written: dict) -> bool:
    """Equal records: every field but the wall time and the tokens fed, scores to the last bits."""
    def exact(record: dict) -> dict:
        return {k: v for k, v in record.items() if k not in ("seconds", "tokens_processed", "spans", *NUMBERS)}

    def close(a: dict, b: dict) -> bool:
        return all(a[key].keys() == b[key].keys() and all(abs(a[key][p] - b[key][p]) <= LAST_BITS for p in a[key])
                   for key in NUMBERS)

    spans_a, spans_b = served.get("spans", []), written.get("spans", [])
    return (exact(served) == exact(written) and close(served, written) and len(spans_a) == len(spans_b)
            and all(exact(x) == exact(y) and close(x, y) for x, y in zip(spans_a, spans_b, strict=True)))


@pytest.fixture()
def client(tiny_lm, tmp_path):
    service = Service(tiny_lm, ServeDefaults(), ServeLimits(max_passages=4, max_body_bytes=20_000))
    with TestClient(create_app(service, root=tmp_path)) as c:
        yield c


def cli_records(tmp_path: Path, model: Path, requests: list[dict], *args: str, command: str = "attribute") -> list:
    """What `ascp attribute` (or `ascp cite`) writes for `requests`, one record per line."""
    source, out = tmp_path / f"{command}-in.jsonl", tmp_path / f"{command}-out.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in requests), encoding="utf-8")
    done = run_ascp(command, "--input", source, "--out", out, "--model", model, *args, home=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_attribute_and_cite_answer_what_the_command_line_writes(tiny_model_dir, tmp_path):
    """The same requests through the service (fixed and generated responses, sentences, a seeded
    estimator) and through `ascp attribute` / `ascp cite` give the same records."""
    from ascp.api import load_model

    requests = [request(0, spans="sentences"), request(1, spans="sentences"), request(2, response=None,
                                                                                      spans="sentences")]
    model = load_model(str(tiny_model_dir))
    with TestClient(create_app(Service(model, ServeDefaults(), ServeLimits()))) as c:
        served = [c.post("/v1/attribute", json=r) for r in requests]
        cited = [c.post("/v1/cite", json={k: v for k, v in r.items() if k != "spans"}) for r in requests]
        drawn = [c.post("/v1/attribute", json={**request(i), "estimator": "contextcite(num_ablations=8)", "seed": 3})
                 for i in range(2)]
    assert all(r.status_code == 200 for r in [*served, *cited, *drawn])
    plain = [{k: v for k, v in r.items() if k != "spans"} for r in requests]
    expected = cli_records(tmp_path, tiny_model_dir, plain, "--spans", "sentences")
    assert len(served) == len(expected) and all(same_record(r.json(), e) for r, e in zip(served, expected, strict=True))
    assert all(r.json()["spans"] for r in served)
    assert [r.json() for r in cited] == cli_records(tmp_path, tiny_model_dir, plain, command="cite")
    seeded = cli_records(tmp_path, tiny_model_dir, [request(0), request(1)], "--estimator",
                         "contextcite(num_ablations=8)", "--seed", "3")
    assert all(same_record(r.json(), e) for r, e in zip(drawn, seeded, strict=True))


def test_sentence_sources_answer_what_the_command_line_writes(tiny_model_dir, tmp_path):
    """`"sources": "sentences"` through the service gives the records of `ascp attribute --sources sentences`."""
    from ascp.api import load_model

    with TestClient(create_app(Service(load_model(str(tiny_model_dir)), ServeDefaults(), ServeLimits()))) as c:
        passages = c.post("/v1/attribute", json=request(0))  # a probe of passages first: sources keep their own
        served = [c.post("/v1/attribute", json={**request(i), "sources": "sentences"}) for i in range(2)]
        cited = c.post("/v1/cite", json={**request(0), "sources": "sentences", "markers": "ids"})
    assert "sources" not in passages.json() and list(passages.json()["scores"]) == [
        p["id"] for p in request(0)["passages"]]
    assert all(r.status_code == 200 for r in [*served, cited])
    expected = cli_records(tmp_path, tiny_model_dir, [request(0), request(1)], "--sources", "sentences")
    assert all(same_record(r.json(), e) for r, e in zip(served, expected, strict=True))
    assert all(r.json()["sources"] == "sentences" and all("#" in pid for pid in r.json()["scores"]) for r in served)
    assert cited.json() == cli_records(tmp_path, tiny_model_dir, [request(0)], "--sources", "sentences",
                                       "--markers", "ids", command="cite")[0]


def test_portfolio_answers_what_run_portfolio_returns(tiny_lm, client):
    import ascp

    pool = [{"id": f"p{i}", "text": f"Passage {i} says the tower opened in {1880 + i}."} for i in range(4)]
    body = {"id": "tower", "question": QUESTION, "pool": pool, "answers": [["1889"]], "k": 2, "T": 2,
            "policy": "rotate", "max_new_tokens": 8}
    answer = client.post("/v1/portfolio", json=body)
    assert answer.status_code == 200, answer.text
    case = ascp.make_case(QUESTION, pool, [["1889"]], id="tower")  # generation seeds derive from the case id
    (expected,) = ascp.run_portfolios([case], policy="rotate", k=2, T=2, model=tiny_lm, max_new_tokens=8)
    def timeless(rounds: list) -> list:
        return [{k: v for k, v in r.items() if "seconds" not in k} for r in rounds]

    assert timeless(answer.json()["rounds"]) == timeless(json.loads(json.dumps(expected.to_json()))["rounds"])
    assert answer.json()["metrics"]["pr"] == pytest.approx(expected.metrics["pr"])
    no_answers = client.post("/v1/portfolio", json={k: v for k, v in body.items() if k != "answers"})
    assert no_answers.status_code == 200 and no_answers.json()["metrics"]["pr"] is None  # NaN is null in JSON


BAD = [
    ("malformed JSON", b'{"id": "x", ', 400, "not valid JSON"),
    ("not UTF-8", b'\xff\xfe{}', 400, "not UTF-8"),
    ("a list, not an object", [1, 2], 422, "must be a JSON object"),
    ("a missing field", {k: v for k, v in request(0).items() if k != "question"}, 422, "'question' is missing"),
    ("an unknown field", {**request(0), "estimater": "loo"}, 422, "unknown field 'estimater'"),
    ("passages over the limit", {**request(0), "passages": PASSAGES * 2}, 413, "over this service's limit of 4"),
    ("a body over the limit", {**request(0), "response": "word " * 5000}, 413, "over this service's limit"),
    ("an unknown estimator", {**request(0), "estimator": "nope"}, 422, "unknown estimator 'nope'"),
    ("a bad threshold", {**request(0), "threshold": 3}, 422, "threshold"),
    ("unknown sources", {**request(0), "sources": "words"}, 422, "sources must be passages or sentences"),
    ("a negative seed", {**request(0), "seed": -1}, 422, "'seed' must be a whole number"),
    ("a duplicate passage id", {**request(0), "passages": [PASSAGES[0], PASSAGES[0]]}, 422, "appears twice"),
    ("a NUL in the question", {**request(0), "question": "a\x00b"}, 422, "NUL"),
    ("unknown spans", {**request(0), "spans": "words"}, 422, "spans must be sentences"),
]


@pytest.mark.parametrize("name,body,status,phrase", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_one_json_sentence_and_the_service_stays_healthy(client, name, body, status, phrase):
    answer = (client.post("/v1/attribute", content=body, headers={"Content-Type": "application/json"})
              if isinstance(body, bytes) else client.post("/v1/attribute", json=body))
    assert answer.status_code == status, answer.text
    assert list(answer.json()) == ["error"] and phrase in answer.json()["error"]
    sentence = answer.json()["error"]
    assert "\n" not in sentence and "Traceback" not in sentence and sentence.endswith((".", ")"))
    assert client.get("/v1/health").json()["status"] == "ok"
    assert client.post("/v1/attribute", json=request(0)).status_code == 200


def test_a_response_beyond_the_window_or_the_token_limit_is_refused_alone(small_window_model_dir):
    """A request that cannot fit fails with its sentence; its batch neighbours are answered."""
    from ascp.api import load_model

    short_prompts = ServeDefaults(template="{passages}\n{question}")  # 27 prompt tokens; the window holds 64
    service = Service(load_model(str(small_window_model_dir)), short_prompts, ServeLimits(max_tokens=60))
    short = {"id": "short", "question": "Q?", "passages": [{"id": "a", "text": "A."}], "response": "Yes."}
    long = {**short, "id": "long", "response": "word " * 80}
    with TestClient(create_app(service)) as c, concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda body: c.post("/v1/attribute", json=body), [short, long, short | {"id": "s2"}]))
    assert [a.status_code for a in answers] == [200, 413, 200]
    assert "over this service's limit of 60 tokens" in answers[1].json()["error"]
    window = Service(service.model, short_prompts, ServeLimits())
    with TestClient(create_app(window)) as c:
        beyond = c.post("/v1/attribute", json=long)
    assert beyond.status_code == 422 and "context window" in beyond.json()["error"]


def test_routes_and_methods_that_do_not_exist_are_one_sentence(client):
    for answer, status in ((client.get("/v1/nothing"), 404), (client.get("/v1/attribute"), 405)):
        assert answer.status_code == status and list(answer.json()) == ["error"]
    assert client.get("/openapi.json").json()["paths"]["/v1/attribute"]["post"]["requestBody"]
    estimators = {e["name"]: e for e in client.get("/v1/estimators").json()}
    assert estimators["loo"]["token_readings"] and "num_ablations" in {o["name"] for o in
                                                                        estimators["contextcite"]["options"]}


def test_an_api_key_guards_every_route_under_v1(tiny_lm):
    service = Service(tiny_lm, ServeDefaults(), ServeLimits())
    with TestClient(create_app(service, api_key="s3cret")) as c:
        for headers in ({}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            for answer in (c.get("/v1/health", headers=headers), c.post("/v1/attribute", json=request(0),
                                                                        headers=headers)):
                assert answer.status_code == 401 and "API key" in answer.json()["error"]
        assert c.get("/v1/health", headers={"X-API-Key": "s3cret"}).status_code == 200
        assert c.post("/v1/attribute", json=request(0), headers={"Authorization": "Bearer s3cret"}).status_code == 200
        page = c.get("/")  # the workbench shell holds no data; its calls send the key typed into it
        assert page.status_code == 200 and "id='key'" in page.text


def test_serve_refuses_to_listen_beyond_this_machine_without_a_key(tmp_path):
    done = run_ascp("serve", "--host", "0.0.0.0", "--model", "no-such-model", home=tmp_path,
                    env={k: v for k, v in cli_env(tmp_path).items() if k != "ASCP_API_KEY"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--host 0.0.0.0 lets other machines reach the service" in done.stderr and "Traceback" not in done.stderr
    from ascp.cli.serve import check_exposure, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.1.2.3")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("example.org")
    check_exposure("0.0.0.0", "key")  # with a key it may


def test_browsing_reads_only_below_the_root(client, tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "table.md").write_text("| a |\n", encoding="utf-8")
    (tmp_path / "secret.sqlite").write_bytes(b"x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir(exist_ok=True)
    (outside / "private.md").write_text("TOP SECRET\n", encoding="utf-8")
    (tmp_path / "link").symlink_to(outside)
    listing = client.get("/v1/browse").json()
    assert [e["name"] for e in listing["entries"]] == ["reports"]  # no link out, no file of another kind
    assert client.get("/v1/files", params={"path": "reports/table.md"}).text == "| a |\n"
    for path, status in (("..", 403), ("../" + outside.name + "/private.md", 403), ("link/private.md", 403),
                         (str(outside / "private.md"), 403), ("reports/none.md", 404), ("secret.sqlite", 404),
                         ("reports", 404)):
        answer = client.get("/v1/files", params={"path": path})
        assert answer.status_code == status and list(answer.json()) == ["error"], (path, answer.text)
        assert "TOP SECRET" not in answer.text
    assert client.get("/v1/browse", params={"path": "link"}).status_code == 403
    assert client.get("/v1/view", params={"path": "reports"}).status_code == 422  # not a results folder


def test_a_full_queue_answers_503_with_retry_after_and_a_cancelled_job_frees_its_slot(tiny_lm):
    release = threading.Event()
    service = Service(tiny_lm, ServeDefaults(), ServeLimits(max_queue=1))
    blocker = Job(None, None, lambda batch: [release.wait(30)])
    with TestClient(create_app(service)) as c:
        service.worker.submit(blocker)
        while service.worker.in_flight == 0:  # the worker holds the blocker; the queue is empty
            time.sleep(0.01)
        waiting = Job(None, None, lambda batch: ["done"])
        service.worker.submit(waiting)
        full = c.post("/v1/attribute", json=request(0))
        assert full.status_code == 503 and int(full.headers["Retry-After"]) >= 1
        assert "queue is full" in full.json()["error"]
        assert service.worker.cancel(waiting) and waiting.future.cancelled()  # its client went away
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(c.post, "/v1/attribute", json=request(0))
            while service.worker.waiting == 0:
                time.sleep(0.01)
            release.set()
            assert pending.result(timeout=60).status_code == 200


def test_the_worker_batches_jobs_with_equal_keys_and_isolates_a_failing_one():
    worker = Worker(max_queue=10, max_batch=3)
    seen: list[list[str]] = []

    def run(batch):
        seen.append([job.payload for job in batch])
        if "bad" in [job.payload for job in batch]:
            raise AscpError("bad request")
        return [job.payload.upper() for job in batch]

    gate = threading.Event()
    first = Job(None, "first", lambda batch: [gate.wait(10)])
    worker.start()
    worker.submit(first)
    while worker.in_flight == 0:
        time.sleep(0.01)
    jobs = [Job("k", p, run) for p in ("a", "bad", "c", "d")] + [Job("other", "e", run)]
    for job in jobs:
        worker.submit(job)
    with pytest.raises(QueueFull):
        for i in range(10):
            worker.submit(Job(None, i, run))
    for job in list(worker._pending)[len(jobs):]:
        worker.cancel(job)
    gate.set()
    assert [job.future.exception(10) is not None for job in jobs] == [False, True, False, False, False]
    assert jobs[0].future.result() == "A" and jobs[2].future.result() == "C"
    worker.stop(10)
    assert seen[:4] == [["a", "bad", "c"], ["a"], ["bad"], ["c"]] and ["d"] in seen and ["e"] in seen


def test_a_dead_engine_is_503_naming_it_and_the_service_recovers(stand_in):
    """The engine behind the service returns 500 (its engine died), then comes back."""
    from ascp.lm.sglang import SGLangModel

    url = stand_in("sglang")
    handler = stand_in.handlers[-1]
    service = Service(SGLangModel("sglang:" + url), ServeDefaults(), ServeLimits())
    with TestClient(create_app(service)) as c:
        assert c.post("/v1/attribute", json=request(0)).status_code == 200
        handler.mode = "vllm-engine-dead"
        dead = c.post("/v1/attribute", json=request(1))
        assert dead.status_code == 503 and url in dead.json()["error"] and dead.headers["Retry-After"]
        assert c.get("/v1/health").json()["status"] == "ok"
        handler.mode = "sglang"
        assert c.post("/v1/attribute", json=request(1)).status_code == 200


def test_an_unreachable_engine_is_503_and_the_service_recovers_when_it_returns(stand_in, tiny_lm, tiny_model_dir):
    from http.server import ThreadingHTTPServer

    from ascp.lm.sglang import SGLangModel

    url = stand_in("sglang")
    service = Service(SGLangModel("sglang:" + url), ServeDefaults(), ServeLimits())
    port = int(url.rsplit(":", 1)[1])
    with TestClient(create_app(service)) as c:
        for s in list(stand_in.servers):
            s.shutdown()
            s.server_close()
        gone = c.post("/v1/attribute", json=request(2))
        assert gone.status_code == 503 and url in gone.json()["error"]
        handler = type("Handler", (test_lm_engine.StandIn,), {"lm": tiny_lm, "folder": str(tiny_model_dir),
                                                              "mode": "sglang"})
        back = ThreadingHTTPServer(("127.0.0.1", port), handler)
        threading.Thread(target=back.serve_forever, daemon=True).start()
        try:
            assert c.post("/v1/attribute", json=request(2)).status_code == 200
        finally:
            back.shutdown()
            back.server_close()


# ----- a real server: `ascp serve` in its own process, over sockets ---------------------------------
class Server:
    """`ascp serve --model DIR` on a free port, started, waited for, stopped by a signal."""

    def __init__(self, home: Path, model: Path, *args: str) -> None:
        self.port = test_lm_engine.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.home = home
        self.args = ["--model", str(model), "--port", str(self.port), "--log-level", "warning", *args]
        self.proc: subprocess.Popen | None = None
        self.key = args[args.index("--api-key") + 1] if "--api-key" in args else None

    def start(self) -> Server:
        self.log = open(self.home / f"serve-{self.port}.log", "a")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "ascp.cli", "serve", *self.args], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=cli_env(self.home))
        deadline = time.time() + 120
        while time.time() < deadline:
            assert self.proc.poll() is None, (self.home / f"serve-{self.port}.log").read_text()
            with contextlib.suppress(OSError):
                if self.get("/v1/health")[0] == 200:
                    return self
            time.sleep(0.2)
        raise AssertionError("the service did not start in 120 s")

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 300,
             headers: dict | None = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **({"X-API-Key": self.key} if self.key else {}), **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def get(self, path: str) -> tuple[int, dict]:
        return self.call("GET", path, timeout=5)

    def post(self, body: dict, path: str = "/v1/attribute") -> tuple[int, dict]:
        return self.call("POST", path, body)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self.log.close()
        return code


def test_a_real_server_answers_32_requests_in_flight_as_the_command_line_does(tiny_model_dir, tmp_path):
    requests = [request(i, spans="sentences") for i in range(32)]
    server = Server(tmp_path, tiny_model_dir, "--max-batch", "8").start()
    try:
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(server.post, requests))
        health = server.get("/v1/health")[1]
    finally:
        assert server.stop() == 0  # SIGTERM: a clean exit
    assert [status for status, _ in answers] == [200] * 32
    assert [record["id"] for _, record in answers] == [r["id"] for r in requests]  # none lost, none swapped
    assert health["finished"] == 32 and health["failed"] == 0 and health["batches"] < 32  # batched
    plain = [{k: v for k, v in r.items() if k != "spans"} for r in requests]
    expected = cli_records(tmp_path, tiny_model_dir, plain, "--spans", "sentences")
    assert all(same_record(record, e) for (_, record), e in zip(answers, expected, strict=True))


def test_sigterm_finishes_the_requests_in_flight_then_exits(tiny_model_dir, tmp_path):
    server = Server(tmp_path, tiny_model_dir, "--max-batch", "1").start()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = [pool.submit(server.post, request(i, response=None)) for i in range(8)]
        while server.get("/v1/health")[1]["finished"] < 1:  # the load is under way
            time.sleep(0.05)
        code = server.stop(signal.SIGTERM)
        results = [a.result(timeout=300) for a in answers]
    assert code == 0
    assert [status for status, _ in results] == [200] * 8  # every accepted request was answered whole
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url + "/v1/health", timeout=5)


def test_a_killed_service_restarted_on_its_request_cache_feeds_nothing_it_had_finished(tiny_model_dir, tmp_path):
    cache = tmp_path / "requests.sqlite"
    server = Server(tmp_path, tiny_model_dir, "--request-cache", str(cache), "--max-batch", "1").start()
    finished: dict[str, dict] = {}
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        futures = {pool.submit(server.post, request(i, response=None)): i for i in range(12)}
        while server.get("/v1/health")[1]["finished"] < 4:
            time.sleep(0.05)
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL  # mid-load: no chance to finish anything
        for future in futures:
            try:
                status, record = future.result(timeout=60)
            except (urllib.error.URLError, ConnectionError, OSError):
                continue  # the client saw the connection die
            if status == 200:
                finished[record["id"]] = record
    assert 4 <= len(finished) < 12
    server.start()
    try:
        again = [server.post(request(int(rid[1:]), response=None)) for rid in finished]
        cache_after = server.get("/v1/health")[1]["request_cache"]
        rest = [server.post(request(i, response=None)) for i in range(12) if f"r{i}" not in finished]
    finally:
        server.stop()
    assert cache_after["generation_misses"] == 0 and cache_after["score_misses"] == 0  # nothing re-fed
    assert cache_after["generation_hits"] == len(finished) and cache_after["tokens_saved"] > 0
    assert all(same_record(record, finished[record["id"]]) for _, record in again)
    assert all(status == 200 for status, _ in rest)


@needs_chromium
def test_the_workbench_attributes_highlights_a_sentences_sources_and_browses_runs(tiny_model_dir, tmp_path):
    """In Chromium: type the key, attribute the example, select a sentence (its passages re-shaded
    by its own reading), then browse to a simulation's page and a report table and figure."""
    from test_render_pages import fake_embed

    from ascp.loop.consumers import Toy
    from ascp.loop.simulate import compare, pool_views, simulate_portfolios, write_simulation
    from ascp.types import AnswerUnit, Case, Passage

    root = tmp_path / "root"
    root.mkdir()
    cases = [Case(id=f"c{c}", question=f"question {c}?",
                  pool=tuple(Passage(id=f"c{c}p{i}", text=f"passage {i} answer{i % 2}") for i in range(8)),
                  units=(AnswerUnit("0", ("answer0",)),)) for c in range(2)]
    views = pool_views(cases, fake_embed)
    results = {p[0].policy: p for p in (simulate_portfolios(cases, name, 2, 2, Toy(q=0.5), views)
                                        for name in ("vanilla", "rotate"))}
    write_simulation(root / "sim", cases, results, {"data": "absent.jsonl", "k": 2, "T": 2},
                     compare(results, n_boot=100))
    (root / "report").mkdir()
    (root / "report" / "table.md").write_text("| policy | PR@T |\n|---|---|\n| rotate | 0.5 |\n", encoding="utf-8")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.plot([0, 1], [0, 1])
    plt.savefig(root / "report" / "figure.png")
    plt.close()
    server = Server(tmp_path, tiny_model_dir, "--api-key", "k3y", "--root", str(root)).start()
    try:
        with chromium_page() as page:
            page.goto(server.url + "/")
            page.wait_for_selector("body[data-ready='1']")
            page.fill("#key", "k3y")
            page.dispatch_event("#key", "change")
            page.wait_for_function("document.querySelectorAll('#estimator option').length > 5")
            page.select_option("#estimator", "loo")
            with page.expect_response("**/v1/attribute") as answer:
                page.click("#run")
            record = answer.value.json()
            page.wait_for_selector("body[data-attributed='example']")
            sentences = page.locator("#result [data-sentence]")
            assert sentences.count() == len(record["spans"]) >= 2
            passages = page.locator("#result [data-passage]")

            def shown() -> dict:
                return {passages.nth(i).get_attribute("data-passage"): (passages.nth(i).get_attribute("data-used"),
                                                                      passages.nth(i).get_attribute("data-shade"))
                        for i in range(passages.count())}

            whole = shown()
            assert {pid for pid, (used, _) in whole.items() if used == "1"} == set(record["used"])
            for i, span in enumerate(record["spans"]):
                sentences.nth(i).click()
                now = shown()
                assert {pid for pid, (used, _) in now.items() if used == "1"} == set(span["used"])
                for pid, (_, shade) in now.items():  # shaded exactly where the sentence's reading is positive
                    assert shade.startswith("rgba(255, 170, 0") == (span["normalized"][pid] > 0), (pid, shade)
                first = next(iter(span["scores"]))
                badge = page.locator(f"#result [data-passage='{first}'] .score").inner_text()
                assert f"sentence {i + 1}: {span['scores'][first]:+.4f}" in badge
            sentences.nth(len(record["spans"]) - 1).click()  # selected again: the whole response's reading
            assert shown() == whole
            page.screenshot(path=str(tmp_path / "workbench-attribute.png"))
            page.check("#sentence-sources")  # the passages' sentences as the sources
            with page.expect_response("**/v1/attribute") as answer:
                page.click("#run")
            cut = answer.value.json()
            page.wait_for_function("document.querySelector('#status').textContent.indexOf('sentences used') >= 0")
            assert [passages.nth(i).get_attribute("data-passage") for i in range(passages.count())] == list(
                cut["scores"]) and all("#" in pid for pid in cut["scores"])
            sentences.nth(0).click()
            assert {pid for pid, (used, _) in shown().items() if used == "1"} == set(cut["spans"][0]["used"])
            page.uncheck("#sentence-sources")

            page.click("[data-tab='browse-tab']")
            page.wait_for_selector("#entries [data-path='sim']")
            page.click("#entries [data-path='sim']")
            frame = page.frame_locator("#view")
            frame.locator("body[data-ready='1']").wait_for()
            assert frame.locator(".case").count() == 2
            assert "lies outside" not in page.inner_text("#note")  # its data file is absent, not refused
            page.click("#entries [data-path='sim/..']")
            page.click("#entries [data-path='report']")
            page.click("#entries [data-path='report/table.md']")
            assert "| rotate | 0.5 |" in page.inner_text("#shown pre[data-file='report/table.md']")
            page.click("#entries [data-path='report/figure.png']")
            page.wait_for_function("document.querySelector(\"#shown img\") && "
                                   "document.querySelector(\"#shown img\").naturalWidth > 100")
            page.screenshot(path=str(tmp_path / "workbench-browse.png"))
    finally:
        server.stop()


def test_a_client_that_disconnects_while_waiting_frees_its_place(tiny_lm):
    """Over a real socket (uvicorn in this process): a request queued behind a busy worker whose client
    closes the connection is taken out of the queue and never run."""
    import socket

    import uvicorn

    release = threading.Event()
    service = Service(tiny_lm, ServeDefaults(), ServeLimits(max_queue=4))
    port = test_lm_engine.free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        service.worker.submit(Job(None, None, lambda batch: [release.wait(60)]))  # the worker is busy
        while service.worker.in_flight == 0:
            time.sleep(0.01)
        body = json.dumps(request(0)).encode()
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"POST /v1/attribute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            deadline = time.time() + 30
            while service.worker.waiting == 0 and time.time() < deadline:
                time.sleep(0.02)
            assert service.worker.waiting == 1  # queued behind the busy worker
        deadline = time.time() + 30  # the client is gone
        while service.worker.waiting and time.time() < deadline:
            time.sleep(0.05)
        assert service.worker.waiting == 0
        release.set()
        deadline = time.time() + 30
        while service.worker.batches == 0 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert service.worker.finished == 1 and service.worker.batches == 1  # only the blocker ran
    finally:
        release.set()
        server.should_exit = True
        thread.join(30)
