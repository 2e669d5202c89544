"""What a training step adds to a graph's forward pass: which initializers it trains, the loss,
and the optimizer that updates them.

- *Trained parameters*: every float initializer that an output the loss covers (`Loss.outputs`:
  mse every float output, cross_entropy the labelled ones) depends on through float tensors;
  integer and shape paths (and inputs a kernel reads on the host: shapes, axes, ratios) carry no
  gradient. The others are not trained (nor reported).
- *Loss*: by default ``sum over float outputs of mean((y - t)^2) / 2`` with targets ``t`` zero
  unless given; ``cross_entropy`` for logits outputs given integer labels. Each output's term is
  computed on its producer's device, so its gradient starts the backward pass there (an output
  no step makes: see `placer.program.training_plan`).
- *Optimizer*: SGD with momentum (default) or Adam, `torch.optim`'s own, built over the tensors
  of one device so that its state lives on that device.

These are plain specifications, as the simulator reads them; the torch engine computes with them
(`placer.engines.torch.training`: the loss terms, the targets' checks, the optimizers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.structure import nested_nodes

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
LOSSES = ("mse", "cross_entropy")
# Ops refused on a gradient path (`check_differentiable`): random draws, whose values are no
# function of their input's (its shape or probabilities only), and DynamicQuantizeLinear, whose
# integer output has no gradient, so one would pass through its scale alone. Every other kernel
# with float inputs and outputs differentiates by torch autograd through the kernel
# (tests/measure/test_backward_coverage.py checks each against finite differences).
NO_BACKWARD = frozenset({"RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
                         "DynamicQuantizeLinear"})
OPTIMIZERS = ("sgd", "adam")
LOSS_HELP = ("mse: sum over the float outputs of mean((y - t)^2) / 2, targets t zero unless --targets "
             "gives them; cross_entropy: mean cross-entropy of each logits output that --targets gives "
             "integer labels for (classes on axis 1, or on the last axis when the labels have the other dims)")


def is_float(graph: OpGraph, tensor: str) -> bool:
    """Whether `tensor` is a floating-point tensor of `graph`."""
    info = graph.tensors.get(tensor)
    return info is not None and info.dtype in FLOAT_DTYPES


def gradient_tensors(graph: OpGraph, host_inputs: Callable[[str], frozenset[int]] = lambda node: frozenset(),
                     loss_outputs: Iterable[str] | None = None) -> set[str]:
    """Every tensor one of `loss_outputs` depends on through float tensors: those a gradient reaches.

    `host_inputs(node)` gives the input positions the node's kernel reads on the host (shapes,
    axes): no gradient flows through them. `loss_outputs`: the outputs the loss has terms for
    (`Loss.outputs`); None: the default loss's, every float output.
    """
    if loss_outputs is None:
        loss_outputs = Loss().outputs(graph, {})
    reached = set(loss_outputs)
    for node in reversed(list(graph.nodes.values())):
        if not any(t in reached for t in node.outputs if t):
            continue
        host = host_inputs(node.name)
        reached.update(t for i, t in enumerate(node.inputs) if t and i not in host and is_float(graph, t))
    return reached


def trained_parameters(graph: OpGraph, host_inputs: Callable[[str], frozenset[int]] = lambda node: frozenset(),
                       loss_outputs: Iterable[str] | None = None) -> list[str]:
    """The float initializers a training step updates, in the file's order (see `gradient_tensors`).

    A file's Constant nodes are weights for placement (`OpGraph.constants`) but literals to the
    model: they stay fixed, as they do in the module that was exported."""
    reached = gradient_tensors(graph, host_inputs, loss_outputs)
    fixed = set(graph.constants.values())
    return [name for name in graph.initializers if name in reached and is_float(graph, name) and name not in fixed]


def check_differentiable(graph: OpGraph, nodes: Sequence[str]) -> None:
    """Refuse, in one error, the ops without a backward among `nodes` (those on a gradient path)."""
    bad: dict[str, list[str]] = {}
    for name in nodes:
        node = graph.nodes[name]
        # a control-flow node differentiates through what its subgraphs run: refused for any op there
        for op in dict.fromkeys([node.op_type, *(n.op_type for n in nested_nodes(node.proto))]):
            if op in NO_BACKWARD:
                bad.setdefault(op, []).append(name)
    if bad:
        listed = "; ".join(f"{op} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
                           for op, names in sorted(bad.items()))
        raise PlacerError(f"a training step needs a backward of every op on a gradient path, and these have "
                          f"none: {listed}; use --objective inference, or re-export the model without them")


@dataclass(frozen=True)
class Loss:
    """The loss of a training step: `kind` is 'mse' or 'cross_entropy' (see `LOSS_HELP`).

    `shares` (output -> its share of its term, default 1) weights the terms of outputs that are
    pieces of one tensor: a lowered plan's loss on a sharded output is its pieces' terms, each
    weighted by the piece's share of the elements, so that it equals the whole output's; a share
    of 0 leaves an output out (a replicated output's copies but one)."""

    kind: str = "mse"
    shares: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in LOSSES:
            raise PlacerError(f"unknown loss {self.kind!r}; choose one of {', '.join(LOSSES)}")

    def share(self, output: str) -> float:
        return dict(self.shares).get(output, 1.0)

    def outputs(self, graph: OpGraph, targets: Mapping[str, Any]) -> list[str]:
        """The graph outputs the loss reads, in graph order: where the gradients, and so the
        trained parameters, start from."""
        if self.kind == "cross_entropy":
            return [o.name for o in graph.outputs if o.name in targets and self.share(o.name)]
        return [o.name for o in graph.outputs if is_float(graph, o.name) and self.share(o.name)]


def class_axis(name: str, logits: tuple[int, ...], labels: tuple[int, ...]) -> int:
    """The classes axis of a logits output given its labels' shape: 1 (torch's convention),
    else the last one (a sequence model's (batch, time, vocabulary))."""
    if len(logits) >= 2 and labels == logits[:1] + logits[2:]:
        return 1
    if len(logits) >= 2 and labels == logits[:-1]:
        return len(logits) - 1
    raise PlacerError(f"the labels of {name!r} have shape {labels}, which fits no classes axis of its "
                      f"logits {logits}; give one label per row (shape {logits[:1] + logits[2:]} "
                      f"or {logits[:-1]})")


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer of a training step: SGD with momentum or Adam, with torch's formulas."""

    name: str = "sgd"
    lr: float | None = None      # None: 0.01 for SGD, 0.001 for Adam
    momentum: float = 0.9        # SGD only

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise PlacerError(f"unknown optimizer {self.name!r}; choose one of {', '.join(OPTIMIZERS)}")
        if self.lr is not None and not self.lr > 0:
            raise PlacerError(f"the learning rate must be positive (got {self.lr})")

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        return 0.01 if self.name == "sgd" else 0.001

    def state_bytes(self, param_bytes: int) -> int:
        """Bytes of optimizer state a parameter of `param_bytes` keeps (momentum; Adam's two moments)."""
        if self.name == "sgd":
            return param_bytes if self.momentum else 0
        return 2 * param_bytes

    def to_dict(self) -> dict[str, float | str]:
        record: dict[str, float | str] = {"optimizer": self.name, "lr": self.learning_rate}
        if self.name == "sgd":
            record["momentum"] = self.momentum
        return record


@dataclass(frozen=True, eq=False)
class TrainingSpec:
    """What a training step runs after the forward pass: its loss (with its targets, output name
    -> array, checked by `placer.engines.torch.training.check_targets`) and the optimizer of the
    update."""

    loss: Loss = Loss()
    optimizer: OptimizerSpec = OptimizerSpec()
    targets: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, float | str]:
        """The loss and the optimizer, as measurements and profiles record them (targets left out)."""
        return {"loss": self.loss.kind, **self.optimizer.to_dict()}
