"""Both engines against a plain ONNX Runtime session of the whole model, on one CPU device with the
same intra-op threads, measured side by side in interleaved rounds (`placer.measure.rounds`):

- `ort engine / ort session`: the onnxruntime engine's single-device step (`RealMeasurer` with
  engine "onnxruntime"; one session of the whole bound model behind the engine's device thread)
  over a plain `InferenceSession` run from the caller (target: within 1.05x);
- `placer torch / ort session`: placer's torch engine (`RealMeasurer`) over the same session.

Each ratio is paired (one per round) with its 95% interval; the outputs of all three are checked
to agree first.

    python benchmarks/vs_onnxruntime.py [--quick] [--threads N] [--models a,b] [--max-rounds R]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnxruntime as ort

import graphs
from _bench import SessionRun, machine_note, zoo_graph
from placer.measure.intervals import NOT_RESOLVED, TIED, verdict
from placer.graph.feeds import random_feeds
from placer.measure.measurer import MeasureProtocol, RealMeasurer
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.placement import Placement

TARGET = 1.05   # the onnxruntime engine's single device over a plain session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="rnnlm only, few rounds")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of all three (default 1)")
    parser.add_argument("--models", default=None, help="comma-separated zoo names (default: all five)")
    parser.add_argument("--min-rounds", type=int, default=None, help="interleaved rounds at least")
    parser.add_argument("--max-rounds", type=int, default=None, help="interleaved rounds at most")
    args = parser.parse_args()
    models = args.models.split(",") if args.models else (["rnnlm"] if args.quick else graphs.names())
    rounds = RoundsProtocol(warmup=1 if args.quick else 2, min_rounds=args.min_rounds or (6 if args.quick else 10),
                            max_rounds=args.max_rounds or (6 if args.quick else 40),
                            max_seconds=60 if args.quick else 180)
    device = f"cpu[threads={args.threads}]"
    print(f"placer's engines vs. a plain onnxruntime {ort.__version__} session, {args.threads} thread(s), "
          f"interleaved rounds; {machine_note()}")
    print(f"{'model':12s} {'session ms':>10s} {'rounds':>6s}  {'ort engine / ort session':28s}  "
          f"{'placer torch / ort session':28s}  max |diff|")
    for name in models:
        graph = zoo_graph(name)
        feeds = random_feeds(graph, seed=0)
        alone = Placement.single_device(list(graph.nodes), "cpu", graph.sha256)
        protocol = MeasureProtocol(timeout_s=120)
        engines = {"ort engine": RealMeasurer(graph, [device], protocol, feeds=feeds, engine="onnxruntime"),
                   "placer torch": RealMeasurer(graph, [device], protocol, feeds=feeds)}
        model_bytes = graph.model.SerializeToString()
        diff = _max_diff(graph, engines, alone, SessionRun(model_bytes, args.threads, feeds).session, feeds)
        candidates = [Candidate("ort session", lambda: SessionRun(model_bytes, args.threads, feeds))]
        candidates += [Candidate(label, lambda m=m: m.open(alone)) for label, m in engines.items()]
        result = measure_in_rounds(candidates, rounds, reference="ort session")
        ref = result.measurements["ort session"]
        cells = []
        for label in engines:
            ratio = result.ratio(label, "ort session")
            cells.append("failed" if ratio is None else f"{ratio.format_ratio()}{_mark(ratio, label)}")
        print(f"{name:12s} {ref.step_time * 1e3:10.2f} {result.rounds:6d}  {cells[0]:28s}  {cells[1]:28s}  {diff:.1e}")
        if result.cap_note():
            print(f"{'':12s} {result.cap_note()}")
        sys.stdout.flush()
    print(f"ratio = time / the plain session's, median of the per-round ratios [95% interval]; target for the "
          f"ort engine <= {TARGET}x (* over it, ~ tied with 1: the interval within 2%, ? not resolved)")
    return 0


def _mark(ratio, label: str) -> str:
    said = verdict(ratio)
    if said in (TIED, NOT_RESOLVED):
        return " ~" if said == TIED else " ?"
    return " *" if label == "ort engine" and ratio.low > TARGET else ""


def _max_diff(graph, engines, alone, session, feeds) -> float:
    """Largest difference of any output between the three (they run the same model on the same inputs)."""
    from placer.engines.torch.executor import PlacedExecutor
    from placer.engines.onnxruntime.placed import OrtPlacement

    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    with OrtPlacement(graph, alone, engines["ort engine"].device_objs) as placed:
        ours = placed.run_arrays(feeds)
    with PlacedExecutor(graph, alone, engines["placer torch"].device_objs) as executor:
        torch_out = {k: v.numpy() for k, v in executor.run(feeds).items()}
    return max(float(np.abs(np.asarray(got[k], np.float64) - expected[k]).max())
               for got in (ours, torch_out) for k in expected)


if __name__ == "__main__":
    sys.exit(main())
