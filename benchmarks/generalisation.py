"""Generalisation of the graph policy (issue 29.6), simulated: on the corpus's held-out problems
(`placer.corpus.held_out_items`: graphs of held-out families on a training cluster, and graphs on
the held-out clusters), the pre-trained policy placing zero-shot, the same policy fine-tuned on the
problem, the same network learning it from scratch and the per-graph seq2seq learner
(`placer train`), against every baseline placer at its defaults (the list heuristics, local
search, the exact CP-SAT solver, random search at the learners' sample count), with the seconds
each took to place and the samples each learner drew.

Every step time is the roofline cost model's on the cluster's datasheet figures (the same
simulator for every row), so it is exact: no interval. Ratios are a row's step time over the best
baseline's (below 1: faster than every baseline). "to reach" is the samples the fine-tuned policy
(and the one from scratch) drew before its best placement was as fast as the per-graph learner's
final one; the issue asks for a fifth of the per-graph learner's samples or fewer.

    python benchmarks/generalisation.py                       # held_out_items(size="full"), 2000 samples
    python benchmarks/generalisation.py --quick               # the small held-out set, 200 samples
    python benchmarks/generalisation.py --items transformer --no-per-graph --json out.json
    python benchmarks/generalisation.py --size large --zero-shot-only     # deep graphs, zero-shot
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import save_json  # noqa: E402
from paper_setting import LIST_HEURISTICS, learn as per_graph_learn  # noqa: E402
from placer.jobs.compare import simulated_comparison  # noqa: E402
from placer.corpus import held_out_items  # noqa: E402
from placer.corpus.items import HELD_OUT_SIZES  # noqa: E402
from placer.costmodel.roofline import cluster_measurer  # noqa: E402
from placer.devices import as_devices  # noqa: E402
from placer.errors import PlacerError  # noqa: E402
from placer.placers import PLACERS  # noqa: E402
from placer.policy.gnn.checkpoint import PRETRAINED, load_policy  # noqa: E402
from placer.policy.gnn.episode import make_episode  # noqa: E402
from placer.policy.budget import GRAPH_POLICY_POLISH  # noqa: E402
from placer.policy.gnn.finetune import finetune, start_chains  # noqa: E402
from placer.policy.gnn.learn import LearnConfig  # noqa: E402
from placer.policy.gnn.model import GraphPlacementPolicy  # noqa: E402
from placer.jobs.place import SAMPLED_CHAINS  # noqa: E402
from placer.policy.gnn.placing import place_episode  # noqa: E402


def baselines(item, samples: int, seed: int) -> dict:
    """Every placer on the item's cluster at its defaults (random search with `samples`)."""
    devices = as_devices(item.cluster.device_specs())
    comparison = simulated_comparison(item.graph, devices, item.cluster, list(PLACERS), None, samples, seed)
    rows = {r.name: r for r in comparison.rows if r.step_time is not None}
    best = min(rows, key=lambda n: rows[n].step_time)
    heuristics = [n for n in LIST_HEURISTICS if n in rows]
    best_heuristic = min(heuristics, key=lambda n: rows[n].step_time) if heuristics else None
    exact = rows.get("exact")
    return {"rows_ms": {n: r.step_time * 1e3 for n, r in rows.items()},
            "seconds": {n: r.find_time_s for n, r in rows.items()},
            "best": best, "best_ms": rows[best].step_time * 1e3,
            "best_heuristic": best_heuristic,
            "best_heuristic_ms": rows[best_heuristic].step_time * 1e3 if best_heuristic else None,
            "exact_gap": exact.placement.extra.get("placer", {}).get("gap") if exact and exact.placement else None,
            "bound_ms": comparison.lower_bound.value * 1e3}


def simulated_ms(item, placement) -> float | None:
    """The placement's step on the item's cluster by the baselines' simulator (memory checked)."""
    m = cluster_measurer(item.cluster, item.graph).measure(placement)
    return m.step_time * 1e3 if m.ok else None


def zero_shot(policy, item) -> dict:
    """The policy placing the item with no training on it, as `placer place` does (its two most
    likely chains of rounds, from nothing and from the best list heuristic's placement, and
    `SAMPLED_CHAINS` sampled ones, the fastest round kept), but never the heuristic's own placement
    in its stead: the policy's step, the step of its most likely chains and of its most likely
    chain from nothing, and the seconds to place (the heuristics it starts from included)."""
    start = time.perf_counter()
    try:
        placement = place_episode(policy, make_episode(item.graph, item.cluster), keep_heuristic=False,
                                  chains=SAMPLED_CHAINS)
    except PlacerError as exc:   # no round of the policy fits the devices' memory: a failure, reported
        return {"ms": None, "seconds": time.perf_counter() - start, "failure": str(exc)}
    seconds = time.perf_counter() - start
    info = placement.extra["placer"]
    finite_ms = lambda s: s * 1e3 if s is not None and s < float("inf") else None   # noqa: E731
    return {"ms": simulated_ms(item, placement), "seconds": seconds, "chain": info.get("chain"),
            "same_as_start": info.get("same_as_start"),
            "most_likely_ms": finite_ms(info["first_chains_step_time"]),
            "from_nothing_ms": finite_ms(info["from_nothing_step_time"])}


def learning(policy, item, samples: int, seed: int, folder: Path) -> dict:
    """`policy` fine-tuned on the item for `samples` sampled placements as `placer train --policy
    pretrained` does (with its default polish): its best step, its curve."""
    start = time.perf_counter()
    result = finetune(policy, make_episode(item.graph, item.cluster), folder, LearnConfig(), samples=samples,
                      chains=start_chains(samples, policy.config.rounds, "simulated", SAMPLED_CHAINS),
                      polish=GRAPH_POLICY_POLISH, seed=seed, log=lambda text: None)
    return {"ms": result.best_step_time * 1e3, "samples": result.samples, "seconds": time.perf_counter() - start,
            "curve": [(c["samples"], c["best_step_time"] * 1e3) for c in result.summary["curve"]]}


# the per-graph learner without its local search: REINFORCE from the best baseline's placement, no
# polish (the learner the "5x fewer samples" was written against, before local search led it)
REINFORCE_ONLY = {"learning": {"warm_start": "best_baseline"}, "polish": 0.0}


def per_graph(item, samples: int, seed: int, folder: Path, options: dict | None = None) -> dict:
    """The per-graph seq2seq learner (the train job on the cluster, rewards simulated, with `options`) on the item."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "graph.onnx"
    onnx.save(item.graph.model, path)
    seconds, summary = per_graph_learn(path, item.cluster.name, samples, seed, folder / "run", "inference",
                                       **(options or {}))
    return {"ms": summary["best_step_time"] * 1e3, "samples": summary["samples"], "seconds": seconds}


def to_reach(curve: list[tuple[int, float]], target_ms: float | None) -> int | None:
    """The samples drawn before the best step was `target_ms` or faster (None: never)."""
    if target_ms is None:
        return None
    return next((s for s, ms in curve if ms <= target_ms * (1 + 1e-9)), None)


def one(item, policy, samples: int, seed: int, with_per_graph: bool, with_learners: bool = True) -> dict:
    base = baselines(item, samples, seed)
    out = {"item": item.name, "family": item.family, "cluster": item.cluster.name, "nodes": len(item.graph.nodes),
           "devices": len(item.cluster.devices), "samples": samples, "baselines": base,
           "zero_shot": zero_shot(policy, item)}
    if with_learners:
        _learners(out, item, policy, samples, seed, with_per_graph)
    for name in ("zero_shot", "fine_tuned", "scratch", "per_graph", "reinforce_only", "fine_tuned_fifth_of_per_graph",
                 "fine_tuned_fifth_of_reinforce_only"):
        if name in out and out[name]["ms"] is not None:
            out[name]["vs_best"] = out[name]["ms"] / base["best_ms"]
    for name in ("most_likely", "from_nothing"):
        if out["zero_shot"].get(f"{name}_ms") is not None:
            out["zero_shot"][f"{name}_vs_best"] = out["zero_shot"][f"{name}_ms"] / base["best_ms"]
    return out


def _learners(out: dict, item, policy, samples: int, seed: int, with_per_graph: bool) -> None:
    """The learners' rows of `out`: fine-tuned, from scratch and (`with_per_graph`) the per-graph ones."""
    with tempfile.TemporaryDirectory(prefix="placer-generalisation-") as folder:
        folder = Path(folder)
        out["fine_tuned"] = learning(copy.deepcopy(policy), item, samples, seed, folder / "fine")
        scratch = GraphPlacementPolicy(policy.config)   # the same network, freshly initialised
        out["scratch"] = learning(scratch, item, samples, seed, folder / "scratch")
        if with_per_graph:
            out["per_graph"] = per_graph(item, samples, seed, folder / "seq2seq")
            out["reinforce_only"] = per_graph(item, samples, seed, folder / "reinforce", REINFORCE_ONLY)
        # the "5x fewer samples", run as such: the policy fine-tuned with a fifth of the samples
        # each per-graph learner drew, and whether it ends at least as fast as that learner
        for learner in ("per_graph", "reinforce_only") if with_per_graph else ():
            fifth = max(2, out[learner]["samples"] // 5)
            run = learning(copy.deepcopy(policy), item, fifth, seed, folder / f"fifth-{learner}")
            run["reached"] = run["ms"] <= out[learner]["ms"] * (1 + 1e-9)
            out[f"fine_tuned_fifth_of_{learner}"] = run
    target = out.get("per_graph", {}).get("ms")
    for name in ("fine_tuned", "scratch"):
        out[name]["to_reach_per_graph"] = to_reach(out[name]["curve"], target)
        out[name]["to_reach_reinforce_only"] = to_reach(out[name]["curve"], out.get("reinforce_only", {}).get("ms"))


def _fifth(r: dict, learner: str) -> str:
    """The fine-tune at a fifth of `learner`'s samples: its ratio, '*' where it is at least as fast."""
    run = r.get(f"fine_tuned_fifth_of_{learner}")
    if run is None:
        return f"{'-':>8}"
    return f"{_cell(run.get('vs_best'), width=7)}{'*' if run['reached'] else ' '}"


def _cell(value, fmt: str = ".3f", width: int = 9) -> str:
    return f"{'-' if value is None else format(value, fmt):>{width}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--size", choices=HELD_OUT_SIZES, default="full",
                        help="which held-out set (corpus size; large: deep graphs of 968-1,928 ops)")
    parser.add_argument("--zero-shot-only", action="store_true",
                        help="only the baselines and the policy zero-shot (no fine-tuning, no learner)")
    parser.add_argument("--items", nargs="+", default=None, metavar="TEXT",
                        help="only the held-out items whose name contains one of these")
    parser.add_argument("--samples", type=int, default=2000,
                        help="samples each learner draws (random search gets as many)")
    parser.add_argument("--policy", default=str(PRETRAINED), help="the graph policy checkpoint (default: the shipped one)")
    parser.add_argument("--no-per-graph", action="store_true", help="skip the per-graph seq2seq learner (slowest)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="the small held-out set, 200 samples")
    parser.add_argument("--json", default=None, help="write every figure here")
    args = parser.parse_args()
    if args.quick:
        args.size, args.samples = "small", 200
    if not Path(args.policy).is_file():
        raise SystemExit(f"no graph policy checkpoint at {args.policy}; run placer pretrain, or give --policy")
    policy, info = load_policy(args.policy)
    items = [i for i in held_out_items(args.seed, args.size)
             if not args.items or any(text in i.name for text in args.items)]
    print(f"generalisation on {len(items)} held-out problems ({args.size}), simulated (roofline costs from datasheets), "
          f"{args.samples} samples per learner; policy {args.policy}")
    print(f"{'item':<52}{'best baseline':>24}{'local s.':>9}{'exact':>9}{'zero-shot':>10}{'likely':>8}{'nothing':>9}"
          f"{'s':>6}"
          f"{'fine-t.':>9}{'scratch':>9}{'per-gr.':>9}{'rl only':>9}{'ft reach':>9}{'sc reach':>9}{'ft rl':>7}"
          f"{'ft/5':>8}{'ft/5 rl':>8}")
    results = []
    for item in items:
        r = one(item, policy, args.samples, args.seed, not args.no_per_graph, not args.zero_shot_only)
        results.append(r)
        if args.json:   # after every item: a long run cut short keeps what it finished
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(_record(args, info, results), indent=2) + "\n")
        b = r["baselines"]
        rows = b["rows_ms"]
        best = f"{b['best']} {b['best_ms']:.3f}"
        ratio = lambda ms: None if ms is None else ms / b["best_ms"]   # noqa: E731
        print(f"{r['item'][:51]:<52}{best:>24}{_cell(ratio(rows.get('local_search')))}"
              f"{_cell(ratio(rows.get('exact')))}{_cell(r['zero_shot'].get('vs_best'), width=10)}"
              f"{_cell(r['zero_shot'].get('most_likely_vs_best'), width=8)}"
              f"{_cell(r['zero_shot'].get('from_nothing_vs_best'))}{r['zero_shot']['seconds']:>6.2f}{_cell(r.get('fine_tuned', {}).get('vs_best'))}"
              f"{_cell(r.get('scratch', {}).get('vs_best'))}{_cell(r.get('per_graph', {}).get('vs_best'))}"
              f"{_cell(r.get('reinforce_only', {}).get('vs_best'))}"
              f"{_cell(r.get('fine_tuned', {}).get('to_reach_per_graph'), 'd')}"
              f"{_cell(r.get('scratch', {}).get('to_reach_per_graph'), 'd')}"
              f"{_cell(r.get('fine_tuned', {}).get('to_reach_reinforce_only'), 'd', 7)}{_fifth(r, 'per_graph')}"
              f"{_fifth(r, 'reinforce_only')}",
              flush=True)
    print("best baseline in ms per simulated step; every other column is that row's step over the best baseline's "
          "(below 1: faster than every baseline); zero-shot: the policy's own placement as placer place makes it (its most "
          f"likely chains from nothing and from the best heuristic's placement and {SAMPLED_CHAINS} sampled ones, the "
          "fastest), likely: its most likely chains alone, nothing: its most likely chain from nothing; s: seconds "
          "to place zero-shot, the heuristics it starts from included; reach: samples the "
          f"learner drew until it was as fast as the per-graph learner after {args.samples} ('-': never); rl only: the "
          "per-graph learner without local search (REINFORCE from the best baseline, no polish), ft rl: samples the "
          "fine-tuned policy drew until it was as fast as that; ft/5: the policy fine-tuned with a fifth of the samples "
          "the per-graph learner drew (ft/5 rl: of those the REINFORCE-only one drew), '*' where it ends at least as "
          "fast as that learner")
    print(f"\ntime to place, seconds (samples drawn): {'zero-shot':>10}{'local search':>14}{'exact':>8}"
          f"{'fine-tuned':>18}{'scratch':>18}{'per-graph':>18}{'rl only':>18}")
    for r in results:
        seconds = r["baselines"]["seconds"]
        learned = "".join(f"{'-' if n not in r else format(r[n]['seconds'], '.1f') + ' (' + str(r[n]['samples']) + ')':>18}"
                          for n in ("fine_tuned", "scratch", "per_graph", "reinforce_only"))
        print(f"{r['item'][:39]:<40}{r['zero_shot']['seconds']:>10.2f}{_cell(seconds.get('local_search'), '.1f', 14)}"
              f"{_cell(seconds.get('exact'), '.1f', 8)}{learned}")
    ratios = [r["zero_shot"]["vs_best"] for r in results if r["zero_shot"].get("vs_best") is not None]
    if ratios:
        print(f"zero-shot over the best baseline: mean {sum(ratios) / len(ratios):.3f}, worst {max(ratios):.3f} "
              f"({len(ratios)} of {len(results)} placed within memory; within 5% on "
              f"{sum(r <= 1.05 for r in ratios)}, within 15% on {sum(r <= 1.15 for r in ratios)}); slowest to place "
              f"{max(r['zero_shot']['seconds'] for r in results):.2f} s")
        print("the chain each zero-shot placement came from: " + "; ".join(
            f"{r['item'][:24]} {r['zero_shot'].get('chain')}" + (" (kept its start)" if r["zero_shot"].get("same_as_start")
                                                                 else "") for r in results))
    with_learners = [r for r in results if "per_graph" in r]
    if with_learners:
        print(f"fine-tuned with a fifth of the samples, at least as fast as the per-graph learner on "
              f"{sum(r['fine_tuned_fifth_of_per_graph']['reached'] for r in with_learners)} of {len(with_learners)}, "
              f"as the REINFORCE-only learner on "
              f"{sum(r['fine_tuned_fifth_of_reinforce_only']['reached'] for r in with_learners)} of {len(with_learners)}")
    if args.json:
        save_json(args.json, _record(args, info, results))


def _record(args, info: dict, results: list[dict]) -> dict:
    return {"size": args.size, "samples": args.samples, "policy": args.policy, "policy_info": info,
            "rows": results}


if __name__ == "__main__":
    main()
