"""The human expert's placement, the baseline of Mirhoseini et al. 2017 ("Device Placement
Optimization with Reinforcement Learning", ICML 2017).

The rule, as that paper describes the practice it compares against (after Sutskever et al. 2014
and Wu et al. 2016's GNMT): in a recurrent network every layer is computed by its own GPU, "each
layer, including all LSTM layers, the attention layer, and the softmax layer"; a convolutional
network (Inception-V3 there) runs whole on one device. Here:

- Recurrent graphs (an LSTM, GRU or RNN op, or modules whose ops include the gates' Sigmoid and
  Tanh, as the zoo's rnnlm and nmt unroll their cells): the layers in the order they first run
  (the embedding, each recurrent layer, the attention, the output projection and softmax), layer
  i on GPU i mod (number of GPUs).
  With recurrent ops, each recurrent op and the nodes after it up to the next one form a layer;
  the nodes before the first are the embedding layer, and the nodes after the last one from its
  first MatMul, Gemm or Softmax on are the output layer.
  Without them, the layers come from the node names torch's exporter writes
  (``/decoder/cells.1_2/Add``: module path ``decoder/cells.1``, its third call): a module whose
  ops include Sigmoid and Tanh is a recurrent cell and a layer with everything under it; every
  other module beside the cells (``embedding``, ``decoder/attention``, ``decoder/projection``) is a
  layer; an op of a module that holds cells (``/decoder/Tanh``, ``/Gather``) joins the layer of
  its producer that runs last (else of its first reader).
- Everything else: the whole graph on the fastest device, the one whose single-device step the
  simulator predicts lowest on the cost model (the training step on the training objective).

GPUs are the devices of kind cuda when there are any, else every device. The expert ignores
memory caps, as the experts' placements did.
"""

from __future__ import annotations

import re

import numpy as np

from placer.devices import device_kind
from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.costmodel.batch_simulator import simulate_batch
from placer.placement import Placement
from placer.placers.base import Caps, make_placement, require_devices
from placer.placers.base import make_simulator

RECURRENT_OPS = {"LSTM", "GRU", "RNN"}
GATE_OPS = {"Sigmoid", "Tanh"}          # a module with both is a recurrent cell (LSTM, GRU)
OUTPUT_OPS = {"MatMul", "Gemm", "Softmax", "LogSoftmax"}
_CALL = re.compile(r"^(.+)_(\d+)$")      # torch's name of a module's second, third, ... call


def gpus_of(devices: list[str]) -> list[str]:
    """The devices of kind cuda, or every device when there are none."""
    return [d for d in devices if device_kind(d) == "cuda"] or list(devices)


def recurrent_layers(graph: OpGraph) -> tuple[list[list[str]], str]:
    """The layers of a recurrent graph in the order they first run, and how they were found
    ("recurrent ops" or "module names"); no layers for a graph that is not recurrent."""
    names = list(graph.nodes)
    if any(graph.nodes[n].op_type in RECURRENT_OPS for n in names):
        return _layers_by_position(graph), "recurrent ops"
    layers = _layers_by_name(graph)
    return (layers, "module names") if len(layers) > 1 else ([], "")


def _layers_by_position(graph: OpGraph) -> list[list[str]]:
    """Each recurrent op and the nodes after it up to the next one; the embedding before the
    first; the output layer from the first MatMul, Gemm or Softmax after the last."""
    names = list(graph.nodes)
    rec = [i for i, n in enumerate(names) if graph.nodes[n].op_type in RECURRENT_OPS]
    tail = next((i for i in range(rec[-1] + 1, len(names)) if graph.nodes[names[i]].op_type in OUTPUT_OPS),
                len(names))
    bounds = [0, *rec, tail, len(names)]
    return [names[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def module_paths(graph: OpGraph) -> dict[str, tuple[str, ...]]:
    """Node -> its module path from the exporter's name (``/a/b_1/Op`` -> ("a", "b")): a component
    ``x_k`` is ``x`` called again when the path ``x`` itself exists."""
    raw = {n: tuple(n.strip("/").split("/")[:-1]) for n in graph.nodes}
    known = {path[:i] for path in raw.values() for i in range(1, len(path) + 1)}
    paths = {}
    for n, path in raw.items():
        out: tuple[str, ...] = ()
        for part in path:
            m = _CALL.match(part)
            out += (m.group(1),) if m and out + (m.group(1),) in known else (part,)
        paths[n] = out
    return paths


def _layers_by_name(graph: OpGraph) -> list[list[str]]:
    """Layers from the module paths (the module docstring's rule); [] without recurrent cells."""
    paths = module_paths(graph)
    ops: dict[tuple[str, ...], set[str]] = {}
    for n, path in paths.items():
        ops.setdefault(path, set()).add(graph.nodes[n].op_type)
    cells = {path for path, kinds in ops.items() if path and GATE_OPS <= kinds}
    if not cells:
        return []
    containers = {cell[:i] for cell in cells for i in range(len(cell))}
    layer: dict[str, tuple[str, ...] | None] = {}
    for n, path in paths.items():
        cell = next((path[:i] for i in range(1, len(path) + 1) if path[:i] in cells), None)
        if cell is not None:
            layer[n] = cell
        elif path in containers:
            layer[n] = None   # an op of a module holding cells: placed by its neighbours below
        else:
            depth = max(len(c) for c in containers if path[:len(c)] == c)
            layer[n] = path[:depth + 1]
    position = {n: i for i, n in enumerate(graph.nodes)}
    for n in graph.nodes:   # topological order: join the layer of the producer that ran last
        if layer[n] is None:
            producers = sorted(graph.dag.predecessors(n), key=position.__getitem__, reverse=True)
            layer[n] = next((layer[p] for p in producers if layer[p] is not None), None)
    for n in reversed(list(graph.nodes)):   # else the first reader's
        if layer[n] is None:
            readers = sorted(graph.dag.successors(n), key=position.__getitem__)
            layer[n] = next((layer[c] for c in readers if layer[c] is not None), None)
    groups: dict[tuple[str, ...] | None, list[str]] = {}
    for n in graph.nodes:
        groups.setdefault(layer[n], []).append(n)
    if None in groups:   # isolated ops with no placed neighbour: with the first layer
        loose = groups.pop(None)
        first = next(iter(groups))
        groups[first] = sorted(groups[first] + loose, key=position.__getitem__)
    return list(groups.values())


def fastest_device(graph: OpGraph, devices: list[str], cost: CostModel | None) -> tuple[str, dict[str, float | None]]:
    """The device whose single-device step the simulator predicts lowest (caps aside), with every
    device's figure (None: some op cannot run there); without a cost model, the first GPU."""
    if cost is None:
        return gpus_of(devices)[0], {}
    sim = make_simulator(graph, devices, cost, None)
    every_on_one = np.repeat(np.arange(len(devices))[:, None], len(graph.nodes), axis=1)
    result = simulate_batch(sim, every_on_one, peaks=False)
    times = {d: float(t) if f is None else None for d, t, f in zip(devices, result.step_time, result.failure)}
    runnable = [d for d in devices if times[d] is not None]
    return (min(runnable, key=times.__getitem__) if runnable else gpus_of(devices)[0]), times


def expert(graph: OpGraph, devices: list[str], cost: CostModel | None = None, caps: Caps | None = None, *,
           seed: int = 0) -> Placement:
    """A recurrent graph one layer per GPU in turn; any other graph whole on the fastest device."""
    require_devices(devices)
    layers, found_by = recurrent_layers(graph)
    if layers:
        gpus = gpus_of(devices)
        nodes = {n: gpus[i % len(gpus)] for i, layer in enumerate(layers) for n in layer}
        return make_placement(graph, devices, nodes, "expert", rule="one layer per GPU", layers=len(layers),
                              found_by=found_by, gpus=gpus)
    device, times = fastest_device(graph, devices, cost)
    return make_placement(graph, devices, {n: device for n in graph.nodes}, "expert",
                          rule="the whole graph on the fastest device", device=device, single_device_step_times=times)
