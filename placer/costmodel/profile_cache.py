"""Profiles cached on disk, checked and calibrated: `profiled_cost_model(graph, devices)` gives the
`ProfiledCostModel` of a graph on a device set, from the cache or profiled now.

A fresh profile is checked and calibrated against whole-graph measurements before it is cached
(`placer.costmodel.calibration`); a cached one is checked against the devices on reuse when the
caller asks (`check_cached`: the commands): each device alone and a few of its calibration splits
(`placer.costmodel.reuse_check`), and taken again when stale. The cache key holds what a
profile depends on (`cache_key`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from placer.costmodel.calibration import (CALIBRATION, PIPELINED_MICRO_BATCHES, CalibrationProtocol,
                                          check_and_calibrate)
from placer.costmodel.profile import PROFILE_PROTOCOL, PROFILE_SETTLE, Profile, device_classes, spread_transfers
from placer.costmodel.profiled import ProfiledCostModel
from placer.costmodel.profiler import profile_graph
from placer.costmodel.reuse_check import stale_by
from placer.devices import Device
from placer.errors import PlacerError
from placer.engines.failures import KERNEL_ERROR
from placer.graph.feeds import generated_inputs, generated_note
from placer.graph.opgraph import OpGraph
from placer.measure.measurer import MeasureProtocol, measurer_for
from placer.measure.progress import Progress, Report
from placer.program.pipeline import Pipeline
from placer.program.training import TrainingSpec

log = logging.getLogger(__name__)

# Bump when the profile's meaning changes, so files written by older code are not reused.
CACHE_VERSION = 6   # 2: one profile per class of identical devices; 3: the objective in the key;
                    # 4: a training step's gradients summed as they arrive (accumulate:<t>@<node> steps);
                    # 5: settled rounds, checked and calibrated on whole-graph steps (contention);
                    # 6: the whole-graph step timed without timing each node


def profiled_cost_model(graph: OpGraph, devices: Sequence[Device], *, cache_dir: str | Path | None = None,
              refresh: bool = False, feeds: dict[str, np.ndarray] | None = None,
              training: TrainingSpec | None = None, protocol: MeasureProtocol = PROFILE_PROTOCOL,
              calibration: CalibrationProtocol | None = CALIBRATION, engine: str = "torch",
              check_cached: bool = False, report: Report = log.info, shortcut: str = "",
              **profile_kwargs) -> ProfiledCostModel:
    """The profiled costs of `graph` on `devices`: from the cache, else measured now and cached.

    With `training` (or a protocol of the training objective) the profile is of a training step
    with its loss and optimizer (default `TrainingSpec()`). `refresh` measures again even when a cached profile
    exists; `profile_kwargs` go to `placer.costmodel.profiler.profile_graph` (e.g. `prepared`).
    A fresh profile is checked and calibrated on whole-graph measurements (`calibration`; None:
    not, e.g. for a quick look); with `check_cached` (the commands), a cached profile the devices
    no longer match is taken again. With `engine` "onnxruntime" every figure is ONNX Runtime's
    (the same profiler, in that engine), so the simulator, the bound and the placers optimise its costs.
    `report` hears what it does: a line when profiling, the check of a cached profile or the
    calibration starts (profiling's with `shortcut`, the option that skips it), then now and then how
    far along it is (`placer.measure.progress`).
    """
    progress = Progress(report)
    if training is None and protocol.objective == "training":
        training = TrainingSpec()   # a training protocol without a spec: the default loss and optimizer
    protocol = replace(protocol, objective="training" if training is not None else "inference")
    # Caps constrain placements, not speed: each device runs the whole graph alone when
    # profiled, which a cap meant for a share of the graph would refuse.
    devs = [replace(d, mem_cap=None) for d in devices]
    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = path / f"{cache_key(graph, devs, training, engine, feeds)}.json"
    if path.is_file() and not refresh:
        profile = _read(path, graph, devs)
        if profile is not None and not (check_cached and calibration and _stale(graph, devs, profile, engine, protocol, feeds,
                                                               training, calibration, profile_kwargs, progress)):
            log.info("profile of %s on %s read from %s", graph.source or "the graph", [d.name for d in devs], path)
            return ProfiledCostModel(profile, path, from_cache=True)
    progress.start(_profiling_text(graph, devs, protocol, profile_kwargs.get("settle", PROFILE_SETTLE), shortcut))
    take = partial(profile_graph, graph, devs, feeds=feeds, protocol=protocol, training=training, engine=engine,
                   progress=progress, **profile_kwargs)
    profile = take()
    missing = [d for d in profile.devices if d in profile.failures]
    if len(missing) == len(profile.devices):
        kernel = any(f.startswith(KERNEL_ERROR) for f in profile.failures.values())   # on generated inputs: say so
        raise PlacerError(f"profiling failed on every device ({profile.failures}); "
                          "check the graph runs with placer measure --device cpu"
                          f"{generated_note(generated_inputs(graph)) if kernel else ''}")
    if calibration is not None and not missing:
        make = partial(measurer_for, engine, graph, devs, replace(protocol, warmup=0, repeats=1), feeds=feeds,
                       prepared=profile_kwargs.get("prepared"), training=training)
        profile = check_and_calibrate(graph, devs, profile, take, make(), calibration, training,
                                      pipelined=make(pipeline=Pipeline(PIPELINED_MICRO_BATCHES)), progress=progress)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        profile.save(tmp)
        tmp.replace(path)   # atomic: a concurrent reader never sees half a file
    except OSError as exc:
        log.warning("could not cache the profile in %s (%s); it will be measured again next time", path, exc)
    return ProfiledCostModel(profile, path)


def _profiling_text(graph: OpGraph, devs: list[Device], protocol: MeasureProtocol, settle, shortcut: str) -> str:
    """The line that says profiling starts: what, how long it may take, that it is cached, what skips it."""
    classes = len(set(device_classes(devs).values()))
    rounds = (f"until its medians settle (at most {max(protocol.repeats, settle.max_rounds)} rounds or "
              f"{settle.max_seconds:g} s)" if settle is not None else f"for {protocol.repeats} rounds")
    return (f"profiling every op of {graph.source or 'the graph'} on {', '.join(d.name for d in devs)}: "
            f"{len(graph.nodes)} ops on {classes} class{'es' if classes > 1 else ''} of identical devices, each "
            f"{rounds}; cached for the next run" + (f" ({shortcut})" if shortcut else ""))


def default_cache_dir() -> Path:
    """$PLACER_CACHE/profiles, else ~/.cache/placer/profiles."""
    root = os.environ.get("PLACER_CACHE") or Path.home() / ".cache" / "placer"
    return Path(root) / "profiles"


def cache_key(graph: OpGraph, devices: list[Device], training: TrainingSpec | None = None,
              engine: str = "torch", feeds: dict[str, np.ndarray] | None = None) -> str:
    """A digest of what the profile depends on: graph, bound input shapes, the content of the
    inputs given (the graph's sample inputs and `feeds`: their values may decide the work), device
    classes, the objective (with the training step's loss and optimizer), the engine, software,
    machine. Order and indices do not count, nor members past a class's second (the second adds
    the transfers within the class)."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    counts = Counter(device_classes([replace(d, mem_cap=None) for d in devices]).values())
    key = {"version": CACHE_VERSION, "graph": graph.sha256,
           "inputs": [[t.name, list(t.shape), t.dtype] for t in graph.inputs],
           "nodes": len(graph.nodes), "classes": sorted([c, min(n, 2)] for c, n in counts.items()),
           "objective": "inference" if training is None else
           {"training": training.to_dict()},
           "torch": torch.__version__, **_engine_key(engine),
           "cpus": os.cpu_count(), "machine": platform.machine(), "gpus": gpus,
           **_given_key({**graph.sample_inputs, **(feeds or {})})}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def _given_key(given: dict[str, np.ndarray]) -> dict[str, str]:
    """The digest of the given inputs' names, dtypes, shapes and bytes (none given: no entry, so
    keys of generated inputs stay as they were)."""
    if not given:
        return {}
    digest = hashlib.sha256()
    for name in sorted(given):
        array = np.asarray(given[name], order="C")   # ascontiguousarray would make a scalar 1-D
        digest.update(json.dumps([name, array.dtype.str, list(array.shape)]).encode())
        digest.update(array.tobytes())
    return {"given_inputs": digest.hexdigest()}


def _stale(graph, devs, profile, engine, protocol, feeds, training, calibration, profile_kwargs,
           progress: Progress | None = None) -> bool:
    """A cached profile whose devices now run the whole graph, alone or split as a few of its
    calibration placements, more than the tolerance off what its calibration predicts is stale
    (`placer.costmodel.reuse_check`): said in one line, and profiled again."""
    make = partial(measurer_for, engine, graph, devs, replace(protocol, warmup=0, repeats=1), feeds=feeds,
                   prepared=profile_kwargs.get("prepared"), training=training)
    off = stale_by(graph, devs, profile, make(), calibration, training,
                   pipelined=partial(make, pipeline=Pipeline(PIPELINED_MICRO_BATCHES)), progress=progress)
    if off:
        log.warning("the cached profile is stale: %s; profiling again", off.note())
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
    if profile is None or not graph.is_named_by(profile.graph_sha256) or not set(graph.nodes) <= set(profile.op_times):
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
