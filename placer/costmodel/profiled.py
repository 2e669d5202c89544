"""`ProfiledCostModel`: a `CostModel` whose times were measured on the real devices.

It wraps a `placer.costmodel.profile.Profile` (each node timed on each class of identical devices
alone, transfers timed per pair of classes) and the profile's calibration against whole-graph
measurements (`placer.costmodel.calibration`): each class's single-device step set to the measured
one, and a contention factor per class (`slowdown`) fitted to a few split placements, which the
simulator and the lower bound use. Profiles are taken, cached and checked by
`placer.costmodel.profile_cache.profiled_cost_model`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from placer.costmodel.profile import Profile
from placer.costmodel.protocol import own_link
from placer.errors import PlacerError
from placer.graph.opgraph import OpNode


@dataclass
class ProfiledCostModel:
    """Op and transfer times read from a measured `Profile` (inf where a node failed).

    With `calibrate`, each running node on a device also carries an equal share of the gap
    between that device's whole-graph step time and the sum of its node times: the executor's
    per-node cost (dispatch, hand-over, bookkeeping) that timing the kernels alone misses, so
    a simulated single-device step equals the profiled one (when the whole step is shorter than
    the sum, every node is scaled down instead). The whole-graph step is the measured one of the
    profile's calibration when it has one, `slowdown` its contention factors, and a hand-over between
    devices that share memory its fitted latency.
    """

    profile: Profile
    path: Path | None = None      # the cache file it came from or went to, if any
    from_cache: bool = False
    calibrate: bool = True
    overhead: dict[str, float] = field(default_factory=dict, init=False)   # device -> seconds per node
    scale: dict[str, float] = field(default_factory=dict, init=False)      # device -> factor on each node
    slowdown: dict[str, float] = field(default_factory=dict, init=False)   # device -> contention factor

    def __post_init__(self) -> None:
        self._shared = {(t.src, t.dst): t.bandwidth_Bps is None for t in self.profile.transfers}
        if not self.calibrate:
            return
        folded = set(self.profile.folded_nodes)
        classes = self.profile.protocol.get("classes", {})
        calibration = self.profile.calibration
        for d in self.profile.devices:
            cls = classes.get(d)
            if cls in calibration.get("slowdown", {}):
                self.slowdown[d] = float(calibration["slowdown"][cls])
            times = [per.get(d, math.inf) for n, per in self.profile.op_times.items() if n not in folded]
            step = calibration.get("single_step_times", {}).get(cls, self.profile.step_times.get(d))
            if step is None or not times or not all(math.isfinite(t) for t in times):
                continue
            self.overhead[d] = max(0.0, step - sum(times)) / len(times)
            if 0 < step < sum(times):
                self.scale[d] = step / sum(times)

    @property
    def devices(self) -> list[str]:
        return list(self.profile.devices)

    def op_time(self, node: OpNode, device: str) -> float:
        """Median measured seconds of `node` on `device` plus its share of the per-node overhead
        (0 for nodes folded into constants: they do not run each step)."""
        t = self.profile.op_time(node.name, device)
        return t if t == 0.0 else self.calibrated(t, device)

    def calibrated(self, t: float, device: str) -> float:
        """A profiled step time with its device's calibration (inf stays)."""
        if not math.isfinite(t):
            return t
        return t * self.scale.get(device, 1.0) + self.overhead.get(device, 0.0)

    @property
    def objective(self) -> str:
        """The profile's objective: its op times are of forward passes or of training steps."""
        return self.profile.objective

    def training_step_time(self, step: str, kind: str, node: OpNode, nbytes: int, device: str) -> float:
        """Median measured seconds of the training step's `step` plus its overhead share."""
        if step not in self.profile.op_times:
            raise PlacerError(f"the profile has no time for the training step's {step!r}: it was made for the "
                              f"{self.objective} objective; profile with the training objective")
        return self.calibrated(self.profile.op_time(step, device), device)

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """Fitted latency + bytes / bandwidth of the src -> dst link (0 on one device); a hand-over
        between devices that share memory takes the calibrated latency when there is one."""
        handover = self.profile.calibration.get("handover_s") if self.calibrate else None
        if handover is not None and src != dst and self._shared.get((src, dst)):
            return float(handover)
        return self.profile.transfer_time(nbytes, src, dst)

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        return own_link(src, dst)   # each pair of devices was timed alone: no shared link is known

    def unrunnable(self) -> dict[str, list[str]]:
        """Device -> nodes that have no finite time there (failed or unsupported)."""
        return {d: [n for n, per in self.profile.op_times.items() if not math.isfinite(per.get(d, math.inf))]
                for d in self.profile.devices}
