"""What the graph policy sees of a graph on a cluster: absolute figures, never scaled by one graph.

- Groups (the op-group DAG of `placer.graph.grouping.group_graph`, at most 256 groups): the share
  of each op type of a fixed vocabulary (an op outside it falls into one of a few hashed buckets,
  so an unseen op still gets a placement), log-scaled FLOPs, output, input and parameter bytes,
  node count and the group's position in the topological order.
- Edges: both directions of every pair of groups that exchange tensors, with the log bytes crossing.
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
from dataclasses import dataclass

import numpy as np

from placer.costmodel.protocol import CostModel
from placer.graph.grouping import Grouping, group_graph
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
MAX_GROUPS = 256   # what the grouping coarsens every graph to at most (Inception-v3 places in well under 2 s)

# Fixed scales of the logs (natural log): a figure of e^scale maps to 1.
_LOG_WORK = 30.0       # FLOPs and bytes: up to ~1e13
_LOG_TIME = 20.0       # seconds, log of 1e-9 s is about -20.7
_LOG_RATE = 40.0       # FLOP/s and bytes/s: up to ~2e17

GROUP_FEATURES = len(OP_VOCABULARY) + HASH_BUCKETS + 6
EDGE_FEATURES = 2
DEVICE_FEATURES = 11
PAIR_FEATURES = 3


@dataclass
class GraphFeatures:
    """The policy's inputs for one graph on one cluster (numpy; `to_torch` in the model)."""

    grouping: Grouping
    devices: list[str]
    groups: np.ndarray        # (G, GROUP_FEATURES) float32
    edge_index: np.ndarray    # (2, E) int64, both directions
    edge_attr: np.ndarray     # (E, EDGE_FEATURES) float32
    edge_bytes: np.ndarray    # (E,) float64: bytes crossing each directed edge's pair, for the placement state
    device: np.ndarray        # (D, DEVICE_FEATURES) float32
    pair: np.ndarray          # (G, D, PAIR_FEATURES) float32
    group_time: np.ndarray    # (G, D) float64 seconds (inf: cannot run there)
    mask: np.ndarray          # (G, D) bool: the devices each group may go to

    @property
    def n_groups(self) -> int:
        return len(self.grouping)


def op_column(op_type: str) -> int:
    """The vocabulary column of an op type; an unknown one goes to a hashed bucket after the vocabulary."""
    column = _COLUMN.get(op_type)
    if column is not None:
        return column
    return len(OP_VOCABULARY) + zlib.crc32(op_type.encode()) % HASH_BUCKETS


def _log(x: float | np.ndarray, scale: float) -> np.ndarray:
    return np.log1p(np.maximum(x, 0.0)) / scale


def device_features(cluster: Cluster) -> np.ndarray:
    """(D, DEVICE_FEATURES): each device's datasheet figures and its links' to the other devices."""
    names = cluster.device_names
    rows = []
    for device in cluster.devices:
        m = device.model
        half = max(m.tensor_flops.get("float16", 0.0), m.peak_flops.get("float16", 0.0), m.peak_flops["float32"])
        bandwidths, latencies = [], []
        for other in names:
            if other != device.name:
                latency, bandwidth = route_figures(cluster.route(device.name, other))
                bandwidths.append(math.log(bandwidth) / _LOG_RATE)
                latencies.append(math.log(max(latency, 1e-9)) / _LOG_TIME)
        bandwidths = bandwidths or [0.0]
        latencies = latencies or [0.0]
        rows.append([math.log(m.peak_flops["float32"]) / _LOG_RATE, math.log(half) / _LOG_RATE,
                     math.log(m.memory_bandwidth_Bps) / _LOG_RATE, math.log(m.memory_bytes) / _LOG_WORK,
                     math.log(max(m.launch_overhead_s, 1e-9)) / _LOG_TIME, float(m.kind == "cuda"),
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


def graph_features(graph: OpGraph, cluster: Cluster, cost: CostModel | None = None,
                   grouping: Grouping | None = None) -> GraphFeatures:
    """The policy's view of `graph` on `cluster` with `cost` (default: the cluster's roofline model),
    its groups `grouping` (default: `group_graph` with at most `MAX_GROUPS`)."""
    if cost is None:
        from placer.costmodel.roofline import RooflineCostModel

        cost = RooflineCostModel(cluster, graph)
    devices = cluster.device_names
    if grouping is None:
        grouping = group_graph(graph, None, len(devices))
        if len(grouping) > MAX_GROUPS:
            grouping = group_graph(graph, MAX_GROUPS, len(devices))
    G = len(grouping)
    activations = {name: info.nbytes for name, info in graph.tensors.items() if name not in graph.initializers}
    groups = np.zeros((G, GROUP_FEATURES), dtype=np.float64)
    memory = np.zeros(G)
    vocab = len(OP_VOCABULARY) + HASH_BUCKETS
    for g, members in enumerate(grouping.groups):
        flops = out_bytes = in_bytes = params = 0.0
        for name in members:
            node = graph.nodes[name]
            groups[g, op_column(node.op_type)] += 1.0
            flops += max(node.flops, 0.0)
            out_bytes += node.output_bytes
            params += node.param_bytes
            in_bytes += sum(activations.get(t, 0) for t in node.inputs if t)
        groups[g, :vocab] /= len(members)
        groups[g, vocab:] = [_log(flops, _LOG_WORK), _log(out_bytes, _LOG_WORK), _log(in_bytes, _LOG_WORK),
                             _log(params, _LOG_WORK), math.log(len(members)) / 10.0, g / max(G - 1, 1)]
        memory[g] = params + out_bytes

    between: dict[tuple[int, int], float] = {}
    for u, v, data in graph.dag.edges(data=True):
        a, b = grouping.node_group[u], grouping.node_group[v]
        if a != b:
            between[(a, b)] = between.get((a, b), 0.0) + float(data.get("bytes", 0))
    pairs = sorted(between)
    edge_index = np.asarray([[a for a, _ in pairs] + [b for _, b in pairs],
                             [b for _, b in pairs] + [a for a, _ in pairs]], dtype=np.int64).reshape(2, -1)
    crossing = np.asarray([between[p] for p in pairs] * 2, dtype=np.float64)
    direction = np.asarray([1.0] * len(pairs) + [-1.0] * len(pairs))   # producer to consumer, or back
    edge_attr = np.stack([_log(crossing, _LOG_WORK), direction], axis=1) if pairs else np.zeros((0, EDGE_FEATURES))

    times = group_times(graph, grouping, cost, devices)
    runnable = np.isfinite(times)
    capacity = np.asarray([d.model.memory_bytes for d in cluster.devices], dtype=np.float64)
    mask = runnable & (memory[:, None] <= capacity[None, :])
    mask |= runnable & ~mask.any(axis=1, keepdims=True)   # too big for any device alone: memory is the simulator's call
    mask[~mask.any(axis=1)] = True   # runs nowhere: any choice fails, and the simulator says so
    safe = np.where(runnable, np.maximum(times, 1e-12), np.nan)
    fastest = np.nanmin(np.where(runnable.any(axis=1, keepdims=True), safe, 1.0), axis=1, keepdims=True)
    pair = np.stack([np.nan_to_num(np.log(safe) / _LOG_TIME, nan=0.0),
                     np.nan_to_num(np.log(safe / fastest), nan=0.0), runnable.astype(np.float64)], axis=2)
    return GraphFeatures(grouping=grouping, devices=devices, groups=groups.astype(np.float32),
                         edge_index=edge_index, edge_attr=edge_attr.astype(np.float32), edge_bytes=crossing,
                         device=device_features(cluster), pair=pair.astype(np.float32), group_time=times, mask=mask)
