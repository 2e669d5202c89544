"""`RayMeasurer`: a `Measurer` whose placements are measured by a pool of Ray actors at once.

The trainer hands over each update's new placements in one `measure_many` call; every idle
worker takes the next one, so N workers measure N placements at a time, one each. A worker that
dies, hangs past the spec's timeout or loses its node is dropped (its actor killed) and its
placement goes back to the front of the queue for another worker: every placement is measured
and returned once, in input order. When no worker is left, `NoWorkersLeft`.

At start the pool checks that the workers fit the cluster, pins each to its own cores, refuses
those whose devices differ from the rest, and (`calibrate`) has every worker measure the
single-device placements, naming the workers far from the median.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from placer.errors import PlacerError
from placer.measure.measurement import Measurement
from placer.placement import Placement
from placer.workers.actor import MeasuringWorker
from placer.workers.outliers import off_median
from placer.workers.ownership import mismatches, split_cores
from placer.workers.ray_cluster import connect, require_ray, room
from placer.workers.spec import WorkerSpec

START_TIMEOUT_S = 300.0   # to start a worker: schedule it, send it the graph, build its measurer
POLL_S = 0.5              # longest wait for a result without looking at the clock and for Ctrl-C


class NoWorkersLeft(PlacerError):
    """Every worker is lost; the run stops here (its last checkpoint lets --resume go on)."""


@dataclass
class Worker:
    """One actor of the pool and where it runs."""

    name: str
    actor: Any
    host: str = ""
    node: str = ""
    pid: int = 0
    cores: list[int] = field(default_factory=list)

    def record(self, reason: str) -> dict[str, str]:
        return {"worker": self.name, "host": self.host, "pid": self.pid, "node": self.node[:12], "reason": reason}


class RayMeasurer:
    """Measures placements on `workers` Ray actors built from `spec` (a `Measurer`).

    `address` joins a running cluster (HOST:PORT or auto); without it a local Ray runtime is
    started (or the one this process already runs is used)."""

    def __init__(self, spec: WorkerSpec, workers: int, address: str | None = None,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        if workers < 1:
            raise PlacerError("--workers must be at least 1")
        self.spec = spec
        self.devices = spec.device_names
        self.protocol = getattr(spec, "protocol", None)
        self.address = address or "local"
        self.requested = workers
        self.workers: dict[str, Worker] = {}
        self.measured = self.retried = 0
        self.lost: list[dict[str, str]] = []
        self.refused: list[dict[str, str]] = []
        self.single_device_step_times: dict[str, dict[str, float | None]] = {}
        self.off_median: dict[str, str] = {}
        self._ray = require_ray()
        self._started_ray = connect(address)
        try:
            self._start(workers, start_timeout_s)
        except BaseException:
            self.close()
            raise

    # --- start ---

    def _start(self, n: int, timeout_s: float) -> None:
        ray, needs = self._ray, self.spec.needs()
        fit = room(needs)
        if n > fit:
            raise PlacerError(f"{n} workers of {needs.cores} cores and {needs.gpus} GPUs each do not fit: "
                              f"the cluster holds {fit}; use --workers {fit} or fewer devices per worker")
        remote = ray.remote(MeasuringWorker).options(num_cpus=needs.cores, num_gpus=needs.gpus, max_restarts=0)
        spec_ref = ray.put(self.spec)   # sent once, however many workers read it
        self.workers = {f"worker-{i}": Worker(f"worker-{i}", remote.remote(spec_ref)) for i in range(n)}
        places = self._call_each(lambda w: w.actor.where.remote(), timeout_s, self._refuse)
        for name, where in places.items():
            w = self.workers[name]
            w.host, w.node, w.pid = where["host"], where["node"], where["pid"]
        if needs.cores:
            # Split the cores of each machine (its address: two Ray nodes may share one machine).
            by_machine: dict[str, list[str]] = {}
            for name in self.workers:
                by_machine.setdefault(places[name]["ip"], []).append(name)
            cores, refused = split_cores(by_machine, {places[n]["ip"]: places[n]["cores"] for n in self.workers},
                                         needs.cores)
            for name, reason in refused.items():
                self._refuse(name, reason)
            for name, c in cores.items():
                self.workers[name].cores = c
        fingerprints = self._call_each(lambda w: w.actor.start.remote(w.cores or None), timeout_s, self._refuse)
        for name, reason in mismatches(fingerprints).items():
            self._refuse(name, reason)
        if not self.workers:
            raise NoWorkersLeft("no worker could start: " + "; ".join(f"{r['worker']} {r['reason']}" for r in self.refused))

    def _call_each(self, call: Callable[[Worker], Any], timeout_s: float,
                   on_fault: Callable[[str, str], None]) -> dict[str, Any]:
        """`call` on every worker at once: worker -> its answer. A worker that fails or does not
        answer within `timeout_s` goes to `on_fault` with the reason."""
        ray = self._ray
        refs = {call(w): name for name, w in list(self.workers.items())}
        if not refs:
            return {}
        ready, late, deadline = [], list(refs), time.monotonic() + timeout_s
        while late and time.monotonic() < deadline:    # short waits, as in measure_many
            done, late = ray.wait(late, num_returns=len(late), timeout=min(POLL_S, deadline - time.monotonic()))
            ready += done
        answers = {}
        for ref in ready:
            try:
                answers[refs[ref]] = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, PlacerError):
                    raise exc.cause from None     # the user's input, not this worker: say so once
                on_fault(refs[ref], _first_line(exc.cause))
            except ray.exceptions.RayError as exc:
                on_fault(refs[ref], _first_line(exc))
        for ref in late:
            on_fault(refs[ref], f"did not answer within {timeout_s:g} s")
        return answers

    # --- measuring ---

    def measure(self, placement: Placement) -> Measurement:
        """Measure one placement on the next idle worker."""
        return self.measure_many([placement])[0]

    def measure_many(self, placements: list[Placement]) -> list[Measurement]:
        """Measure `placements` across the workers, one per worker at a time; results in input order."""
        ray = self._ray
        results: list[Measurement | None] = [None] * len(placements)
        queue, idle = deque(range(len(placements))), deque(self.workers)
        running: dict[Any, tuple[int, str, float]] = {}    # task -> (placement index, worker, started)
        while queue or running:
            while queue and idle:
                i, name = queue.popleft(), idle.popleft()
                running[self.workers[name].actor.measure.remote(placements[i])] = (i, name, time.monotonic())
            if not running:
                raise NoWorkersLeft(self._none_left_message(len(queue)))
            deadline = min(started for _, _, started in running.values()) + self.spec.timeout_s
            # Short waits: Ctrl-C reaches Python only between them.
            wait_s = min(POLL_S, max(0.0, deadline - time.monotonic()))
            ready, _ = ray.wait(list(running), num_returns=1, timeout=wait_s)
            for ref in ready:
                i, name, _ = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    raise exc.cause from None     # the measurer itself failed: the same on any worker
                except ray.exceptions.RayError as exc:
                    self._lose(name, _first_line(exc))
                    queue.appendleft(i)
                    self.retried += 1
                    continue
                self.measured += 1
                idle.append(name)
            now = time.monotonic()
            for ref, (i, name, started) in list(running.items()):
                if now - started >= self.spec.timeout_s:
                    del running[ref]
                    self._lose(name, f"no answer after {self.spec.timeout_s:g} s: hung")
                    queue.appendleft(i)
                    self.retried += 1
        return results

    def calibrate(self, placements: dict[str, Placement]) -> dict[str, dict[str, float | None]]:
        """Every worker measures every placement (the single-device ones: label -> placement), all
        workers at once; returns worker -> label -> step time, and names in `off_median` the
        workers far from the median."""
        labels = list(placements)
        timeout_s = self.spec.timeout_s * max(1, len(labels))
        answers = self._call_each(lambda w: w.actor.measure_each.remote([placements[k] for k in labels]),
                                  timeout_s, self._lose)
        self.single_device_step_times = {
            name: {k: m.step_time if m.ok else None for k, m in zip(labels, ms)} for name, ms in answers.items()}
        self.off_median = off_median(self.single_device_step_times)
        if not self.workers:
            raise NoWorkersLeft(self._none_left_message(len(labels)))
        return self.single_device_step_times

    # --- faults ---

    def _drop(self, name: str) -> Worker:
        worker = self.workers.pop(name)
        try:
            self._ray.kill(worker.actor, no_restart=True)
        except Exception:   # noqa: BLE001 - already gone with its node
            pass
        return worker

    def _lose(self, name: str, reason: str) -> None:
        self.lost.append(self._drop(name).record(reason))

    def _refuse(self, name: str, reason: str) -> None:
        self.refused.append(self._drop(name).record(reason))

    def _none_left_message(self, waiting: int) -> str:
        lost = "; ".join(f"{r['worker']} ({r['reason']})" for r in self.lost) or "none"
        return (f"no worker is left to measure on ({waiting} placements waiting; lost: {lost}); "
                "the run stopped at its last checkpoint: start workers again and continue with --resume")

    # --- summary ---

    def report(self) -> dict[str, Any]:
        """For summary.json and TensorBoard: the pool's size, its faults and the workers' figures."""
        return {"address": self.address, "workers": self.requested - len(self.refused),
                "workers_alive": len(self.workers), "measured": self.measured, "retried": self.retried,
                "lost": list(self.lost), "refused": list(self.refused),
                "single_device_step_times": self.single_device_step_times, "off_median": dict(self.off_median)}

    def close(self) -> None:
        """Stop the workers, and the local Ray runtime if this pool started it."""
        for name in list(self.workers):
            self._drop(name)
        if self._started_ray and self._ray.is_initialized():
            self._ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> RayMeasurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_line(exc: BaseException) -> str:
    """The error in one line; for an actor that failed to start, the error its start raised."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if lines and "creation task" in lines[0]:
        return f"could not start: {lines[-1]}"
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
