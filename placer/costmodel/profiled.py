"""`ProfiledCostModel`: a `CostModel` whose times were measured on the real devices.

It wraps a `placer.costmodel.profile.Profile` (each node timed on each class of identical devices
alone, transfers timed per pair of classes) and caches it on disk, keyed by everything that
changes the figures: the graph (hash and bound input shapes), the device classes (threads
included), the objective (a training step's profile also times each node's backward and each
parameter's update, with its loss and optimizer), the torch version and the machine. A second run on the same graph and classes reads
the file instead of profiling again, even for other indices or more members of a class: the
figures are the class's, copied to each device. Memory caps are left out of both the profiling
and the key: they constrain placements, not speed.

A fresh profile is checked and calibrated against whole-graph measurements before it is cached
(`placer.costmodel.calibration`): retaken (or flagged) when its single-device step is off the
measured one, each class's single-device step set to the measured one, and a contention factor per
class (`slowdown`) fitted to a few split placements, which the simulator and the lower bound use.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from placer.devices import Device
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, OpNode
from placer.costmodel.calibration import CALIBRATION, CalibrationProtocol
from placer.measure.measurer import MeasureProtocol
from placer.costmodel.profile import PROFILE_PROTOCOL, Profile, device_classes, spread_transfers
from placer.program.training import TrainingSpec

log = logging.getLogger(__name__)

# Bump when the profile's meaning changes, so files written by older code are not reused.
CACHE_VERSION = 6   # 2: one profile per class of identical devices; 3: the objective in the key;
                    # 4: a training step's gradients summed as they arrive (accumulate:<t>@<node> steps);
                    # 5: settled rounds, checked and calibrated on whole-graph steps (contention);
                    # 6: the whole-graph step timed without timing each node


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
        return t if t == 0.0 else self._calibrated(t, device)

    def _calibrated(self, t: float, device: str) -> float:
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
        return self._calibrated(self.profile.op_time(step, device), device)

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """Fitted latency + bytes / bandwidth of the src -> dst link (0 on one device); a hand-over
        between devices that share memory takes the calibrated latency when there is one."""
        handover = self.profile.calibration.get("handover_s") if self.calibrate else None
        if handover is not None and src != dst and self._shared.get((src, dst)):
            return float(handover)
        return self.profile.transfer_time(nbytes, src, dst)

    @classmethod
    def for_graph(cls, graph: OpGraph, devices: Sequence[Device], *, cache_dir: str | Path | None = None,
                  refresh: bool = False, feeds: dict[str, np.ndarray] | None = None,
                  training: TrainingSpec | None = None, protocol: MeasureProtocol = PROFILE_PROTOCOL,
                  calibration: CalibrationProtocol | None = CALIBRATION, engine: str = "torch",
                  check_cached: bool = False, **profile_kwargs) -> ProfiledCostModel:
        """The profiled costs of `graph` on `devices`: from the cache, else measured now and cached.

        With `training` (or a protocol of the training objective) the profile is of a training step
        with its loss and optimizer (default `TrainingSpec()`). `refresh` measures again even when a cached profile
        exists; `profile_kwargs` go to `placer.costmodel.profile.profile_graph` (e.g. `prepared`).
        A fresh profile is checked and calibrated on whole-graph measurements (`calibration`; None:
        not, e.g. for a quick look); with `check_cached` (the commands), a cached profile the devices
        no longer match is taken again. With `engine` "onnxruntime" every figure is ONNX Runtime's
        (`placer.engines.onnxruntime.profile`), so the simulator, the bound and the placers optimise its costs.
        """
        from placer.costmodel.profile import profile_graph
        from placer.engines.onnxruntime.measurer import measurer_for
        from placer.engines.onnxruntime.profile import profile_graph_ort

        if training is None and protocol.objective == "training":
            training = TrainingSpec()   # a training protocol without a spec: the default loss and optimizer
        protocol = replace(protocol, objective="training" if training is not None else "inference")
        # Caps constrain placements, not speed: each device runs the whole graph alone when
        # profiled, which a cap meant for a share of the graph would refuse.
        devs = [replace(d, mem_cap=None) for d in devices]
        path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        path = path / f"{cache_key(graph, devs, training, engine)}.json"
        if path.is_file() and not refresh:
            profile = _read(path, graph, devs)
            if profile is not None and not (check_cached and calibration and _stale(graph, devs, profile, engine, protocol, feeds,
                                                                   training, calibration, profile_kwargs)):
                log.info("profile of %s on %s read from %s", graph.source or "the graph", [d.name for d in devs], path)
                return cls(profile, path, from_cache=True)
        log.info("profiling %s on %s (every node on every device)", graph.source or "the graph", [d.name for d in devs])
        if engine == "onnxruntime":
            take = partial(profile_graph_ort, graph, devs, feeds=feeds, protocol=protocol, **profile_kwargs)
        else:
            take = partial(profile_graph, graph, devs, feeds=feeds, protocol=protocol, training=training,
                           **profile_kwargs)
        profile = take()
        missing = [d for d in profile.devices if d in profile.failures]
        if len(missing) == len(profile.devices):
            raise PlacerError(f"profiling failed on every device ({profile.failures}); "
                              "check the graph runs with placer measure --device cpu")
        if calibration is not None and not missing:
            from placer.costmodel.calibration import PIPELINED_MICRO_BATCHES, check_and_calibrate
            from placer.program.pipeline import Pipeline

            make = partial(measurer_for, engine, graph, devs, replace(protocol, warmup=0, repeats=1), feeds=feeds,
                           prepared=profile_kwargs.get("prepared"), training=training)
            profile = check_and_calibrate(graph, devs, profile, take, make(), calibration, training,
                                          pipelined=make(pipeline=Pipeline(PIPELINED_MICRO_BATCHES)))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            profile.save(tmp)
            tmp.replace(path)   # atomic: a concurrent reader never sees half a file
        except OSError as exc:
            log.warning("could not cache the profile in %s (%s); it will be measured again next time", path, exc)
        return cls(profile, path)

    def unrunnable(self) -> dict[str, list[str]]:
        """Device -> nodes that have no finite time there (failed or unsupported)."""
        return {d: [n for n, per in self.profile.op_times.items() if not math.isfinite(per.get(d, math.inf))]
                for d in self.profile.devices}


def default_cache_dir() -> Path:
    """$PLACER_CACHE/profiles, else ~/.cache/placer/profiles."""
    root = os.environ.get("PLACER_CACHE") or Path.home() / ".cache" / "placer"
    return Path(root) / "profiles"


def cache_key(graph: OpGraph, devices: list[Device], training: TrainingSpec | None = None,
              engine: str = "torch") -> str:
    """A digest of what the profile depends on: graph, bound input shapes, device classes, the
    objective (with the training step's loss and optimizer), the engine, software, machine. Order and indices
    do not count, nor members past a class's second (the second adds the transfers within the
    class)."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    counts = Counter(device_classes([replace(d, mem_cap=None) for d in devices]).values())
    key = {"version": CACHE_VERSION, "graph": graph.sha256,
           "inputs": [[t.name, list(t.shape), t.dtype] for t in graph.inputs],
           "nodes": len(graph.nodes), "classes": sorted([c, min(n, 2)] for c, n in counts.items()),
           "objective": "inference" if training is None else
           {"training": training.to_dict()},
           "torch": torch.__version__, **_engine_key(engine),
           "cpus": os.cpu_count(), "machine": platform.machine(), "gpus": gpus}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def _stale(graph, devs, profile, engine, protocol, feeds, training, calibration, profile_kwargs) -> bool:
    """A cached profile whose devices now run the whole graph more than the tolerance off what it
    was calibrated on is stale: said in one line, and profiled again."""
    from placer.costmodel.calibration import stale_by
    from placer.engines.onnxruntime.measurer import measurer_for

    measurer = measurer_for(engine, graph, devs, replace(protocol, warmup=0, repeats=1), feeds=feeds,
                            prepared=profile_kwargs.get("prepared"), training=training)
    off = stale_by(graph, devs, profile, measurer, calibration)
    if off:
        log.warning("the cached profile is stale: the devices now run the whole graph %s off what it was "
                    "calibrated on; profiling again", ", ".join(f"{o:+.0%} ({c})" for c, o in off.items()))
    return bool(off)


def _engine_key(engine: str) -> dict[str, str]:
    """The engine a profile was taken in, with its version (none for torch: keys stay as they were)."""
    if engine == "torch":
        return {}
    import onnxruntime

    return {"engine": engine, "onnxruntime": onnxruntime.__version__}


def _read(path: Path, graph: OpGraph, devices: list[Device]) -> Profile | None:
    """The cached profile moved onto `devices`, or None (with a warning) when it is unreadable or
    for another graph or other device classes."""
    try:
        profile = _for_devices(Profile.load(path), devices)
    except (PlacerError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring the unreadable cached profile %s (%s); profiling again", path, exc)
        return None
    if profile is None or profile.graph_sha256 != graph.sha256 or not set(graph.nodes) <= set(profile.op_times):
        log.warning("cached profile %s does not match the graph or devices; profiling again", path)
        return None
    return profile


def _for_devices(profile: Profile, devices: list[Device]) -> Profile | None:
    """`profile`'s class figures copied onto `devices`; None when it lacks one of their classes."""
    classes = device_classes(devices)
    stored = profile.protocol.get("classes", {})
    source = {d: next((s for s, c in stored.items() if c == cls), None) for d, cls in classes.items()}
    if None in source.values():
        return None
    fits = {(stored[t.src], stored[t.dst]): t for t in profile.transfers}
    return replace(profile, devices=list(classes),
                   op_times={n: {d: per[s] for d, s in source.items()} for n, per in profile.op_times.items()},
                   transfers=spread_transfers(list(classes), classes, fits),
                   step_times={d: profile.step_times[s] for d, s in source.items() if s in profile.step_times},
                   failures={d: profile.failures[s] for d, s in source.items() if s in profile.failures},
                   protocol={**profile.protocol, "devices": [str(d) for d in devices], "classes": classes})
