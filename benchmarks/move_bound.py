"""How far a perfect chooser of moves could take a fine-tune (issue 29's "5x fewer samples"), simulated.

A fine-tune that reaches the per-graph learner's result in a fifth of its samples must, from where it
starts, find that many improving moves almost without trying a move that does not improve. This
script bounds what the best possible chooser of single-group moves could do: from the policy's
zero-shot placement (its start in `placer train --policy pretrained`) and from the best list
heuristic's (the per-graph learner's), it takes the steepest move of one group of the policy's
groups to another device, every move's step time known for free (an oracle: each move costs one
simulated sample, not the hundreds of placements it took to find it), until no move helps. A
problem where even this ends slower than the per-graph learner cannot be reached by a fine-tune
whose moves are on the policy's groups, however well it learned which moves pay.

The per-graph learner's result comes from a `benchmarks/generalisation.py --json` file (same items,
same seed); every step time is the roofline cost model's, exact.

    python benchmarks/generalisation.py --samples 500 --json gen.json
    python benchmarks/move_bound.py --generalisation gen.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from placer.corpus import held_out_items
from placer.policy.gnn.checkpoint import PRETRAINED, load_policy
from placer.policy.gnn.episode import Episode, group_majority, make_episode
from placer.jobs.place import SAMPLED_CHAINS
from placer.policy.gnn.placing import place_episode


def group_devices(episode: Episode, placement) -> np.ndarray:
    """(G,) the device of each of the policy's groups in a placement the policy made (one device each)."""
    names = episode.cluster.device_names
    node_devices = [names.index(placement.nodes[n]) for n in episode.graph.nodes]
    return group_majority(episode.graph, episode.node_group, episode.features.n_groups, len(names), node_devices)


def steepest_descent(episode: Episode, start: np.ndarray, target_s: float) -> dict:
    """The oracle's descent from `start`: every single-group move simulated, the fastest taken, until
    none helps; where it ends and after how many moves it was at least as fast as `target_s`."""
    assign = start.copy()
    G, D = len(assign), len(episode.features.devices)
    step = first = float(episode.step_times(assign[None])[0])
    moves, reached = 0, (0 if first <= target_s * (1 + 1e-9) else None)
    while np.isfinite(step):
        rows = np.repeat(assign[None], G * D, axis=0)
        rows[np.arange(G * D), np.repeat(np.arange(G), D)] = np.tile(np.arange(D), G)
        times = episode.step_times(rows)
        best = int(np.argmin(times))
        if not times[best] < step * (1 - 1e-9):
            break
        assign, step, moves = rows[best], float(times[best]), moves + 1
        if reached is None and step <= target_s * (1 + 1e-9):
            reached = moves
    return {"from_s": first, "to_s": step, "moves": moves, "reached_after_moves": reached}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generalisation", required=True, help="a benchmarks/generalisation.py --json file")
    parser.add_argument("--json", default=None, help="write every figure here")
    args = parser.parse_args()
    run = json.loads(Path(args.generalisation).read_text())
    rows = {r["item"]: r for r in run["rows"] if "per_graph" in r}
    if not rows:
        raise SystemExit(f"{args.generalisation} has no per-graph learner's results; run generalisation.py without "
                         "--no-per-graph")
    policy, _ = load_policy(run.get("policy") or PRETRAINED)
    fifth = run["samples"] // 5
    print(f"a perfect chooser of single-group moves, simulated; yardstick: the per-graph learner after "
          f"{run['samples']} samples (from {args.generalisation}); a fine-tune has {fifth} (a fifth)")
    print(f"{'item':<52}{'per-graph':>10}{'start':>16}{'ends':>8}{'moves':>7}{'reach':>7}"
          f"{'start':>16}{'ends':>8}{'moves':>7}{'reach':>7}")
    out = []
    for item in held_out_items(0, run["size"]):
        if item.name not in rows:
            continue
        episode = make_episode(item.graph, item.cluster, name=item.name)
        target_s = rows[item.name]["per_graph"]["ms"] / 1e3
        zero_shot = place_episode(policy, episode, keep_heuristic=False, chains=SAMPLED_CHAINS)
        starts = {"zero-shot": group_devices(episode, zero_shot)}
        if episode.start is not None:
            starts["heuristic"] = episode.start.astype(np.int64)
        found = {name: steepest_descent(episode, start, target_s) for name, start in starts.items()}
        out.append({"item": item.name, "per_graph_s": target_s, **found})
        cells = "".join(f"{name[:9] + ' ' + format(f['from_s'] / target_s, '.3f'):>16}{f['to_s'] / target_s:>8.3f}"
                        f"{f['moves']:>7}{'-' if f['reached_after_moves'] is None else f['reached_after_moves']:>7}"
                        for name, f in found.items())
        print(f"{item.name[:51]:<52}{target_s * 1e3:>10.3f}{cells}", flush=True)
    reachable = [r for r in out if any(r[k]["reached_after_moves"] is not None for k in ("zero-shot", "heuristic") if k in r)]
    print("step times over the per-graph learner's (ms per simulated step); ends: where the descent stops; reach: "
          "moves until at least as fast as the per-graph learner ('-': never)")
    print(f"reachable by single-group moves from the zero-shot or the heuristic's placement: {len(reachable)} of "
          f"{len(out)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"generalisation": args.generalisation, "rows": out}, indent=2) + "\n")


if __name__ == "__main__":
    main()
