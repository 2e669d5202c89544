"""`load`: a split model (`placer apply --split`) made ready to deploy in ONNX Runtime.

    runner = placer.engines.onnxruntime.load("parts/")             # sessions built once
    outputs = runner.run({"x": x})                      # every step: the stages run concurrently

Each stage file is an `InferenceSession` on its device, built once; `run` hands the stages to
`ConcurrentSessions` (one thread per device, each stage as soon as its inputs exist), the engine
`placer measure --engine onnxruntime` measures. `device_map` runs a split made on another machine
(`{"cuda:1": "cuda:0", "cuda:0": "cpu"}`), and `devices` gives the devices' options
(`["cpu:0[threads=2]", "cpu:1[threads=2]"]`; by default each CPU device gets its share of the cores).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from placer.annotate.chain import load_split_index
from placer.devices import Device, as_devices, parse_device
from placer.errors import PlacerError
from placer.engines.affinity import threads_and_cores
from placer.engines.onnxruntime.concurrent import ConcurrentSessions, Piece
from placer.engines.onnxruntime.sessions import build_session, session_options


class SplitRunner:
    """The stages of a split model as sessions on their devices; `run(feeds)` is one step."""

    def __init__(self, path: str | Path, device_map: Mapping[str, str] | None = None,
                 devices: Sequence[Device | str] | None = None) -> None:
        folder, index = load_split_index(path)
        rename = {parse_device(k).name: parse_device(v).name for k, v in (device_map or {}).items()}
        names = list(dict.fromkeys(rename.get(s["device"], s["device"]) for s in index["stages"]))
        given = {d.name: d for d in as_devices(devices or [])}
        unknown = [n for n in given if n not in names]
        if unknown:
            raise PlacerError(f"devices {unknown} run no stage of {folder} (its stages run on {names}); "
                              "give options for those devices only")
        self.devices = [given.get(n) or parse_device(n) for n in names]
        by_name = {d.name: d for d in self.devices}
        self.inputs = list(index["inputs"])
        stages = index["stages"]
        made = {t for s in stages for t in s["outputs"]}
        lost = [t for t in index["outputs"] if t not in made and t not in self.inputs]
        if lost:
            raise PlacerError(f"no stage of {folder} makes the outputs {lost}; write the split again with "
                              "placer apply --split")
        spinning = len(stages) == 1   # see placer.engines.onnxruntime.placed: only a lone session keeps ORT's default
        threads, cores = threads_and_cores(self.devices)
        pieces = []
        for stage in stages:
            device = by_name[rename.get(stage["device"], stage["device"])]
            options = session_options(device, threads[device.name] or 1, spinning=spinning,
                                      cores=cores.get(device.name, frozenset()))
            pieces.append(Piece(stage["file"], device, build_session(folder / stage["file"], device, options),
                                list(stage["inputs"]), list(stage["outputs"])))
        self.engine = ConcurrentSessions(pieces, index["outputs"], cores=cores)

    def run(self, feeds: Mapping[str, np.ndarray | ort.OrtValue], timeout_s: float | None = None
            ) -> dict[str, np.ndarray]:
        """One step: every graph input in `feeds`; graph output name -> array."""
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise PlacerError(f"no value given for the inputs {missing}; the model's inputs are {self.inputs}")
        return {k: v.numpy() for k, v in self.engine.run(feeds, timeout_s).items()}

    @property
    def last_step(self):
        """When each stage ran during the last step (`placer.engines.onnxruntime.concurrent.Span`s)."""
        return list(self.engine.spans)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> SplitRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(path: str | Path, device_map: Mapping[str, str] | None = None,
         devices: Sequence[Device | str] | None = None) -> SplitRunner:
    """The split model in `path` (its folder or split.json) ready to run; see the module doc."""
    return SplitRunner(path, device_map, devices)
