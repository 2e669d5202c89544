"""Node times from ONNX Runtime's profiler: each kernel record matched back to placer's node.

ORT renames what it rewrites: a node it converts to the blocked layout is named after its output
(``<tensor>_nchwc``), and a fusion after its last output (Conv+Relu is the Relu's output with op
Conv), so a record is matched to the node that makes its output, then back along the first input
to the node of the op ORT ran. Nodes ORT fused away or folded get no record; layout reorders ORT
inserts match no node, and like the engine's own per-session cost they are in the gap between the
step time and the sum of the node times, which the profiled cost model spreads over the nodes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from placer.graph.opgraph import OpGraph

# How far back along first inputs a fused record looks for the node of the op ORT ran.
_FUSED_DEPTH = 4


def node_records(path: str) -> list[list[tuple[str, str, float]]]:
    """The kernel records of an ORT profile file, one list per run: (record name, op, seconds)."""
    events = json.loads(Path(path).read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    result: list[list[tuple[str, str, float]]] = [[] for _ in runs]
    starts = [s for s, _ in runs]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        i = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        if 0 <= i < len(runs) and e["ts"] <= runs[i][1]:
            name = e["name"][:-len("_kernel_time")]
            result[i].append((name, e.get("args", {}).get("op_name", ""), e["dur"] * 1e-6))
    return result


def node_seconds(graph: OpGraph, records: list[tuple[str, str, float]]) -> dict[str, float]:
    """Seconds per placer node of one run (records that match no node are left out)."""
    times: dict[str, float] = {}
    for name, op, seconds in records:
        node = match_node(graph, name, op)
        if node is not None:
            times[node] = times.get(node, 0.0) + seconds
    return times


def match_node(graph: OpGraph, record: str, op: str) -> str | None:
    """The placer node an ORT kernel record stands for (see the module doc), or None."""
    if record in graph.nodes:
        node = record
    else:
        node = graph.producer.get(record.removesuffix("_nchwc"))
        if node is None:
            return None
    found = node
    for _ in range(_FUSED_DEPTH):
        if graph.nodes[found].op_type == op:
            return found
        first = next((t for t in graph.nodes[found].inputs if t), None)
        found = graph.producer.get(first)
        if found is None:
            break
    return node
