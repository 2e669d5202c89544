"""Starting the workers `placer train --workers N [--ray-address HOST:PORT|auto]` asks for, and
saying how they went."""

from __future__ import annotations

from placer.errors import PlacerError

def start_pool(workers: int | None, ray_address: str | None, graph, devices, protocol, seed: int, training=None,
               engine: str = "torch", report=print):
    """The `RayMeasurer` of `workers` workers (None: none asked for), started on `ray_address` (or a
    local Ray runtime) and calibrated; `training`: the `TrainingSpec` each worker times training
    steps with; `engine`: what each worker measures in."""
    if ray_address and not workers:
        raise PlacerError("--ray-address needs --workers N")
    if workers is None:
        return None
    from placer.placement import Placement
    from placer.workers.ownership import check_gpu_names
    from placer.workers.pool import RayMeasurer
    from placer.workers.spec import RealSpec

    check_gpu_names(devices)
    spec = RealSpec([str(d) for d in devices], graph=graph, protocol=protocol, seed=seed,
                    training=training, engine=engine)
    report(f"starting {workers} worker{'s' if workers != 1 else ''} on {ray_address or 'a local Ray runtime'}, "
           f"each with {', '.join(str(d) for d in devices)} ...")
    pool = RayMeasurer(spec, workers, ray_address)
    for r in pool.refused:
        report(f"  {r['worker']} ({r['host']}) refused: {r['reason']}")
    names = [d.name for d in devices]
    singles = {d: Placement.single_device(list(graph.nodes), d, graph.sha256, names) for d in names}
    pool.calibrate(singles)
    report(calibration_text(pool.report()))
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


def finish_pool(pool, report=print) -> None:
    """Say what went wrong on the workers, if anything, and stop them."""
    if pool is None:
        return
    figures = pool.report()
    if figures["retried"] or figures["lost"]:
        report(f"workers: {figures['retried']} measurements retried; lost: " +
               "; ".join(f"{r['worker']} ({r['host']}): {r['reason']}" for r in figures["lost"]))
    pool.close()
