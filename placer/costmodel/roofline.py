"""`RooflineCostModel`: op and transfer times on a described cluster (`placer.hardware`), from the
devices' datasheet figures: placing for hardware placer cannot run on.

An op costs its device's launch overhead plus the larger of its compute time and its memory time
(the roofline: an op is bound by one or the other, not by their sum):

- compute: FLOPs / (peak FLOP/s of its dtype x an efficiency). Matmul-class ops (convolutions,
  GEMMs, recurrent cells) in half precision run on tensor cores where the device has them. The
  efficiency grows with the op's size and saturates at its class's ceiling,
  ``ceiling * flops / (flops + half_flops)``: a small kernel cannot fill a large device.
- memory: bytes read and written (inputs, outputs and weights) / the device's memory bandwidth
  times the fraction of it that kernels reach.

A training step's backward costs `BACKWARD_FACTOR` forwards, and its loss, accumulate and update
steps make `PASSES` passes over the gradient bytes, as in the analytic model. A copy crosses the
links of the cluster's route between its devices: their latencies add up, the slowest link sets
the bandwidth, and the copy occupies every one of them (`route`), so copies over a shared PCIe
bridge or network link queue in the simulator. A device with a `contention` figure (virtual CPU
devices sharing a machine's memory) runs that many times slower while another device is busy. Memory capacities are the devices' caps
(`Cluster.device_specs`), which the simulator enforces.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from placer.costmodel.simulator import BACKWARD_FACTOR, PASSES, SimulatedMeasurer
from placer.devices import as_devices, device_kind
from placer.graph.opgraph import OpGraph, OpNode
from placer.hardware import Cluster, DeviceModel, route_time

# Ops whose work is dense matrix products: they reach a large share of a device's peak, on tensor
# cores in half precision.
MATMUL_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger", "QLinearConv", "QLinearMatMul",
                        "ConvInteger", "LSTM", "GRU", "RNN", "Einsum", "Attention", "MultiHeadAttention"})
_HALF = frozenset({"float16", "bfloat16"})


@dataclass(frozen=True)
class Efficiency:
    """The share of a device's datasheet peak ops reach. The defaults are typical figures (large
    cuBLAS/cuDNN GEMMs and convolutions reach 60-80% of peak; element-wise kernels are memory
    bound, and STREAM-like copies reach about 80% of the memory bandwidth); `fit_efficiency`
    fits them to a profile of the machine at hand."""

    matmul: float = 0.7         # ceiling of matmul-class ops
    other: float = 0.3          # ceiling of every other op's compute
    half_flops: float = 5e7     # an op of this many FLOPs reaches half its class's ceiling
    memory: float = 0.8         # share of the memory bandwidth kernels reach

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class RooflineCostModel:
    """A `CostModel` of `graph` on `cluster` (see the module doc)."""

    def __init__(self, cluster: Cluster, graph: OpGraph, efficiency: Efficiency = Efficiency()) -> None:
        self.cluster, self.efficiency = cluster, efficiency
        self.devices = cluster.device_names
        # contention as the simulator and the bound read it (`placer.costmodel.contention`)
        self.slowdown = {d.name: d.contention for d in cluster.devices}
        self._model: dict[str, DeviceModel] = {d.name: d.model for d in cluster.devices}
        # devices priced alike: one model, one kind (`op_times`)
        self._alike = {d.name: (id(d.model), device_kind(d.name)) for d in cluster.devices}
        self._transfers: dict[tuple[int, str, str], float] = {}
        activations = {name: info.nbytes for name, info in graph.tensors.items() if name not in graph.initializers}
        # bytes an op reads besides its weights (which `param_bytes` counts)
        self._input_bytes = {node.name: sum(activations.get(t, 0) for t in dict.fromkeys((*node.inputs,
                                                                                          *node.implicit_inputs)) if t)
                             for node in graph.nodes.values()}

    def describe(self) -> dict[str, Any]:
        """What the model is, for records: the cluster and the efficiencies."""
        return {"cost_model": "roofline", "cluster": self.cluster.name, "efficiency": self.efficiency.to_dict()}

    def peak_flops(self, node: OpNode, device: str) -> float:
        """The FLOP/s `node` could reach on `device` at the best: tensor cores for a half-precision
        matmul where the device has them, else its cores' peak for the node's dtype (float32's for
        integer and boolean ops)."""
        model = self._model[device]
        dtype = node.output_info[0].dtype if node.output_info else "float32"
        if node.op_type in MATMUL_OPS and dtype in _HALF and dtype in model.tensor_flops:
            return model.tensor_flops[dtype]
        return model.peak_flops.get(dtype) or model.peak_flops["float32"]

    def compute_time(self, node: OpNode, device: str) -> float:
        flops = max(node.flops, 0.0)
        if flops == 0.0:
            return 0.0
        e = self.efficiency
        ceiling = e.matmul if node.op_type in MATMUL_OPS else e.other
        return flops / (self.peak_flops(node, device) * ceiling * flops / (flops + e.half_flops))

    def memory_time(self, node: OpNode, device: str) -> float:
        moved = self._input_bytes.get(node.name, 0) + node.output_bytes + node.param_bytes
        return moved / (self._model[device].memory_bandwidth_Bps * self.efficiency.memory)

    def launch_overhead(self, device: str) -> float:
        """What every op pays on `device` before its work: its shards too (the bound over plans reads it)."""
        return self._model[device].launch_overhead_s

    def op_time(self, node: OpNode, device: str) -> float:
        """Launch overhead + max(compute, memory); inf where the node cannot run on the device's kind."""
        if device_kind(device) not in node.device_kinds:
            return math.inf
        return self._model[device].launch_overhead_s + max(self.compute_time(node, device),
                                                           self.memory_time(node, device))

    def op_times(self, node: OpNode, devices: list[str]) -> list[float]:
        """`op_time` on each of `devices`, worked out once per device model and kind."""
        priced: dict[tuple[int, str], float] = {}
        out = []
        for device in devices:
            key = self._alike[device]
            t = priced.get(key)
            if t is None:
                t = priced[key] = self.op_time(node, device)
            out.append(t)
        return out

    def training_step_time(self, step: str, kind: str, node: OpNode, nbytes: int, device: str) -> float:
        """A backward: BACKWARD_FACTOR x the node's forward; else PASSES[kind] passes over `nbytes`."""
        if kind == "backward":
            return BACKWARD_FACTOR * self.op_time(node, device)
        model = self._model[device]
        return PASSES[kind] * nbytes / (model.memory_bandwidth_Bps * self.efficiency.memory) + model.launch_overhead_s

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """The route's latencies plus `nbytes` over its slowest link (0 on one device)."""
        key = (nbytes, src, dst)
        t = self._transfers.get(key)
        if t is None:   # kept: list schedulers ask for the same sizes over and over (2.7 million times
            # for HEFT, m-SCT and m-ETF on a 10,000-node Llama, a few thousand of them distinct)
            t = self._transfers[key] = route_time(self.cluster.route(src, dst), nbytes)
        return t

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        return self.cluster.occupied(src, dst)


def cluster_measurer(cluster: Cluster, graph: OpGraph, cost: RooflineCostModel | None = None, *,
                     training=None, pipeline=None, program=None) -> SimulatedMeasurer:
    """The measurer of a placement on `cluster`: its devices with their memory capacities as caps,
    every step time simulated with `cost` (default: the cluster's roofline model), the cluster
    named in the protocol, so that figures of two clusters are never taken for one another."""
    measurer = SimulatedMeasurer(graph, as_devices(cluster.device_specs()), cost or RooflineCostModel(cluster, graph),
                                 training=training, pipeline=pipeline, program=program)
    measurer.protocol["cluster"] = cluster.name
    return measurer


def fit_efficiency(graph: OpGraph, cluster: Cluster, op_times: dict[str, dict[str, float]],
                   grid: int = 12) -> Efficiency:
    """The efficiencies under which the roofline model best predicts measured per-node times
    (`op_times`: node -> device -> seconds, a profile's, on the cluster's devices): least squares
    of log times over a grid of the four parameters, every node with a finite positive time counted."""
    model = RooflineCostModel(cluster, graph)
    rows = []   # (flops, bytes moved, is matmul, peak, bandwidth, launch, measured)
    for name, per in op_times.items():
        node = graph.nodes.get(name)
        if node is None:
            continue
        for device, t in per.items():
            if device in model._model and 0 < t < math.inf:
                m = model._model[device]
                moved = model._input_bytes.get(name, 0) + node.output_bytes + node.param_bytes
                rows.append((max(node.flops, 0.0), moved, node.op_type in MATMUL_OPS, model.peak_flops(node, device),
                             m.memory_bandwidth_Bps, m.launch_overhead_s, t))
    if not rows:
        return Efficiency()
    f, b, mm, peak, bw, launch, measured = (np.asarray(c, dtype=float) for c in zip(*rows))
    ceilings = np.geomspace(0.01, 1.0, grid)
    halves = np.geomspace(1e3, 1e10, grid)
    memories = np.geomspace(0.02, 1.0, grid)
    target = np.log(measured)
    best = (math.inf, Efficiency())
    for half in halves:
        size = np.where(f > 0, f / (f + half), 1.0)
        for memory in memories:
            mem_t = b / (bw * memory)
            # compute time of each node under every (matmul, other) ceiling pair, matmul nodes use the first
            ceiling = np.where(mm[:, None, None], ceilings[:, None][None, :, :], ceilings[None, :][None, :, :])
            comp = np.where(f[:, None, None] > 0, f[:, None, None] / (peak[:, None, None] * ceiling * size[:, None, None]),
                            0.0)
            predicted = launch[:, None, None] + np.maximum(comp, mem_t[:, None, None])
            error = ((np.log(predicted) - target[:, None, None]) ** 2).sum(axis=0)
            i, j = np.unravel_index(np.argmin(error), error.shape)
            if error[i, j] < best[0]:
                best = (float(error[i, j]), Efficiency(float(ceilings[i]), float(ceilings[j]), float(half), float(memory)))
    return best[1]
