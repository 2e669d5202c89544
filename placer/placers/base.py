"""What every placer shares: the call signature, memory caps and the memory model they respect.

A placer is a function ``(graph, devices, cost, caps, *, seed) -> Placement``: `devices` are
device names in the order placements list them, `cost` a `CostModel` (placers that do not need
one accept None), `caps` device name -> bytes (a missing device has no cap).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from placer.devices import Device, as_devices, device_kind
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, OpNode
from placer.graph.placement_check import assignment as checked_assignment
from placer.costmodel.protocol import CostModel
from placer.costmodel.sim_program import SimProgram
from placer.costmodel.simulator import Simulator
from placer.program.training import TrainingSpec
from placer.costmodel.training_costs import TrainingStepCosts
from placer.placement import Placement

Caps = dict[str, int]
T = TypeVar("T")


class Placer(Protocol):
    def __call__(self, graph: OpGraph, devices: list[str], cost: CostModel | None = None,
                 caps: Caps | None = None, *, seed: int = 0) -> Placement: ...


class LastCall:
    """What the last call of a search kept, for a next call asking the same (a comparison asks local
    search's start and solve, then the exact row's): `key` the plain arguments, `objects` those
    compared by identity (a graph, whose sha256 names its file and not the shapes bound when it was
    loaded; a cost model, which may be unhashable), held by weak reference so nothing stays alive."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._key: Any = None
        self._objects: tuple[weakref.ref, ...] = ()
        self.value: Any = None

    def get(self, key: Any, *objects: Any) -> Any:
        """The value kept for `key` and `objects`, or None."""
        same = self._key == key and len(self._objects) == len(objects) and \
            all(ref() is o for ref, o in zip(self._objects, objects))
        return self.value if same else None

    def keep(self, value: Any, key: Any, *objects: Any) -> None:
        self._key, self._objects, self.value = key, tuple(weakref.ref(o) for o in objects), value


def caps_from_devices(devices: Sequence[Device]) -> Caps:
    """Device name -> memory cap, for the devices that have one (`cuda:0[mem=4GiB]`)."""
    return {d.name: d.mem_cap for d in devices if d.mem_cap is not None}


def training_of(cost: CostModel | None) -> TrainingSpec | None:
    """The training step a placer places on the training objective (its cost model is then a
    `TrainingStepCosts`), None for the forward pass."""
    return cost.training if isinstance(cost, TrainingStepCosts) else None


def node_memory(node: OpNode) -> int:
    """A node's weights plus its outputs: its size when sharing memory out evenly (m-TOPO)."""
    return node.param_bytes + node.output_bytes


class MemoryBook:
    """The memory the cap-respecting placers budget, device by device, as nodes are placed.

    It follows the executor's accounting (`placer.program.memory`) in placement order: a device
    holds each weight and graph input its nodes read (once, for the whole step), each output its
    nodes make, and a copy of each tensor its nodes read from another device. An output (and its
    copies) is freed once every node that reads it has been placed; graph outputs stay.
    When nodes are placed in the order they run (topological fill) this bounds the executor's
    estimate from above; list schedulers place out of that order, so they check their result
    with `over_caps` and fall back to ``frees=False`` (nothing freed: safe in any order).
    The real measurement has the last word: an over-cap placement fails as out-of-memory.

    On the training objective (`cost` a `TrainingStepCosts`) a node brings every step of the
    training step that runs on its device (`placer.costmodel.sim_program`): its forward, backward,
    loss terms, accumulations and updates, with their tensors and gradients, and the optimizer
    state of the parameters it updates. There, freeing in placement order is no bound (a forward
    tensor is kept until its backward), so every cap-respecting placer checks its result with
    `over_caps` and falls back to ``frees=False`` (`within_caps`).
    """

    def __init__(self, graph: OpGraph, devices: list[str], caps: Caps | None, frees: bool = True,
                 cost: CostModel | None = None) -> None:
        self.graph = graph
        program = cost.program if isinstance(cost, TrainingStepCosts) else None
        self.frees = frees   # False: nothing is ever freed, a bound on any order of execution
        self._touches, self._held = _touched_tensors(graph, program)
        self._size = program.size if program is not None else self._tensor_size
        self.caps = {d: float((caps or {}).get(d, math.inf)) for d in devices}
        # Weights and graph inputs stay for the whole step, so they add to the peak of
        # activations whenever they arrive: peak = resident + the largest live activation set.
        self.resident = {d: 0 for d in devices}
        self.live = {d: 0 for d in devices}
        self.live_peak = {d: 0 for d in devices}
        self._present: dict[str, set[str]] = {d: set() for d in devices}  # tensors held on d
        self._kept = {t.name for t in graph.inputs} | set(graph.initializers)
        self._outputs = {t.name for t in graph.outputs}
        self._readers_left = {t: len(readers) for t, readers in graph.consumers.items()}

    @property
    def peak(self) -> dict[str, int]:
        """Device -> resident bytes plus the largest set of live activations so far."""
        return {d: self.resident[d] + self.live_peak[d] for d in self.resident}

    def _tensor_size(self, tensor: str) -> int:
        info = self.graph.tensors.get(tensor)
        return info.nbytes if info is not None else 0

    def _new_tensors(self, node: str, device: str) -> list[str]:
        """Tensors placing `node` on `device` would add there: missing inputs, then outputs."""
        have = self._present[device]
        return [t for t in self._touches[node] if t not in have]

    def _split(self, node: str, tensors: list[str]) -> tuple[int, int]:
        """(resident bytes, activation bytes) of `node`'s `tensors`; its optimizer state is resident."""
        kept = self._held.get(node, 0) + sum(self._size(t) for t in tensors if t in self._kept)
        return kept, sum(self._size(t) for t in tensors if t not in self._kept)

    def need(self, node: str, device: str) -> int:
        """How much `node` would raise `device`'s peak if placed there now."""
        kept, act = self._split(node, self._new_tensors(node, device))
        return kept + max(self.live_peak[device], self.live[device] + act) - self.live_peak[device]

    def fits(self, node: str, device: str) -> bool:
        if self.caps[device] == math.inf:
            return True   # no cap: skip the accounting, the list schedulers ask this very often
        return self.peak[device] + self.need(node, device) <= self.caps[device]

    def add(self, node: str, device: str) -> None:
        """Charge `node` to `device`, then free what no unplaced node will read any more."""
        new = self._new_tensors(node, device)
        kept, act = self._split(node, new)
        self.resident[device] += kept
        self.live[device] += act
        self.live_peak[device] = max(self.live_peak[device], self.live[device])
        self._present[device].update(new)
        if not self.frees:
            return
        op = self.graph.nodes[node]
        done = []
        for t in dict.fromkeys(op.inputs):
            if t and t in self._readers_left:
                self._readers_left[t] -= 1
                if self._readers_left[t] == 0:
                    done.append(t)
        done += [t for t in op.outputs if t and t not in self._readers_left]   # read by nobody
        for t in done:
            if t in self._kept or t in self._outputs:
                continue
            for d, have in self._present.items():
                if t in have:
                    have.discard(t)
                    self.live[d] -= self._size(t)


def _touched_tensors(graph: OpGraph, program: SimProgram | None
                     ) -> tuple[dict[str, list[str]], dict[str, int]]:
    """node -> the tensors its steps read and write (inputs first), and node -> optimizer state
    bytes resident where it runs: its own inputs and outputs for the forward pass, every step
    of `program` run on its device for a training step."""
    if program is None:
        return {name: [t for t in dict.fromkeys([*n.inputs, *n.outputs]) if t]
                for name, n in graph.nodes.items()}, {}
    names = list(graph.nodes)
    reads: dict[str, list[str]] = {n: [] for n in names}
    writes: dict[str, list[str]] = {n: [] for n in names}
    for step, k in zip(program.steps, program.node_of):
        reads[names[k]] += step.inputs
        writes[names[k]] += step.outputs
    held: dict[str, int] = {}
    for nbytes, step in program.held:
        node = names[program.node_of[step]]
        held[node] = held.get(node, 0) + nbytes
    return {n: [t for t in dict.fromkeys([*reads[n], *writes[n]]) if t] for n in names}, held


def executor_peak_memory(graph: OpGraph, placement: Placement) -> dict[str, int]:
    """Per-device peak the executor predicts for `placement` (the accounting that refuses an
    over-cap placement before running: `placer.program.memory`), without preparing kernels.

    Every node counts as a step; the executor folds constant subgraphs out of its steps, so
    this is a little above its own figure, never below."""
    from placer.program.memory import predict_peak_memory
    from placer.program.schedule import build_schedule
    from placer.program.walk import Step

    steps = [Step(n.name, n.op_type, n.inputs, n.outputs) for n in graph.nodes.values()]
    schedule = build_schedule(steps, placement.nodes, list(placement.devices), set(graph.initializers),
                              {t.name for t in graph.inputs}, [t.name for t in graph.outputs])
    size = lambda t: graph.tensors[t].nbytes if t in graph.tensors else 0  # noqa: E731
    return {d: e.peak for d, e in predict_peak_memory(schedule, size).items()}


def over_caps(graph: OpGraph, placement: Placement, caps: Caps | None,
              training: TrainingSpec | None = None) -> list[str]:
    """Devices whose `executor_peak_memory` exceeds their cap; with `training`, whose training step
    the executor accounts over its cap (gradients, saved activations, optimizer state:
    `placer.program.placed_step.PlacedStep.memory`), the graph prepared as the executor prepares it."""
    if not caps:
        return []
    if training is None:
        peaks = executor_peak_memory(graph, placement)
    else:
        from placer.kernels.prepare import training_prepared

        devices = [d.name for d in as_devices(placement.devices)]
        step = training_prepared(graph, None).place(checked_assignment(graph, placement, devices), devices, training)
        peaks = {d: e.peak for d, e in step.memory().items()}
    return [d for d, cap in caps.items() if d in peaks and peaks[d] > cap]


def book_peak_memory(graph: OpGraph, placement: Placement) -> dict[str, int]:
    """Per-device peak of `placement` as the `MemoryBook` counts it, nodes in topological order."""
    book = MemoryBook(graph, placement.devices, None)
    for name in graph.nodes:
        book.add(name, placement.nodes[name])
    return book.peak


def within_caps(graph: OpGraph, devices: list[str], caps: Caps | None, cost: CostModel | None,
                place: Callable[[bool], T], nodes_of: Callable[[T], dict[str, str]] = lambda nodes: nodes) -> T:
    """`place(frees)` with memory freed as readers are placed; if the executor would find its
    placement (`nodes_of` it: node -> device) over a cap, `place` again with nothing freed (safe
    in any order)."""
    result = place(True)
    if caps and over_caps(graph, Placement(list(devices), dict(nodes_of(result))), caps, training_of(cost)):
        result = place(False)
    return result


def require_cost(cost: CostModel | None, placer: str) -> CostModel:
    """The cost model, or a PlacerError saying the placer needs one."""
    if cost is None:
        raise PlacerError(f"the {placer} placer needs a cost model; pass a profiled or analytic one")
    return cost


def require_devices(devices: list[str]) -> None:
    if not devices:
        raise PlacerError("no devices to place on; give at least one, e.g. --devices cpu:0,cpu:1")


def does_not_fit(placer: str, graph: OpGraph, caps: Caps, node: str | None = None, *,
                 cost: CostModel | None = None) -> PlacerError:
    """The error a cap-respecting placer raises when the graph (a training step of it, when `cost`
    is a `TrainingStepCosts`) cannot fit under the caps."""
    total = sum(node_memory(n) for n in graph.nodes.values())
    what = (f"a training step of the graph ({human_bytes(total)} of weights and outputs, plus gradients, saved "
            "activations and optimizer state)" if training_of(cost) is not None
            else f"the graph ({human_bytes(total)} of weights and outputs)")
    where = f"; stuck at node {node!r}" if node else ""
    capped = ", ".join(f"{d}={human_bytes(c)}" for d, c in caps.items())
    return PlacerError(f"{placer}: {what} does not fit under the memory caps {capped}{where}; "
                       "raise the mem= caps or add devices")


def human_bytes(n: float) -> str:
    """1536 -> '1.5KiB'."""
    if abs(n) < 1024:
        return f"{n:.0f}B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "GiB":
            break
    return f"{n:.1f}{unit}"


def supports(node: OpNode, device: str) -> bool:
    """Whether the node's op can run on the device's kind ('cuda:1' -> 'cuda')."""
    return device_kind(device) in node.device_kinds


def make_placement(graph: OpGraph, devices: list[str], nodes: dict[str, str], placer: str,
                   **info: object) -> Placement:
    """A `Placement` for `graph` recording which placer made it (under extra["placer"]).

    A node put on a device kind its op cannot run on moves to the first device that can run it,
    so even the cost-blind placers give a runnable placement.
    """
    placed = {}
    moved = 0
    for name, node in graph.nodes.items():
        device = nodes[name]
        if not supports(node, device):
            device = next((d for d in devices if supports(node, d)), device)
            moved += device != nodes[name]
        placed[name] = device
    placed.update(graph.constant_devices(placed))
    if moved:
        info = {**info, "moved_to_supporting_device": moved}
    return Placement(devices=list(devices), nodes=placed, graph_sha256=graph.sha256,
                     extra={"placer": {"name": placer, **info}})


def make_simulator(graph: OpGraph, devices: list[str], cost: CostModel, caps: Caps | None,
                   pipeline=None) -> Simulator:
    """The simulator a search scores placements with: of the training step when `cost` is a
    `TrainingStepCosts` (on its inner costs), of the pipelined step with `pipeline`."""
    training = training_of(cost)
    inner = cost.inner if isinstance(cost, TrainingStepCosts) else cost
    return Simulator(graph, devices, inner, [(caps or {}).get(d) for d in devices], training=training,
                     pipeline=pipeline)
