"""Shards timed at their own shapes on this machine's devices, so that a plan's prediction does not
take a shard for its share of the whole op.

A shard of half the batch is not half the op's time on a CPU: rnnlm's Gemms at batch 16 take 23%
more per row than at 32 (their matrices are too short to fill the cores' pipelines), so its
profile, each shard its share, predicted DDP at 100 ms where it measures 116. Here the graph
lowered to DDP's plan (every op split on its batch over the devices) is profiled as any graph is
(`placer.costmodel.profile_cache`: each node timed alone on each class of devices, cached), and
each shard's time is kept under what tells it apart: its source op, its output shapes and FLOPs.
A plan's prediction (`pricing.SourceCosts`) reads a shard's time here when a shard of the same
shapes was timed (every batch shard over the same number of devices), and its share of the op
otherwise (a split by weights, or over another number of devices). The times go through the base
profile's calibration (its per-node overhead and scale), as the whole ops' do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from placer.devices import Device
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, OpNode
from placer.plans.data_parallel import data_parallel
from placer.plans.runnable import runnable


def shard_key(node: OpNode, source: str) -> tuple:
    """What tells a shard of `source` apart from its other shards of other sizes."""
    return source, tuple(tuple(info.shape) for info in node.output_info), node.flops


class ShardProfiled:
    """`base` (a profile of the source graph) with the times of the shards profiled at their
    shapes (`times`: shard key -> device -> raw seconds): everything else is the base's."""

    def __init__(self, base, times: Mapping[tuple, Mapping[str, float]]) -> None:
        self.base, self.times = base, dict(times)
        self.devices = base.devices

    def __getattr__(self, name: str):
        return getattr(self.base, name)

    def shard_time(self, node: OpNode, source: str, device: str) -> float | None:
        """The shard's profiled time on `device`, calibrated as the base's ops are; None where no
        shard of its shapes was timed."""
        raw = self.times.get(shard_key(node, source), {}).get(device)
        if raw is None:
            return None
        calibrated = getattr(self.base, "calibrated", None)
        return raw if raw == 0.0 or calibrated is None else calibrated(raw, device)


def profile_shards(graph: OpGraph, devices: Sequence[Device], base, feeds: Mapping[str, np.ndarray],
                   report=None) -> ShardProfiled:
    """`base` with `graph`'s batch shards over `devices` profiled (cached after the first time);
    `base` unchanged where the graph has no batch to split."""
    from placer.costmodel.profile_cache import profiled_cost_model

    names = [d.name for d in devices]
    try:
        made = runnable(graph, data_parallel(graph, names))
    except PlacerError:
        return ShardProfiled(base, {})
    kwargs = {"report": report} if report is not None else {}
    shards = profiled_cost_model(made.graph, devices, feeds=made.feeds(feeds), calibration=None, **kwargs)
    timed: dict[tuple, list[dict[str, float]]] = {}
    for name, source in made.lowered.shard_of.items():
        node = made.graph.nodes.get(name)
        if node is not None and name != source:
            timed.setdefault(shard_key(node, source), []).append({d: shards.profile.op_time(name, d) for d in names})
    # the shards of one op alike (each replica's) are one figure: their mean
    return ShardProfiled(base, {key: {d: float(np.mean([t[d] for t in ts])) for d in names}
                                for key, ts in timed.items()})
