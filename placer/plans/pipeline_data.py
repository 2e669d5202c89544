"""Pipeline stages, each replicated for data parallelism (PipeDream's "straight" plan, GPipe with
DDP): the devices fall into `stages` groups of as many replicas, in order (neighbours share the
fastest links); a partition of the graph over one device of each group (the caller's: PipeDream's
`pipeline_dp` in a comparison) makes the stages, and each stage's ops are split on the batch over its
group as DDP splits them (`data_parallel.batch_split`). A batch-sharded tensor crossing to the
next stage goes piece by piece, replica k to replica k; an op with no batch split is computed
whole on each replica of its stage.

Priced as one step (no micro-batches yet), a stage waits for the one before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement
from placer.plans.data_parallel import batch_lengths, batch_split
from placer.plans.layout import Layout
from placer.plans.plan import OpPlan, Plan

NAME = "pipeline_data"


def stage_groups(devices: Sequence[str], stages: int) -> list[tuple[str, ...]]:
    """`devices` in `stages` consecutive groups of equal size (the remainder left out)."""
    replicas = len(devices) // stages
    if stages < 2 or replicas < 2:
        raise PlacerError(f"pipeline_data needs {stages} stages of two replicas or more, so {2 * max(stages, 2)} "
                          f"devices or more, and there are {len(devices)}: {', '.join(devices) or 'none'}")
    return [tuple(devices[s * replicas:(s + 1) * replicas]) for s in range(stages)]


def pipeline_data(graph: OpGraph, devices: Sequence[str], partition: Callable[[OpGraph, list[str]], Placement],
                  stages: int = 2) -> Plan:
    """`stages` pipeline stages over `devices`, each split on the batch over its replicas; the
    stages are `partition`'s placement of the graph on the groups' first devices."""
    groups = stage_groups(devices, stages)
    heads = {group[0]: group for group in groups}
    staged = partition(graph, list(heads)).nodes
    held: dict[str, Layout] = {}
    lengths = batch_lengths(graph)
    ops, split_any = {}, False
    for name, node in graph.nodes.items():
        chosen, _, batch = batch_split(graph, node, held, lengths)
        split_any = split_any or batch
        ops[name] = OpPlan(heads[staged[name]], chosen.inputs, chosen.outputs)
    if not split_any:
        raise PlacerError(f"pipeline_data splits each stage's batch, and no op of {graph.source or 'the graph'} has "
                          f"a batch axis longer than 1; bind a larger batch (--input-shape NAME=BATCHx...)")
    used = [list(g) for g in groups if g[0] in set(staged.values())]
    return Plan([d for g in groups for d in g], ops, graph.sha256,
                extra={"placer": {"name": NAME, "stages": used}})


def describe(plan: Plan) -> str:
    """The plan in a line, for its row in a comparison."""
    stages = plan.extra["placer"]["stages"]
    return (f"a plan, not a placement: {len(stages)} pipeline stage(s) cut by pipeline_dp, each op split on its "
            f"batch over its stage's replicas ({' | '.join(', '.join(g) for g in stages)}); one step, no micro-batches")
