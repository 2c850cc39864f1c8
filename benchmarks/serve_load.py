"""`ascp serve` under load and under a kill, beside `ascp attribute`'s path in one process.

Requests: ASQA and HotpotQA contexts from `../shared/data` (the first `--per-task` eligible items of
each file in file order, k = 5 passages as the data ranks them), each with the embedded model's own
sampled response (generated once, then fixed, so every request has a response of a real length).

1. In one process, `Probe.attribute_many` (what `ascp attribute` runs) probes every request: the
   baseline's seconds, requests per second and records, measured before the service and again after
   it (a shared machine drifts; the ratios are to the mean of both).
2. A real `ascp serve` on the same model (no request cache): for 1, 4, 16 and 64 concurrent clients,
   every request sent once (as many times as needed for every client to hold one): requests per
   second, p50/p95/p99 latency, HTTP statuses, requests lost or duplicated, and how far the records
   are from the baseline's (max |score difference|, used sets that differ).
3. Faults: a service on a request cache is killed (SIGKILL) mid-load by 16 clients and restarted on
   the same cache; the clients resend what they lost. Reported: what they saw, the rows the restarted
   service fed for requests answered before the kill (must be 0) and for the rest.

    python benchmarks/serve_load.py --out docs/results/serve [--per-task 16] [--clients 1,4,16,64]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from task_requests import check_files, task_requests  # noqa: E402  (the requests of the shared data)

K = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """`ascp serve` in its own process."""

    def __init__(self, log: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = ["--port", str(self.port), "--log-level", "warning", "--max-queue", "512", *args]
        self.log = log

    def start(self) -> Service:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "ascp.cli", "serve", *self.args], stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"ascp serve exited: {self.log.read_text()[-2000:]}")
            try:
                if self.call("GET", "/v1/health", timeout=5)[0] == 200:
                    return self
            except OSError:
                time.sleep(0.3)
        raise SystemExit("ascp serve did not start in 300 s")

    def call(self, method: str, path: str, body: Any = None, timeout: float = 600) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(300)


def percentile(values: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q)) if values else float("nan")


def distance(records: Sequence[dict], baseline: dict[str, dict]) -> tuple[float, int]:
    """Max |score difference| against the baseline's record of the same id, and used sets that differ."""
    worst, differ = 0.0, 0
    for record in records:
        base = baseline[record["id"].split("~")[0]]
        worst = max([worst, *(abs(record["scores"][p] - base["scores"][p]) for p in base["scores"])])
        differ += set(record["used"]) != set(base["used"])
    return worst, differ


def load(service: Service, requests: Sequence[dict], clients: int) -> dict[str, Any]:
    """Every request sent once by `clients` concurrent clients; with more clients than requests, the
    requests again under new ids (`ID~2`), so that every client has one in flight."""
    copies = -(-clients // len(requests))
    requests = [{**r, "id": r["id"] if n == 0 else f"{r['id']}~{n + 1}"} for n in range(copies) for r in requests]
    def send(body: dict) -> tuple[float, int, Any]:
        start = time.perf_counter()
        status, answer = service.call("POST", "/v1/attribute", body)
        return time.perf_counter() - start, status, answer

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(send, requests))
    seconds = time.perf_counter() - start
    latencies = [t for t, _, _ in outcomes]
    statuses: dict[str, int] = {}
    for _, status, _ in outcomes:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    records = [answer for _, status, answer in outcomes if status == 200]
    ids = [r["id"] for r in records]
    return {"clients": clients, "requests": len(requests), "seconds": round(seconds, 2),
            "rps": round(len(requests) / seconds, 3), "p50_s": round(percentile(latencies, 50), 3),
            "p95_s": round(percentile(latencies, 95), 3), "p99_s": round(percentile(latencies, 99), 3),
            "statuses": statuses, "lost": len(requests) - len(set(ids)), "duplicated": len(ids) - len(set(ids)),
            "tokens_fed": sum(r["tokens_processed"] for r in records), "records": records}


def run_faults(work: Path, requests: Sequence[dict]) -> dict[str, Any]:
    """SIGKILL mid-load by 16 clients, a restart on the same request cache, what was lost resent."""
    cache = work / "requests.sqlite"
    killed = Service(work / "kill.log", "--request-cache", str(cache)).start()
    answered: dict[str, dict] = {}
    seen = {"answered": 0, "connection_lost": 0, "other": 0}

    def send(body: dict) -> None:
        try:
            status, answer = killed.call("POST", "/v1/attribute", body)
        except (OSError, urllib.error.URLError):
            seen["connection_lost"] += 1
            return
        if status == 200:
            answered[answer["id"]] = answer
            seen["answered"] += 1
        else:
            seen["other"] += 1

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(send, r) for r in requests]
        while killed.call("GET", "/v1/health")[1]["finished"] < len(requests) // 3:
            time.sleep(0.1)
        code = killed.stop(signal.SIGKILL)
        concurrent.futures.wait(futures)
    killed.start()
    for request in requests:
        if request["id"] in answered:
            killed.call("POST", "/v1/attribute", request)
    after_finished = killed.call("GET", "/v1/health")[1]["request_cache"]
    resent = [killed.call("POST", "/v1/attribute", r) for r in requests if r["id"] not in answered]
    after_rest = killed.call("GET", "/v1/health")[1]["request_cache"]
    killed.stop()
    faults = {"killed_exit": code, "clients_saw": seen, "answered_before_kill": len(answered),
              "resent_finished": len(answered), "rows_fed_for_finished": after_finished["score_misses"],
              "tokens_saved_for_finished": after_finished["tokens_saved"],
              "resent_unfinished": len(resent), "answered_after_restart": sum(s == 200 for s, _ in resent),
              "rows_fed_for_unfinished": after_rest["score_misses"] - after_finished["score_misses"],
              "rows_answered_from_cache_for_unfinished": after_rest["score_hits"] - after_finished["score_hits"]}
    print(json.dumps(faults), flush=True)
    return faults


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json and README.md")
    parser.add_argument("--per-task", type=int, default=16, help="requests per task (default 16)")
    parser.add_argument("--clients", default="1,4,16,64", help="concurrent clients per level")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--no-faults", action="store_true", help="skip the SIGKILL phase")
    args = parser.parse_args(argv)
    check_files()
    args.out.mkdir(parents=True, exist_ok=True)

    from ascp.api import Probe, load_model
    from ascp.lm.sampling import SamplingConfig

    lm = load_model("default")
    requests = task_requests(args.per_task, K)
    print(f"# serve load: {len(requests)} requests (k = {K}), model default ({lm.backend}); "
          f"{platform.processor() or platform.machine()}, nproc={os.cpu_count()}", flush=True)
    generated = Probe(lm, sampling=SamplingConfig(max_new_tokens=args.max_new_tokens)).attribute_many(requests)
    for request, result in zip(requests, generated, strict=True):
        request["response"] = result.response  # fixed from here on
    response_tokens = [r.response_tokens for r in generated]

    probe = Probe(lm)

    def one_process() -> tuple[float, dict[str, dict]]:
        """`ascp attribute`'s path on every request, timed (the model stays idle while the service runs)."""
        start = time.perf_counter()
        records = {r.id: r.to_json() for r in probe.attribute_many(requests)}
        seconds = time.perf_counter() - start
        print(f"in one process (ascp attribute's path): {seconds:.1f} s, {len(requests) / seconds:.3f} requests/s",
              flush=True)
        return seconds, records

    before, baseline = one_process()
    base_tokens = sum(r["tokens_processed"] for r in baseline.values())

    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    levels = []
    service = Service(work / "serve.log").start()
    try:
        for clients in (int(c) for c in args.clients.split(",")):
            row = load(service, requests, clients)
            row["max_score_diff"], row["used_differ"] = distance(row.pop("records"), baseline)
            levels.append(row)
            print(json.dumps(row), flush=True)
        health = service.call("GET", "/v1/health")[1]
    finally:
        service.stop()
    # the baseline again after the levels: a shared machine drifts, so the ratio is to the mean of both
    after, _ = one_process()
    base_seconds = (before + after) / 2
    for row in levels:
        row["vs_one_process"] = round(row["rps"] / (len(requests) / base_seconds), 3)

    faults = run_faults(work, requests) if not args.no_faults else None

    machine = (f"{platform.processor() or platform.machine()}, nproc={os.cpu_count()}, "
               f"Python {platform.python_version()}")
    command = "python benchmarks/serve_load.py --out docs/results/serve " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in (("per_task", args.per_task), ("clients", args.clients),
                                                     ("max_new_tokens", args.max_new_tokens))) + (
        " --no-faults" if args.no_faults else "")
    result = {"command": command, "machine": machine, "requests": len(requests), "k": K,
              "response_tokens": {"mean": sum(response_tokens) / len(response_tokens), "max": max(response_tokens)},
              "one_process": {"seconds_before": round(before, 2), "seconds_after": round(after, 2),
                              "seconds": round(base_seconds, 2), "rps": round(len(requests) / base_seconds, 3),
                              "tokens_fed": base_tokens},
              "levels": levels, "service_health": health, "faults": faults}
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    lines = ["# `ascp serve` under load and faults\n", f"Command: `{command}`  ",
             f"Machine: {machine}; the embedded model (SmolLM2-135M) on the CPU, estimator loo, k = {K}.  ",
             f"{len(requests)} requests ({args.per_task} ASQA, {args.per_task} HotpotQA), each with the model's own "
             f"response (mean {result['response_tokens']['mean']:.0f} tokens), fixed.\n",
             f"In one process (`ascp attribute`'s path, `Probe.attribute_many`), measured before and after the "
             f"service: {before:.1f} s and {after:.1f} s, mean {len(requests) / base_seconds:.3f} requests/s, "
             f"{base_tokens:,} tokens fed; \"vs one process\" is against that mean.\n",
             "| clients | requests/s | vs one process | p50 s | p95 s | p99 s | statuses | lost | duplicated | "
             "max \\|score diff\\| | used sets differing | tokens fed |", "|---" * 12 + "|"]
    for row in levels:
        lines.append(f"| {row['clients']} ({row['requests']} requests) | {row['rps']:.3f} | "
                     f"{row['vs_one_process']:.2f}x | {row['p50_s']:.2f} | "
                     f"{row['p95_s']:.2f} | {row['p99_s']:.2f} | {row['statuses']} | {row['lost']} | "
                     f"{row['duplicated']} | {row['max_score_diff']:.1e} | {row['used_differ']} | "
                     f"{row['tokens_fed']:,} |")
    if faults is not None:
        lines += ["", "Faults (16 clients, SIGKILL after a third of the requests, restart on the same request "
                  "cache):", "", "```json", json.dumps(faults, indent=2), "```", ""]
    (args.out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.out}/results.json and README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
