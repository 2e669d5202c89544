"""`ConcurrentSessions`: ONNX Runtime sessions of one placement, run together, one thread per device.

Each device's thread runs its sessions in their order, each as soon as its inputs exist (ORT
releases the GIL while it runs, so the devices really run at once). A pipelined step feeds M
micro-batches: each thread runs its sessions for micro-batch 0, then 1, ..., so device d works on
micro-batch k+1 while the next device works on k (`placer.program.pipeline`); a hand-over is
dropped once its last reader has run, so only the micro-batches in flight hold theirs. Tensors pass between sessions
as `OrtValue`s: between CPU devices a hand-over, no copy; a CUDA session binds its inputs and
outputs (`IOBinding`), so a tensor stays on its GPU and ORT copies it where another GPU reads it;
a CPU session gets a host copy of a GPU tensor. Built once per placement (or split model), run many
times; the partitions come from `placer.engines.onnxruntime.partition` or from a split's stage files.

Failures are every engine's (`placer.engines.failures`), the threads' lifecycle every engine's
(`placer.engines.threads`): a session's error is a
`KernelError` (`OutOfMemory` when ORT could not allocate), and a step over its time limit a
`StepTimeout`: threads check the deadline between sessions, and a session still running then is
stopped through its `RunOptions.terminate`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from placer.devices import Device
from placer.engines.failures import KernelError, OutOfMemory
from placer.engines.threads import ClosesOnExit, Aborted, DeviceThread, DeviceThreads, Job
from placer.program.pipeline import tag


@dataclass
class Piece:
    """One session of the run: where it runs and the tensors it takes and gives."""

    name: str                      # for messages: "partition 3", "stage02_cpu_1.onnx"
    device: Device
    session: ort.InferenceSession
    inputs: list[str]
    outputs: list[str]
    options: ort.RunOptions = field(default_factory=ort.RunOptions)


@dataclass
class Span:
    """When a piece ran during the last step (`time.perf_counter` seconds)."""

    piece: str
    device: str
    start: float
    end: float
    micro_batch: int = 0


class _Slot:
    __slots__ = ("ready", "value")

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.value: ort.OrtValue | None = None


class _Step(Job):
    """One step in flight, shared by the device threads; tensors are keyed per micro-batch."""

    def __init__(self, n_threads: int, timeout_s: float | None, feeds: list[dict[str, ort.OrtValue]],
                 constants: dict[str, ort.OrtValue], crossing: set[str], readers: dict[str, int]) -> None:
        super().__init__(n_threads, timeout_s)
        self.feeds = feeds             # one mapping per micro-batch
        self.constants = constants
        self.micro_batches = len(feeds)
        self.slots = {(t, k): _Slot() for k in range(self.micro_batches) for t in crossing}
        self.unread = {(t, k): n for k in range(self.micro_batches) for t, n in readers.items()}
        self.spans: list[Span] = []

    def given(self, tensor: str, k: int) -> ort.OrtValue | None:
        """A constant or micro-batch `k`'s feed; None for what a piece makes."""
        value = self.constants.get(tensor)
        return value if value is not None else self.feeds[k].get(tensor)

    def value(self, tensor: str, k: int) -> ort.OrtValue | None:
        """`tensor` of micro-batch `k`: given, or as its piece made it (once it has run)."""
        value = self.given(tensor, k)
        return value if value is not None else self.slots[tensor, k].value

    def release(self, tensors: Sequence[str], k: int) -> None:
        """A piece of micro-batch `k` has run on `tensors`: drop those it was the last reader of."""
        with self.lock:
            for t in tensors:
                if (t, k) in self.unread:
                    self.unread[t, k] -= 1
                    if self.unread[t, k] == 0:
                        self.slots[t, k].value = None


class ConcurrentSessions(ClosesOnExit):
    """Runs `pieces` (in a valid topological order) with one thread per device.

    `constants` are tensors no piece makes but some read or the graph outputs (values placer
    folded, initializers that are outputs); `outputs` the names `run` returns; `cores` pins each
    device's thread to its cores (`placer.engines.affinity.core_sets`)."""

    def __init__(self, pieces: Sequence[Piece], outputs: Sequence[str],
                 constants: Mapping[str, np.ndarray] | None = None,
                 cores: Mapping[str, frozenset[int]] | None = None) -> None:
        self.pieces = list(pieces)
        self.outputs = list(outputs)
        # np.asarray(order="C"), not np.ascontiguousarray: that makes a scalar (an int64 rate) 1-D
        self.constants = {k: ort.OrtValue.ortvalue_from_numpy(np.asarray(v, order="C"))
                          for k, v in (constants or {}).items()}
        made = {t for p in self.pieces for t in p.outputs}
        # slots for what a piece makes and another reads; the rest is a feed or a constant
        self._crossing = made & ({t for p in self.pieces for t in p.inputs} | set(self.outputs))
        # how many pieces read each hand-over that is no graph output (kept to the step's end)
        self._readers = {t: sum(t in p.inputs for p in self.pieces) for t in self._crossing - set(self.outputs)}
        self._by_device: dict[str, list[Piece]] = {}
        for p in self.pieces:
            self._by_device.setdefault(p.device.name, []).append(p)
        cores = dict(cores or {})
        self._threads = DeviceThreads(
            lambda: [DeviceThread(name, _DeviceWork(pieces).work, cores=cores.get(name))
                     for name, pieces in self._by_device.items()],
            on_overrun=self._terminate)
        self.spans: list[Span] = []   # of the last step, for profiles and tests

    def run(self, feeds: Mapping[str, ort.OrtValue | np.ndarray] | Sequence[Mapping[str, ort.OrtValue | np.ndarray]],
            timeout_s: float | None = None) -> dict[str, ort.OrtValue]:
        """One step: graph output name -> `OrtValue` (on the device that made it). A sequence of
        mappings is a pipelined step, one per micro-batch: micro-batch k's outputs are named
        ``<output>#k`` (an output that is a constant once, by its name)."""
        pipelined = not isinstance(feeds, Mapping)
        per = [{k: v if isinstance(v, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(np.asarray(v, order="C"))
                for k, v in f.items()} for f in (feeds if pipelined else [feeds])]
        job = self._threads.new_job(timeout_s, lambda n, limit: _Step(n, limit, per, self.constants, self._crossing,
                                                                       self._readers))
        try:
            self._threads.run(job, timeout_s)
        finally:
            self.spans = sorted(job.spans, key=lambda i: i.start)
        results = [{t: job.value(t, k) for t in self.outputs} for k in range(len(per))]
        if not pipelined:
            return results[0]
        return {t if t in self.constants else tag(t, k): v for k, r in enumerate(results) for t, v in r.items()}

    def worker_cores(self) -> dict[str, list[int]]:
        """Device -> the cores its thread may run on, read from the thread itself (started here if not yet)."""
        return {t.name: sorted(os.sched_getaffinity(t.native_id)) for t in self._threads.start()}

    def _terminate(self, stop: bool) -> None:
        """Stop (or allow again) every session still running: ORT checks `terminate` as it runs."""
        for p in self.pieces:
            p.options.terminate = stop

    def close(self) -> None:
        """Stop the device threads (idempotent)."""
        self._threads.close()



class _DeviceWork:
    """What one device's thread does with a step: its pieces, in order, micro-batch by micro-batch."""

    def __init__(self, pieces: list[Piece]) -> None:
        self.pieces = pieces
        self.device = pieces[0].device

    def work(self, job: _Step) -> None:
        for k in range(job.micro_batches):   # micro-batch order: the next device takes over k
            for piece in self.pieces:
                self._run(job, piece, k)

    def _run(self, job: _Step, piece: Piece, k: int) -> None:
        """`piece` on micro-batch `k`, once its inputs exist; its outputs handed over."""
        inputs = {t: self._receive(job, t, k) for t in piece.inputs}
        job.check(self.device.name, f"before {piece.name}" + (f" of micro-batch {k}" if job.micro_batches > 1 else ""))
        start = time.perf_counter()
        outputs = _run_piece(piece, inputs)
        end = time.perf_counter()
        with job.lock:
            job.spans.append(Span(piece.name, self.device.name, start, end, k))
        for t, value in zip(piece.outputs, outputs):
            slot = job.slots.get((t, k))
            if slot is not None:
                slot.value = value
                slot.ready.set()
        job.release(piece.inputs, k)

    def _receive(self, job: _Step, tensor: str, k: int) -> ort.OrtValue:
        """A feed or constant at once; another piece's tensor of micro-batch `k` once it exists
        (a host copy of a GPU tensor for a CPU session)."""
        value = job.given(tensor, k)
        if value is None:
            slot = job.slots[tensor, k]
            job.wait_for(slot.ready, self.device.name, tensor)
            value = slot.value
        if self.device.kind == "cpu" and value.device_name().lower() != "cpu":
            value = ort.OrtValue.ortvalue_from_numpy(value.numpy())
        return value


def _run_piece(piece: Piece, inputs: dict[str, ort.OrtValue]) -> list[ort.OrtValue]:
    """Run one session on OrtValues; its errors become the engine's failures, naming the piece."""
    try:
        if piece.device.kind != "cuda":
            return list(piece.session.run_with_ort_values(piece.outputs, inputs, piece.options))
        binding = piece.session.io_binding()
        for name, value in inputs.items():
            binding.bind_ortvalue_input(name, value)
        for name in piece.outputs:
            binding.bind_output(name, "cuda", piece.device.index or 0)
        piece.session.run_with_iobinding(binding, piece.options)
        return list(binding.get_outputs())
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if piece.options.terminate:
            raise Aborted() from exc
        if "allocat" in first.lower() or "out of memory" in first.lower():
            raise OutOfMemory(f"{piece.device.name} ran out of memory in {piece.name}: {first}") from exc
        raise KernelError(f"{piece.name} failed on {piece.device.name}: {first}") from exc
