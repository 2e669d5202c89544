"""A fast simulator of the placed executor, an analytic cost model, and the measurer built on them.

The executor's semantics, as simulated here: every device runs its nodes one at a time in the
graph's topological order; a tensor needed on another device is copied over the directed link
between the two as soon as its producer finishes, each link carrying one copy at a time in the
same topological order (a copy occupies every link of its route, `CostModel.route`, so copies over a
shared link wait for each other); a node starts when its device is free and every input has arrived.
A step on its device's communication stream (`SimProgram.side`: a collective's ring steps, as NCCL
runs them beside the compute) starts once its inputs have arrived and holds no device up.
Because every resource (device or link) serves its jobs in a fixed order, the event times follow
from one pass over the nodes in topological order, with no event heap: each job starts at the
later of "its resource is free" and "its inputs are done", and both are known by then. That pass
is the shared walk (`placer.program.walk`) with, as each value, a tensor's arrival time on every
device: `Simulator.simulate` runs it for one placement; `simulate_batch`
(`placer.costmodel.batch_simulator`) runs it for many at once, vectorised over the placements,
with the same results.

Memory comes from tensor lifetimes: a node's output is allocated when it starts and freed when
its last consumer on that device finishes (and its outgoing copies are done); a copy lives on its
destination from the start of the transfer to the end of its last consumer there; weights and
graph inputs stay resident on every device that reads them. A device whose peak exceeds its cap
fails the placement as out-of-memory.

A training step (`training=TrainingSpec(...)`) is simulated the same way over its own steps
(`placer.costmodel.sim_program`): the forward steps, the loss, each node's backward on the node's
device in reverse topological order with gradients crossing the forward edges backwards (as many
bytes as the forward tensor), the updates, and the copy of each updated parameter to every other
device reading it (a refresh); gradients and optimizer state count in memory.

Costs come only from a `placer.costmodel.protocol.CostModel`. A cost model with `slowdown` (device
-> factor, fitted by `placer.costmodel.calibration`) adds contention: each step grows by
`placer.costmodel.contention.contention_extra` of its uncontended schedule.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from placer.devices import Device, as_devices, device_kind
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, OpNode
from placer.graph.placement_check import assignment
from placer.costmodel.batch_simulator import simulate_batch
from placer.costmodel.contention import contention_extra, overlap_seconds
from placer.costmodel.protocol import CostModel, own_link
from placer.costmodel.sim_tables import SimulatorTables
from placer.measure.measurement import INVALID, OOM, Measurement
from placer.program.pipeline import Pipeline, tag
from placer.costmodel.sim_program import SimProgram, inference_program, pipelined_program, training_program
from placer.program.training import TrainingSpec
from placer.program.walk import Step, last_uses, walk
from placer.placement import Placement

# Defaults of the analytic model, per device kind: rough figures of one CPU core's share and a
# mid-range GPU. Only their ratios matter to the placements the simulator prefers.
_FLOPS = {"cpu": 2e10, "cuda": 1e13}          # FLOP/s
_MEM_BW = {"cpu": 1e10, "cuda": 5e11}         # bytes/s of memory traffic per op
_LAUNCH = {"cpu": 5e-6, "cuda": 1e-5}         # fixed cost per op, seconds
# A training step: a node's backward costs BACKWARD_FACTOR times its forward (the usual rule: the
# gradients of its inputs and of its weights, each about one forward), and a loss, accumulate or
# update step makes PASSES passes over the gradient bytes it reads at the memory bandwidth (an
# update reads the parameter, its gradient and its state and writes two of them back).
BACKWARD_FACTOR = 2.0
PASSES = {"loss": 2, "accumulate": 2, "update": 4}
# Links: (latency s, bandwidth bytes/s). Virtual CPU devices share memory, so a copy is a memcpy.
_LINKS = {("cpu", "cpu"): (1e-6, 1e10), ("cpu", "cuda"): (1e-5, 1.2e10),
          ("cuda", "cpu"): (1e-5, 1.2e10), ("cuda", "cuda"): (1e-5, 5e10)}


@dataclass
class AnalyticCostModel:
    """Deterministic costs from the graph's own features.

    op time = FLOPs / device speed + bytes touched (outputs + weights) / memory bandwidth
    + a fixed launch overhead; a training step's backward and updates: `training_step_time`; transfer = link latency + bytes / link bandwidth. Every figure can
    be set per device name (`speeds`, `mem_bandwidths`) or per link (`links`).
    """

    devices: list[str]
    speeds: dict[str, float] = field(default_factory=dict)          # device -> FLOP/s
    mem_bandwidths: dict[str, float] = field(default_factory=dict)  # device -> bytes/s
    launch_overhead: dict[str, float] = field(default_factory=dict)  # device -> seconds
    links: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # (src, dst) -> (latency, B/s)

    def __post_init__(self) -> None:
        for d in self.devices:
            kind = device_kind(d)
            if kind not in _FLOPS:
                raise PlacerError(f"the analytic cost model knows cpu and cuda devices, not {d!r}")
            self.speeds.setdefault(d, _FLOPS[kind])
            self.mem_bandwidths.setdefault(d, _MEM_BW[kind])
            self.launch_overhead.setdefault(d, _LAUNCH[kind])

    def op_time(self, node: OpNode, device: str) -> float:
        """Seconds `node` takes on `device` (inf where the node cannot run on its kind)."""
        if device_kind(device) not in node.device_kinds:
            return math.inf
        moved = node.output_bytes + node.param_bytes
        return (max(node.flops, 0.0) / self.speeds[device] + moved / self.mem_bandwidths[device]
                + self.launch_overhead[device])

    def training_step_time(self, step: str, kind: str, node: OpNode, nbytes: int, device: str) -> float:
        """A backward: BACKWARD_FACTOR x the node's forward; else PASSES[kind] passes over `nbytes`."""
        if kind == "backward":
            return BACKWARD_FACTOR * self.op_time(node, device)
        return PASSES[kind] * nbytes / self.mem_bandwidths[device] + self.launch_overhead[device]

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """Seconds to copy `nbytes` from `src` to `dst` (0 on the same device)."""
        if src == dst:
            return 0.0
        latency, bandwidth = self.links.get((src, dst)) or _LINKS[(device_kind(src), device_kind(dst))]
        return latency + nbytes / bandwidth

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        return own_link(src, dst)


@dataclass
class SimResult:
    """One simulated step: its time, per-device peak memory, and a failure if any."""

    step_time: float
    peak_memory: list[int]
    failure: str | None = None
    reason: str | None = None
    overlap: list[float] | None = None   # per device: seconds busy while another is (asked for, or contended)


class Simulator:
    """Predicts the step time and peak memory of a placement given as one device index per node.

    Everything that does not depend on the placement (costs, tensor sizes, consumers) is
    precomputed into flat lists at construction, so a simulation is one tight Python pass; the
    same facts as read-only arrays are `tables`, all the batched pass reads.
    """

    def __init__(self, graph: OpGraph, devices: Sequence[str], cost_model: CostModel,
                 mem_caps: Sequence[int | None] | None = None, training: TrainingSpec | None = None,
                 pipeline: Pipeline | None = None, program: SimProgram | None = None) -> None:
        """`program`: the steps to walk, where a caller built them (a plan's training step with its
        gradients' collectives, `placer.plans.training`); None: `training`'s program of `graph`."""
        self.graph = graph
        self.devices = list(devices)
        self.mem_caps = list(mem_caps) if mem_caps is not None else [None] * len(self.devices)
        self.training = training
        objective = "inference" if training is None else "training"
        if getattr(cost_model, "objective", objective) != objective:
            raise PlacerError(f"the cost model's times are of the {cost_model.objective} objective, not of the "
                              f"{objective} one being simulated; profile with --objective {objective}")
        self.node_names = list(graph.nodes)
        if program is None:
            program = (inference_program(graph, self.devices, cost_model) if training is None
                       else training_program(graph, self.devices, cost_model, training))
        # a pipelined step: every micro-batch's steps (`placer.program.pipeline`)
        self.pipeline = pipeline if pipeline is not None and pipeline.pipelined else None
        if self.pipeline is not None:
            program = pipelined_program(program, self.pipeline, set(graph.initializers))
        self.program = program
        # The simulated steps: a node's own (inference), or the training step's, each on its node's device.
        self.step_names = [step.name for step in program.steps]
        self.step_node = program.node_of
        D = len(self.devices)
        # Links: a copy between two devices occupies every link of its route (`CostModel.route`), so
        # copies whose routes share one (a PCIe host bridge, a machine's network link) queue there.
        link_id: dict[str, int] = {}
        self.pair_links: list[tuple[int, ...]] = [
            tuple(link_id.setdefault(name, len(link_id)) for name in (cost_model.route(s, d) if s != d else ()))
            for s in self.devices for d in self.devices]
        self.link_names = list(link_id)

        # op_time[i][d]: seconds of step i on device d.
        self.op_time = program.times
        # contention: device d runs slowdown[d] times slower while another is busy (1: not modelled)
        slowdown = getattr(cost_model, "slowdown", None) or {}
        self.slowdown = [float(slowdown.get(d, 1.0)) for d in self.devices]

        # Tensors produced by steps and read by a step or returned: one entry each.
        consumers: dict[str, list[int]] = {}
        for i, step in enumerate(program.steps):
            for t in dict.fromkeys(step.inputs):
                if t:
                    consumers.setdefault(t, []).append(i)
        producer = {t: i for i, step in enumerate(program.steps) for t in step.outputs if t}
        self.t_producer: list[int] = []
        self.t_bytes: list[int] = []
        self.t_copy_bytes: list[int] = []   # a copy on another device (an updated parameter: its bytes)
        self.t_consumers: list[list[int]] = []
        self.t_is_output: list[bool] = []
        self.t_xfer: list[list[float]] = []     # [src * D + dst] -> seconds
        tensor_id: dict[str, int] = {}
        # a copy's time depends on its bytes alone: priced once per size (a large graph repeats few)
        xfer_of_size: dict[int, list[float]] = {}
        self.out_tensors: list[list[int]] = [[] for _ in program.steps]
        for i, step in enumerate(program.steps):
            for t in step.outputs:
                if not t or (t not in consumers and t not in program.outputs):
                    continue
                nbytes, copied = program.size(t), program.copy_size(t)
                tid = len(self.t_bytes)
                tensor_id[t] = tid
                self.t_producer.append(i)
                self.t_bytes.append(nbytes)
                self.t_copy_bytes.append(copied)
                self.t_consumers.append(consumers.get(t, []))
                self.t_is_output.append(t in program.outputs)
                if copied not in xfer_of_size:
                    xfer_of_size[copied] = [float(cost_model.transfer_time(copied, s, d))
                                            for s in self.devices for d in self.devices]
                self.t_xfer.append(xfer_of_size[copied])
                self.out_tensors[i].append(tid)
        # The program the walk runs: each step reads the tensors other steps produce and writes
        # the ones some step reads or the program returns; a value is a tensor's arrival per device.
        self.steps = [Step(step.name, step.op_type,
                           tuple(dict.fromkeys(t for t in step.inputs if t in tensor_id and producer.get(t) != i)),
                           tuple(t for t in step.outputs if t in tensor_id))
                      for i, step in enumerate(program.steps)]
        self.frees = last_uses(self.steps)

        # Resident data: weights and graph inputs, each counted once on every device reading it,
        # and a training step's optimizer state on its update's device.
        resident: dict[str, int] = {t.name: t.nbytes for t in graph.initializers.values()}
        resident.update({t.name: t.nbytes for t in graph.inputs})
        if self.pipeline is not None:   # each micro-batch reads its own inputs
            resident.update({tag(t.name, k): t.nbytes for t in graph.inputs for k in range(self.pipeline.micro_batches)})
        self.r_bytes: list[int] = []
        self.r_consumers: list[list[int]] = []
        for t, nbytes in resident.items():
            readers = consumers.get(t, [])
            if readers:
                self.r_bytes.append(nbytes)
                self.r_consumers.append(readers)
        for nbytes, step in program.held:
            self.r_bytes.append(nbytes)
            self.r_consumers.append([step])
        # The same facts as read-only arrays, for the memory pass (numpy over edges, not Python
        # loops) and for the batched pass, which reads these and nothing else of the simulator.
        self.tables = SimulatorTables(
            devices=D, nodes=len(self.node_names), steps=tuple(self.steps),
            frees=tuple(tuple(f) for f in self.frees), ordered_per_placement=program.unrolled is not None,
            step_node=np.asarray(program.node_of, dtype=np.int64),
            op_time=np.asarray(self.op_time, dtype=np.float64).reshape(len(self.op_time), D),
            mem_caps=tuple(self.mem_caps), slowdown=tuple(self.slowdown),
            links=len(self.link_names), pair_links=tuple(self.pair_links),
            out_tensors=tuple(tuple(ts) for ts in self.out_tensors),
            t_producer=np.asarray(self.t_producer, dtype=np.int64),
            t_bytes=np.asarray(self.t_bytes, dtype=np.int64),
            t_copy_bytes=np.asarray(self.t_copy_bytes, dtype=np.int64),
            t_is_output=np.asarray(self.t_is_output, dtype=bool),
            t_xfer=np.asarray(self.t_xfer, dtype=np.float64).reshape(len(self.t_xfer), D * D),
            e_tensor=np.asarray([t for t, cs in enumerate(self.t_consumers) for _ in cs], dtype=np.int64),
            e_consumer=np.asarray([c for cs in self.t_consumers for c in cs], dtype=np.int64),
            r_bytes=np.asarray(self.r_bytes, dtype=np.int64),
            r_edge=np.asarray([r for r, cs in enumerate(self.r_consumers) for _ in cs], dtype=np.int64),
            r_reader=np.asarray([c for cs in self.r_consumers for c in cs], dtype=np.int64),
            side=np.isin(np.arange(len(program.steps)), sorted(program.side)))

    def simulate(self, assign: Sequence[int], overlap: bool = False) -> SimResult:
        """Simulate one step of the placement `assign` (device index of each node, in order); with
        `overlap`, the result also holds each device's seconds of the uncontended schedule shared
        with another busy device (what the contention factors multiply)."""
        tables = self.tables
        D = tables.devices
        if self.training is not None or self.pipeline is not None:
            assign = [assign[k] for k in self.step_node]   # each step of the program on its node's device
        op_time = self.op_time
        n = len(op_time)
        for i in range(n):
            if op_time[i][assign[i]] == math.inf:
                return SimResult(math.inf, [0] * D, INVALID,
                                 f"node {self.step_names[i]} cannot run on {self.devices[assign[i]]}")

        start = [0.0] * n
        finish = [0.0] * n
        dev_free = [0.0] * D
        link_free = [0.0] * max(len(self.link_names), 1)
        # Copies made: (tensor, dst, transfer start, transfer end).
        copies: list[tuple[int, int, float, float]] = []
        t_xfer, out_tensors, pair_links = self.t_xfer, self.out_tensors, self.pair_links
        # Which devices read each tensor, found with one numpy scatter instead of per-tensor sets.
        a = np.asarray(assign, dtype=np.int64)
        readers = np.zeros((len(self.t_bytes), D), dtype=bool)
        readers[tables.e_tensor, a[tables.e_consumer]] = True
        readers[np.arange(len(self.t_bytes)), a[tables.t_producer]] = False
        remote = _remote_devices(readers)
        never = [math.inf] * D
        side, side_end = self.program.side, [0.0]

        def run_node(i: int, inputs: list[list[float]]) -> list[list[float]]:
            """Start when the device is free and every input has arrived; send the outputs on."""
            d = assign[i]
            ready = 0.0 if i in side else dev_free[d]
            for arrival in inputs:
                if arrival[d] > ready:
                    ready = arrival[d]
            fin = ready + op_time[i][d]
            start[i] = ready
            finish[i] = fin
            if i in side:
                side_end[0] = max(side_end[0], fin)
            else:
                dev_free[d] = fin
            outputs = []
            for t in out_tensors[i]:
                arrival = never.copy()
                arrival[d] = fin
                for dst in remote[t]:
                    pair = d * D + dst
                    links = pair_links[pair]
                    s = fin
                    for k in links:
                        if link_free[k] > s:
                            s = link_free[k]
                    e = s + t_xfer[t][pair]
                    for k in links:
                        link_free[k] = e
                    arrival[dst] = e
                    copies.append((t, dst, s, e))
                outputs.append(arrival)
            return outputs

        order = self.program.order(assign)
        if order is None:
            for _ in walk(self.steps, self.frees, {}, run_node):
                pass
        else:   # this placement's own order of the steps (1F1B): every value kept to the end
            for _ in walk([self.steps[i] for i in order], [()] * n, {},
                          lambda i, inputs: run_node(order[i], inputs)):
                pass

        step = max(max(dev_free), max(link_free), side_end[0]) if n else 0.0
        peaks = self._peak_memory(assign, start, finish, copies, step)
        shared = None
        if overlap or any(s > 1.0 for s in self.slowdown):
            shared = overlap_seconds(start, finish, assign[:n], D)
            step += contention_extra(shared, self.slowdown)
        for d, cap in enumerate(self.mem_caps):
            if cap is not None and peaks[d] > cap:
                return SimResult(step, peaks, OOM,
                                 f"{self.devices[d]} needs {peaks[d]} bytes at peak, over its cap of {cap}")
        return SimResult(step, peaks, None, overlap=None if shared is None else shared.tolist())

    def bubble(self, assign: Sequence[int], step_time: float) -> float:
        """The idle share of the devices `assign` uses during a step of `step_time` seconds: 1 -
        their busy seconds / (devices x step time); a pipeline's bubble."""
        steps = [assign[k] for k in self.step_node] if len(assign) != len(self.op_time) else assign
        busy: dict[int, float] = {}
        for times, d in zip(self.op_time, steps):
            busy[d] = busy.get(d, 0.0) + times[d]
        return 1.0 - sum(busy.values()) / (len(busy) * step_time) if step_time > 0 else 0.0

    def _peak_memory(self, assign: Sequence[int], start: list[float], finish: list[float],
                     copies: list[tuple[int, int, float, float]], step: float) -> list[int]:
        """Per-device peak of resident data plus live tensors, from allocation/free events."""
        tables = self.tables
        D, T = tables.devices, len(self.t_bytes)
        a = np.asarray(assign, dtype=np.int64)
        fin = np.asarray(finish)
        present = np.zeros((len(self.r_bytes), D), dtype=bool)
        present[tables.r_edge, a[tables.r_reader]] = True
        static = tables.r_bytes @ present
        # last[t, d]: when the last reader of tensor t on device d finishes (-inf: none there).
        last = np.full((T, D), -np.inf)
        np.maximum.at(last, (tables.e_tensor, a[tables.e_consumer]), fin[tables.e_consumer])
        src = a[tables.t_producer]
        free = np.maximum(last[np.arange(T), src], fin[tables.t_producer])
        times = [np.asarray(start)[tables.t_producer]]
        devs = [src]
        nbytes = [tables.t_bytes]
        if copies:
            c = np.asarray(copies)
            ct, cd = c[:, 0].astype(np.int64), c[:, 1].astype(np.int64)
            np.maximum.at(free, ct, c[:, 3])              # the source copy lives until sent
            times.append(c[:, 2])
            devs.append(cd)
            nbytes.append(tables.t_copy_bytes[ct])
            copy_free = np.maximum(last[ct, cd], c[:, 3])
        free = np.where(tables.t_is_output, step, free)
        frees = [free] + ([copy_free] if copies else [])
        times = np.concatenate(times + frees)
        devs = np.concatenate(devs + devs)
        deltas = np.concatenate(nbytes + [-b for b in nbytes])
        # At equal times frees (negative) sort first: a finished op releases before the next starts.
        order = np.lexsort((deltas, times, devs))
        devs, deltas = devs[order], deltas[order]
        live = np.cumsum(deltas)
        peaks = []
        bounds = np.searchsorted(devs, np.arange(D + 1))
        for d in range(D):
            lo, hi = bounds[d], bounds[d + 1]
            if hi > lo:
                base = live[lo - 1] if lo > 0 else 0
                peaks.append(int(static[d] + max(0, (live[lo:hi] - base).max())))
            else:
                peaks.append(int(static[d]))
        return peaks



def _remote_devices(readers: np.ndarray) -> list[tuple[int, ...]]:
    """Row t of the (tensors x devices) `readers` as the tuple of its devices (the hot loop's form)."""
    if readers.shape[1] > 62:
        return [tuple(np.flatnonzero(row).tolist()) for row in readers]
    # one integer per row: a matrix product and one cached lookup instead of a numpy call per row
    return [_devices_in(code) for code in (readers @ (1 << np.arange(readers.shape[1]))).tolist()]


@functools.cache
def _devices_in(code: int) -> tuple[int, ...]:
    """The device indices of a set of devices written as bits (0b101 -> (0, 2))."""
    return tuple(d for d in range(code.bit_length()) if code >> d & 1)

class SimulatedMeasurer:
    """A `Measurer` whose step times come from the simulator: deterministic and fast.

    `mem_caps` (device name -> bytes) overrides the caps given in the `Device` specs. With
    `training`, a step is a training step with its loss and optimizer (the cost model must price
    it: the analytic one, or a profile of the training objective). Every call simulates
    (microseconds); the trainer remembers what it needs (`placer.policy.measurement_cache`).
    """

    def __init__(self, graph: OpGraph, devices: Sequence[Device | str], cost_model: CostModel | None = None,
                 mem_caps: dict[str, int] | None = None, training: TrainingSpec | None = None,
                 pipeline: Pipeline | None = None, program: SimProgram | None = None) -> None:
        devs = as_devices(devices)
        names = [d.name for d in devs]
        caps = {d.name: d.mem_cap for d in devs if d.mem_cap is not None}
        caps.update(mem_caps or {})
        self.devices = names
        self.graph = graph
        self.cost_model = cost_model if cost_model is not None else AnalyticCostModel(names)
        self.simulator = Simulator(graph, names, self.cost_model, [caps.get(d) for d in names], training, pipeline,
                                   program)
        self._index = {d: i for i, d in enumerate(names)}
        self.protocol = {"kind": "simulated", "cost_model": type(self.cost_model).__name__,
                         "objective": "inference" if training is None else "training"}
        if training is not None:
            self.protocol.update(training.to_dict())
        if self.simulator.pipeline is not None:
            self.protocol.update(self.simulator.pipeline.to_dict())

    def measure(self, placement: Placement) -> Measurement:
        """Simulate `placement`; a placement that misses nodes or names unknown devices fails as invalid."""
        assign = self._assign(placement)
        return assign if isinstance(assign, Measurement) else self.measure_assignment(assign)

    def measure_many(self, placements: Sequence[Placement]) -> list[Measurement]:
        """`measure` of each placement, simulated together in one batched pass (`simulate_batch`,
        the same figures); a failed one is simulated again alone for its reason."""
        out = [self._assign(p) for p in placements]
        todo = [k for k, a in enumerate(out) if not isinstance(a, Measurement)]
        if todo:
            batch = simulate_batch(self.simulator, np.asarray([out[k] for k in todo], dtype=np.int64))
            for k, t, peaks, failure in zip(todo, batch.step_time.tolist(), batch.peak_memory.tolist(), batch.failure):
                out[k] = (self.measure_assignment(out[k]) if failure is not None else
                          Measurement(ok=True, step_time=t, spread=0.0, times=[t],
                                      peak_memory=dict(zip(self.devices, peaks)), protocol=dict(self.protocol)))
        return out

    def _assign(self, placement: Placement) -> list[int] | Measurement:
        """The device index of each node, or the invalid measurement of a placement that misses nodes
        or names unknown devices (the check's refusal is this measurement's failure, not an error)."""
        try:
            nodes = assignment(self.graph, placement, self.devices)
        except PlacerError as exc:
            return Measurement(ok=False, failure=INVALID, reason=str(exc), protocol=dict(self.protocol))
        return [self._index[d] for d in nodes.values()]

    def measure_assignment(self, assign: Sequence[int]) -> Measurement:
        """Like `measure`, for a device index per node in topological order (no `Placement` built)."""
        r = self.simulator.simulate(tuple(assign))
        peaks = {d: int(p) for d, p in zip(self.devices, r.peak_memory)}
        if r.failure is None:
            return Measurement(ok=True, step_time=r.step_time, spread=0.0, times=[r.step_time],
                               peak_memory=peaks, protocol=dict(self.protocol))
        return Measurement(ok=False, peak_memory=peaks, failure=r.failure, reason=r.reason,
                           protocol=dict(self.protocol))
