"""The paper's experiment on described hardware, simulated: Mirhoseini et al. (2017) place the
training step of Inception-V3 (batch 32), RNNLM and NMT (batch 64) on one CPU and 2 or 4 K40s over
PCIe; the zoo's ResNet-50 (batch 32) and Transformer (batch 64) join them. For each model and cluster this trains placer's learner on the cluster's roofline costs
(`placer train --cluster C --reward simulated`: local search's own run first, REINFORCE and a polish with
the samples it leaves), then sets its placement beside every baseline
(the list heuristics, the expert's layer-per-GPU rule, local search and random search at the
learner's sample count, the exact CP-SAT solver with its proven gap) and the lower bound.

Every figure is simulated with the roofline cost model of `placer.costmodel.roofline` on the
cluster's datasheet figures: exact, so no interval. What the paper reports is printed beside it
for reference: its figures are real TensorFlow steps on its machine, not comparable one to one.

    python benchmarks/paper_setting.py                          # the zoo's 5 models x the paper's 2 clusters + 2 heterogeneous
    python benchmarks/paper_setting.py --quick                  # rnnlm on paper-2xk40, few samples
    python benchmarks/paper_setting.py --models rnnlm --clusters cpu-fast-slow-gpu --samples 4000 --json out.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import save_json, zoo_path  # noqa: E402
from placer.jobs.compare import simulated_comparison  # noqa: E402
from placer.jobs.settings import HardwareSettings, ModelSettings, StepSettings  # noqa: E402
from placer.jobs.train import TrainSettings, train  # noqa: E402
from placer.devices import as_devices  # noqa: E402
from placer.hardware import load_cluster  # noqa: E402
from placer.kernels.loading import load_graph  # noqa: E402
from placer.placers import PLACERS  # noqa: E402
from placer.program.training import TrainingSpec  # noqa: E402

BATCH = {"inception_v3": 32, "rnnlm": 64, "nmt": 64,   # the paper's section 4
         "resnet50": 32, "transformer": 64}            # the rest of the zoo, at the same batches as its kin
CLUSTERS = ["paper-2xk40", "paper-4xk40", "cpu-fast-slow-gpu", "v100-k40-mix"]
LIST_HEURISTICS = ("heft", "m_etf", "m_sct", "expert")
# What Mirhoseini et al. (2017) report, in words (their abstract and section 4, as issue 26 sums
# them up): real TensorFlow steps on their machine.
PAPER = {"inception_v3": "RL about 20% under the human expert with 4 GPUs",
         "nmt": "RL about 20% under the human expert with 4 GPUs",
         "rnnlm": "RL beats the expert's layer-per-GPU placement"}


def learn(graph_path: Path, cluster: str, samples: int, seed: int, run_dir: Path, objective: str,
          **options) -> tuple[float, dict]:
    """Train placer's learner on the cluster's simulated costs (the train job, `options`: more of its
    settings); the seconds it took and the run's summary."""
    start = time.perf_counter()
    settings = TrainSettings(ModelSettings(str(graph_path)), HardwareSettings(cluster=cluster),
                             StepSettings(objective=objective), samples=samples, seed=seed, run_dir=run_dir,
                             reward="simulated", closing_comparison=False, **options)
    outcome = train(settings, report=lambda line: None)
    if outcome.interrupted or outcome.summary.get("best_step_time") is None:
        raise SystemExit(f"placer train found no placement on {graph_path.name} / {cluster}")
    return time.perf_counter() - start, outcome.summary


def one(model: str, cluster_name: str, samples: int, seed: int, objective: str) -> dict:
    """Every row of one (model, cluster) pair, simulated."""
    path = zoo_path(model, batch=BATCH[model])
    graph = load_graph(path)
    cluster = load_cluster(cluster_name)
    devices = as_devices(cluster.device_specs())
    training = TrainingSpec() if objective == "training" else None
    with tempfile.TemporaryDirectory(prefix="placer-paper-") as folder:
        run_dir = Path(folder) / "run"
        learn_s, summary = learn(path, cluster_name, samples, seed, run_dir, objective)
        comparison = simulated_comparison(graph, devices, cluster, list(PLACERS), run_dir, None, seed,
                                          training=training)
    rows = {r.name: r for r in comparison.rows if r.step_time is not None}
    heuristics = {n: rows[n].step_time for n in LIST_HEURISTICS if n in rows}
    best_heuristic = min(heuristics, key=heuristics.get)
    baselines = {n: r.step_time for n, r in rows.items() if not n.startswith("learned")}
    best_baseline = min(baselines, key=baselines.get)
    learned = rows["learned"].step_time
    exact = rows.get("exact")
    gap = (exact.placement.extra.get("placer", {}).get("gap") if exact is not None and exact.placement else None)
    return {"model": model, "cluster": cluster_name, "batch": BATCH[model], "objective": objective,
            "samples": samples, "learn_s": learn_s,
            "rows_ms": {n: r.step_time * 1e3 for n, r in rows.items()},
            "best_heuristic": best_heuristic, "best_heuristic_ms": heuristics[best_heuristic] * 1e3,
            "best_baseline": best_baseline, "best_baseline_ms": baselines[best_baseline] * 1e3,
            "learned_ms": learned * 1e3, "bound_ms": comparison.lower_bound.value * 1e3, "exact_gap": gap,
            "learned_vs_best_heuristic": heuristics[best_heuristic] / learned,
            "learned_vs_best_baseline": baselines[best_baseline] / learned,
            "learned_vs_local_search": rows["local_search"].step_time / learned if "local_search" in rows else None,
            **_phases(summary), "paper": PAPER.get(model, "")}


def _phases(summary: dict) -> dict:
    """Where the learner's samples went (local search warm start, REINFORCE, polish), whether local
    search reached its local optimum and at how many samples, and whether REINFORCE improved on it."""
    searched = summary.get("local_search_warm_start") or {}
    return {"samples_by_phase": summary.get("samples_by_phase"), "learned_samples": summary["samples"],
            "local_search_optimum": searched.get("local_optimum"), "local_search_samples": searched.get("samples"),
            "reinforce_improved_on_local_search": summary.get("reinforce_improved_on_local_search"),
            "learned_source": summary.get("best_source")}


def _ratio(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "-"


def _split(r: dict) -> str:
    phases = r["samples_by_phase"]
    if not phases:
        return "-"
    return (f"{phases['local_search']}{'*' if r['local_search_optimum'] else ''}/{phases['reinforce']}/"
            f"{phases['polish']}" + (" (REINFORCE improved on local search)" if r["reinforce_improved_on_local_search"]
                                     else ""))


def _counts(results: list[dict]) -> None:
    """The pairs where local search reached its local optimum, and the learned placement against
    local search at the same samples and against the best list heuristic."""
    vs_local = [r["learned_vs_local_search"] for r in results if r["learned_vs_local_search"] is not None]
    print(f"local search reached its local optimum within the budget on "
          f"{sum(bool(r['local_search_optimum']) for r in results)} of {len(results)} pairs; REINFORCE improved on "
          f"it on {sum(bool(r['reinforce_improved_on_local_search']) for r in results)}")
    print(f"learned against local search at the same samples: faster on {sum(v > 1 for v in vs_local)}, equal on "
          f"{sum(v == 1 for v in vs_local)}, slower on {sum(v < 1 for v in vs_local)}; at least 10% faster than the "
          f"best list heuristic on {sum(r['learned_vs_best_heuristic'] >= 1.1 for r in results)} of {len(results)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(BATCH), choices=list(BATCH))
    parser.add_argument("--clusters", nargs="+", default=CLUSTERS, help="catalogue names or TOML files")
    parser.add_argument("--samples", type=int, default=2000, help="the learner's simulated samples; local search "
                        "and random search get as many")
    parser.add_argument("--objective", choices=("training", "inference"), default="training")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="rnnlm on paper-2xk40 with 300 samples")
    parser.add_argument("--json", default=None, help="write every row here")
    args = parser.parse_args()
    if args.quick:
        args.models, args.clusters, args.samples = ["rnnlm"], ["paper-2xk40"], 300
    print(f"the paper's setting, simulated (roofline costs from datasheets), {args.objective} step, "
          f"{args.samples} samples for the learner, local search and random search")
    head = (f"{'model':<13}{'cluster':<19}{'best heuristic':>22}{'local search':>14}{'exact (gap)':>18}"
            f"{'learned':>10}{'bound':>10}{'vs heuristic':>14}{'vs best':>9}{'vs local':>10}  samples ls/rl/polish")
    print(head)
    results = []
    for model in args.models:
        for cluster in args.clusters:
            r = one(model, cluster, args.samples, args.seed, args.objective)
            results.append(r)
            ms = r["rows_ms"]
            gap = f" ({r['exact_gap']:.0%})" if r["exact_gap"] is not None else ""
            exact = f"{ms['exact']:.2f}{gap}" if "exact" in ms else "-"
            local = f"{ms['local_search']:.2f}" if "local_search" in ms else "-"
            print(f"{model:<13}{cluster:<19}{r['best_heuristic'] + ' ' + format(r['best_heuristic_ms'], '.2f'):>22}"
                  f"{local:>14}{exact:>18}{r['learned_ms']:>10.2f}{r['bound_ms']:>10.2f}"
                  f"{r['learned_vs_best_heuristic']:>13.3f}x{r['learned_vs_best_baseline']:>8.3f}x"
                  f"{_ratio(r['learned_vs_local_search']):>10}  {_split(r)}", flush=True)
    print("ms per simulated step; 'vs' = the other's step / the learned one (above 1: learned faster); "
          "the best baseline includes local search, the exact solver and random search; samples: local search "
          "warm start (* at its local optimum) / REINFORCE / polish")
    _counts(results)
    for model in args.models:
        if model in PAPER:
            print(f"paper, {model}: {PAPER[model]} (real TensorFlow steps on its machine)")
    if args.json:
        save_json(args.json, {"objective": args.objective, "samples": args.samples, "rows": results})


if __name__ == "__main__":
    main()
