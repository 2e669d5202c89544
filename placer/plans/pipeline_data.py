"""Pipeline stages, each replicated for data parallelism (PipeDream's "straight" plan, GPipe with
DDP): the devices fall into `stages` groups of as many replicas, in order (neighbours share the
fastest links); a partition of the graph over one device of each group (the caller's: PipeDream's
`pipeline_dp` in a comparison) makes the stages, and each stage's ops are split on the batch over its
group as DDP splits them (`data_parallel.batch_split`). A batch-sharded tensor crossing to the
next stage goes piece by piece, replica k to replica k; an op with no batch split is computed
whole on each replica of its stage.

Priced as one step (no micro-batches yet), a stage waits for the one before it.

Where two stages' weights do not fit the devices' memory (a model larger than two devices),
`pipeline_data_within` cuts more stages of fewer replicas, down to one device a stage (a pure
pipeline, GPipe's), the first whose partition fits the caps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement
from placer.plans.data_parallel import batch_lengths, batch_split
from placer.plans.layout import Layout
from placer.plans.plan import OpPlan, Plan

NAME = "pipeline_data"


def stage_groups(devices: Sequence[str], stages: int, replicas_at_least: int = 2) -> list[tuple[str, ...]]:
    """`devices` in `stages` consecutive groups of equal size (the remainder left out)."""
    replicas = len(devices) // stages
    if stages < 2 or replicas < replicas_at_least:
        raise PlacerError(f"pipeline_data needs {stages} stages of two replicas or more, so {2 * max(stages, 2)} "
                          f"devices or more, and there are {len(devices)}: {', '.join(devices) or 'none'}")
    return [tuple(devices[s * replicas:(s + 1) * replicas]) for s in range(stages)]


def pipeline_data(graph: OpGraph, devices: Sequence[str], partition: Callable[[OpGraph, list[str]], Placement],
                  stages: int = 2) -> Plan:
    """`stages` pipeline stages over `devices`, each split on the batch over its replicas; the
    stages are `partition`'s placement of the graph on the groups' first devices."""
    groups = stage_groups(devices, stages)
    return _staged(graph, groups, partition(graph, [group[0] for group in groups]))


def pipeline_data_within(graph: OpGraph, devices: Sequence[str], partition: Callable[..., Placement],
                         caps: Mapping[str, int]) -> Plan:
    """`pipeline_data` with the fewest stages (so the most replicas) whose partition fits `caps`:
    `partition(graph, heads, caps=caps)` raises a PlacerError where no cut fits. Where none does,
    two stages cut without the caps, so that the plan's row fails for memory naming the device."""
    n = len(devices)
    for stages in (s for s in range(2, n + 1) if n % s == 0):
        groups = stage_groups(devices, stages, replicas_at_least=1)
        try:
            staged = partition(graph, [group[0] for group in groups], caps=caps)
        except PlacerError:   # this many stages do not fit: cut more
            continue
        return _staged(graph, groups, staged)
    return pipeline_data(graph, devices, partition)


def _staged(graph: OpGraph, groups: list[tuple[str, ...]], staged: Placement) -> Plan:
    """The plan of `staged` (a placement on the groups' first devices): each op on its stage's
    group, split on the batch where the group has two replicas or more, else whole."""
    heads = {group[0]: group for group in groups}
    held: dict[str, Layout] = {}
    lengths = batch_lengths(graph)
    ops, split_any = {}, False
    for name, node in graph.nodes.items():
        group = heads[staged.nodes[name]]
        if len(group) == 1:
            ops[name] = OpPlan(group)
            continue
        chosen, _, batch = batch_split(graph, node, held, lengths, len(group))
        split_any = split_any or batch
        ops[name] = OpPlan(group, chosen.inputs, chosen.outputs)
    if not split_any and len(groups[0]) > 1:
        raise PlacerError(f"pipeline_data splits each stage's batch, and no op of {graph.source or 'the graph'} has "
                          f"a batch axis longer than 1; bind a larger batch (--input-shape NAME=BATCHx...)")
    used = [list(g) for g in groups if g[0] in set(staged.nodes.values())]
    return Plan([d for g in groups for d in g], ops, graph.sha256,
                extra={"placer": {"name": NAME, "stages": used}})


def describe(plan: Plan) -> str:
    """The plan in a line, for its row in a comparison."""
    stages = plan.extra["placer"]["stages"]
    each = ("each op whole on its stage's device" if all(len(g) == 1 for g in stages)
            else "each op split on its batch over its stage's replicas")
    return (f"a plan, not a placement: {len(stages)} pipeline stage(s) cut by pipeline_dp, {each}"
            f" ({' | '.join(', '.join(g) for g in stages)}); one step, no micro-batches")
