"""Executors: turn pending chunks into unit records and hand them to the store (the only writer).

`local`: one process; each model is loaded once and its chunks run in order, each chunk batched
across its cases by the loop. `ray`: actors that each load their model once and run chunks sent
to them; the driver writes the records as they come back, and a worker whose process dies is
restarted with its chunk retried (`run_ray`). Both run `execute.run_chunk` on the same chunks, so
(same spec, same seeds, same intra-op thread count) they write the same records.
"""

from __future__ import annotations

import collections
import gc
import itertools
import math
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ascp.errors import AscpError
from ascp.experiments.embedders import EmbedFn, MemoEmbedder, resolve_embedder
from ascp.experiments.execute import load_matcher, load_model, run_chunk
from ascp.experiments.plan import Chunk
from ascp.experiments.spec import Settings
from ascp.experiments.store import RunStore
from ascp.lm.protocol import LanguageModel
from ascp.lm.request_cache import CachedModel, savings

EXECUTORS = ("local", "ray")
Progress = Callable[[int, int], None]  # (rounds finished, units written)
RAY_INSTALL = "pip install -e '.[ray]'"


def _quiet(*_: int) -> None:
    return None


def run_local(chunks: Sequence[Chunk], store: RunStore, embed_fn: EmbedFn | None = None,
              progress: Progress | None = None, request_cache: str | None = None) -> list[str]:
    """Run the chunks in this process; returns what the request cache and the prefix store saved,
    one sentence each per model."""
    progress = progress or _quiet
    savings: list[str] = []
    matcher = load_matcher(chunks[0].settings) if chunks else None  # the settings are the spec's: one matcher
    for model, grouped in itertools.groupby(chunks, key=lambda c: c.model):
        group = list(grouped)
        settings = group[0].settings
        embed = MemoEmbedder(embed_fn or resolve_embedder(settings.embedder))
        lm = load_model(model.source, settings.device, settings.backend, request_cache, settings.prefix_cache_mb)
        for chunk in group:
            records = run_chunk(lm, chunk, embed, progress=lambda n: progress(n, 0), matcher=matcher)
            progress(0, sum(store.write(r) for r in records))
        savings += savings_of(model.name, lm)
        if isinstance(lm, CachedModel):
            lm.cache.close()
        del lm
        gc.collect()
    return savings


def savings_of(name: str, lm: LanguageModel) -> list[str]:
    """What the request cache and the prefix store of model `name` saved, one sentence each."""
    return [f"{name}: {line}" for line in savings(lm)]


def import_ray():
    try:
        import ray
    except ImportError:
        raise AscpError(f"the ray executor needs Ray, which is not installed; install it with `{RAY_INSTALL}`."
                        ) from None
    return ray


class ChunkWorker:
    """A Ray actor body: holds one model and claim matcher (loaded once) and runs the chunks it is sent.
    `index` names the worker in progress lines; a restarted actor keeps its index and gets a new pid."""

    def __init__(self, model_source: str, device: str, embedder: str, embed_fn: EmbedFn | None = None,
                 backend: str = "auto", settings: Settings | None = None, request_cache: str | None = None,
                 index: int = 0) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.index = index
        self.error: str | None = None  # a user error while loading, re-raised by run() as a task error
        try:
            self.lm = load_model(model_source, device, backend, request_cache,
                                 settings.prefix_cache_mb if settings is not None else None)
            self.embed = MemoEmbedder(embed_fn or resolve_embedder(embedder))
            self.matcher = load_matcher(settings) if settings is not None else None
        except AscpError as exc:
            self.error = str(exc)

    def run(self, chunk: Chunk) -> tuple[int, int, list[dict]]:
        """(this worker's index, its pid, the chunk's records)."""
        if self.error is not None:
            raise AscpError(self.error)
        return self.index, os.getpid(), run_chunk(self.lm, chunk, self.embed, matcher=self.matcher)

    def savings(self, name: str) -> list[str]:
        return [] if self.error is not None else savings_of(f"{name} (worker {os.getpid()})", self.lm)


def worker_resources(cpus: float, gpus: float, memory_gb: float) -> dict[str, float]:
    """What one actor reserves, in Ray's resource names (memory in bytes; absent when 0)."""
    for flag, value in (("--cpus-per-worker", cpus), ("--gpus-per-worker", gpus),
                        ("--memory-per-worker", memory_gb)):
        if not math.isfinite(value) or value < 0:
            raise AscpError(f"{flag} must be a number at least 0, got {value!r}.")
    need = {"CPU": float(cpus), "GPU": float(gpus), "memory": float(memory_gb) * 2**30}
    return {name: amount for name, amount in need.items() if amount > 0}


def check_placeable(need: dict[str, float], nodes: Sequence[dict[str, float]]) -> None:
    """One sentence if no node (its total resources) could ever hold one actor reserving `need`:
    Ray would keep such an actor pending, and its chunks waiting, for ever."""
    if any(all(node.get(name, 0.0) >= amount for name, amount in need.items()) for node in nodes):
        return
    def shown(name: str, amount: float) -> str:
        return f"{amount / 2**30:.1f} GB memory" if name == "memory" else f"{amount:g} {name}"
    largest = {name: max((node.get(name, 0.0) for node in nodes), default=0.0) for name in need}
    raise AscpError(f"no node of the Ray cluster can hold a worker that reserves "
                    f"{', '.join(shown(n, a) for n, a in need.items())} (the largest node offers "
                    f"{', '.join(shown(n, a) for n, a in largest.items())}); lower --cpus-per-worker, "
                    f"--gpus-per-worker or --memory-per-worker, or add a larger node.")


WorkerDone = Callable[[str, int], None]  # (worker label "worker I (pid P)", units that worker has returned so far)
MAX_RESTARTS = 3  # restarts of a Ray worker whose process died (its chunk in flight is retried on the new one)


def run_ray(chunks: Sequence[Chunk], store: RunStore, workers: int = 1, address: str | None = None,
            embed_fn: EmbedFn | None = None, progress: Progress | None = None,
            cpus_per_worker: float = 1, gpus_per_worker: float = 0, memory_per_worker_gb: float = 0,
            request_cache: str | None = None, on_worker: WorkerDone | None = None) -> list[str]:
    """Run chunks on Ray actors: `workers` actors per model. Uses the Ray session already
    initialised in this process if any, else joins `address`, else starts a local cluster.

    Each actor reserves `cpus_per_worker`, `gpus_per_worker` and `memory_per_worker_gb` (0: no
    reservation) and is sent chunks only once it is placed and has loaded its model: actors the
    cluster cannot hold now wait and join when room appears (an autoscaler's new node, another job
    ending), and the run finishes without them. An actor no node of a local cluster could ever hold
    is an error; on a joined cluster, a warning (its autoscaler may add such a node).

    Fault tolerance: a worker whose process dies (killed, out of memory) is restarted by Ray up to
    `MAX_RESTARTS` times, reloading its model, and the chunk it was running is retried there; the
    driver is the store's only writer and writes a unit only once, so a retried chunk adds nothing
    twice. `on_worker(label, units)` is called after each chunk with the units that worker has done.
    Returns what each worker's request cache and prefix store saved."""
    ray = import_ray()

    progress = progress or _quiet
    need = worker_resources(cpus_per_worker, gpus_per_worker, memory_per_worker_gb)  # checked before Ray starts
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
            raise AscpError(f"cannot start or join {where} ({exc.__class__.__name__}: {exc}); check --address."
                            ) from None
        started = True
    savings: list[str] = []
    try:
        try:
            check_placeable(need, [node["Resources"] for node in ray.nodes() if node.get("Alive")])
        except AscpError as exc:
            if started:  # a local cluster never grows
                raise
            # a joined cluster may: its autoscaler adds a node for pending actors
            warnings.warn(f"{exc} Waiting for the cluster to add one.", stacklevel=2)
        remote = ray.remote(num_cpus=need.get("CPU", 0), num_gpus=need.get("GPU", 0), memory=need.get("memory"),
                            max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)(ChunkWorker)
        done_by: dict[int, int] = {}
        for model, grouped in itertools.groupby(chunks, key=lambda c: c.model):
            group = list(grouped)
            settings = group[0].settings
            # a model served by several engines: the workers take its servers in turn
            sources = model.sources
            actors = [remote.remote(sources[i % len(sources)], settings.device, settings.embedder, embed_fn,
                                    settings.backend, settings, request_cache, i)
                      for i in range(max(1, min(workers, len(group))))]
            try:
                ready = {actor.__ray_ready__.remote(): actor for actor in actors}  # placed and loaded
                placed: list[Any] = []
                idle: list[Any] = []
                running: dict[Any, Any] = {}  # chunk result -> the actor running it
                todo = collections.deque(group)
                while todo or running:
                    (ref,), _ = ray.wait([*running, *ready], num_returns=1)
                    if ref in ready:
                        ray.get(ref)
                        actor = ready.pop(ref)
                        placed.append(actor)
                        idle.append(actor)
                    else:
                        idle.append(running.pop(ref))
                        index, pid, records = ray.get(ref)
                        rounds = sum(r["T"] for r in records)
                        progress(rounds, sum(store.write(r) for r in records))
                        done_by[index] = done_by.get(index, 0) + len(records)
                        if on_worker is not None:
                            on_worker(f"worker {index} (pid {pid})", done_by[index])
                    while todo and idle:
                        actor = idle.pop()
                        running[actor.run.remote(todo.popleft())] = actor
                for lines in ray.get([actor.savings.remote(model.name) for actor in placed]):
                    savings += lines
            except ray.exceptions.RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, AscpError):
                    raise AscpError(str(cause)) from None
                raise
            finally:
                for actor in actors:
                    ray.kill(actor, no_restart=True)
    finally:
        if started:
            ray.shutdown()
    return savings
