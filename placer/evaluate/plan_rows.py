"""Plans beside the placements in a simulated comparison: what users run instead of placing ops whole,
simulated on the same cluster with the same costs (`placer.plans.pricing`).

`data_parallel` is PyTorch DDP's forward step: every op split on its batch over the cluster's GPUs
(every device where it has fewer than two), weights replicated. A plan is no placement: its row has
no placement file, and the placements' lower bound does not bound it (it splits ops). A plan that
does not apply (no batch to split; a training or pipelined step, which plans do not price yet) is a
note, not a row; one that does not fit a device's memory is a row that fails saying which device.
"""

from __future__ import annotations

import time

from placer.devices import device_kind
from placer.errors import PlacerError
from placer.evaluate.compare import CompareRow
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.plans.data_parallel import NAME as DATA_PARALLEL, data_parallel
from placer.plans.pricing import simulate_plan

PLANS = (DATA_PARALLEL,)


def plan_rows(graph: OpGraph, cluster: Cluster, devices: list[str], names=PLANS, *, training=None,
              pipeline=None) -> tuple[list[CompareRow], list[str]]:
    """The rows of the plans `names` on `cluster`'s `devices` (those compared), and a note for each
    that does not apply."""
    unknown = [n for n in names if n not in PLANS]
    if unknown:
        raise PlacerError(f"unknown plan(s) {', '.join(unknown)}; choose from {', '.join(PLANS)}")
    if not names:
        return [], []
    if training is not None or (pipeline is not None and pipeline.pipelined):
        return [], [f"{', '.join(names)}: not simulated; plans are priced on one inference step so far"]
    gpus = [d for d in devices if device_kind(d) == "cuda"]
    devices = gpus if len(gpus) >= 2 else devices
    start = time.perf_counter()
    try:
        plan = data_parallel(graph, devices)
    except PlacerError as exc:
        return [], [f"{DATA_PARALLEL}: not simulated; {exc}"]
    found = time.perf_counter() - start
    measurement = simulate_plan(graph, plan, cluster)
    replicated = plan.extra["placer"]["replicated"]
    note = (f"a plan, not a placement: every op split on its batch over {', '.join(devices)}, weights replicated"
            + (f"; {len(replicated)} op(s) with no batch split computed whole on each ({', '.join(replicated[:3])})"
               if replicated else ""))
    row = CompareRow(DATA_PARALLEL, DATA_PARALLEL, False, found, measurement=measurement, note=note,
                     predicted_step_time=measurement.step_time if measurement.ok else None)
    return [row], []
