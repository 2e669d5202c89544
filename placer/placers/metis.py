"""METIS k-way partitioning: balance compute across devices, minimise the bytes cut between them.

The graph-partitioning baseline of Mirhoseini et al. (2017). Vertices are weighted by their
cost (fastest-device time from the cost model, else FLOPs), edges by the bytes they carry;
device shares follow each device's speed so a slower device gets less work.
"""

from __future__ import annotations

import logging

import numpy as np

from placer.graph.opgraph import OpGraph
from placer.costmodel.protocol import CostModel
from placer.placement import Placement
from placer.placers.base import Caps, make_placement, require_devices

log = logging.getLogger(__name__)

_WEIGHT_SCALE = 10_000  # METIS wants integer weights; this keeps ~4 significant digits


def _integer_weights(values: np.ndarray) -> list[int]:
    """Positive integers proportional to `values` (zero-cost nodes still weigh 1)."""
    top = float(values.max()) if values.size else 0.0
    if top <= 0:
        return [1] * len(values)
    return [max(1, int(round(v / top * _WEIGHT_SCALE))) for v in values]


def metis(graph: OpGraph, devices: list[str], cost: CostModel | None = None,
          caps: Caps | None = None, *, seed: int = 0) -> Placement:
    """k-way METIS partition of the op graph into len(devices) parts, one per device."""
    import pymetis

    require_devices(devices)
    names = list(graph.nodes)
    if len(devices) == 1 or len(names) < 2:
        return make_placement(graph, devices, {n: devices[0] for n in names}, "metis", edge_cut_bytes=0)
    index = {n: i for i, n in enumerate(names)}

    if cost is not None:
        times = np.array([[cost.op_time(graph.nodes[n], d) for d in devices] for n in names])
        work = np.where(np.isfinite(times), times, np.nan)
        vertex = np.nanmin(work, axis=1)
        # A device's share is its speed: the inverse of its time for the whole graph.
        speed = 1.0 / np.maximum(np.nansum(work, axis=0), 1e-12)
        shares = speed / speed.sum()
    else:
        vertex = np.array([graph.nodes[n].flops for n in names], dtype=float)
        shares = np.full(len(devices), 1.0 / len(devices))

    # Undirected adjacency in CSR form; parallel edges in both directions merge their bytes.
    neighbours: list[dict[int, float]] = [{} for _ in names]
    for u, v, data in graph.dag.edges(data=True):
        a, b = index[u], index[v]
        w = float(data.get("bytes", 0))
        neighbours[a][b] = neighbours[a].get(b, 0.0) + w
        neighbours[b][a] = neighbours[b].get(a, 0.0) + w
    xadj, adjncy, edge_bytes = [0], [], []
    for adj in neighbours:
        for j in sorted(adj):
            adjncy.append(j)
            edge_bytes.append(adj[j])
        xadj.append(len(adjncy))
    eweights = _integer_weights(np.array(edge_bytes)) if edge_bytes else None

    tpwgts = [float(s) for s in shares[:-1]]
    tpwgts.append(1.0 - sum(tpwgts))  # exactly one in total, as METIS requires
    options = pymetis.Options(seed=seed)
    _, parts = pymetis.part_graph(len(devices), pymetis.CSRAdjacency(xadj, adjncy),
                                  vweights=_integer_weights(vertex), eweights=eweights,
                                  tpwgts=tpwgts, options=options)
    nodes = {n: devices[parts[index[n]]] for n in names}
    cut = sum(int(data.get("bytes", 0)) for u, v, data in graph.dag.edges(data=True) if nodes[u] != nodes[v])
    log.info("metis: %d parts, %d bytes cut", len(devices), cut)
    return make_placement(graph, devices, nodes, "metis", edge_cut_bytes=cut)
