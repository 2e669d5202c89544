"""What `placer inspect` reports about an `OpGraph`: totals, op histogram, critical path, and the
JSON form with every node and the graph hash."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from placer.graph.opgraph import OpGraph, TensorInfo

JSON_FORMAT = "placer.inspect/1"


@dataclass
class GraphSummary:
    """Totals of one graph, as `placer inspect` prints them."""

    source: str
    sha256: str
    node_count: int
    op_histogram: dict[str, int]          # op type -> count, most frequent first
    param_count: int                      # elements of all initializers
    param_bytes: int
    flops: float                          # one forward step
    activation_bytes: int                 # sum of every node output's size
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    opsets: dict[str, int]
    critical_path: list[str] = field(default_factory=list)
    critical_path_flops: float = 0.0
    # Constant node (or node folded with Constants) -> its weight (`OpGraph.constants`)
    constant_weights: dict[str, str] = field(default_factory=dict)
    data_dependent: dict[str, str] = field(default_factory=dict)    # control-flow node -> what the data decides
    given_inputs: list[str] = field(default_factory=list)   # inputs the user's arrays gave (--inputs); others generated
    run_shapes: list[str] = field(default_factory=list)     # tensors whose shapes a real run on the inputs found


def critical_path(graph: OpGraph) -> tuple[list[str], float]:
    """The dependency chain with the most FLOPs (node names, first to last) and its FLOPs.

    Ties go to the predecessor earliest in topological order, so the answer is deterministic."""
    best: dict[str, float] = {}
    via: dict[str, str | None] = {}
    position = {name: i for i, name in enumerate(graph.nodes)}
    for name, node in graph.nodes.items():
        preds = sorted(graph.dag.predecessors(name), key=position.__getitem__)
        prev = max(preds, key=lambda p: best[p], default=None)  # max keeps the first of equals
        best[name] = node.flops + (best[prev] if prev is not None else 0.0)
        via[name] = prev
    if not best:
        return [], 0.0
    end = max(graph.nodes, key=lambda n: best[n])
    path: list[str] = []
    cursor: str | None = end
    while cursor is not None:
        path.append(cursor)
        cursor = via[cursor]
    return path[::-1], best[end]


def summarize(graph: OpGraph) -> GraphSummary:
    """The totals `placer inspect` shows."""
    histogram = Counter(n.op_type for n in graph.nodes.values())
    path, path_flops = critical_path(graph)
    return GraphSummary(
        source=graph.source, sha256=graph.sha256, node_count=len(graph.nodes),
        op_histogram=dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
        param_count=sum(t.numel for t in graph.initializers.values()),
        param_bytes=graph.total_param_bytes, flops=graph.total_flops,
        activation_bytes=sum(n.output_bytes for n in graph.nodes.values()),
        inputs=list(graph.inputs), outputs=list(graph.outputs), opsets=dict(graph.opsets),
        critical_path=path, critical_path_flops=path_flops, constant_weights=dict(graph.constants),
        data_dependent={n: op.data_dependence for n, op in graph.nodes.items() if op.data_dependence},
        given_inputs=list(graph.sample_inputs), run_shapes=list(graph.run_shapes),
    )


def _generated(s: GraphSummary) -> list[str]:
    return [t.name for t in s.inputs if t.name not in s.given_inputs]


def _tensor(t: TensorInfo) -> dict[str, Any]:
    return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}


def to_json(graph: OpGraph) -> dict[str, Any]:
    """Everything `placer inspect --json` prints: the summary, the hash and every node."""
    s = summarize(graph)
    return {
        "format": JSON_FORMAT,
        "source": s.source,
        "graph": {"sha256": s.sha256},
        "node_count": s.node_count,
        "op_histogram": s.op_histogram,
        "param_count": s.param_count,
        "param_bytes": s.param_bytes,
        "flops": s.flops,
        "activation_bytes": s.activation_bytes,
        "opsets": s.opsets,
        "inputs": [_tensor(t) for t in s.inputs],
        "outputs": [_tensor(t) for t in s.outputs],
        "critical_path": {"flops": s.critical_path_flops, "nodes": s.critical_path},
        "constant_weights": s.constant_weights,
        "data_dependent": s.data_dependent,
        "given_inputs": s.given_inputs,
        # the shapes only a real run found, and the inputs that run was fed: they decided them
        "shapes_from_run": {"tensors": s.run_shapes, "given": s.given_inputs, "generated": _generated(s)},
        "nodes": [
            {"name": n.name, "op_type": n.op_type, "domain": n.domain, "opset": n.opset,
             "inputs": [t for t in n.inputs if t],
             "outputs": [_tensor(t) for t in n.output_info],
             "output_shapes": [list(t.shape) for t in n.output_info],
             "flops": n.flops, "param_bytes": n.param_bytes, "device_kinds": sorted(n.device_kinds)}
            for n in graph.nodes.values()
        ],
    }


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def _bytes(value: int) -> str:
    for scale, prefix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= scale:
            return f"{value / scale:.2f} {prefix}"
    return f"{value} B"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def format_summary(s: GraphSummary, top_ops: int = 15, path_nodes: int = 8) -> str:
    """The human-readable report of `placer inspect`."""
    shape = lambda t: "x".join(map(str, t.shape)) or "scalar"  # noqa: E731
    origin = (lambda t: " given" if t.name in s.given_inputs else " generated") if s.given_inputs else (lambda t: "")  # noqa: E731
    lines = [
        f"graph       {s.source}",
        f"sha256      {s.sha256}",
        "opsets      " + ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(s.opsets.items())),
        f"nodes       {s.node_count}",
        f"parameters  {s.param_count:,} ({_bytes(s.param_bytes)})" + (
            f", {len(set(s.constant_weights.values()))} of them in Constant nodes (placed with their readers)"
            if s.constant_weights else ""),
        f"FLOPs       {_si(s.flops, 'FLOP')} per step",
        f"activations {_bytes(s.activation_bytes)} (all node outputs)",
        "inputs",
        *(f"  {t.name:<24} {shape(t):<20} {t.dtype:<8}{origin(t)}".rstrip() for t in s.inputs),
        "outputs",
        *(f"  {t.name:<24} {shape(t):<20} {t.dtype}" for t in s.outputs),
        "op histogram",
    ]
    ops = list(s.op_histogram.items())
    lines += [f"  {op:<24} {count}" for op, count in ops[:top_ops]]
    if len(ops) > top_ops:
        lines.append(f"  ... {len(ops) - top_ops} more op types ({_count(sum(c for _, c in ops[top_ops:]), 'node')})")
    share = s.critical_path_flops / s.flops if s.flops else 0.0
    lines.append(f"critical path by FLOPs: {_count(len(s.critical_path), 'node')}, "
                 f"{_si(s.critical_path_flops, 'FLOP')} ({share:.0%} of all)")
    shown = s.critical_path
    if len(shown) > path_nodes:
        half = path_nodes // 2
        shown = shown[:half] + [f"... {len(shown) - 2 * half} more ..."] + shown[-half:]
    lines += [f"  {name}" for name in shown]
    if s.data_dependent:
        lines.append(f"control flow whose cost depends on the data ({_count(len(s.data_dependent), 'node')}): FLOPs estimate "
                     "the larger branch and one iteration where no trip count is fixed; a profile times what "
                     "the profiling inputs did")
        lines += [f"  {name}: {reason}" for name, reason in s.data_dependent.items()]
    if s.run_shapes:
        given, generated = ", ".join(s.given_inputs) or "none", ", ".join(_generated(s)) or "none"
        lines.append(f"shapes the inputs' values decided (an If's branch, a Loop's trip count, ...): "
                     f"{_count(len(s.run_shapes), 'tensor')}, found by a real run on the inputs given ({given}) "
                     f"and generated ({generated})")
        shown = s.run_shapes[:path_nodes] + ([f"... {len(s.run_shapes) - path_nodes} more"]
                                             if len(s.run_shapes) > path_nodes else [])
        lines += [f"  {name}" for name in shown]
    return "\n".join(lines)
