"""`placer train --workers N [--ray-address HOST:PORT|auto]`: the options and the pool they start."""

from __future__ import annotations

import argparse

from placer.errors import PlacerError


def add_worker_args(parser: argparse.ArgumentParser) -> None:
    """--workers and --ray-address."""
    group = parser.add_argument_group("workers (measure many placements at once on Ray: pip install -e '.[ray]')")
    group.add_argument("--workers", type=int, default=None, metavar="N",
                       help="measure the real samples on N workers at once, each owning its own copy of "
                            "--devices: its own GPUs (name them cuda:0..D-1) or its own cores (one per thread "
                            "of each cpu:K device). Default: measure in this process, one placement at a time")
    group.add_argument("--ray-address", default=None, metavar="HOST:PORT|auto",
                       help="join the running Ray cluster at HOST:PORT (or auto: the one this machine runs) "
                            "instead of starting a local Ray runtime; each node runs workers on its own devices")


def pool_from_args(args: argparse.Namespace, graph, devices, protocol, training=None, engine: str = "torch"):
    """The `RayMeasurer` that --workers asks for, started and calibrated (None without --workers);
    `training`: the `TrainingSpec` each worker times training steps with (--objective training);
    `engine`: what each worker measures in (--engine)."""
    if args.ray_address and not args.workers:
        raise PlacerError("--ray-address needs --workers N")
    if args.workers is None:
        return None
    if args.reward == "simulated":
        raise PlacerError("--workers measures the real samples, and --reward simulated has none; "
                          "use --reward hybrid or real")
    from placer.placement import Placement
    from placer.workers.ownership import check_gpu_names
    from placer.workers.pool import RayMeasurer
    from placer.workers.spec import RealSpec

    check_gpu_names(devices)
    spec = RealSpec([str(d) for d in devices], graph=graph, protocol=protocol, seed=args.seed,
                    training=training, engine=engine)
    print(f"starting {args.workers} worker{'s' if args.workers != 1 else ''} on {args.ray_address or 'a local Ray runtime'}, "
          f"each with {', '.join(str(d) for d in devices)} ...")
    pool = RayMeasurer(spec, args.workers, args.ray_address)
    for r in pool.refused:
        print(f"  {r['worker']} ({r['host']}) refused: {r['reason']}")
    names = [d.name for d in devices]
    singles = {d: Placement.single_device(list(graph.nodes), d, graph.sha256, names) for d in names}
    pool.calibrate(singles)
    print(calibration_text(pool.report()))
    return pool


def calibration_text(report: dict) -> str:
    """The workers' single-device step times, one line each, those off the median named."""
    n = report['workers_alive']
    lines = [f"{n} worker{'s' if n != 1 else ''} measured the single devices:"]
    for worker, times in report["single_device_step_times"].items():
        figures = ", ".join(f"{d} " + (f"{t * 1e3:.2f} ms" if t is not None else "failed") for d, t in times.items())
        off = report["off_median"].get(worker)
        lines.append(f"  {worker}: {figures}" + (f"  <- off the median: {off}" if off else ""))
    return "\n".join(lines)


def finish_pool(pool) -> None:
    """Say what went wrong on the workers, if anything, and stop them."""
    if pool is None:
        return
    report = pool.report()
    if report["retried"] or report["lost"]:
        print(f"workers: {report['retried']} measurements retried; lost: " +
              "; ".join(f"{r['worker']} ({r['host']}): {r['reason']}" for r in report["lost"]))
    pool.close()
