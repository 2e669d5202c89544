"""What a user runs today instead of a placement, as comparison rows: `whole_machine` (one device
with all the compared CPU devices' threads, in placer's engine) and `onnxruntime` (ONNX Runtime on
the whole model with the same threads). They run on other devices than the compared ones, so each
row opens its own run; the comparison measures them in the same rounds as every placement."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from placer.devices import Device
from placer.graph.opgraph import OpGraph
from placer.engines.affinity import cpu_threads
from placer.measure.measurer import MeasureProtocol
from placer.program.training import TrainingSpec
from placer.placement import Placement
from placer.evaluate.compare import WHOLE_MACHINE, CompareRow

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
    from placer.measure.measurer import measurer_for

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
    # one plain session of the whole model with all the threads: the onnxruntime engine's one-device
    # case (pipelined, it runs the micro-batches one after another, as the whole machine does)
    ort = measurer_for(ONNXRUNTIME, graph, [Device("cpu", None, threads=threads)], protocol, seed=seed,
                       pipeline=pipeline)
    whole_model = Placement.single_device(list(graph.nodes), "cpu", graph.sha256)
    rows.append(CompareRow(ONNXRUNTIME, ONNXRUNTIME, None, None, placement=whole_model,
                           opener=partial(ort.open, whole_model), run_record=ort.run_record(),
                           note=f"ONNX Runtime, the whole model in one session, {threads} threads"))
    return rows, []
