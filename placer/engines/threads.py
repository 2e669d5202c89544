"""The device-thread lifecycle every engine shares: one thread per device, started on first use,
each step handed to all of them as one `Job` with a deadline and an abort flag, the first failure
reported to the caller, the threads stopped once.

An engine supplies what a thread does with a step (`work`) and, optionally, what it sets up once
on its own thread (`setup`: intra-op threads, a CUDA stream); the waiting, the deadline, the abort
and the shutdown are here, once. Each thread is pinned to its device's cores before anything else
runs on it (`placer.engines.affinity`), so the threads its libraries start inherit the mask.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence

from placer.engines.affinity import pin_this_thread
from placer.engines.failures import ExecutionFailure, KernelError, StepTimeout
from placer.errors import PlacerError

# How often a waiting thread looks at the abort flag and the deadline.
POLL_S = 0.05
# How long a step past its time limit may take to wind down before the engine is given up.
GRACE_S = 5.0


class Aborted(Exception):
    """Another thread failed; this one stops without adding an error of its own."""


class Job:
    """One step in flight, shared by the device threads: its deadline, abort flag and errors."""

    def __init__(self, n_threads: int, timeout_s: float | None) -> None:
        self.deadline = time.perf_counter() + (timeout_s if timeout_s is not None else float("inf"))
        self.abort = threading.Event()
        self.errors: list[BaseException] = []
        self.remaining = n_threads
        self.lock = threading.Lock()
        self.finished = threading.Event()
        if n_threads == 0:
            self.finished.set()

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(exc)
        self.abort.set()

    def done(self) -> None:
        with self.lock:
            self.remaining -= 1
            if self.remaining == 0:
                self.finished.set()

    def check(self, device: str, where: str, name: str = "") -> None:
        """Between two pieces of work (`where` `name`, e.g. "after node" 'conv1'): stop if another
        thread failed or the deadline passed. The message is made only when it is raised: this runs
        after every node of every step."""
        if self.abort.is_set():
            raise Aborted()
        if time.perf_counter() > self.deadline:
            raise StepTimeout(f"step exceeded its time limit on {device} ({where}{f' {name!r}' if name else ''})")

    def wait_for(self, ready: threading.Event, device: str, what: str) -> None:
        """Wait until `ready` is set (another device's tensor), watching the abort flag and the deadline."""
        while not ready.wait(POLL_S):
            self.check(device, f"waiting for {what!r}")


class DeviceThread:
    """The thread that owns one device: pinned to `cores`, `setup()` once, then `work(job)` for
    every job it is given; an exception is the job's failure (`classify` may translate it)."""

    def __init__(self, name: str, work: Callable[[Job], None], *, cores: frozenset[int] | None = None,
                 setup: Callable[[], None] | None = None,
                 classify: Callable[[BaseException], BaseException] = lambda exc: exc) -> None:
        self.name = name
        self.work, self.cores, self.setup, self.classify = work, cores, setup, classify
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.ready = threading.Event()
        self.failed: BaseException | None = None   # why the thread could not set its device up
        self.native_id: int | None = None
        self.thread = threading.Thread(target=self._loop, name=f"placer-{name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        self.native_id = threading.get_native_id()
        try:
            if self.cores:
                pin_this_thread(self.cores)   # before any library thread starts: they inherit the mask
            if self.setup is not None:
                self.setup()
        except BaseException as exc:  # noqa: BLE001 - a device that cannot be set up: said by start()
            self.failed = exc
            return
        finally:
            self.ready.set()
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                self.work(job)
            except Aborted:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported to the caller of run()
                job.fail(Aborted() if job.abort.is_set() and not isinstance(exc, ExecutionFailure)
                         else self.classify(exc))
            finally:
                job.done()


class DeviceThreads:
    """An engine's device threads: `make()` builds them on the first step; `run(timeout_s)` hands
    every thread one job and waits for it; `close()` stops them. `on_overrun` is what the engine
    can do to stop work still running past the deadline (ONNX Runtime terminates its sessions)."""

    def __init__(self, make: Callable[[], Sequence[DeviceThread]],
                 on_overrun: Callable[[bool], None] | None = None) -> None:
        self._make = make
        self._on_overrun = on_overrun
        self.threads: list[DeviceThread] = []
        self.broken: str | None = None

    def start(self) -> list[DeviceThread]:
        """The threads, started and set up (idempotent)."""
        if not self.threads:
            self.threads = list(self._make())
            for t in self.threads:
                t.ready.wait()
            failed = next((t for t in self.threads if t.failed is not None), None)
            if failed is not None:
                self.close()
                raise KernelError(f"{failed.name} could not be set up: {type(failed.failed).__name__}: "
                                  f"{failed.failed}") from failed.failed
        return self.threads

    def new_job(self, timeout_s: float | None, make_job: Callable[[int, float | None], Job] = Job) -> Job:
        if self.broken:
            raise PlacerError(f"this engine cannot run again: {self.broken}; build a new one")
        return make_job(len(self.start()), timeout_s)

    def run(self, job: Job, timeout_s: float | None) -> None:
        """Hand `job` to every thread and wait; the first failure is raised (an error that is no
        `ExecutionFailure` as a `KernelError`). A step still running past its limit is stopped
        where the engine can stop it, and an engine whose work will not stop cannot run again."""
        for t in self.threads:
            t.jobs.put(job)
        if not job.finished.wait(None if timeout_s is None else timeout_s + POLL_S):
            job.fail(StepTimeout(f"step exceeded its time limit of {timeout_s:g}s inside a kernel"))
            if self._on_overrun is not None:
                self._on_overrun(True)
            if not job.finished.wait(GRACE_S):
                # the stop signal stays on: the work still running must not go on beside the next step
                self.broken = "a kernel overran the step's time limit and is still running"
            elif self._on_overrun is not None:
                self._on_overrun(False)
        errors = [e for e in job.errors if not isinstance(e, Aborted)]
        if errors:
            first = errors[0]
            if isinstance(first, ExecutionFailure):
                raise first
            raise KernelError(f"{type(first).__name__}: {first}") from first

    def close(self) -> None:
        """Stop the threads (idempotent)."""
        for t in self.threads:
            t.jobs.put(None)
        for t in self.threads:
            t.thread.join(timeout=1.0)
        self.threads = []


class ClosesOnExit:
    """What owns device threads stops them on `close()`, at the end of a `with` block, and when it
    is collected (a failed build leaves nothing to stop: that close is a no-op)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown, or a build that failed half way
            pass
