"""How well the simulator, fed with profiled costs, predicts real step times.

Profiles the graph on the devices (cached), then measures a few dozen varied placements for real
and simulates the same ones: every baseline placer, random placements with every mix of devices,
contiguous topological splits at several cut points, and random placements of the learner's
groups (plus a learned placement with --include-rl). Prints each pair and the two figures that
matter: Spearman rank correlation (does the simulator order placements as reality does?) and the
mean relative error |simulated - measured| / measured. Also times the simulator itself.

    python benchmarks/simulator_fidelity.py --graph inception_v3.onnx
    python benchmarks/simulator_fidelity.py --graph inception_v3.onnx --devices cpu:0,cpu:1 --repeats 5
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import save_json  # noqa: E402


def varied_placements(graph, devices, cost, seed: int = 0, n_random: int = 12, n_splits: int = 6,
                      n_group_random: int = 8) -> list[tuple[str, object]]:
    """(label, Placement) pairs: baselines, biased random, topological splits, random over groups."""
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
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="inception_v3.onnx", help="ONNX file or zoo name")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x224x224")
    parser.add_argument("--devices", default=None, help="default: the machine's default device set")
    parser.add_argument("--include-rl", default=None, metavar="runs/NAME", help="also a learned placement")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per placement per round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="passes over all placements; a placement's figure is the median of its rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--refresh-profile", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/simulator_fidelity.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from graphs import resolve
    from placer.graph.load import parse_input_shapes
    from placer.measure.loading import load_graph
    from placer.devices import default_devices, parse_devices
    from placer.measure.measurer import MeasureProtocol, RealMeasurer
    from placer.measure.profiled import ProfiledCostModel
    from placer.measure.simulator import Simulator
    from placer.commands.compare import learned_rows

    graph = load_graph(resolve(args.graph), parse_input_shapes(args.input_shape))
    devs = parse_devices(args.devices) if args.devices else default_devices()
    names = [d.name for d in devs]
    t0 = time.perf_counter()
    cost = ProfiledCostModel.for_graph(graph, devs, refresh=args.refresh_profile)
    print(f"{args.graph}: {len(graph.nodes)} nodes on {', '.join(str(d) for d in devs)}; profile "
          f"{'cached' if cost.from_cache else f'measured in {time.perf_counter() - t0:.1f} s'}")

    placements = varied_placements(graph, names, cost, seed=args.seed)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if args.include_rl:
        placements.append(("learned", learned_rows(graph, args.include_rl, names)[0].placement))
    sim = Simulator(graph, names, cost)
    index = {d: i for i, d in enumerate(names)}
    assigns = [[index[p.nodes[n]] for n in graph.nodes] for _, p in placements]

    # The simulator's own speed, on these placements.
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < 1.0:
        for a in assigns:
            sim.simulate(a)
        count += len(assigns)
    sims_per_s = count / (time.perf_counter() - start)

    # Identical placements (memory_greedy without caps is single-device) count once.
    seen: dict[tuple, str] = {}
    unique = []
    for (label, placement), assign in zip(placements, assigns):
        if placement.key() in seen:
            print(f"{label} is the same placement as {seen[placement.key()]}; measured once")
            continue
        seen[placement.key()] = label
        unique.append((label, placement, assign))

    # Rounds interleave the placements, so a change in the machine's load hits all of them alike.
    measurer = RealMeasurer(graph, devs, protocol=MeasureProtocol(warmup=args.warmup, repeats=args.repeats),
                            seed=args.seed)
    rounds: dict[str, list[float]] = {label: [] for label, _, _ in unique}
    failed: dict[str, str] = {}
    for r in range(args.rounds):
        for label, placement, _ in unique:
            if label in failed:
                continue
            m = measurer.measure(placement)
            if m.ok:
                rounds[label].append(m.step_time)
            else:
                failed[label] = f"{m.failure}: {m.reason}"
        print(f"round {r + 1}/{args.rounds} done", flush=True)

    results = []
    print(f"{'placement':16s} {'simulated ms':>12s} {'measured ms':>12s} {'range ms':>9s} {'rel err':>8s}")
    for label, placement, assign in unique:
        predicted = sim.simulate(assign).step_time
        if label in failed:
            print(f"{label:16s} {predicted * 1e3:12.2f} {'failed':>12s}  {failed[label]}")
            continue
        measured = float(np.median(rounds[label]))
        spread = max(rounds[label]) - min(rounds[label])
        rel = abs(predicted - measured) / measured
        results.append({"placement": label, "simulated_s": predicted, "measured_s": measured,
                        "round_medians_s": rounds[label], "relative_error": rel})
        print(f"{label:16s} {predicted * 1e3:12.2f} {measured * 1e3:12.2f} {spread * 1e3:9.2f} {rel:8.1%}")

    # Load-normalised: each step time over the first device's single-device time of the same
    # round, simulated and measured alike, so a machine that slowed down as a whole cancels out.
    ref = f"single:{names[0]}"
    if ref in rounds and len(rounds[ref]) == args.rounds:
        sim_ref = sim.simulate([0] * len(graph.nodes)).step_time
        for r in results:
            ratios = [t / t_ref for t, t_ref in zip(r["round_medians_s"], rounds[ref])]
            if len(ratios) == args.rounds:
                r["measured_ratio"] = float(np.median(ratios))
                r["simulated_ratio"] = r["simulated_s"] / sim_ref
                r["ratio_relative_error"] = abs(r["simulated_ratio"] - r["measured_ratio"]) / r["measured_ratio"]
    fresh = results
    sim_t = [r["simulated_s"] for r in fresh]
    real_t = [r["measured_s"] for r in fresh]
    # The noise floor: how well one round of real measurements ranks the placements like another.
    full = [r["round_medians_s"] for r in fresh if len(r["round_medians_s"]) == args.rounds]
    pairs = [(a, b) for a in range(args.rounds) for b in range(a + 1, args.rounds)]
    self_rho = (float(np.mean([spearman([x[a] for x in full], [x[b] for x in full]) for a, b in pairs]))
                if pairs and len(full) > 2 else None)
    summary = {"graph": args.graph, "nodes": len(graph.nodes), "devices": [str(d) for d in devs],
               "placements": len(fresh), "spearman": spearman(sim_t, real_t) if len(fresh) > 2 else None,
               "mean_relative_error": float(np.mean([r["relative_error"] for r in fresh])) if fresh else None,
               "median_relative_error": float(np.median([r["relative_error"] for r in fresh])) if fresh else None,
               "round_to_round_spearman": self_rho,
               "normalised_to": ref,
               "mean_relative_error_normalised": (float(np.mean([r["ratio_relative_error"] for r in fresh]))
                                                  if fresh and all("ratio_relative_error" in r for r in fresh)
                                                  else None),
               "simulations_per_s": sims_per_s, "load_average_at_start": load, "cpus": os.cpu_count(), "protocol": {"warmup": args.warmup, "repeats": args.repeats, "rounds": args.rounds},
               "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "results": results}
    if load is not None:
        print(f"(machine load average at the start: {load:.1f} on {os.cpu_count()} cores)")
    print(f"\n{summary['placements']} distinct placements: Spearman {summary['spearman']:.3f}, mean relative "
          f"error {summary['mean_relative_error']:.1%} (median {summary['median_relative_error']:.1%}); "
          f"simulator {sims_per_s:,.0f} placements/s")
    if summary["mean_relative_error_normalised"] is not None:
        print(f"normalised to {ref} of the same round: mean relative error "
              f"{summary['mean_relative_error_normalised']:.1%}")
    if self_rho is not None:
        print(f"noise floor: one round of real measurements ranks the placements like another with "
              f"Spearman {self_rho:.3f}")
    save_json(args.out, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
