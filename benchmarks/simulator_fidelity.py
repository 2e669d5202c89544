"""How well the simulator, fed with profiled and calibrated costs, predicts real step times.

Profiles the graph on the devices (cached; a fresh profile is checked and calibrated on
whole-graph steps, `placer.costmodel.calibration`), then measures a few dozen varied placements for
real in interleaved rounds (`placer.measure.rounds`: every placement once per round, in a shuffled
order, so that the machine's drift does not decide the ranking) and simulates the same ones:
every device alone, every baseline placer, random placements from mostly one device to even
splits, contiguous topological splits at several cut points, and random placements of the
learner's groups, a ladder from m-SCT's placement to one device (plus a learned placement with
--include-rl). Prints each pair and the figures
that matter: Spearman rank correlation (does the simulator order placements as reality does?),
the mean absolute relative error |simulated - measured| / measured (and the same of each step
over the first device's alone, paired in the same rounds, which a machine's drift between the
calibration and the rounds does not move), the range of the measured
steps (slowest over fastest) and how many measured steps fall below the lower bound (their whole
95% interval; the medians below it are counted apart); the same
figures without the calibration, the noise floor (the odd rounds' medians against the even
rounds': how well the measurements rank the placements themselves), and the simulator's own speed.

    python benchmarks/simulator_fidelity.py --graph inception_v3.onnx
    python benchmarks/simulator_fidelity.py --graph model.onnx --input-shape x=1x3x224x224 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import save_json  # noqa: E402


def varied_placements(graph, devices, cost, seed: int = 0, n_random: int = 12, n_splits: int = 6,
                      n_group_random: int = 8, n_ladder: int = 7) -> list[tuple[str, object]]:
    """(label, Placement) pairs: baselines, biased random, topological splits, random over groups,
    and a ladder from m-SCT's placement to one device (a growing share of its other devices' nodes
    moved to the first), whose steps spread between the two even where random placements bunch."""
    from placer.errors import PlacerError
    from placer.placement import Placement
    from placer.placers import PLACERS
    from placer.placers.simple import node_groups

    rng = np.random.default_rng(seed)
    names = list(graph.nodes)
    out: list[tuple[str, Placement]] = []
    for d in devices:
        out.append((f"single:{d}", PLACERS["single"].place(graph, devices, cost, None, device=d)))
    for name, spec in PLACERS.items():
        if name == "single":
            continue
        try:
            out.append((name, spec.place(graph, devices, cost, None, seed=seed)))
        except PlacerError as exc:
            logging.warning("%s gave no placement: %s", name, exc)

    def make(label: str, assign) -> None:
        out.append((label, Placement(list(devices), {n: devices[int(a)] for n, a in zip(names, assign)},
                                     graph.sha256)))

    for i in range(n_random):
        # Mixes from mostly-first-device to mostly-others, so step times spread widely.
        weights = rng.dirichlet(np.full(len(devices), 0.7))
        make(f"random{i}", rng.choice(len(devices), size=len(names), p=weights))
    for i in range(1, n_splits + 1):
        cut = int(len(names) * i / (n_splits + 1))
        make(f"split{i}/{n_splits + 1}", [0] * cut + [1 % len(devices)] * (len(names) - cut))
    groups = node_groups(graph, len(devices))
    index = {n: i for i, n in enumerate(names)}
    for i in range(n_group_random):
        assign = [0] * len(names)
        for g in groups:
            d = int(rng.integers(len(devices)))
            for n in g:
                assign[index[n]] = d
        make(f"groups{i}", assign)
    anchor = dict(out).get("m_sct")
    if anchor is not None:
        spread = [i for i, n in enumerate(names) if anchor.nodes[n] != devices[0]]
        order = rng.permutation(spread)
        for k in range(1, n_ladder + 1):
            moved = set(order[: len(order) * k // (n_ladder + 1)].tolist())
            make(f"ladder{k}/{n_ladder + 1}", [0 if i in moved else devices.index(anchor.nodes[n])
                                              for i, n in enumerate(names)])
    return out


def roofline_of_this_machine(graph, devices, op_times):
    """The roofline model of this machine: the describe-local job (`placer cluster describe-local`)
    on `devices` (measured now), its efficiencies fitted to the profile's per-node times."""
    import tempfile

    from placer.costmodel.roofline import RooflineCostModel, fit_efficiency
    from placer.jobs.describe_local import DescribeLocalSettings, describe_local

    with tempfile.TemporaryDirectory() as folder:
        described = describe_local(DescribeLocalSettings(Path(folder) / "local.toml",
                                                         ",".join(str(d) for d in devices)))
    return RooflineCostModel(described.cluster, graph, fit_efficiency(graph, described.cluster, op_times))


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def figures(predicted: list[float], measured: list[float]) -> dict:
    """Spearman and the mean and median absolute relative error of `predicted` against `measured`."""
    errors = [abs(p - m) / m for p, m in zip(predicted, measured)]
    return {"spearman": spearman(predicted, measured) if len(measured) > 2 else None,
            "mean_abs_error": float(np.mean(errors)) if errors else None,
            "median_abs_error": float(np.median(errors)) if errors else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="inception_v3.onnx", help="ONNX file or zoo name")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x224x224")
    parser.add_argument("--devices", default=None, help="default: the machine's default device set")
    parser.add_argument("--include-rl", default=None, metavar="runs/NAME", help="also a learned placement")
    parser.add_argument("--min-rounds", type=int, default=10)
    parser.add_argument("--max-rounds", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=300.0, help="cap of the interleaved rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--refresh-profile", action="store_true")
    parser.add_argument("--cost-model", choices=("profiled", "analytic"), default="profiled",
                        help="what the simulator predicts with: the calibrated profile (default), or the roofline "
                             "model of this machine described by placer cluster describe-local, its efficiencies "
                             "fitted to the profile's per-node times ('uncalibrated' is then the roofline model "
                             "with its default efficiencies)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (the rest on stderr)")
    parser.add_argument("--out", default="benchmarks/results/simulator_fidelity.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    say = partial(print, file=sys.stderr if args.json else sys.stdout, flush=True)

    from dataclasses import replace

    from graphs import resolve
    from placer.jobs.compare import learned_rows
    from placer.devices import default_devices, parse_devices
    from placer.graph.load import parse_input_shapes
    from placer.kernels.loading import load_graph
    from placer.costmodel.lower_bound import check_bound, lower_bound
    from placer.measure.measurer import RealMeasurer
    from placer.costmodel.profiled import ProfiledCostModel
    from placer.costmodel.profile_cache import profiled_cost_model
    from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
    from placer.costmodel.roofline import RooflineCostModel
    from placer.costmodel.simulator import Simulator

    graph = load_graph(resolve(args.graph), parse_input_shapes(args.input_shape))
    devs = parse_devices(args.devices) if args.devices else default_devices()
    names = [d.name for d in devs]
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    cost = profiled_cost_model(graph, devs, refresh=args.refresh_profile, check_cached=True)
    say(f"{args.graph}: {len(graph.nodes)} nodes on {', '.join(str(d) for d in devs)}; profile "
        f"{'cached' if cost.from_cache else f'measured and calibrated in {time.perf_counter() - t0:.1f} s'}; "
        f"contention factors {cost.slowdown or 'none'}")
    if cost.profile.flag:
        say(f"the profile is flagged: {cost.profile.flag}")

    placements = varied_placements(graph, names, cost, seed=args.seed)
    if args.include_rl:
        placements.append(("learned", learned_rows(graph, args.include_rl, names)[0].placement))
    sim = Simulator(graph, names, cost)
    bare = Simulator(graph, names, ProfiledCostModel(replace(cost.profile, calibration={})))
    analytic = None
    if args.cost_model == "analytic":
        analytic = roofline_of_this_machine(graph, devs, cost.profile.op_times)
        say(f"roofline model of this machine ({analytic.cluster.name}), efficiencies fitted to the profile: "
            f"{analytic.efficiency.to_dict()}")
        sim = Simulator(graph, names, analytic)
        bare = Simulator(graph, names, RooflineCostModel(analytic.cluster, graph))
    index = {d: i for i, d in enumerate(names)}

    # Identical placements (memory_greedy without caps is single-device) count once.
    seen: dict[tuple, str] = {}
    unique = []
    for label, placement in placements:
        if placement.key() in seen:
            say(f"{label} is the same placement as {seen[placement.key()]}; measured once")
            continue
        seen[placement.key()] = label
        unique.append((label, placement, [index[placement.nodes[n]] for n in graph.nodes]))

    # The simulator's own speed, on these placements.
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < 1.0:
        for _, _, a in unique:
            sim.simulate(a)
        count += len(unique)
    sims_per_s = count / (time.perf_counter() - start)

    measurer = RealMeasurer(graph, devs, seed=args.seed)
    protocol = RoundsProtocol(warmup=1, min_rounds=args.min_rounds, max_rounds=args.max_rounds,
                              max_seconds=args.max_seconds, seed=args.seed)
    result = measure_in_rounds([Candidate(label, partial(measurer.open, p)) for label, p, _ in unique], protocol,
                               reference=f"single:{names[0]}",
                               progress=lambda k, r: say(f"round {k}: {r.seconds:.0f} s"))
    bound = lower_bound(graph, names, analytic or cost)

    results = []
    say(f"{'placement':20s} {'simulated ms':>12s} {'measured ms':>12s} {'95% interval':>17s} {'rel err':>8s}")
    for label, _, assign in unique:
        m = result.measurements[label]
        predicted = sim.simulate(assign).step_time
        if not m.ok:
            say(f"{label:20s} {predicted * 1e3:12.2f} {'failed':>12s}  {m.failure}: {m.reason}")
            continue
        rel = abs(predicted - m.step_time) / m.step_time
        results.append({"placement": label, "simulated_s": predicted, "uncalibrated_s": bare.simulate(assign).step_time,
                        "measured_s": m.step_time, "interval_s": [m.interval["low"], m.interval["high"]],
                        "relative_error": rel, "median_below_bound": m.step_time < bound.value,
                        "below_bound": m.interval["high"] < bound.value})
        say(f"{label:20s} {predicted * 1e3:12.2f} {m.step_time * 1e3:12.2f} "
            f"{m.interval['low'] * 1e3:8.2f}-{m.interval['high'] * 1e3:<8.2f} {rel:8.1%}")

    measured = [r["measured_s"] for r in results]
    # drift-free: each placement over the first device alone, measured in the same rounds (paired) and simulated
    ref = f"single:{names[0]}"
    sim_ref = sim.simulate([0] * len(graph.nodes)).step_time
    paired = {r["placement"]: result.ratio(r["placement"], ref) for r in results}
    normalised = [abs(r["simulated_s"] / sim_ref - paired[r["placement"]].value) / paired[r["placement"]].value
                  for r in results if paired[r["placement"]] is not None]
    # the noise floor: how well the medians of the odd rounds rank the placements like the even rounds'
    halves = [[float(np.median([t for t in result.times[r["placement"]][k::2] if t is not None])) for r in results]
              for k in (0, 1)]
    note = check_bound(bound, {r["placement"]: r["measured_s"] for r in results})
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    summary = {"graph": args.graph, "nodes": len(graph.nodes), "devices": [str(d) for d in devs],
               "cost_model": args.cost_model,
               **({"efficiency": analytic.efficiency.to_dict()} if analytic is not None else {}),
               "n": len(results), **figures([r["simulated_s"] for r in results], measured),
               "range": max(measured) / min(measured) if measured else None,
               # a violation: the measured step's whole 95% interval below the bound; its median below, counted apart
               "bound_violations": sum(r["below_bound"] for r in results),
               "medians_below_bound": sum(r["median_below_bound"] for r in results), "lower_bound_s": bound.value,
               "mean_abs_error_normalised": float(np.mean(normalised)) if normalised else None,
               "normalised_to": ref,
               "noise_spearman": spearman(*halves) if len(results) > 2 and result.rounds > 1 else None,
               "uncalibrated": figures([r["uncalibrated_s"] for r in results], measured),
               "slowdown": cost.slowdown, "profile_flag": cost.profile.flag, "profile_cached": cost.from_cache,
               "calibration": {k: v for k, v in cost.profile.calibration.items() if k != "placements"},
               "rounds": result.rounds, "capped": result.capped, "seconds": round(result.seconds, 1),
               "simulations_per_s": sims_per_s, "load_average": [load_start, load_end], "cpus": os.cpu_count(),
               "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "results": results}
    if note:
        say(f"note: {note}")
    if result.cap_note():
        say(f"note: {result.cap_note()}")
    say(f"(machine load average {load_start:.1f} at the start, {load_end:.1f} at the end, on {os.cpu_count()} cores)"
        if load_start is not None else "")
    say(f"\n{summary['n']} distinct placements spanning {summary['range']:.2f}x: Spearman {summary['spearman']:.3f}, "
        f"mean absolute error {summary['mean_abs_error']:.1%} (median {summary['median_abs_error']:.1%}), "
        f"(normalised to {ref} in the same rounds {summary['mean_abs_error_normalised']:.1%}), "
        f"{summary['bound_violations']} below the lower bound ({summary['medians_below_bound']} medians); uncalibrated: Spearman "
        f"{summary['uncalibrated']['spearman']:.3f}, mean absolute error {summary['uncalibrated']['mean_abs_error']:.1%}; "
        f"simulator {sims_per_s:,.0f} placements/s; noise floor: the odd rounds rank the placements like the even "
        f"ones with Spearman {summary['noise_spearman']:.3f}")
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        save_json(args.out, summary)
    if args.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "results"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
