"""`placer cluster list|show|describe-local`: the hardware a placement is made for (placer.hardware)."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from placer.commands.common import check_writable, print_table

HELP = "list, show or describe the hardware clusters placements are made for"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `placer cluster` with its `list`, `show` and `describe-local` actions."""
    parser = subparsers.add_parser(
        "cluster", help=HELP,
        description="Clusters: devices with their datasheet figures and the links between them, from the "
                    "catalogue or a TOML file (format: placer/hardware/catalogue/README.md).")
    actions = parser.add_subparsers(dest="cluster_action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the catalogue's clusters: devices, models, description")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show = actions.add_parser("show", help="one cluster: devices and figures, links, routes")
    show.add_argument("cluster", metavar="NAME|FILE",
                      help="a catalogue name (see `placer cluster list`) or a .toml file")
    show.add_argument("--json", action="store_true", help="print the cluster as JSON (every figure and its source)")
    local = actions.add_parser("describe-local", help="write this machine as a cluster file, from measurements",
                               description="Measure this machine's devices (GEMM peak, memory bandwidth, launch "
                                           "overhead, copies between devices) and write them as a cluster file.")
    local.add_argument("-o", "--output", required=True, metavar="FILE.toml", help="the cluster file to write")
    local.add_argument("--devices", default=None, metavar="D1,D2",
                       help="the devices to measure, e.g. cpu:0,cpu:1 or cuda:0,cpu (default: what placer uses: "
                            "every GPU plus the CPU; without a GPU, two virtual CPU devices)")
    local.add_argument("--name", default=None, help="the cluster's name (default: local-<hostname>)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch to list, show or describe-local."""
    if args.cluster_action == "list":
        return _list(args)
    if args.cluster_action == "show":
        return _show(args)
    return _describe_local(args)


# --- list / show -----------------------------------------------------------------------------------

def _model_counts(cluster) -> str:
    counts = Counter(d.model.key for d in cluster.devices)
    return ", ".join(f"{n}x {key}" for key, n in counts.items())


def _list(args: argparse.Namespace) -> int:
    from placer.jobs.cluster import list_clusters

    clusters = list_clusters()
    if args.json:
        print(json.dumps([{"name": c.name, "devices": len(c.devices),
                           "models": dict(Counter(d.model.key for d in c.devices)),
                           "description": c.description} for c in clusters], indent=2))
        return 0
    print_table([(c.name, str(len(c.devices)), _model_counts(c), c.description) for c in clusters],
                ("NAME", "DEVICES", "MODELS", "DESCRIPTION"))
    return 0


def _tflops(rates: dict[str, float]) -> str:
    return " ".join(f"{dtype}={rate / 1e12:g}" for dtype, rate in rates.items()) or "-"


def _show(args: argparse.Namespace) -> int:
    from placer.jobs.cluster import cluster_routes

    shown = cluster_routes(args.cluster)
    cluster = shown.cluster
    if args.json:
        print(json.dumps(cluster.to_dict(), indent=2))
        return 0
    print(f"{cluster.name}: {cluster.description}")
    if cluster.source:
        print(f"source: {cluster.source}")
    print(f"\ndevices ({len(cluster.devices)}):")
    print_table([(d.name, d.machine, d.model.key, _tflops(d.model.peak_flops), _tflops(d.model.tensor_flops),
                  f"{d.model.memory_bandwidth_Bps / 1e9:g}", f"{d.model.memory_bytes / 2**30:g}",
                  f"{d.model.launch_overhead_s * 1e6:g}") for d in cluster.devices],
                ("DEVICE", "MACHINE", "MODEL", "TFLOPS", "TENSOR TFLOPS", "GB/s", "GiB", "LAUNCH us"))
    print("\nmodels:")
    for key, model in {d.model.key: d.model for d in cluster.devices}.items():
        print(f"  {key}: {model.name} ({model.kind}). source: {model.source}")
    if cluster.hosts:
        print(f"\nhosts (no ops run there): {', '.join(cluster.hosts)}")
    print(f"\nlinks ({len(cluster.links)}):")
    print_table([(link.name, ", ".join(link.members) + (" (shared bus)" if len(link.members) > 2 else ""),
                  f"{link.bandwidth_Bps / 1e9:g}", f"{link.latency_s * 1e6:g}", link.source) for link in cluster.links],
                ("LINK", "MEMBERS", "GB/s", "us", "SOURCE"))
    print(f"\nroutes ({len(shown.routes)} pairs; a copy passes through hosts and CPU devices, never through a GPU):")
    print_table([(f"{r.source} <-> {r.target}", r.how, " > ".join(link.name for link in r.links),
                  f"{r.bandwidth_Bps / 1e9:g} GB/s, {r.latency_s * 1e6:g} us") for r in shown.routes],
                ("PAIR", "HOW", "LINKS", "SLOWEST LINK, LATENCY"))
    if shown.shared_links:
        print("links on several pairs' routes (copies at once share them): "
              + ", ".join(f"{name} ({n} pairs)" for name, n in shown.shared_links))
    return 0


# --- describe-local --------------------------------------------------------------------------------

def _describe_local(args: argparse.Namespace) -> int:
    """Measure this machine into the -o file (`placer.jobs.describe_local`); print its figures."""
    from placer.jobs.describe_local import DescribeLocalSettings, describe_local

    result = describe_local(DescribeLocalSettings(check_writable(args.output, "-o"), args.devices, args.name))
    cluster = result.cluster
    print(f"wrote {result.path} ({len(cluster.devices)} devices, {len(cluster.links)} links) "
          f"in {result.seconds:.1f} s")
    for d in cluster.devices:
        m = d.model
        print(f"  {d.name}: {m.peak_flops['float32'] / 1e9:.1f} GFLOPS float32, "
              f"{m.memory_bandwidth_Bps / 1e9:.1f} GB/s, launch {m.launch_overhead_s * 1e6:.2f} us, "
              f"{d.contention:.2f}x slower while another device is busy")
    for link in cluster.links:
        print(f"  {link.name}: {', '.join(link.members)}, latency {link.latency_s * 1e6:.1f} us")
    return 0
