"""How `placer place` and `placer compare` on a described cluster grow with the model: Llama-2-7B
shapes (hidden 4096, 32 heads, MLP 11008, 4096 tokens, batch 1) at more and more layers, and
Llama-2-70B's own 80 layers, their weights never written (a sparse data file), so that only the
graph's size grows (the 7B's layers, 1 GB each, fit the 8 H100s at 192 layers; the 70B's, 3.4 GB,
do not).

Each command runs as the user types it, in its own process, once per size; its wall time and its
peak memory (the process's maximum resident set, from `wait4`) are printed beside the node count,
with the seconds per 1,000 nodes, so the growth reads down the column. The targets (issue 42): a
10,000-op graph placed in under 60 s, compared in under 5 min, in under 3 GiB. These are single
timings on whatever else the machine runs (say so when quoting them), and each command's own
figures are simulated.

    python benchmarks/large_graphs.py           # the 7B at 24, 48, 96 and 192 layers (10,000 nodes), the 70B
    python benchmarks/large_graphs.py --models llama2_70b:80 --commands place
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import machine_note, save_json  # noqa: E402
import graphs  # noqa: E402
from placer.graph.load import load_graph  # noqa: E402

CLUSTER = "8xh100-nvlink"
MODELS = "llama2_7b:24,llama2_7b:48,llama2_7b:96,llama2_7b:192,llama2_70b:80"   # 192 layers: 10,000 nodes
COMMANDS = {
    "place": lambda model, out: ["place", "--graph", str(model), "--cluster", CLUSTER, "-o", str(out / "p.json")],
    "compare": lambda model, out: ["compare", "--graph", str(model), "--cluster", CLUSTER, "--no-plot",
                                   "--out", str(out / "compare")],
}
TARGETS = {"place": 60.0, "compare": 300.0}   # seconds on a 10,000-op graph
PEAK_TARGET = 3 * 2**30


def run(args: list[str]) -> tuple[float, int, int]:
    """`placer args` in a fresh process: wall seconds, peak resident bytes, exit code."""
    begun = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "placer.cli", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - begun, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=MODELS, help="zoo model:layers, comma-separated")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="of: " + ", ".join(COMMANDS))
    parser.add_argument("--out", default="benchmarks/results/large_graphs.json")
    args = parser.parse_args()
    commands = args.commands.split(",")
    print(machine_note())
    print(f"{'model':>10} {'layers':>6} {'nodes':>6} {'command':>8} {'wall s':>8} {'s/1k nodes':>10} {'peak MiB':>9} "
          f"{'rc':>3}")
    rows = []
    with tempfile.TemporaryDirectory() as where:
        for entry in args.models.split(","):
            zoo, layers = entry.split(":")[0], int(entry.split(":")[1])
            model = graphs.export(zoo, Path(where) / f"{zoo}-{layers}.onnx", layers=layers)
            nodes = len(load_graph(model, weights="shapes").nodes)
            for command in commands:
                out = Path(where) / f"{command}-{zoo}-{layers}"
                out.mkdir()
                seconds, peak, code = run(COMMANDS[command](model, out))
                rows.append({"model": zoo, "layers": layers, "nodes": nodes, "command": command, "wall_s": seconds,
                             "peak_bytes": peak, "exit_code": code})
                print(f"{zoo:>10} {layers:>6} {nodes:>6} {command:>8} {seconds:>8.1f} {1000 * seconds / nodes:>10.2f} "
                      f"{peak / 2**20:>9.0f} {code:>3}", flush=True)
            os.remove(model.with_name(model.name + ".data"))
    largest = max(r["nodes"] for r in rows)
    for r in rows:
        if r["nodes"] == largest and r["command"] in TARGETS:
            met = r["wall_s"] < TARGETS[r["command"]] and r["peak_bytes"] < PEAK_TARGET and r["exit_code"] == 0
            print(f"{r['command']} on {largest} nodes: {r['wall_s']:.1f} s (target {TARGETS[r['command']]:.0f} s), "
                  f"{r['peak_bytes'] / 2**30:.2f} GiB (target 3): {'met' if met else 'NOT met'}")
    save_json(args.out, {"cluster": CLUSTER, "machine": machine_note(), "rows": rows})


if __name__ == "__main__":
    main()
