"""Control flow: If, Loop and Scan run their subgraphs with placer's own kernels.

A control-flow node is one op: its kernel binds every node of its subgraphs once (nested
control flow binds recursively) and runs the branch taken or the iterations on the device of
its inputs. Values the subgraphs read from the enclosing graph arrive as trailing inputs
(`structure.node_inputs`), like any input. Autograd records whatever ran, so a training step
differentiates through the branch taken and the iterations run. Each kernel counts what it did
(`observed`: "then branch", "3 iterations" -> runs), which a profile records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import onnx
import torch

from placer.errors import PlacerError
from placer.graph.structure import node_inputs
from placer.kernels.dtypes import to_torch
from placer.kernels.registry import Node, Tensors, bind_node, register
from placer.program.walk import Step, last_uses, walk


class Body:
    """One subgraph bound to kernels: ``run(env, inputs)`` -> its outputs, where `env` holds the
    enclosing scopes' values and `inputs` the subgraph's own formal inputs, in order."""

    def __init__(self, graph: onnx.GraphProto, opset: int, owner: str) -> None:
        from onnx import numpy_helper

        self.owner = owner
        self.input_names = [i.name for i in graph.input]
        self.output_names = [o.name for o in graph.output]
        self.constants = {t.name: to_torch(numpy_helper.to_array(t)) for t in graph.initializer}
        nodes = list(graph.node)
        self.kernels = [bind_node(n, opset) for n in nodes]
        self.steps = [Step(n.name or f"{owner}/#{i}", n.op_type, node_inputs(n), tuple(n.output))
                      for i, n in enumerate(nodes)]
        self.frees = last_uses(self.steps, keep=set(self.output_names))

    def run(self, env: Mapping[str, torch.Tensor], inputs: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
        values = _Scope(env)
        values.update(self.constants)
        values.update(zip(self.input_names, inputs))
        for _ in walk(self.steps, self.frees, values, self._run_step):
            pass
        return [values[name] for name in self.output_names]

    def _run_step(self, i: int, inputs: list[torch.Tensor | None]) -> list[torch.Tensor]:
        while inputs and inputs[-1] is None:   # as at the top level: kernels test len(inputs)
            inputs.pop()
        return self.kernels[i](inputs)


class _Scope(dict):
    """A subgraph's values over its enclosing scope's: a name not set here is read from there
    (and never dropped there: the walk frees only what this scope set)."""

    def __init__(self, outer: Mapping[str, torch.Tensor]) -> None:
        super().__init__()
        self.outer = outer

    def __missing__(self, name: str) -> torch.Tensor:
        return self.outer[name]

    def __delitem__(self, name: str) -> None:
        if dict.__contains__(self, name):
            dict.__delitem__(self, name)


def _bodies(node: Node, *names: str) -> list[Body]:
    return [Body(node.attrs[name], node.opset, f"{node.name}/{name}") for name in names]


def _outer(node: Node, inputs: Tensors) -> dict[str, torch.Tensor]:
    """Name -> value of every input, listed or read from the enclosing scope."""
    return {name: value for name, value in zip(node.inputs, inputs) if name and value is not None}


def _iterations(n: int) -> str:
    return f"{n} iteration{'' if n == 1 else 's'}"


def observed(kernels: Mapping[str, object], since: Mapping[str, Mapping[str, int]] | None = None
             ) -> dict[str, dict[str, int]]:
    """Node -> what its control-flow kernel did (the branch taken, the iterations run -> runs),
    counting only the runs after `since` (an earlier answer); nodes with no such run are left out."""
    result = {}
    for name, kernel in kernels.items():
        seen = getattr(getattr(kernel, "fn", kernel), "observed", None)
        before = (since or {}).get(name, {})
        runs = {what: n - before.get(what, 0) for what, n in (seen or {}).items() if n > before.get(what, 0)}
        if runs:
            result[name] = runs
    return result


def _host_bool(t: torch.Tensor) -> bool:
    return bool(t.reshape(-1)[0].item()) if t.numel() else False


@register("If", since=1, host_inputs=(0,))
def _if(node: Node):
    then_body, else_body = _bodies(node, "then_branch", "else_branch")

    def run(xs: Tensors) -> list[torch.Tensor]:
        taken = then_body if _host_bool(xs[0]) else else_body
        run.observed["then branch" if taken is then_body else "else branch"] += 1
        return taken.run(_outer(node, xs), [])
    run.observed = Counter()
    return run


@register("Loop", since=1, host_inputs=(0, 1))
def _loop(node: Node):
    (body,) = _bodies(node, "body")
    n_carried = node.n_inputs - 2

    def run(xs: Tensors) -> list[torch.Tensor]:
        xs = list(xs) + [None] * (len(node.inputs) - len(xs))
        outer = _outer(node, xs)
        trips = int(xs[0].reshape(-1)[0].item()) if xs[0] is not None else None
        go = _host_bool(xs[1]) if xs[1] is not None else True
        carried = list(xs[2:node.n_inputs])
        device = next((t.device for t in carried if t is not None), torch.device("cpu"))
        scans: list[list[torch.Tensor]] = []
        i = 0
        while go and (trips is None or i < trips):
            cond = torch.tensor(go)
            out = body.run(outer, [torch.tensor(i, dtype=torch.int64), cond, *carried])
            go = _host_bool(out[0])
            carried = out[1:1 + n_carried]
            scans.append(out[1 + n_carried:])
            i += 1
        run.observed[_iterations(i)] += 1
        n_scans = len(body.output_names) - 1 - n_carried
        stacked = [torch.stack([s[k] for s in scans]) if scans else torch.empty(0, device=device)
                   for k in range(n_scans)]
        return carried + stacked
    run.observed = Counter()
    return run


@register("Scan", since=9)
def _scan(node: Node):
    (body,) = _bodies(node, "body")
    m = int(node.attr("num_scan_inputs"))
    n_state = node.n_inputs - m
    in_axes = list(node.attr("scan_input_axes", [0] * m))
    in_dirs = list(node.attr("scan_input_directions", [0] * m))
    k = len(body.output_names) - n_state
    out_axes = list(node.attr("scan_output_axes", [0] * k))
    out_dirs = list(node.attr("scan_output_directions", [0] * k))

    def run(xs: Tensors) -> list[torch.Tensor]:
        outer = _outer(node, xs)
        state = list(xs[:n_state])
        sequences = [x.movedim(a, 0) for x, a in zip(xs[n_state:node.n_inputs], in_axes)]
        sequences = [s.flip(0) if d else s for s, d in zip(sequences, in_dirs)]
        length = sequences[0].shape[0] if sequences else 0
        run.observed[_iterations(length)] += 1
        outs: list[list[torch.Tensor]] = [[] for _ in range(k)]
        for t in range(length):
            result = body.run(outer, [*state, *(s[t] for s in sequences)])
            state = result[:n_state]
            for j, y in enumerate(result[n_state:]):
                outs[j].append(y)
        if not length and k:
            raise PlacerError(f"Scan node {node.name!r} scans sequences of length 0; give inputs with at least one step")
        stacked = [torch.stack(o[::-1] if d else o).movedim(0, a if a >= 0 else a + o[0].dim() + 1)
                   for o, d, a in zip(outs, out_dirs, out_axes)]
        return state + stacked
    run.observed = Counter()
    return run
