"""`PlacedExecutor`: runs one step of an `OpGraph` under a `Placement` on real devices.

One worker thread per device runs that device's nodes in a static topological order and waits
only for the tensors it reads from other devices. Design:

- *Schedule* (`placer.program.schedule`): computed once per placement; for each device its steps,
  the remote tensors each step needs first, the outputs other devices read (published after the
  producing step) and the tensors dropped after their last local use.
- *Walk* (`placer.program.walk`): a worker runs its steps with the same interpreter loop as the
  reference interpreter and the simulator; its own parts are the kernel call, receiving a tensor
  on its first read (`_Inbox`) and publishing one after the step that makes it.
- *Constants*: parameters and folded shape/constant subgraphs (`placer.kernels.prepare`) are put
  on each device that reads them once, when the executor is built; small integer tensors that
  kernels read on the host (shapes, axes) stay on the CPU so no kernel ever syncs a GPU for them.
- *Virtual CPU devices* `cpu:K` share the process's memory: a tensor crossing between two of them
  is handed over, not copied. Each worker is pinned to its own cores (`placer.engines.affinity`)
  and sets its own intra-op thread count
  (`torch.set_num_threads` inside the worker thread: OpenMP's thread count is per thread), so
  two single-thread workers really run on two cores at once.
- *CUDA*: each device has its own stream; a crossing tensor carries an event recorded on the
  producer's stream, and the consumer's stream waits on it before a non-blocking copy.
- *Failures*: an over-cap placement raises `OutOfMemory` when the executor is built (predicted
  from tensor lifetimes, before anything is allocated); a kernel failure raises `KernelError`;
  workers check a deadline between nodes and raise `StepTimeout`. The first failing worker
  aborts the others.

Training step (`training=TrainingSpec(...)`): a step is any callable with named inputs and
outputs (`walk.Step`), so the backward pass is more steps in the same list
(`placer.engines.torch.backward`): each forward step on a gradient path also returns its autograd
record ``saved:<node>``; then a loss step per loss output on that output's device, the VJP of
each node on the node's device in reverse topological order reading ``grad:<tensor>`` names,
``accumulate:`` steps where a tensor has several readers, and the ``update:`` of each parameter
on the device of its last contributor, then a ``refresh:`` on every other device reading the
parameter (the updated value crosses from the owner into that device's copy, so the next step
reads it). `build_schedule` derives the crossings (gradients flow back over the same edges) and
frees the same way (a record dies after its backward step), and a worker finds a backward
step's callable where it finds a kernel (`step_functions`). Memory of gradients and optimizer
state is accounted (a received updated parameter as a copy of it); a record keeps its node's
inputs and outputs alive until its backward step (an upper bound: torch saves a subset), and an
update is in place.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from placer.devices import Device, as_devices
from placer.graph.opgraph import OpGraph
from placer.graph.placement_check import assignment as checked_assignment
from placer.engines.affinity import threads_and_cores
from placer.engines.failures import KernelError, OutOfMemory, format_bytes
from placer.engines.threads import ClosesOnExit, DeviceThread, DeviceThreads, Job
from placer.engines.torch.backward import bind_updates, step_functions, training_results
from placer.program.memory import MemoryEstimate
from placer.program.pipeline import Pipeline, per_micro_batch, tag
from placer.kernels.prepare import PreparedGraph, check_feeds, prepare, training_prepared
from placer.program.placed_step import PlacedStep
from placer.program.training import TrainingSpec
from placer.program.training_plan import TrainingPlan
from placer.program.walk import walk
from placer.placement import Placement

log = logging.getLogger(__name__)

# Integer tensors up to this many elements that only feed host inputs stay on the CPU.
_HOST_MAX_NUMEL = 4096
@dataclass
class StepProfile:
    """Per-step timings of one run (seconds, node name -> duration) and which device ran it."""

    node_times: dict[str, float] = field(default_factory=dict)
    node_device: dict[str, str] = field(default_factory=dict)


class _Slot:
    """A tensor published by its producer for the devices that read it."""

    __slots__ = ("ready", "value", "event")

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.value: torch.Tensor | None = None
        self.event = None   # torch.cuda.Event recorded after the producing kernel


class _Step(Job):
    """One step in flight: its feeds, the crossing tensors' slots and the outputs gathered."""

    def __init__(self, n_threads: int, timeout_s: float | None, feeds: dict[str, torch.Tensor],
                 crossing: set[str], profile: StepProfile | None) -> None:
        super().__init__(n_threads, timeout_s)
        self.feeds = feeds
        self.slots = {t: _Slot() for t in crossing}
        self.results: dict[str, torch.Tensor] = {}
        self.profile = profile


class _Worker:
    """What one device's thread does: set up its intra-op threads (and CUDA stream) once, then
    run the device's schedule for every step (`placer.engines.threads` owns the thread)."""

    def __init__(self, executor: PlacedExecutor, device: Device, threads: int | None) -> None:
        self.device = device
        self.name = device.name
        self.threads = threads
        self.is_cuda = device.kind == "cuda"
        self.torch_device = torch.device(device.torch_device)
        self.stream = None
        self.threads_in_use = 0
        sched = executor.schedule.per_device[device.name]
        self.schedule = sched
        self.kernels = [executor.step_functions[s.name] for s in sched.steps]
        self.mode = torch.inference_mode if executor.training is None else torch.enable_grad
        self.feeds = list(sched.feeds)
        self.outputs = list(sched.outputs)
        self.consts = executor._consts[device.name]
        self.thread = DeviceThread(device.name, self.work, cores=executor._cores.get(device.name),
                                   setup=self.setup, classify=self._classify)

    def setup(self) -> None:
        if self.device.kind == "cpu" and self.threads:
            # per-thread: OpenMP keeps the thread count in each thread's own state
            torch.set_num_threads(self.threads)
        self.threads_in_use = torch.get_num_threads()
        if self.is_cuda:
            torch.cuda.set_device(self.torch_device)
            self.stream = torch.cuda.Stream(device=self.torch_device)

    def work(self, job: _Step) -> None:
        with self.mode():
            if self.is_cuda:
                with torch.cuda.stream(self.stream):
                    self._run(job)
                self.stream.synchronize()
            else:
                self._run(job)

    def _classify(self, exc: BaseException) -> BaseException:
        if self.is_cuda and isinstance(exc, torch.cuda.OutOfMemoryError):
            return OutOfMemory(f"{self.name} ran out of memory: {str(exc).splitlines()[0]}")
        return exc

    def _run(self, job: _Step) -> None:
        env = _Inbox(self, job)
        env.update(self.consts)
        for t in self.feeds:
            env[t] = self._to_device(job.feeds[t])
        sched = self.schedule
        run_step = self._run_kernel if job.profile is None else self._timed(job.profile)
        for i in walk(sched.steps, sched.frees, env, run_step):
            for t in sched.publish[i]:
                self._publish(job, t, env[t])
            job.check(self.name, "after node", sched.steps[i].name)
        for t in self.outputs:
            job.results[t] = env[t]

    def _run_kernel(self, i: int, inputs: list[torch.Tensor | None]) -> list[torch.Tensor]:
        """Step i's kernel on its inputs; a failure names the node."""
        try:
            return self.kernels[i](inputs)
        except Exception as exc:
            name = self.schedule.steps[i].name
            if self.is_cuda and isinstance(exc, torch.cuda.OutOfMemoryError):
                raise OutOfMemory(f"{self.name} ran out of memory in node {name!r}") from exc
            raise KernelError(f"node {name!r} failed on {self.name}: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc

    def _timed(self, profile: StepProfile) -> Callable[[int, list[torch.Tensor | None]], list[torch.Tensor]]:
        """`_run_kernel` that records each node's duration (CUDA nodes synchronised) into `profile`."""
        clock = time.perf_counter

        def run_step(i: int, inputs: list[torch.Tensor | None]) -> list[torch.Tensor]:
            start = clock()
            outputs = self._run_kernel(i, inputs)
            if self.is_cuda:
                self.stream.synchronize()
            name = self.schedule.steps[i].name
            profile.node_times[name] = clock() - start
            profile.node_device[name] = self.name
            return outputs
        return run_step

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device == self.torch_device:
            return tensor
        return tensor.to(self.torch_device, non_blocking=True)

    def _publish(self, job: _Step, tensor: str, value: torch.Tensor) -> None:
        slot = job.slots[tensor]
        if self.is_cuda:
            slot.event = torch.cuda.Event()
            slot.event.record(self.stream)
        slot.value = value
        slot.ready.set()

    def _receive(self, job: _Step, tensor: str) -> torch.Tensor:
        slot = job.slots[tensor]
        job.wait_for(slot.ready, self.name, tensor)
        value = slot.value
        if value.device == self.torch_device:
            return value     # virtual CPU devices share memory: a hand-over, no copy
        if slot.event is not None:
            if self.is_cuda:
                self.stream.wait_event(slot.event)
            else:
                slot.event.synchronize()
        copy = value.to(self.torch_device, non_blocking=self.is_cuda)
        if self.is_cuda and value.is_cuda:
            # the source block must not be reused before this stream's copy has read it
            value.record_stream(self.stream)
        return copy


class _Inbox(dict):
    """A worker's tensors by name; one it does not hold yet comes from the device producing it."""

    def __init__(self, worker: _Worker, job: _Step) -> None:
        super().__init__()
        self.worker, self.job = worker, job

    def __missing__(self, tensor: str) -> torch.Tensor:
        value = self[tensor] = self.worker._receive(self.job, tensor)
        return value


class PlacedExecutor(ClosesOnExit):
    """Runs `graph` under `placement` on `devices`, one worker thread per device holding nodes.

    Build it once per placement (parameters are loaded then), call `run(feeds)` for each step,
    and `close()` it (or use it as a context manager) to stop its threads. With `training`, a
    step is a training step (`placer.engines.torch.backward`): forward, loss, backward, update; `run`
    then gives the loss, each trained parameter's gradient and its updated value.
    """

    def __init__(self, graph: OpGraph, placement: Placement, devices: Sequence[Device | str] | None = None,
                 *, prepared: PreparedGraph | None = None, training: TrainingSpec | None = None,
                 pipeline: Pipeline | None = None) -> None:
        self.graph = graph
        self.devices = as_devices(devices if devices is not None else placement.devices)
        self.assignment = checked_assignment(graph, placement, [d.name for d in self.devices])
        self.training = training
        self.pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
        self.prepared, step = _placed_step(graph, prepared, self.assignment, [d.name for d in self.devices],
                                           training, self.pipeline)
        self.plan, self.schedule, self._names = step.plan, step.schedule, step.names
        functions = (self.prepared.kernels if self.plan is None
                     else {**self.prepared.kernels, **step_functions(self.plan, self.prepared, training)})
        # a micro-batch's step runs its per-micro-batch step's callable
        self.step_functions = {**{new: functions[old] for new, old in self._names.items() if old in functions},
                               **functions}
        used = [d for d in self.devices if d.name in set(self.assignment.values())]
        self.memory = step.memory()
        over = [(d, self.memory[d.name]) for d in used if d.mem_cap is not None and self.memory[d.name].peak > d.mem_cap]
        if over:
            raise OutOfMemory("; ".join(f"{d.name} needs about {format_bytes(m.peak)} (peak at {m.peak_step!r}) "
                                        f"but its cap is {format_bytes(d.mem_cap)}" for d, m in over),
                              peak_memory={d: m.peak for d, m in self.memory.items()})
        self._measured_peak: dict[str, int] = {}
        self._consts = {d.name: self._load_constants(d) for d in self.devices}
        if self.plan is not None:
            self._own_parameters(self.plan)
        self._threads, self._cores = threads_and_cores(self.devices)
        self._workers: list[_Worker] = []
        self._active = [d for d in self.devices if self.schedule.per_device[d.name].steps]
        self._device_threads = DeviceThreads(self._make_workers)
        self._crossing = {t for t, _, _ in self.schedule.crossings}
        self._direct_outputs = {t for t in self.schedule.outputs if t not in self.schedule.home}

    # -- building ---------------------------------------------------------------------------

    def _load_constants(self, device: Device) -> dict[str, torch.Tensor]:
        """Parameters and folded values this device reads, moved there once."""
        sched = self.schedule.per_device[device.name]
        if device.kind == "cpu":
            return {t: self.prepared.constant(t) for t in sched.consts}
        host_only = _host_only_inputs(self.prepared, sched)
        target = torch.device(device.torch_device)
        consts = {}
        try:
            for t in sched.consts:
                value = self.prepared.constant(t)
                keep_on_host = t in host_only and not value.is_floating_point() and value.numel() <= _HOST_MAX_NUMEL
                consts[t] = value if keep_on_host else value.to(target)
        except torch.cuda.OutOfMemoryError as exc:
            raise OutOfMemory(f"{device.name} ran out of memory loading the parameters") from exc
        return consts

    def _own_parameters(self, plan: TrainingPlan) -> None:
        """Trained parameters become this executor's own copies (updates must not reach the shared
        prepared graph), and each update step gets its optimizer over its owner's copy."""
        for consts in self._consts.values():
            for p in plan.trained:
                if p in consts and consts[p] is self.prepared.params[p]:
                    consts[p] = consts[p].clone()
        self.step_functions.update(bind_updates(plan, self.training, lambda p: self._consts[plan.owner[p]][p]))

    def _make_workers(self) -> list[DeviceThread]:
        self._workers = [_Worker(self, d, self._threads[d.name]) for d in self._active]
        return [w.thread for w in self._workers]

    def _start(self) -> None:
        main_threads = torch.get_num_threads()
        self._device_threads.start()
        # workers' set_num_threads also set the default of threads torch creates later; restore it
        torch.set_num_threads(main_threads)

    # -- running ----------------------------------------------------------------------------

    def run(self, feeds: Mapping[str, object] | Sequence[Mapping[str, object]], timeout_s: float | None = None,
            profile: StepProfile | None = None) -> dict[str, torch.Tensor]:
        """Run one step; graph output name -> tensor (on the device that produced it).

        `timeout_s` bounds the step: workers check the deadline between nodes. With `profile`,
        each node's duration is recorded into it (CUDA nodes are synchronised to be timed).
        Pipelined, `feeds` is one mapping per micro-batch (or one for all of them) and micro-batch
        k's outputs are named ``<output>#k`` (`placer.program.pipeline`).
        """
        tensors = self._feeds(feeds)
        if not self._workers and self._active:
            self._start()
        cuda = [d for d in self._active if d.kind == "cuda"]
        for d in cuda:
            torch.cuda.reset_peak_memory_stats(d.torch_device)
        job = self._device_threads.new_job(
            timeout_s, lambda n, limit: _Step(n, limit, tensors, self._crossing, profile))
        self._device_threads.run(job, timeout_s)
        for d in cuda:
            self._measured_peak[d.name] = torch.cuda.max_memory_allocated(d.torch_device)
            if d.mem_cap is not None and self._measured_peak[d.name] > d.mem_cap:
                raise OutOfMemory(f"{d.name} peaked at {format_bytes(self._measured_peak[d.name])}, "
                                  f"over its cap of {format_bytes(d.mem_cap)}")
        results = job.results
        for t in self._direct_outputs:
            results[t] = tensors[t] if t in tensors else self.prepared.constant(t)
        if self.plan is not None:
            return training_results(self.plan, results)
        return {t: results[t] for t in self.schedule.outputs}

    def _feeds(self, feeds: Mapping[str, object] | Sequence[Mapping[str, object]]) -> dict[str, torch.Tensor]:
        """The step's input tensors by name: each micro-batch's under its own names."""
        if self.pipeline is None:
            return check_feeds(self.graph, dict(feeds))
        checked = [check_feeds(self.graph, dict(f)) for f in per_micro_batch(feeds, self.pipeline.micro_batches)]
        return {tag(name, k): value for k, tensors in enumerate(checked) for name, value in tensors.items()}

    @property
    def peak_memory(self) -> dict[str, int]:
        """Peak bytes per device: measured on CUDA (after a run), accounted from lifetimes elsewhere."""
        return {d.name: self._measured_peak.get(d.name, self.memory[d.name].peak) for d in self.devices}

    def worker_threads(self) -> dict[str, int]:
        """Device -> the intra-op thread count its worker runs with (workers start on first use)."""
        if not self._workers and self._active:
            self._start()
        return {w.name: w.threads_in_use for w in self._workers}

    def worker_cores(self) -> dict[str, list[int]]:
        """Device -> the cores its worker thread may run on, read from the thread itself."""
        self.worker_threads()
        return {w.name: sorted(os.sched_getaffinity(w.thread.native_id)) for w in self._workers}

    @property
    def predicted_memory(self) -> dict[str, MemoryEstimate]:
        return dict(self.memory)

    def close(self) -> None:
        """Stop the worker threads (idempotent)."""
        self._device_threads.close()
        self._workers = []



def accounted_memory(graph: OpGraph, placement: Placement, devices: Sequence[Device | str] | None = None, *,
                     prepared: PreparedGraph | None = None, training: TrainingSpec | None = None,
                     pipeline: Pipeline | None = None) -> dict[str, MemoryEstimate]:
    """Each device's peak memory under `placement` as the executor accounts it before running
    (resident constants and live tensors; with `training` also gradients, saved activations and
    optimizer state; with `pipeline` every micro-batch in flight), without loading or running anything."""
    devs = as_devices(devices if devices is not None else placement.devices)
    assignment = checked_assignment(graph, placement, [d.name for d in devs])
    _, step = _placed_step(graph, prepared, assignment, [d.name for d in devs], training, pipeline)
    return step.memory()


def _placed_step(graph: OpGraph, prepared: PreparedGraph | None, assignment: dict[str, str], devices: list[str],
                 training: TrainingSpec | None, pipeline: Pipeline | None) -> tuple[PreparedGraph, PlacedStep]:
    """The graph prepared for the step (a training step: `training_prepared`) and the step it places."""
    if training is not None:
        prepared = training_prepared(graph, prepared)
    elif prepared is None:
        prepared = prepare(graph)
    return prepared, prepared.place(assignment, devices, training, pipeline)


def _host_only_inputs(prepared: PreparedGraph, sched) -> set[str]:
    """Constants that this device's steps read only at host-input positions."""
    host, data = set(), set()
    for step in sched.steps:
        positions = prepared.host_inputs(step.name)
        for i, t in enumerate(step.inputs):
            if t:
                (host if i in positions else data).add(t)
    return host - data
