"""What a user runs today instead of a placement, as comparison rows: `whole_machine` (one device
with all the compared CPU devices' threads, in placer's engine) and `onnxruntime` (ONNX Runtime on
the whole model with the same threads). They run on other devices than the compared ones, so each
row opens its own run; the comparison measures them in the same rounds as every placement."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial

import numpy as np

from placer.devices import Device
from placer.graph.opgraph import OpGraph
from placer.measure.executor import KernelError, cpu_threads
from placer.measure.measurer import MeasureProtocol, random_feeds
from placer.measure.training import TrainingSpec
from placer.placement import Placement
from placer.placers.compare import WHOLE_MACHINE, CompareRow

log = logging.getLogger(__name__)
ONNXRUNTIME = "onnxruntime"


def machine_threads(devices: Sequence[Device]) -> int:
    """The threads the compared CPU devices own together."""
    return sum(cpu_threads(d, list(devices)) for d in devices if d.kind == "cpu")


def user_baseline_rows(graph: OpGraph, devices: Sequence[Device], protocol: MeasureProtocol, seed: int = 0,
                       training: TrainingSpec | None = None, engine: str = "torch",
                       pipeline=None) -> tuple[list[CompareRow], list[str]]:
    """The rows `whole_machine` and `onnxruntime` when every compared device is a CPU device, and
    one-line notes for what was skipped and why. Under the onnxruntime engine `whole_machine` is
    already ONNX Runtime on the whole model with all the threads, so it is the one row."""
    from placer.runtime.measurer import measurer_for

    if not devices or any(d.kind != "cpu" for d in devices):
        return [], []
    threads = machine_threads(devices)
    whole = Device("cpu", 0, threads=threads)
    measurer = measurer_for(engine, graph, [whole], protocol, seed=seed, training=training, pipeline=pipeline)
    placement = Placement.single_device(list(graph.nodes), whole.name, graph.sha256)
    where = "ONNX Runtime, the whole model in one session" if engine == ONNXRUNTIME else "placer's torch engine"
    rows = [CompareRow(WHOLE_MACHINE, WHOLE_MACHINE, None, None, placement=placement,
                       opener=partial(measurer.open, placement), run_record=measurer.run_record(),
                       note=f"one device with all {threads} threads, {where}")]
    if engine == ONNXRUNTIME:
        return rows, []
    if training is not None:
        return rows, ["onnxruntime: not compared on the training objective (ONNX Runtime runs the forward pass)"]
    if pipeline is not None and pipeline.pipelined:
        return rows, ["onnxruntime: not compared on a pipelined step (it runs one input at a time)"]
    feeds = random_feeds(graph, seed)
    rows.append(CompareRow(ONNXRUNTIME, ONNXRUNTIME, None, None,
                           opener=partial(OrtWholeModelRun, graph, threads, feeds, protocol.timeout_s),
                           run_record={"engine": "onnxruntime", "threads": threads, "objective": "inference",
                                       "timeout_s": protocol.timeout_s},
                           note=f"ONNX Runtime, the whole model in one session, {threads} threads"))
    return rows, []


class OrtWholeModelRun:
    """A `PlacementRun` of ONNX Runtime on the whole model: one session, built once."""

    def __init__(self, graph: OpGraph, threads: int, feeds: dict[str, np.ndarray], timeout_s: float) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle threads must not spin after a step: the next candidate of the round needs the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(graph.model.SerializeToString(), options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT raises its own types; a model it refuses is a failure
            raise KernelError(f"ONNX Runtime cannot load the model: {exc}") from exc
        self.feeds = {i.name: feeds[i.name] for i in self.session.get_inputs()}
        self.timeout_s = timeout_s
        self.peak_memory: dict[str, int] = {}

    def step(self) -> float:
        start = time.perf_counter()
        try:
            self.session.run(None, self.feeds)
        except Exception as exc:  # noqa: BLE001
            raise KernelError(f"ONNX Runtime failed: {exc}") from exc
        return time.perf_counter() - start

    def close(self) -> None:
        self.session = None
