"""Shards and collectives timed at their own shapes on this machine's devices, so that a plan's
prediction does not take a shard for its share of the whole op, nor a collective for free.

A shard of half the batch is not half the op's time on a CPU: rnnlm's Gemms at batch 16 take 23%
more per row than at 32 (their matrices are too short to fill the cores' pipelines), so its
profile, each shard its share, predicted DDP at 100 ms where it measures 116-119. Here two plans'
lowered graphs are profiled as any graph is (`placer.costmodel.profile_cache`: each node timed
alone on each class of devices, cached): DDP's (every op split on its batch) and every op split by
weights where its maths allows (its shards, and the steps of the collectives between them: a join,
a ring step's sum, an all-to-all's cut). Each shard's time is kept under its source op, output
shapes and FLOPs, each step's under its kind and output shapes. A plan's prediction
(`pricing.SourceCosts`, `pricing.PlanCostModel`) reads a shard's or a step's time here when one of
the same shapes was timed, and otherwise its share of the op (a shard) or nothing (a step: its
time is the hand-over the calibration fitted). The times go through the base profile's
calibration (its per-node overhead and scale), as the whole ops' do.
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
    shapes (`times`: shard key -> device -> raw seconds) and of the collectives' steps (`helpers`:
    helper key -> device -> raw seconds): everything else is the base's."""

    def __init__(self, base, times: Mapping[tuple, Mapping[str, float]],
                 helpers: Mapping[tuple, Mapping[str, float]] | None = None) -> None:
        self.base, self.times, self.helper_times = base, dict(times), dict(helpers or {})
        self.devices = base.devices

    def __getattr__(self, name: str):
        return getattr(self.base, name)

    def shard_time(self, node: OpNode, source: str, device: str) -> float | None:
        """The shard's profiled time on `device`, calibrated as the base's ops are; None where no
        shard of its shapes was timed."""
        return self._calibrated(self.times.get(shard_key(node, source), {}).get(device), device)

    def helper_time(self, node: OpNode, device: str) -> float | None:
        """A collective's step (a join, a ring step, a cut for all-to-all) as profiled on `device`:
        its kernel's time, the hand-over to the next device aside; None where none of its kind and
        shapes was timed."""
        return self._calibrated(self.helper_times.get(helper_key(node), {}).get(device), device)

    def _calibrated(self, raw: float | None, device: str) -> float | None:
        calibrated = getattr(self.base, "calibrated", None)
        return raw if raw is None or raw == 0.0 or calibrated is None else calibrated(raw, device)


def helper_key(node: OpNode) -> tuple:
    """What tells a collective's step apart: its kind and its output shapes."""
    return node.op_type, tuple(tuple(info.shape) for info in node.output_info)


def profiled_plans(graph: OpGraph, devices: list[str]) -> list:
    """The plans whose lowered graphs are profiled: DDP's (every batch shard) and every op split by
    weights where its maths allows (their shards, and the collectives between them)."""
    from placer.placement import Placement
    from placer.plans.plan import Plan
    from placer.plans.space import WEIGHTS, Config, replan

    plans = []
    for build in (lambda: data_parallel(graph, devices),
                  lambda: replan(graph, Plan.from_placement(Placement.single_device(
                      list(graph.nodes), devices[0], graph.sha256, devices)), list(graph.nodes),
                      Config(tuple(devices), WEIGHTS))):
        try:
            plans.append(build())
        except PlacerError:
            continue
    return plans


def profile_shards(graph: OpGraph, devices: Sequence[Device], base, feeds: Mapping[str, np.ndarray],
                   report=None, engine: str = "torch") -> ShardProfiled:
    """`base` with `graph`'s shards over `devices` (by batch, and by weights) and the collectives'
    steps between them profiled in `engine` (cached after the first time; ONNX Runtime runs no
    collective, so there the batch shards alone); `base` alone where nothing splits."""
    from placer.costmodel.profile_cache import profiled_cost_model

    names = [d.name for d in devices]
    kwargs = {"report": report} if report is not None else {}
    shards: dict[tuple, dict[str, float]] = {}
    helpers: dict[tuple, dict[str, float]] = {}
    for plan in profiled_plans(graph, names):
        try:
            made = runnable(graph, plan)
        except PlacerError:
            continue
        if made.lowered.helpers and engine != "torch":
            continue
        profiled = profiled_cost_model(made.graph, devices, feeds=made.feeds(feeds), calibration=None, engine=engine,
                                       **kwargs)
        found: dict[tuple, list[dict[str, float]]] = {}
        for name, node in made.graph.nodes.items():
            source = made.lowered.shard_of.get(name)
            if name in made.lowered.helpers:
                key = ("helper", helper_key(node))
            elif source is not None and name != source:
                key = ("shard", shard_key(node, source))
            else:
                continue
            found.setdefault(key, []).append({d: profiled.profile.op_time(name, d) for d in names})
        # the steps alike in one plan (each replica's shard of an op, each ring step) are one figure,
        # the least: profiled one after another, the first replica reads the op's weights from memory
        # and the next finds them in cache (rnnlm: 119.8 against 101.4 ms over each replica's shards), and
        # the base's op times are of warm repeats too, its calibration adding what a step pays on top;
        # a shape an earlier plan timed keeps that plan's figure (DDP's batch shards read whole
        # tensors, not the slices a split by weights may leave them)
        for (kind, key), ts in found.items():
            (helpers if kind == "helper" else shards).setdefault(key, {d: float(min(t[d] for t in ts))
                                                                       for d in names})
    return ShardProfiled(base, shards, helpers)

