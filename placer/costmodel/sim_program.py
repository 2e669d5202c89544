"""The program the simulator walks: a step per node (inference), or the whole training step.

A training step is the executor's (`placer.program.training_plan.plan_training`): the forward steps,
the loss term of each output the loss covers, then each node's backward in reverse topological
order, gradient accumulations and the parameters' updates. Every one of them runs on the device
of some node (a backward on its node's; a loss on its output's producer's, or for an output no
step makes (a parameter, an input) on its first gradient reader's, else the first node's; an
update on the device of the parameter's last contributor, a backward step or such a loss), so a
placement of the nodes places the whole program: the plan is made once with every node as its
own "device", and `node_of` maps each step to that node. A gradient is the size of its tensor;
the optimizer state of a parameter is resident on its update's device.

After each update, every other device reading the parameter gets the new value: a refresh step
per other reader (a node here, so a device may have several; the simulator copies a tensor once
per device). A refresh takes no time of its own: its cost is the copy of the updated weights from
the owner, which the cost model's `transfer_time` prices like any crossing (`SimProgram.copy_size`:
the parameter's bytes). Its in-place copy into the device's own weights is not priced.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import cached_property

from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel, op_times
from placer.kernels.registry import host_read_inputs
from placer.program.pipeline import BACKWARD, Pipeline, Unrolled, order_1f1b, unroll
from placer.program.training import TrainingSpec
from placer.program.training_plan import copied_as, plan_training
from placer.program.walk import Step


@dataclass
class SimProgram:
    """Steps in a valid order, the node whose device runs each, and their costs."""

    steps: list[Step]                  # inputs and outputs: every tensor a step reads and writes
    node_of: list[int]                 # step -> index of the node (in graph order) whose device runs it
    times: list[list[float]]           # step -> device -> seconds
    outputs: set[str]                  # what the step returns (kept to its end)
    size: Callable[[str], int]         # tensor -> bytes
    held: list[tuple[int, int]]        # (bytes, step) resident wherever that step runs: optimizer state
    unrolled: Unrolled | None = None   # a pipelined step's unrolling, when each placement has its own order
    copied: Callable[[str], int] | None = None   # tensor -> bytes a copy of it sent elsewhere takes; None: size
    # steps on their device's communication stream (a collective's, as NCCL's run beside the
    # compute): each starts once its inputs are in, and holds its device up for nothing
    side: frozenset[int] = frozenset()

    def copy_size(self, tensor: str) -> int:
        """Bytes a copy of `tensor` on another device takes: an updated parameter, no bytes where
        it is made (its owner's parameter, updated in place), is the parameter's bytes there."""
        return (self.copied or self.size)(tensor)

    @cached_property
    def predecessors(self) -> list[list[int]]:
        """Per step, the earlier steps whose outputs it reads (the steps are in a valid order)."""
        producer: dict[str, int] = {}
        before = []
        for i, step in enumerate(self.steps):
            before.append(sorted({producer[t] for t in step.inputs if t in producer}))
            producer.update((t, i) for t in step.outputs if t)
        return before

    def longest_path(self, weights: Sequence[float]) -> float:
        """The longest dependency chain through the steps, step i weighing `weights[i]`."""
        done: list[float] = []
        for before, w in zip(self.predecessors, weights):
            done.append(max((done[j] for j in before), default=0.0) + w)
        return max(done, default=0.0)

    def order(self, device: Sequence[int]) -> list[int] | None:
        """The order of the steps when step i runs on device ``device[i]``, where it depends on
        the placement (a 1F1B pipelined step); None: the steps' own order."""
        return None if self.unrolled is None else order_1f1b(self.unrolled, device)


def inference_program(graph: OpGraph, devices: Sequence[str], cost: CostModel) -> SimProgram:
    """One step per node, at the cost model's op time."""
    return SimProgram(steps=[Step(n.name, n.op_type, n.inputs, n.outputs) for n in graph.nodes.values()],
                      node_of=list(range(len(graph.nodes))),
                      times=[[float(t) for t in op_times(cost, node, list(devices))] for node in graph.nodes.values()],
                      outputs={t.name for t in graph.outputs}, size=_tensor_size(graph, {}), held=[])


def training_program(graph: OpGraph, devices: Sequence[str], cost: CostModel, spec: TrainingSpec) -> SimProgram:
    """The training step of `graph` with `spec`'s loss and optimizer; the cost model's
    `training_step_time` prices the loss, backward, accumulate and update steps."""
    forward = [Step(n.name, n.op_type, n.inputs, n.outputs) for n in graph.nodes.values()]
    plan = plan_training(graph, {n: n for n in graph.nodes}, forward, spec, host_read_inputs(graph))
    size = _tensor_size(graph, plan.gradient_of)
    index = {n: i for i, n in enumerate(graph.nodes)}
    node_of = [index[plan.assignment[s.name]] for s in plan.steps]
    times = []
    for step, k in zip(plan.steps, node_of):
        node = graph.nodes[plan.assignment[step.name]]
        if step.op_type == "refresh":   # its cost is the copy of the updated weights to it
            times.append([0.0] * len(devices))
        elif step.op_type in ("loss", "accumulate", "update", "backward"):
            touched = sum(size(t) for t in step.inputs if t.startswith("grad:") or step.op_type == "loss")
            times.append([float(cost.training_step_time(step.name, step.op_type, node, touched, d))
                          for d in devices])
        else:
            times.append([float(t) for t in op_times(cost, node, list(devices))])
    position = {s.name: i for i, s in enumerate(plan.steps)}
    held = [(spec.optimizer.state_bytes(size(p)), position[f"update:{p}"]) for p in plan.trained]
    return SimProgram(plan.steps, node_of, times, set(plan.outputs), size, held,
                      copied=lambda t: size(copied_as(t)))


# A micro-batch sum of a parameter's gradient makes 2 passes over its bytes, the update 4
# (`placer.costmodel.simulator.PASSES`): it is priced at half the update's time, which every cost
# model (a profile included) has.
_SUM_OF_UPDATE = 0.5


def pipelined_program(program: SimProgram, pipeline: Pipeline, shared: Collection[str]) -> SimProgram:
    """`program` (one micro-batch's) unrolled over `pipeline`'s micro-batches
    (`placer.program.pipeline`): each step on its node's device, its micro-batch sums on the
    device of the step making the gradient, in GPipe's order or, for 1F1B, each placement's own."""
    if not pipeline.pipelined:
        return program
    u = unroll(program.steps, sorted(program.outputs), shared, pipeline.micro_batches)
    update_of = {s.inputs[1]: i for i, s in enumerate(program.steps) if s.op_type == "update"}
    sums = set(u.sums)
    times = [[t * _SUM_OF_UPDATE for t in program.times[update_of[u.names[s.inputs[1]]]]] if j in sums
             else program.times[i] for j, (s, i) in enumerate(zip(u.steps, u.origin))]
    position = {i: j for j, i in enumerate(u.origin) if u.steps[j].op_type == "update"}
    ordered = pipeline.schedule == "1f1b" and BACKWARD in u.phase
    return SimProgram(u.steps, [program.node_of[i] for i in u.origin], times, set(u.outputs),
                      lambda t: program.size(u.names.get(t, t)), [(b, position[i]) for b, i in program.held],
                      u if ordered else None, lambda t: program.copy_size(u.names.get(t, t)))


def _tensor_size(graph: OpGraph, gradient_of: dict[str, str]) -> Callable[[str], int]:
    """Bytes of a tensor as the executor counts them: a gradient the size of its tensor, the
    step's own records (saved activations are kept through the tensors they read) nothing."""
    def size(name: str) -> int:
        info = graph.tensors.get(gradient_of.get(name, name))
        return info.nbytes if info is not None else 0
    return size
