"""rnnlm on two 1-thread ONNX Runtime devices against one 2-thread session: what the plans ONNX
Runtime runs can reach, and the raw sessions that bound them.

`plans_real.py` found placer's ONNX Runtime plan on rnnlm (batch 32) slower than one session of
the whole model on both threads. This measures why, side by side in interleaved rounds and blocks
(`placer.measure.rounds`), each row's time against the 2-thread session's and one 1-thread
session's:

- `onnxruntime_1_thread`: the whole model, one session, one thread;
- `raw_data_parallel`: two 1-thread sessions of the half-batch model, side by side on two Python
  threads, nothing cut or joined: the best any data-parallel plan can do;
- `data_parallel`: DDP's plan in placer's ONNX Runtime engine (the batch cut, the logits joined);
- `by_layer_uncut`: a placement, the first LSTM layer on cpu:0, the second on cpu:1, the steps'
  projections split between them (every other one on cpu:0, after its layer), each device's
  nodes of one level one partition (no stages): cpu:1 waits for the whole first layer;
- `by_layer_staged`: the same placement with each node's time step as its partition stage
  (`placer.engines.onnxruntime.partition`), `--chunk` steps a stage: cpu:1 starts the second
  layer once the first has made `--chunk` steps, as the torch engine runs it op by op;
- `by_layer`: the same placement as the engine runs it by default (stages by bands of depth).

    python benchmarks/ort_two_devices.py [--batch 32] [--chunk 4] [--lag 2] [--blocks 3]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from functools import partial

import numpy as np
import onnxruntime as ort

from _bench import CallableRun, machine_note, save_json, zoo_path
from placer.devices import Device, parse_devices
from placer.engines.onnxruntime.placed import OrtPlacement
from placer.graph.feeds import random_feeds
from placer.kernels.loading import load_graph
from placer.measure.intervals import format_interval, speedup_verdict
from placer.measure.measurer import MeasureProtocol, measurer_for
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.placement import Placement
from placer.plans.data_parallel import data_parallel
from placer.plans.engine import measures_plans

DEVICES = "cpu:0[threads=1],cpu:1[threads=1]"
REFERENCE = "onnxruntime_2_threads"
ONE_THREAD = "onnxruntime_1_thread"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=4, help="time steps a stage of by_layer_staged")
    parser.add_argument("--lag", type=int, default=2, help="stages cpu:0's projections wait after their step's")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds per block")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    print(f"rnnlm b{args.batch} on two 1-thread ONNX Runtime devices vs one 2-thread session, {args.blocks} "
          f"block(s) of {args.rounds} interleaved rounds; {machine_note()}", flush=True)
    path = zoo_path("rnnlm", batch=args.batch)
    graph = load_graph(path)
    feeds = random_feeds(graph, seed=0)
    devices = parse_devices(DEVICES)
    by_layer, stages = layer_placement(graph, args.chunk, args.lag)
    check_outputs(path, graph, by_layer, devices, stages, feeds)
    protocol = MeasureProtocol(warmup=0, repeats=1, timeout_s=300)
    engine = measurer_for("onnxruntime", graph, devices, protocol)
    measures_plans(engine)   # its `open` takes plans too
    candidates = [
        Candidate(REFERENCE, partial(session_run, path, feeds, 2)),
        Candidate(ONE_THREAD, partial(session_run, path, feeds, 1)),
        Candidate("raw_data_parallel", partial(side_by_side, zoo_path("rnnlm", batch=args.batch // 2), feeds)),
        Candidate("data_parallel", partial(engine.open, data_parallel(graph, [d.name for d in devices])),
                  engine.run_record()),
        Candidate("by_layer", partial(engine.open, by_layer), engine.run_record()),
        Candidate("by_layer_uncut", partial(StagedRun, graph, by_layer, devices, {}, feeds)),
        Candidate("by_layer_staged", partial(StagedRun, graph, by_layer, devices, stages, feeds)),
    ]
    rounds = RoundsProtocol(warmup=1, min_rounds=args.rounds, max_rounds=args.rounds, max_seconds=3600,
                            blocks=args.blocks)
    result = measure_in_rounds(candidates, rounds, reference=REFERENCE)
    figures = {"batch": args.batch, "chunk": args.chunk, "lag": args.lag, "rounds": result.rounds, "rows": {}}
    for c in candidates:
        m = result.measurements[c.name]
        if not m.ok:
            print(f"{c.name:22s} failed: {m.failure}: {m.reason}")
            continue
        ms = result.interval(c.name).value * 1e3
        row = {"step_ms": round(ms, 2)}
        against = ""
        for reference, label in ((REFERENCE, "the 2-thread session"), (ONE_THREAD, "one 1-thread session")):
            if c.name != reference:
                speedup = result.ratio(reference, c.name)   # the reference's time over this row's
                row[f"vs_{reference}"] = {"speedup": speedup.to_dict(), "verdict": speedup_verdict(speedup)}
                against += f"  / {label} {format_interval(speedup.to_dict())} {speedup_verdict(speedup)}"
        figures["rows"][c.name] = row
        print(f"{c.name:22s} {ms:8.1f} ms{against}", flush=True)
    if args.json:
        save_json(args.json, figures)
    return 0


def layer_placement(graph, chunk: int, lag: int) -> tuple[Placement, dict[str, int]]:
    """rnnlm by layer (see the module doc) and each node's stage. The export lists the nodes step
    by step, each step ending in its projection; a projection on cpu:0 waits `lag` stages more, so
    that cpu:0 runs the first layer's next steps before it."""
    nodes, step_of, step = {}, {}, 0
    for name in graph.nodes:
        decoder = name.startswith("/decoder")
        nodes[name] = ("cpu:0" if step % 2 == 0 else "cpu:1") if decoder else \
            "cpu:1" if name.startswith("/cells.1") else "cpu:0"
        step_of[name] = step
        step += decoder
    for name, op in graph.nodes.items():
        if op.op_type == "Unsqueeze":   # each step's logits, before the join: with their projection
            source = graph.producer.get(op.inputs[0], "")
            if source.startswith("/decoder"):
                nodes[name], step_of[name] = nodes[source], step_of[source]
        elif op.op_type == "Concat":
            nodes[name], step_of[name] = "cpu:1", step
    stages = {}
    for name, op in graph.nodes.items():
        later = lag if nodes[name] == "cpu:0" and (name.startswith("/decoder") or op.op_type == "Unsqueeze") else 0
        stages[name] = 0 if op.op_type == "Constant" else step_of[name] // chunk + later
    joins = [n for n, op in graph.nodes.items() if op.op_type == "Concat"]
    stages.update(dict.fromkeys(joins, max(stages.values())))   # the join: after every step
    return Placement(["cpu:0", "cpu:1"], nodes, graph.sha256), stages


def check_outputs(path, graph, placement, devices, stages, feeds) -> None:
    """The staged placement gives the session's outputs (else timing it means nothing)."""
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    with OrtPlacement(graph, placement, devices, stages=stages) as placed:
        got = placed.run_arrays(feeds, timeout_s=300)
    for output, want in zip(graph.outputs, expected):
        np.testing.assert_allclose(got[output.name], want, rtol=1e-4, atol=1e-5)


def session_run(path, feeds, threads: int) -> CallableRun:
    """The whole model as one plain ONNX Runtime session on `threads` threads."""
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    given = {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()}
    return CallableRun(lambda: session.run_with_ort_values([o.name for o in session.get_outputs()], given))


def side_by_side(half_path, feeds) -> CallableRun:
    """Two 1-thread sessions of the half-batch model, each on its half of the feeds, at once."""
    runs = []
    for k in range(2):
        half = {name: v[k * (len(v) // 2):(k + 1) * (len(v) // 2)] for name, v in feeds.items()}
        runs.append(session_run(half_path, half, 1).fn)

    def both():
        other = threading.Thread(target=runs[1])
        other.start()
        runs[0]()
        other.join()
    return CallableRun(both)


class StagedRun:
    """An `OrtPlacement` with the partition stages given, as a run of `measure_in_rounds`."""

    def __init__(self, graph, placement: Placement, devices: list[Device], stages, feeds) -> None:
        self.placed = OrtPlacement(graph, placement, devices, stages=stages)
        self.feeds = {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()}

    def step(self) -> float:
        start = time.perf_counter()
        self.placed.run(self.feeds, timeout_s=300)
        return time.perf_counter() - start

    @property
    def peak_memory(self) -> dict[str, int]:
        return self.placed.peak_memory

    def close(self) -> None:
        self.placed.close()


if __name__ == "__main__":
    sys.exit(main())
