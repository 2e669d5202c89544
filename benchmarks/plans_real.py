"""Plans run for real on this machine: two 1-thread CPU devices against the whole machine (one
device, both threads) and ONNX Runtime (the whole model, one session, both threads), measured side
by side in interleaved rounds and blocks (`placer.measure.rounds`), as `placer compare` measures.

Per model, the candidates are:
- the placers' placements on the two devices (costs profiled here, cached): the fastest of them
  measured is "the best placement";
- the plans that run here (`placer.evaluate.plan_rows.MEASURED`: data parallel, Megatron's tensor
  parallel where the model has its blocks, and placer's plan search on the profile from the best of
  those and the placements, which measures its plan and the best-predicted starts and keeps the
  fastest measured) in the torch engine; the fastest of them measured is "placer's plan" there;
- the same plans in the ONNX Runtime engine where their devices never talk (data parallelism: a
  session per device on its half of the batch);
- the whole machine in placer's torch engine, and a plain ONNX Runtime session.

Printed per model: placer's plan (per engine) over the best placement, the whole machine and ONNX
Runtime, each the reference's time over the plan's, paired over the rounds, with its 95% interval
and verdict (faster / slower beyond 2%, tied within, else not resolved).

    python benchmarks/plans_real.py [--quick] [--models inception_v3 resnet50 rnnlm] [--batch 32]
                                    [--blocks 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

from _bench import machine_note, save_json, zoo_path
from placer.devices import Device, parse_devices
from placer.errors import PlacerError
from placer.kernels.loading import load_graph
from placer.measure.intervals import format_interval, speedup_verdict
from placer.measure.measurer import MeasureProtocol, measurer_for
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.placement import Placement

DEVICES = "cpu:0[threads=1],cpu:1[threads=1]"
PLACERS = ["single", "m_etf", "heft", "local_search"]
PLANS = ("data_parallel", "tensor_parallel", "plan_search")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["inception_v3", "resnet50", "rnnlm"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--placers", nargs="+", default=PLACERS, help="whose placements compete for the best")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--min-rounds", type=int, default=8, help="interleaved rounds per block, at least")
    parser.add_argument("--max-rounds", type=int, default=16, help="interleaved rounds per block, at most")
    parser.add_argument("--max-seconds", type=float, default=900, help="cap of one model's rounds")
    parser.add_argument("--quick", action="store_true", help="rnnlm at batch 8, one block of 6 rounds")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.models, args.batch, args.blocks, args.min_rounds, args.max_rounds = ["rnnlm"], 8, 1, 6, 6
    rounds = RoundsProtocol(warmup=1, min_rounds=args.min_rounds, max_rounds=args.max_rounds,
                            max_seconds=args.max_seconds, blocks=args.blocks)
    print(f"plans on two 1-thread CPU devices vs the whole machine (2 threads) and ONNX Runtime (2 threads), "
          f"batch {args.batch}, {args.blocks} block(s) of interleaved rounds; {machine_note()}")
    figures = {name: run_model(name, args.batch, rounds, args.placers) for name in args.models}
    if args.json:
        save_json(args.json, {"batch": args.batch, "rounds": rounds.to_dict(), "models": figures})
    return 0


def run_model(name: str, batch: int, rounds: RoundsProtocol, placers: list[str]) -> dict:
    from placer.costmodel.profile_cache import profiled_cost_model
    from placer.evaluate.compare import baseline_rows
    from placer.evaluate.plan_rows import measured_plan_rows
    from placer.placers import caps_from_devices

    graph = load_graph(zoo_path(name, batch=batch))
    devices = parse_devices(DEVICES)
    names = [d.name for d in devices]
    protocol = MeasureProtocol(warmup=0, repeats=1, timeout_s=300)
    cost = profiled_cost_model(graph, devices, report=lambda text: print(f"  {name}: {text}", flush=True))
    placements = {r.name: r.placement for r in baseline_rows(graph, names, cost, caps_from_devices(devices), placers)
                  if r.placement is not None}
    torch_two = measurer_for("torch", graph, devices, protocol)
    candidates = [Candidate(row, partial(torch_two.open, p), torch_two.run_record()) for row, p in placements.items()]
    plans = {}
    for engine in ("torch", "onnxruntime"):
        measurer = measurer_for(engine, graph, devices, protocol)
        rows, notes = measured_plan_rows(graph, names, PLANS, measurer, cost, placements=placements)
        for note in notes:
            print(f"  {name} ({engine}): {note}")
        for row in rows:
            plans[f"{row.name} ({engine})"] = engine
            if row.name == "plan_search":
                print(f"  {name} ({engine}): plan_search: {row.note}", flush=True)
            candidates.append(Candidate(f"{row.name} ({engine})", row.opener, row.run_record))
    whole = Device("cpu", 0, threads=2)
    machine = measurer_for("torch", graph, [whole], protocol)
    everything = Placement.single_device(list(graph.nodes), whole.name, graph.sha256)
    ort = measurer_for("onnxruntime", graph, [Device("cpu", None, threads=2)], protocol)
    one_session = Placement.single_device(list(graph.nodes), "cpu", graph.sha256)
    candidates += [Candidate("whole_machine", partial(machine.open, everything), machine.run_record()),
                   Candidate("onnxruntime", partial(ort.open, one_session), ort.run_record())]
    result = measure_in_rounds(candidates, rounds, reference="whole_machine")
    ok = {c.name for c in candidates if result.measurements[c.name].ok}
    failed = sorted(set(result.measurements) - ok)
    best_placement = min((p for p in placements if p in ok), key=lambda p: result.interval(p).value)
    figures = {"best_placement": best_placement, "failed": failed, "rounds": result.rounds,
               "step_ms": {c: round(result.interval(c).value * 1e3, 2) for c in sorted(ok)}, "plans": {}}
    print(f"{name} b{batch}: {result.rounds} rounds; best placement {best_placement} "
          f"{figures['step_ms'][best_placement]:.1f} ms, whole machine {figures['step_ms']['whole_machine']:.1f} ms, "
          f"ONNX Runtime {figures['step_ms']['onnxruntime']:.1f} ms" + (f"; failed: {failed}" if failed else ""))
    for engine in ("torch", "onnxruntime"):
        mine = [p for p, e in plans.items() if e == engine and p in ok]
        if not mine:
            print(f"  placer's plan ({engine}): none ran")
            continue
        plan = min(mine, key=lambda p: result.interval(p).value)
        against = {}
        for reference in (best_placement, "whole_machine", "onnxruntime"):
            speedup = result.ratio(reference, plan)   # the reference's time over the plan's
            against[reference] = {"speedup": speedup.to_dict(), "verdict": speedup_verdict(speedup)}
        figures["plans"][engine] = {"plan": plan, "step_ms": figures["step_ms"][plan], "against": against}
        print(f"  placer's plan ({engine}): {plan} {figures['step_ms'][plan]:.1f} ms; "
              + "; ".join(f"vs {ref} {format_interval(a['speedup'])} {a['verdict']}" for ref, a in against.items()))
    return figures


if __name__ == "__main__":
    try:
        sys.exit(main())
    except PlacerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
