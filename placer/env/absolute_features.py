"""Absolute features of a graph's groups on a cluster: fixed scales and a fixed op vocabulary, never
one graph's maxima, so a group or a device looks the same in every problem.

The padded environment's observation and the graph policy's inputs are both computed here (the
policy layer sits above the environment and imports this; never the other way), so an agent
trained through the environment sees the figures the graph policy sees.

- Groups: the share of each op type of a fixed vocabulary (an op outside it falls into one of a few
  hashed buckets, so an unseen op still counts), log-scaled FLOPs, output, input and parameter
  bytes, node count and the group's position in the topological order.
- Devices: what a cluster description says of each (log peak FLOP/s, log memory bandwidth, log
  memory, log launch overhead, kind, contention) and of its links to the others (mean and min log
  bandwidth, mean and max log latency over the routes to every other device).
- (group, device) pairs: the cost model's log time of the group on the device, and that time over
  the group's fastest device's; the mask of pairs that may be chosen: every op of the group runs
  there (cost model time finite) and the group's weights and outputs fit the device's memory.

Logs are divided by fixed constants so that the figures sit near [-1, 1] for every graph and
cluster alike.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from placer.costmodel.protocol import CostModel
from placer.graph.grouping import Grouping
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster, route_figures

# The op vocabulary: the ops of the zoo and of common exported vision, language and speech models.
OP_VOCABULARY = (
    "Add", "ArgMax", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape",
    "Conv", "ConvTranspose", "Cos", "CumSum", "Div", "Dropout", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand",
    "Flatten", "Gather", "GatherElements", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "GRU", "Identity",
    "If", "InstanceNormalization", "LayerNormalization", "LeakyRelu", "Less", "Log", "LogSoftmax", "Loop", "LSTM",
    "MatMul", "Max", "MaxPool", "Mean", "Min", "Mul", "Neg", "Not", "Pad", "Pow", "Range", "Reciprocal",
    "ReduceMax", "ReduceMean", "ReduceSum", "Relu", "Reshape", "Resize", "RNN", "Scan", "ScatterND", "Shape",
    "Sigmoid", "Sin", "Slice", "Softmax", "Split", "Sqrt", "Squeeze", "Sub", "Tanh", "Tile", "TopK", "Transpose",
    "Unsqueeze", "Where",
)
HASH_BUCKETS = 4   # ops outside the vocabulary, by a stable hash of their name
_COLUMN = {op: i for i, op in enumerate(OP_VOCABULARY)}

# Fixed scales of the logs (natural log): a figure of e^scale maps to 1.
LOG_WORK = 30.0       # FLOPs and bytes: up to ~1e13
LOG_TIME = 20.0       # seconds, log of 1e-9 s is about -20.7
LOG_RATE = 40.0       # FLOP/s and bytes/s: up to ~2e17

GROUP_FEATURES = len(OP_VOCABULARY) + HASH_BUCKETS + 6
DEVICE_FEATURES = 11
PAIR_FEATURES = 3


def op_column(op_type: str) -> int:
    """The vocabulary column of an op type; an unknown one goes to a hashed bucket after the vocabulary."""
    column = _COLUMN.get(op_type)
    if column is not None:
        return column
    return len(OP_VOCABULARY) + zlib.crc32(op_type.encode()) % HASH_BUCKETS


def log_scaled(x: float | np.ndarray, scale: float) -> np.ndarray:
    """log1p of a non-negative figure over a fixed scale."""
    return np.log1p(np.maximum(x, 0.0)) / scale


def group_rows(graph: OpGraph, grouping: Grouping) -> np.ndarray:
    """(G, GROUP_FEATURES) float32: each group's op shares over the vocabulary and its buckets, then
    log FLOPs, output, input and parameter bytes, log node count and topological position."""
    G = len(grouping)
    activations = {name: info.nbytes for name, info in graph.tensors.items() if name not in graph.initializers}
    rows = np.zeros((G, GROUP_FEATURES), dtype=np.float64)
    vocab = len(OP_VOCABULARY) + HASH_BUCKETS
    for g, members in enumerate(grouping.groups):
        flops = out_bytes = in_bytes = params = 0.0
        for name in members:
            node = graph.nodes[name]
            rows[g, op_column(node.op_type)] += 1.0
            flops += max(node.flops, 0.0)
            out_bytes += node.output_bytes
            params += node.param_bytes
            in_bytes += sum(activations.get(t, 0) for t in node.inputs if t)
        rows[g, :vocab] /= len(members)
        rows[g, vocab:] = [log_scaled(flops, LOG_WORK), log_scaled(out_bytes, LOG_WORK), log_scaled(in_bytes, LOG_WORK),
                           log_scaled(params, LOG_WORK), math.log(len(members)) / 10.0, g / max(G - 1, 1)]
    return rows.astype(np.float32)


def group_memory(graph: OpGraph, grouping: Grouping) -> np.ndarray:
    """(G,) bytes a group holds on its device: its weights and its outputs."""
    return np.asarray([float(sum(graph.nodes[n].param_bytes for n in members))
                       + float(sum(graph.nodes[n].output_bytes for n in members)) for members in grouping.groups])


def bytes_between(graph: OpGraph, grouping: Grouping) -> dict[tuple[int, int], float]:
    """Bytes sent from one group to another, by (producer group, consumer group)."""
    between: dict[tuple[int, int], float] = {}
    for u, v, data in graph.dag.edges(data=True):
        a, b = grouping.node_group[u], grouping.node_group[v]
        if a != b:
            between[(a, b)] = between.get((a, b), 0.0) + float(data.get("bytes", 0))
    return between


def device_features(cluster: Cluster) -> np.ndarray:
    """(D, DEVICE_FEATURES) float32: each device's datasheet figures and its links' to the other devices."""
    names = cluster.device_names
    rows = []
    for device in cluster.devices:
        m = device.model
        half = max(m.tensor_flops.get("float16", 0.0), m.peak_flops.get("float16", 0.0), m.peak_flops["float32"])
        bandwidths, latencies = [], []
        for other in names:
            if other != device.name:
                latency, bandwidth = route_figures(cluster.route(device.name, other))
                bandwidths.append(math.log(bandwidth) / LOG_RATE)
                latencies.append(math.log(max(latency, 1e-9)) / LOG_TIME)
        bandwidths = bandwidths or [0.0]
        latencies = latencies or [0.0]
        rows.append([math.log(m.peak_flops["float32"]) / LOG_RATE, math.log(half) / LOG_RATE,
                     math.log(m.memory_bandwidth_Bps) / LOG_RATE, math.log(m.memory_bytes) / LOG_WORK,
                     math.log(max(m.launch_overhead_s, 1e-9)) / LOG_TIME, float(m.kind == "cuda"),
                     math.log(max(device.contention, 1.0)),
                     float(np.mean(bandwidths)), float(np.min(bandwidths)), float(np.mean(latencies)),
                     float(np.max(latencies))])
    return np.asarray(rows, dtype=np.float32)


def group_times(graph: OpGraph, grouping: Grouping, cost: CostModel, devices: list[str]) -> np.ndarray:
    """(G, D) seconds of each group's ops on each device, one after another (inf: some op cannot run there)."""
    times = np.zeros((len(grouping), len(devices)))
    for g, members in enumerate(grouping.groups):
        for name in members:
            node = graph.nodes[name]
            times[g] += [cost.op_time(node, d) for d in devices]
    return times


def pair_features(times: np.ndarray) -> np.ndarray:
    """(G, D, PAIR_FEATURES) float32 of `group_times`: log time, log time over the group's fastest
    device's, and whether it runs there (both logs 0 where it does not)."""
    runnable = np.isfinite(times)
    safe = np.where(runnable, np.maximum(times, 1e-12), np.nan)
    fastest = np.nanmin(np.where(runnable.any(axis=1, keepdims=True), safe, 1.0), axis=1, keepdims=True)
    pair = np.stack([np.nan_to_num(np.log(safe) / LOG_TIME, nan=0.0),
                     np.nan_to_num(np.log(safe / fastest), nan=0.0), runnable.astype(np.float64)], axis=2)
    return pair.astype(np.float32)


def allowed_devices(times: np.ndarray, memory: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """(G, D) bool: the devices each group may go to, given `group_times`, `group_memory` and each
    device's memory `capacity` in bytes: it runs every op there and its weights and outputs fit."""
    runnable = np.isfinite(times)
    mask = runnable & (memory[:, None] <= capacity[None, :])
    mask |= runnable & ~mask.any(axis=1, keepdims=True)   # too big for any device alone: memory is the simulator's call
    mask[~mask.any(axis=1)] = True   # runs nowhere: any choice fails, and the simulator says so
    return mask
