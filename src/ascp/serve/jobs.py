"""The service's one worker: a bounded queue of jobs and the thread that owns the model.

Every model pass of the service runs on this thread, so concurrent HTTP requests never race on the
model, its prefix store or its request cache. The worker takes the oldest pending job and every
other pending job with the same `key` (the same probe settings), up to `max_batch`, and runs them as
one `Probe.attribute_many` call: missing responses are generated in one batch and requests of one
context share its prompt prefixes. A job refused on its own (a response beyond the model's window)
fails alone: the batch is rerun one job at a time when it raised a user error.

The queue holds at most `max_queue` jobs waiting (the batch in progress does not count); `submit`
refuses one more with `QueueFull`, which the app answers 503 with `Retry-After`. A waiting job
whose client went away is taken out (`cancel`), freeing its slot at once.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ascp.errors import AscpError

log = logging.getLogger("ascp.serve")


class QueueFull(Exception):
    """The queue holds `max_queue` waiting jobs; try again later."""


class ServiceStopping(Exception):
    """The service is shutting down and takes no new work."""


@dataclass(eq=False)
class Job:
    """One unit of work: `run(batch)` computes the results of a batch of jobs that share `key`
    (one result per job, in order, or an exception per job). `key=None`: never batched."""

    key: Hashable | None
    payload: Any
    run: Callable[[Sequence[Job]], Sequence[Any]]
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    submitted: float = field(default_factory=time.monotonic)


class Worker:
    """One thread running jobs from a bounded queue, batching jobs with equal keys."""

    def __init__(self, max_queue: int = 64, max_batch: int = 8) -> None:
        if max_queue < 1 or max_batch < 1:
            raise AscpError(f"the queue and the batch hold at least one job (got --max-queue {max_queue}, "
                            f"--max-batch {max_batch}).")
        self.max_queue = max_queue
        self.max_batch = max_batch
        self._pending: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self.in_flight = 0
        self.finished = 0
        self.failed = 0
        self.batches = 0
        self.seconds = 0.0  # wall time of the batches run, for Retry-After
        self._thread = threading.Thread(target=self._loop, name="ascp-serve-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._pending)

    def submit(self, job: Job) -> concurrent.futures.Future:
        """Queue `job`; QueueFull when `max_queue` jobs already wait, ServiceStopping after `stop`."""
        with self._cond:
            if self._stopping:
                raise ServiceStopping()
            if len(self._pending) >= self.max_queue:
                raise QueueFull()
            self._pending.append(job)
            self._cond.notify()
        return job.future

    def cancel(self, job: Job) -> bool:
        """Take a job that has not started out of the queue (its client went away); False if it runs."""
        with self._cond:
            try:
                self._pending.remove(job)
            except ValueError:
                return False
        job.future.cancel()
        return True

    def stop(self, timeout: float | None = None) -> None:
        """Take no new job, finish the waiting ones and the batch in progress, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _take(self) -> list[Job] | None:
        with self._cond:
            while not self._pending:
                if self._stopping:
                    return None
                self._cond.wait()
            first = self._pending.popleft()
            batch = [first]
            if first.key is not None:
                for job in list(self._pending):
                    if len(batch) >= self.max_batch:
                        break
                    if job.key == first.key:
                        self._pending.remove(job)
                        batch.append(job)
            self.in_flight = len(batch)
            return batch

    def _loop(self) -> None:
        while (batch := self._take()) is not None:
            live = [job for job in batch if job.future.set_running_or_notify_cancel()]
            started = time.monotonic()
            try:
                if live:
                    self._run(live)
            finally:
                with self._cond:
                    self.in_flight = 0
                    self.batches += 1
                    self.seconds += time.monotonic() - started

    def _run(self, batch: list[Job]) -> None:
        try:
            outcomes: Sequence[Any] = batch[0].run(batch)
        except AscpError as exc:
            if len(batch) > 1:  # one bad request must not fail its neighbours: rerun them one at a time
                for job in batch:
                    self._run([job])
                return
            outcomes = [exc]
        except Exception as exc:  # an internal fault: reported to the client in one sentence, logged whole
            log.exception("a batch of %d job(s) failed", len(batch))
            outcomes = [exc] * len(batch)
        for job, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                job.future.set_exception(outcome)
                self.failed += 1
            else:
                job.future.set_result(outcome)
                self.finished += 1
