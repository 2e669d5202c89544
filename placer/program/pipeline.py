"""A pipelined step: M micro-batches through one placement, several in flight (GPipe, 1F1B).

The model is the per-micro-batch graph. Its program (the executor's steps, or the simulator's)
is unrolled M times: every step and tensor gets the suffix ``#k`` of its micro-batch ``k``,
except what the micro-batches share (parameters, folded constants). A training step's gradient
of a parameter, ``grad:<p>#k`` per micro-batch, is summed in micro-batch order by
``accumulate:<p>#0-k`` steps on the device that makes it (the last sum is ``grad:<p>``), and
each parameter has one update, after every micro-batch. Everything else (executor, memory
accounting, simulator, lower bound) sees one longer program and needs no new machinery.

Each device runs its steps in a static order, which is the schedule:

- inference: micro-batch order (device d works on micro-batch k+1 while the next one works on k);
- ``gpipe``: every forward (micro-batch order), then every backward, then the updates;
- ``1f1b``: PipeDream-flush. The devices are ranked as stages by their first forward step;
  stage s of p runs ``min(p - 1 - s, M)`` forwards, then alternates one forward and one
  backward, then the remaining backwards: at most p - s micro-batches' activations in flight.

`Unrolled.steps` is in GPipe's order, valid under any placement. 1F1B's order depends on which
device is which stage, so `order_1f1b` computes it per placement; where the textbook order
would deadlock (a device holding layers both before and after another device's), the earliest
step in it that can run goes first.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from placer.errors import PlacerError
from placer.program.training_plan import TrainingPlan
from placer.program.walk import Step

SCHEDULES = ("1f1b", "gpipe")
FORWARD, BACKWARD, UPDATE = 0, 1, 2


@dataclass(frozen=True)
class Pipeline:
    """How a step is pipelined: `micro_batches` inputs of the per-micro-batch graph per step
    (1: no pipelining) and, for a training step, the `schedule`."""

    micro_batches: int = 1
    schedule: str = "1f1b"

    def __post_init__(self) -> None:
        if not isinstance(self.micro_batches, int) or self.micro_batches < 1:
            raise PlacerError(f"--micro-batches must be a whole number >= 1, not {self.micro_batches!r}")
        if self.schedule not in SCHEDULES:
            raise PlacerError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")

    @property
    def pipelined(self) -> bool:
        return self.micro_batches > 1

    def to_dict(self) -> dict[str, int | str]:
        return {"micro_batches": self.micro_batches, "schedule": self.schedule}


def tag(name: str, k: int) -> str:
    """`name` in micro-batch `k`."""
    return f"{name}#{k}"


def per_micro_batch(feeds: Mapping | Sequence[Mapping], micro_batches: int) -> list[Mapping]:
    """One mapping of inputs per micro-batch: `feeds` when it is one per micro-batch, else `feeds`
    for every one of them."""
    per = [feeds] * micro_batches if isinstance(feeds, Mapping) else list(feeds)
    if len(per) != micro_batches:
        raise PlacerError(f"the pipelined step takes {micro_batches} micro-batches' inputs, not {len(per)}; "
                          f"give one mapping per micro-batch (or one for all)")
    return per


def phase_of(step: Step) -> int:
    """FORWARD (a node, a loss term), BACKWARD (a VJP, a gradient sum) or UPDATE (an update, a
    refresh of another device's copy of the updated parameter)."""
    if step.op_type in ("update", "refresh"):
        return UPDATE
    return BACKWARD if step.op_type in ("backward", "accumulate") else FORWARD


@dataclass
class Unrolled:
    """A per-micro-batch program unrolled over M micro-batches, in GPipe's order."""

    steps: list[Step]
    origin: list[int]          # step -> its step in the per-micro-batch program (a micro-batch sum: the
                               # step making the gradient it adds)
    micro_batch: list[int]     # step -> its micro-batch (an update: M)
    phase: list[int]           # step -> FORWARD, BACKWARD or UPDATE
    names: dict[str, str]      # every new step and tensor name -> its per-micro-batch name
    outputs: list[str]         # each micro-batch's outputs, then the gradient totals and updates
    sums: list[int]            # the indices of the ``accumulate:<p>#0-k`` steps


def unroll(steps: Sequence[Step], outputs: Sequence[str], shared: Collection[str], micro_batches: int) -> Unrolled:
    """`steps` (one micro-batch's program, a valid order) for `micro_batches` (>= 2) micro-batches.

    `shared`: tensors every micro-batch reads as they are (parameters, constants). An update
    step (op_type ``update``, inputs ``(p, grad)``) runs once, on the sum of the micro-batches'
    gradients, and so do the refreshes after it.
    """
    M = micro_batches
    if M < 2:
        raise ValueError("unroll needs at least 2 micro-batches; one is the program itself")
    totals = {s.inputs[1]: s.inputs[0] for s in steps if s.op_type == "update"}   # gradient -> parameter
    names: dict[str, str] = {}

    def rename(t: str, k: int) -> str:
        if not t or t in shared:
            return t
        return named(tag(t, k), t)

    def named(new: str, old: str) -> str:
        if names.setdefault(new, old) != old:
            raise PlacerError(f"names {old!r} and {names[new]!r} collide when pipelined; rename {old!r}")
        return new

    # (phase, micro-batch) -> [(step, origin, is a micro-batch sum)]
    blocks: dict[tuple[int, int], list[tuple[Step, int, bool]]] = {}
    for k in range(M):
        for i, s in enumerate(steps):
            phase = phase_of(s)
            if phase == UPDATE:
                continue
            block = blocks.setdefault((phase, k), [])
            block.append((Step(named(tag(s.name, k), s.name), s.op_type, tuple(rename(t, k) for t in s.inputs),
                               tuple(rename(t, k) for t in s.outputs)), i, False))
            for g in s.outputs:
                if g in totals and k > 0:
                    # the running sum, in micro-batch order: ((g#0 + g#1) + g#2) ...
                    previous = tag(g, 0) if k == 1 else f"{g}#0-{k - 1}"
                    total = named(g if k == M - 1 else f"{g}#0-{k}", g)
                    name = named(f"accumulate:{totals[g]}#0-{k}", f"accumulate:{totals[g]}#0-{k}")
                    block.append((Step(name, "accumulate", (previous, tag(g, k)), (total,)), i, True))
    result = Unrolled([], [], [], [], names, [], [])
    for key in [(p, k) for p in (FORWARD, BACKWARD) for k in range(M)]:
        for step, i, is_sum in blocks.get(key, []):
            if is_sum:
                result.sums.append(len(result.steps))
            result.steps.append(step)
            result.origin.append(i)
            result.micro_batch.append(key[1])
            result.phase.append(key[0])
    for i, s in enumerate(steps):
        if phase_of(s) == UPDATE:
            result.steps.append(s)
            names[s.name] = s.name
            result.origin.append(i)
            result.micro_batch.append(M)
            result.phase.append(UPDATE)
    once = set(totals) | {t for s in steps if s.op_type == "update" for t in s.outputs}
    for k in range(M):
        result.outputs += [rename(t, k) for t in outputs if t not in once and (k == 0 or t not in shared)]
    result.outputs += [t for t in outputs if t in once]
    return result


def order_1f1b(unrolled: Unrolled, device: Sequence[int]) -> list[int]:
    """1F1B's order of `unrolled`'s steps when step i runs on device ``device[i]``: a valid order
    whose steps, taken device by device, are each device's static order."""
    M = max(unrolled.micro_batch, default=0)
    first: dict[int, int] = {}
    for i, (d, phase) in enumerate(zip(device, unrolled.phase)):
        if phase == FORWARD:
            first.setdefault(d, i)
    stages = sorted(first, key=first.get)
    p = len(stages)
    slots: dict[int, dict[tuple[int, int], int]] = {}
    for d in set(device):
        s = stages.index(d) if d in first else p - 1
        warm = min(p - 1 - s, M)
        seq = [(FORWARD, k) for k in range(warm)]
        for k in range(M - warm):
            seq += [(FORWARD, warm + k), (BACKWARD, k)]
        seq += [(BACKWARD, k) for k in range(M - warm, M)]
        seq.append((UPDATE, M))
        slots[d] = {slot: j for j, slot in enumerate(seq)}
    key = [(slots[d][(phase, k)], i) for i, (d, phase, k)
           in enumerate(zip(device, unrolled.phase, unrolled.micro_batch))]
    return merge(unrolled.steps, device, key)


def merge(steps: Sequence[Step], device: Sequence[int], key: Sequence[tuple]) -> list[int]:
    """A valid order of `steps` in which each device's steps come in increasing `key` where that
    can run; where no device's next step can (a deadlock of those orders), the runnable step of
    least key goes first."""
    n = len(steps)
    producer = {t: i for i, s in enumerate(steps) for t in s.outputs if t}
    consumers: list[list[int]] = [[] for _ in range(n)]
    missing = [0] * n
    for i, s in enumerate(steps):
        for j in {producer[t] for t in s.inputs if t in producer and producer[t] != i}:
            consumers[j].append(i)
            missing[i] += 1
    queues: dict[int, list[int]] = {}
    for i in sorted(range(n), key=key.__getitem__):
        queues.setdefault(device[i], []).append(i)
    at = {d: 0 for d in queues}
    done = [False] * n
    runnable = [(key[i], i) for i in range(n) if missing[i] == 0]
    heapq.heapify(runnable)
    order: list[int] = []

    def emit(i: int) -> None:
        done[i] = True
        order.append(i)
        for j in consumers[i]:
            missing[j] -= 1
            if missing[j] == 0:
                heapq.heappush(runnable, (key[j], j))

    while len(order) < n:
        moved = False
        for d, queue in queues.items():
            while at[d] < len(queue) and (done[queue[at[d]]] or missing[queue[at[d]]] == 0):
                if not done[queue[at[d]]]:
                    emit(queue[at[d]])
                    moved = True
                at[d] += 1
        if not moved:
            while done[runnable[0][1]]:
                heapq.heappop(runnable)
            emit(heapq.heappop(runnable)[1])
    return order


def placed(steps: Sequence[Step], assignment: dict[str, str], outputs: Sequence[str], shared: Collection[str],
           pipeline: Pipeline, devices: Sequence[str]) -> tuple[list[Step], dict[str, str], Unrolled]:
    """The pipelined program of `steps` placed by `assignment` (step name -> device): its steps in
    the schedule's order, each step's device, and the unrolling (names, outputs)."""
    u = unroll(steps, outputs, shared, pipeline.micro_batches)
    where = {s.name: assignment[steps[i].name] for s, i in zip(u.steps, u.origin)}
    if pipeline.schedule == "gpipe" or BACKWARD not in u.phase:
        return list(u.steps), where, u
    index = {d: i for i, d in enumerate(devices)}
    order = order_1f1b(u, [index[where[s.name]] for s in u.steps])
    return [u.steps[i] for i in order], where, u


def pipelined_plan(plan: TrainingPlan, pipeline: Pipeline, shared: Collection[str], devices: Sequence[str]
                   ) -> tuple[TrainingPlan, Unrolled]:
    """`plan` for `pipeline`'s micro-batches, and the unrolling: every step of `plan` per
    micro-batch, the micro-batch sums of each parameter's gradient, one update per parameter.
    A micro-batch's step runs its per-micro-batch step's callable (`Unrolled.names` maps it), so
    the plan keeps `plan`'s facts for those under their per-micro-batch names."""
    steps, where, u = placed(plan.steps, plan.assignment, plan.outputs, shared, pipeline, devices)
    # the first sum is a fresh tensor (a micro-batch's gradient may alias another one),
    # the later ones add into it
    sums = {u.steps[j].name: not u.steps[j].name.endswith("#0-1") for j in u.sums}
    M = pipeline.micro_batches
    loss_terms = [tag(t, k) for k in range(M) for t in plan.loss_terms]
    gradient_of = {new: plan.gradient_of[old] for new, old in u.names.items() if old in plan.gradient_of}
    return TrainingPlan(steps, where, list(plan.trained), dict(plan.owner), loss_terms, u.outputs, gradient_of,
                        dict(plan.leaves), dict(plan.losses), dict(plan.backwards),
                        {**plan.accumulates, **sums}), u
