"""Small graphs and clusters whose plans' step times can be worked out by hand (tests/plans)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from placer.graph.load import load_graph
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster, ClusterDevice, DeviceModel, Link

# A GPU so fast that every op takes its launch overhead and no more (1e30 FLOP/s and B/s: an op's
# compute and memory times are below 1e-24 s), so a plan's step time is its launches and copies.
LAUNCH = 1e-6
BANDWIDTH = 10e9
LATENCY = 5e-6


def instant_gpu(launch: float = LAUNCH) -> DeviceModel:
    return DeviceModel("instant", "a GPU whose ops take their launch", "cuda", {"float32": 1e30}, {}, 1e30,
                       2**40, launch, "test figures")


def pairwise_cluster(n: int, launch: float = LAUNCH) -> Cluster:
    """n GPUs, every pair joined by a link of its own (BANDWIDTH, LATENCY)."""
    devices = tuple(ClusterDevice(f"cuda:{i}", instant_gpu(launch)) for i in range(n))
    links = tuple(Link(f"link-{i}-{j}", (f"cuda:{i}", f"cuda:{j}"), BANDWIDTH, LATENCY, "test")
                  for i in range(n) for j in range(i + 1, n))
    return Cluster("pairwise", "GPUs joined pairwise", devices, links)


def memory_bound(memory: tuple[int, ...] = (2**40, 2**40), bandwidth: tuple[float, ...] | None = None) -> Cluster:
    """A GPU per `memory` cap, whose ops take the time to read their bytes (`bandwidth`, 1 GB/s
    each by default; compute and launches next to free), all on one link: an op that reads a big
    weight is as fast as its share."""
    def gpu(mem: int, bw: float) -> DeviceModel:
        return DeviceModel("slow-memory", "a GPU bound by its memory", "cuda", {"float32": 1e15}, {}, bw, mem, 1e-6,
                           "test figures")
    names = tuple(f"cuda:{i}" for i in range(len(memory)))
    devices = tuple(ClusterDevice(d, gpu(m, bw)) for d, m, bw in zip(names, memory, bandwidth or (1e9,) * len(memory)))
    return Cluster("bus", "memory-bound GPUs", devices, (Link("link", names, BANDWIDTH, LATENCY, "test"),))


def bus_cluster(groups: int, per_group: int, launch: float = LAUNCH) -> Cluster:
    """`groups` sets of `per_group` GPUs, each set on one shared bus of its own (a switch whose
    every copy crosses it), the sets joined by a slow link between their buses."""
    devices, links, hosts = [], [], []
    for g in range(groups):
        members = [f"cuda:{g * per_group + i}" for i in range(per_group)]
        devices += [ClusterDevice(d, instant_gpu(launch)) for d in members]
        hosts.append(f"switch{g}")
        links.append(Link(f"bus{g}", (*members, f"switch{g}"), BANDWIDTH, LATENCY, "test"))
    links += [Link(f"uplink{g}", (f"switch{g}", f"switch{g + 1}"), 1e9, 1e-4, "test") for g in range(groups - 1)]
    return Cluster("buses", "GPUs on shared buses", tuple(devices), tuple(links), tuple(hosts))


def matmul_relu(m: int, k: int, n: int, branches: int = 1) -> OpGraph:
    """Per branch b: y_b = relu(x_b @ w_b), x_b (m, k), w_b (k, n); nodes mm<b> and relu<b>."""
    nodes, inits, inputs, outputs = [], [], [], []
    for b in range(branches):
        inits.append(numpy_helper.from_array(np.ones((k, n), np.float32), f"w{b}"))
        inputs.append(helper.make_tensor_value_info(f"x{b}", TensorProto.FLOAT, [m, k]))
        outputs.append(helper.make_tensor_value_info(f"y{b}", TensorProto.FLOAT, [m, n]))
        nodes += [helper.make_node("MatMul", [f"x{b}", f"w{b}"], [f"m{b}"], name=f"mm{b}"),
                  helper.make_node("Relu", [f"m{b}"], [f"y{b}"], name=f"relu{b}")]
    graph = helper.make_graph(nodes, "matmul_relu", inputs, outputs, inits)
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def conv_net(batch: int, size: int = 8, channels: int = 8) -> OpGraph:
    """x (batch, 3, size, size) -> Conv+bias (`channels`) -> Relu -> GlobalAveragePool -> Flatten
    -> Gemm+bias -> y (batch, 10)."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w", (channels, 3, 3, 3)), ("b", (channels,)), ("fc", (10, channels)),
                                   ("fc_b", (10,)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], weights)
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def embedding_mlp(batch: int = 4096, vocab: int = 200_000, width: int = 64, hidden: int = 1024) -> OpGraph:
    """A recommender's shape: ids (batch,) -> Gather from a large table (vocab, width) -> MatMul
    (width, hidden) -> Relu -> MatMul (hidden, hidden) -> Relu -> MatMul (hidden, 1) -> y (batch, 1).
    The table is most of the weights and little of the work; the MLP the reverse."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.01, name)
               for name, shape in (("table", (vocab, width)), ("w1", (width, hidden)), ("w2", (hidden, hidden)),
                                   ("w3", (hidden, 1)))]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("MatMul", ["e", "w1"], ["h1"], name="mm1"),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="mm2"),
             helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
             helper.make_node("MatMul", ["r2", "w3"], ["y"], name="mm3")]
    graph = helper.make_graph(nodes, "embedding_mlp", [helper.make_tensor_value_info("ids", TensorProto.INT64, [batch])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1])], weights)
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def gpu_pair(flops: float = 10e12, bandwidth: float = 100e9, link: float = BANDWIDTH) -> Cluster:
    """Two GPUs of `flops` and memory `bandwidth`, joined by one link of `link` bytes/s."""
    gpu = DeviceModel("test-gpu", "a GPU of round figures", "cuda", {"float32": flops}, {}, bandwidth, 2**40, LAUNCH,
                      "test figures")
    devices = tuple(ClusterDevice(f"cuda:{i}", gpu) for i in range(2))
    return Cluster("pair", "two GPUs on one link", devices, (Link("link", ("cuda:0", "cuda:1"), link, LATENCY, "test"),))


def fast_and_slow(ratio: float = 3.0) -> Cluster:
    """Two GPUs whose ops are compute-bound, cuda:0 `ratio` times faster, launches free."""
    fast = replace(instant_gpu(0.0), peak_flops={"float32": 3e9}, memory_bandwidth_Bps=1e30)
    slow = replace(fast, key="slow", peak_flops={"float32": 3e9 / ratio})
    return Cluster("fast-slow", "a fast and a slow GPU", (ClusterDevice("cuda:0", fast), ClusterDevice("cuda:1", slow)),
                   (Link("link", ("cuda:0", "cuda:1"), BANDWIDTH, LATENCY, "test"),))


def shared_weight_chains(steps: int, chains: int = 2, m: int = 64, k: int = 256) -> OpGraph:
    """An unrolled recurrent net's shape: per chain c, h = tanh(h @ w_c) `steps` times from x_c,
    every step reading the one weight w_c (k, k); nodes mm<c>_<t> and tanh<c>_<t>."""
    rng = np.random.default_rng(0)
    nodes, inits, inputs, outputs = [], [], [], []
    for c in range(chains):
        inits.append(numpy_helper.from_array(rng.standard_normal((k, k)).astype(np.float32) * 0.05, f"w{c}"))
        inputs.append(helper.make_tensor_value_info(f"x{c}", TensorProto.FLOAT, [m, k]))
        h = f"x{c}"
        for t in range(steps):
            nodes += [helper.make_node("MatMul", [h, f"w{c}"], [f"m{c}_{t}"], name=f"mm{c}_{t}"),
                      helper.make_node("Tanh", [f"m{c}_{t}"], [f"h{c}_{t}"], name=f"tanh{c}_{t}")]
            h = f"h{c}_{t}"
        outputs.append(helper.make_tensor_value_info(h, TensorProto.FLOAT, [m, k]))
    graph = helper.make_graph(nodes, "shared_weight_chains", inputs, outputs, inits)
    return load_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
