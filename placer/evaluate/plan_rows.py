"""Plans beside the placements in a simulated comparison: what users run instead of placing ops whole,
simulated on the same cluster with the same costs (`placer.plans.pricing`).

`data_parallel` is PyTorch DDP: every op split on its batch over the cluster's GPUs (every device
where it has fewer than two), weights replicated, in a training step their gradients all-reduced
(`placer.plans.training`); `fsdp` (ZeRO-3, training only) stores each weight sharded;
`tensor_parallel` (Megatron's split of each MLP and attention block), `pipeline_data` (pipeline
stages, each data parallel, one batch through them, no micro-batches; more stages of fewer
replicas where two do not fit the devices' memory) and `data_parallel_by_speed` (the batch cut
in proportion to each device's speed on its own slice: balanced on the devices' busy seconds in the
step priced, `placer.plans.busy`), on either step. Then placer's search over plans, `plan_search`, FlexFlow's
`mcmc`, the exact solver's `plan_exact` and REINFORCE's `plan_reinforce` (`plan_search_rows`), from the fastest placement or plan
above. A plan is no placement: its row has no placement file, and the placements' lower bound does not bound it (it splits ops). A plan that
does not apply (no batch to split; a pipelined step, which plans do not price yet) is a
note, not a row; one that does not fit a device's memory is a row that fails saying which device.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from functools import partial

from placer.devices import device_kind
from placer.errors import PlacerError
from placer.evaluate import plan_finalists
from placer.evaluate.compare import CompareRow
from placer.evaluate.plan_search_rows import SEARCHES, searched_rows
from placer.plans import search
from placer.costmodel.roofline import RooflineCostModel
from placer.graph.opgraph import OpGraph
from placer.hardware import Cluster
from placer.placers.partitioners import pipeline_dp
from placer.plans.busy import device_busy
from placer.plans.data_parallel import NAME as DATA_PARALLEL, data_parallel
from placer.plans.data_parallel_by_speed import NAME as BY_SPEED, data_parallel_by_speed, describe as describe_by_speed
from placer.plans.fsdp import NAME as FSDP, fsdp
from placer.plans.pipeline_data import NAME as PIPELINE_DATA, describe as describe_pipeline_data, pipeline_data_within
from placer.plans.plan import Plan
from placer.plans.pricing import predict_plan, simulate_plan
from placer.plans.tensor_parallel import NAME as TENSOR_PARALLEL, describe as describe_tensor_parallel, tensor_parallel
from placer.plans.training import simulate_training

PLANS = (DATA_PARALLEL, FSDP, TENSOR_PARALLEL, PIPELINE_DATA, BY_SPEED, *SEARCHES)   # the searches start from the rows before them
_BUILDERS = {DATA_PARALLEL: data_parallel, FSDP: fsdp, TENSOR_PARALLEL: tensor_parallel}
# read the costs; the batch cut by speed balanced on each device's busy seconds in the step priced
_COSTED = {PIPELINE_DATA: lambda graph, devices, cost, caps, busy: pipeline_data_within(graph, devices,
                                                                                   partial(pipeline_dp, cost=cost), caps),
           BY_SPEED: lambda graph, devices, cost, caps, busy: data_parallel_by_speed(graph, devices, cost, busy)}
_TRAINING_ONLY = {FSDP}   # sharding weights saves only a training step's gradients and state


def plan_rows(graph: OpGraph, cluster: Cluster, devices: list[str], names=PLANS, *, training=None,
              pipeline=None, placements=None, samples=None, seed=0,
              searches: Mapping[str, Callable] = SEARCHES) -> tuple[list[CompareRow], list[str]]:
    """The rows of the plans `names` on `cluster`'s `devices` (those compared), and a note for each
    that does not apply; the searches (`plan_search_rows`; `searches` maps their names to their
    functions, a learner's handed down from above) start from the best of `placements` (row name ->
    placement) and the other plans' rows, with `samples` simulated plans each."""
    known = [n for n in PLANS if n not in SEARCHES] + list(searches)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PlacerError(f"unknown plan(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    rows, notes, built = _fixed_rows(graph, cluster, devices, [n for n in names if n not in searches], training,
                                     pipeline)
    searched = [n for n in names if n in searches]
    if searched:   # from the plans just priced (each built once), and the placements
        found, more = searched_rows(graph, cluster, devices, searched, placements or {}, built, samples, seed, training,
                                    pipeline is not None and pipeline.pipelined, searches,
                                    measured={r.name: r.measurement for r in rows})
        rows, notes = rows + found, notes + more
    return rows, notes


def _fixed_rows(graph: OpGraph, cluster: Cluster, devices: list[str], names, training, pipeline
                ) -> tuple[list[CompareRow], list[str], dict[str, Plan]]:
    """The rows of the plans users run (`names`, no search), the notes of those that do not apply,
    and each row's plan by name."""
    if not names:
        return [], [], {}
    if pipeline is not None and pipeline.pipelined:
        return [], [f"{', '.join(names)}: not simulated; plans are priced on one step, not a pipelined one, so far"], {}
    gpus = [d for d in devices if device_kind(d) == "cuda"]
    devices = gpus if len(gpus) >= 2 else devices
    rows, notes, built = [], [], {}
    for name in names:
        if name in _TRAINING_ONLY and training is None:
            notes.append(f"{name}: not simulated; it shards a training step's weights (--objective training)")
            continue
        start = time.perf_counter()
        try:
            plan = _build(name, graph, devices, cluster, training)
        except PlacerError as exc:
            notes.append(f"{name}: not simulated; {exc}")
            continue
        found = time.perf_counter() - start
        try:
            measurement = (simulate_plan(graph, plan, cluster) if training is None
                           else simulate_training(graph, plan, cluster, training))
        except PlacerError as exc:   # a layout the lowering cannot make: a note, not the end of the comparison
            notes.append(f"{name}: not simulated; {exc}")
            continue
        rows.append(CompareRow(name, name, False, found, measurement=measurement, note=_note(plan, devices),
                               predicted_step_time=measurement.step_time if measurement.ok else None, plan=True,
                               split_plan=plan))
        built[name] = plan
    return rows, notes, built


def _build(name: str, graph: OpGraph, devices: list[str], cluster: Cluster, training=None):
    """Plan `name` of `graph` over `devices`, the costed ones with the cluster's roofline costs (and
    the devices' busy seconds in the step, training or forward, to balance a cut by)."""
    if name in _COSTED:
        caps = {d.name: d.model.memory_bytes for d in cluster.devices}   # pipeline stages cut to fit them
        busy = partial(device_busy, graph, cluster=cluster, training=training)
        return _COSTED[name](graph, devices, RooflineCostModel(cluster, graph), caps, busy)
    return _BUILDERS[name](graph, devices)


def _note(plan, devices: list[str]) -> str:
    """What the row's plan does, in a line."""
    if plan.extra["placer"]["name"] in _DESCRIBE:
        return _DESCRIBE[plan.extra["placer"]["name"]](plan)
    replicated, stored = plan.extra["placer"]["replicated"], plan.extra["placer"].get("stored", {})
    weights = (f"{len(stored)} weight(s) sharded Shard(0), all-gathered before use" if stored
               else "weights replicated")
    return (f"a plan, not a placement: every op split on its batch over {', '.join(devices)}, {weights}"
            + (f"; {len(replicated)} op(s) with no batch split computed whole on each ({', '.join(replicated[:3])})"
               if replicated else ""))


_DESCRIBE = {TENSOR_PARALLEL: describe_tensor_parallel, PIPELINE_DATA: describe_pipeline_data,
             BY_SPEED: describe_by_speed}


# What runs for real on this machine's devices so far (forward and training steps; ONNX Runtime
# runs those whose devices never talk): the plans built without a search (`data_parallel_by_speed`
# reads the profiled costs), and placer's local search over plans, on the profile's predictions of
# forward steps (on a training step they rank the finalists, whose training steps are measured),
# from the best of those and the placements
MEASURED = (DATA_PARALLEL, TENSOR_PARALLEL, BY_SPEED, search.NAME)


def measured_plan_rows(graph: OpGraph, devices: list[str], names, measurer, cost, placements=None,
                       samples: int | None = None, seed: int = 0) -> tuple[list[CompareRow], list[str]]:
    """The rows of the plans `names` over this machine's `devices`, each run for real by `measurer`
    (`placer.plans.engine`: its own lowered graph, in the same rounds as the placements), and a note
    for each that does not run. `plan_search` starts from the other plans and `placements` (row
    name -> placement) and predicts `samples` plans from `cost` (the profile) before its plan is
    measured beside them."""
    from placer.plans.engine import check_runs, measures_plans

    if not names:
        return [], []
    try:
        check_runs(measurer.engine.name, measurer.pipeline)
    except PlacerError as exc:
        return [], [f"{', '.join(names)}: not measured; {exc}"]
    measures_plans(measurer)
    cost = costs_here(graph, measurer, cost)
    rows, notes, built = [], [], {}
    for name in names:
        if name == search.NAME:
            continue   # last: from the others
        if name not in MEASURED:
            notes.append(f"{name}: not measured; on this machine's devices plans run so far: {', '.join(MEASURED)} "
                         "(price the others on a described --cluster)")
            continue
        start = time.perf_counter()
        try:
            plan = data_parallel_by_speed(graph, devices, cost) if name == BY_SPEED else _BUILDERS[name](graph, devices)
            check_runs(measurer.engine.name, graph=graph, plan=plan)
        except PlacerError as exc:
            notes.append(f"{name}: not measured; {exc}")
            continue
        # predicted from the profile's op times (forward steps so far): each shard its op's share
        predicted = predict_plan(graph, plan, cost) if measurer.training is None else None
        rows.append(CompareRow(name, name, False, time.perf_counter() - start, note=_note(plan, devices), plan=True,
                               split_plan=plan, opener=partial(measurer.open, plan), run_record=measurer.run_record(),
                               predicted_step_time=predicted.step_time if predicted and predicted.ok else None))
        built[name] = plan
    if search.NAME in names:
        row, note = _searched_here(graph, devices, measurer, cost, {**{n: Plan.from_placement(p) for n, p in
                                                                      (placements or {}).items()}, **built},
                                   samples or search.SAMPLES, seed)
        rows, notes = rows + ([row] if row else []), notes + ([note] if note else [])
    return rows, notes


def costs_here(graph: OpGraph, measurer, cost):
    """What predicts plans on this machine's devices: `cost` (the profile), with the graph's batch
    shards and collectives profiled at their own shapes in the measurer's engine
    (`placer.plans.shard_profile`, cached) where it is a profile of forward steps."""
    from placer.plans.shard_profile import ShardProfiled, profile_shards

    if measurer.training is not None or not hasattr(cost, "profile") or isinstance(cost, ShardProfiled):
        return cost
    return profile_shards(graph, measurer.device_objs, cost, measurer.inputs, engine=measurer.engine.name)


def _searched_here(graph: OpGraph, devices: list[str], measurer, cost, starts: dict[str, Plan], samples: int,
                   seed: int) -> tuple[CompareRow | None, str | None]:
    """placer's plan search on this machine: plans predicted from the profile, the best measured."""
    from placer.plans.scoring import ProfiledPlanScorer

    if not starts:
        return None, f"{search.NAME}: not measured; no placement or plan to start from"
    begun = time.perf_counter()
    scorer = ProfiledPlanScorer(graph, cost, samples)
    found = search.plan_search(graph, None, starts, devices, samples=samples, seed=seed, scorer=scorer)
    finalists = plan_finalists.runnable_finalists(graph, [(plan_finalists.found_name(found), found.plan),
                                                          *plan_finalists.by_prediction(starts, scorer.time)],
                                                  measurer)
    if not finalists:
        return None, f"{search.NAME}: not measured; the engine runs none of its plans"
    measured = plan_finalists.measure_finalists(finalists, measurer) if len(finalists) > 1 else {}
    kept = plan_finalists.fastest_measured(finalists, measured)
    plan = finalists[kept]
    split = sum(1 for op in plan.ops.values() if not op.whole)
    note = (f"a plan found by local search over plans from {found.start} ({found.start_time * 1e3:.3f} ms predicted): "
            f"{found.samples} plans predicted from the profile; of its {len(finalists)} fastest predicted, "
            + (f"{len(measured)} measured in {plan_finalists.ROUNDS.min_rounds} rounds and {kept} kept "
               f"({measured[kept] * 1e3:.1f} ms)" if kept in measured else f"{kept} kept")
            + f": {split} of {len(plan.ops)} ops split"
            + ("; ranked by predicted forward steps, their training steps measured" if measurer.training else ""))
    # a forward step's prediction is no training step's: none shown on the training objective
    predicted = scorer.time(plan) if measurer.training is None else math.inf
    return CompareRow(search.NAME, search.NAME, False, time.perf_counter() - begun, note=note, plan=True,
                      split_plan=plan, opener=partial(measurer.open, plan),
                      run_record=measurer.run_record(), predicted_step_time=predicted
                      if math.isfinite(predicted) else None), None
