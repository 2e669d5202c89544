"""The space the plan searches move in: a set of ops (a group, or one op) takes a `Config`, and
`replan` rewrites those ops of a plan to it, leaving every other op as it was (and a weight FSDP
stores sharded stored so while its readers read it as FSDP's do, `fsdp.still_stored`).

A config is either whole on one device, or split over a device set, with a preference among the
splits `rules.py` allows:

- `batch`: outputs `Shard(0)` with the weights whole, as data parallelism splits;
- `weights`: a split that shards a weight (a matmul's columns or reduced axis, a conv's channels),
  as Megatron's column-then-row split does;
- `by speed` (over devices of unequal speed): as `batch`, each slice in proportion to its device's
  speed (`Shard(d, parts=...)`, as `data_parallel_by_speed` cuts the batch).

Within a split set, each op (in graph order) first takes a split that reads its inputs as they are
held (no layout change), then the preferred kind, so a group's ops chain without collectives
where they can (a column-split matmul's ReLU follows it, and the next matmul takes the reduced
axis). An op with no split is replicated over the set. Device sets are the runs of neighbouring
accelerators (all devices where there are fewer than two): a ring over neighbours, and few enough
sets that the space stays small on 8 GPUs (28 sets).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from placer.costmodel.protocol import CostModel
from placer.devices import device_kind
from placer.graph.opgraph import OpGraph
from placer.plans.fsdp import still_stored
from placer.plans.layout import REPLICATE, Layout, Shard
from placer.plans.plan import OpPlan, Plan
from placer.plans.rules import Split, replicated, splits

WHOLE, BATCH, WEIGHTS, BY_SPEED = "whole", "batch", "weights", "by speed"
PARTS = 16   # the fastest device's part of a split by speed: a share resolved to 1/16 of it


@dataclass(frozen=True)
class Config:
    """Whole on `devices[0]`, or split over `devices` preferring `kind`'s splits (cut by `parts`)."""

    devices: tuple[str, ...]
    kind: str = WHOLE
    parts: tuple[int, ...] | None = None


def split_sets(devices: Sequence[str]) -> list[tuple[str, ...]]:
    """Every run of two or more neighbouring accelerators (of all devices, where fewer than two)."""
    gpus = [d for d in devices if device_kind(d) == "cuda"]
    pool = gpus if len(gpus) >= 2 else list(devices)
    return [tuple(pool[i:i + n]) for n in range(2, len(pool) + 1) for i in range(len(pool) - n + 1)]


def configs(devices: Sequence[str], speeds: Mapping[str, float] | None = None) -> list[Config]:
    """Each device whole, and each split set with each kind (by speed where `speeds` differ on it)."""
    out = [Config((d,)) for d in devices] + [Config(s, k) for s in split_sets(devices) for k in (BATCH, WEIGHTS)]
    for s in split_sets(devices) if speeds else ():
        fastest = max(speeds[d] for d in s)
        parts = tuple(max(1, round(PARTS * speeds[d] / fastest)) for d in s)
        if len(set(parts)) > 1:
            out.append(Config(s, BY_SPEED, parts))
    return out


def device_speeds(graph: OpGraph, cost: CostModel, devices: Sequence[str]) -> dict[str, float]:
    """Each device's speed on `graph`: one over its time for the whole graph under `cost` (a
    cluster's roofline, or this machine's profile)."""
    return {d: 1 / max(sum(cost.op_time(node, d) for node in graph.nodes.values()), 1e-30) for d in devices}


def plan_key(graph: OpGraph, plan: Plan) -> tuple:
    """What tells two plans of `graph` apart (their op plans in graph order, and the weights stored
    sharded and where: DDP's and FSDP's ops are alike): a cache key."""
    held = plan.extra.get("placer", {})
    stored = tuple(sorted(held.get("stored", {}).items()))
    return (*(plan.ops[n] for n in graph.nodes), stored, tuple(held.get("stored_on", plan.devices)) if stored else ())


def replan(graph: OpGraph, plan: Plan, names: Iterable[str], config: Config) -> Plan:
    """`plan` with the ops `names` set to `config` (in graph order, reading what the plan holds)."""
    ops = dict(plan.ops)
    chosen = set(names)
    for name in graph.nodes:
        if name not in chosen:
            continue
        if config.kind == WHOLE:
            ops[name] = OpPlan(config.devices[:1])
            continue
        split = _pick(graph, name, ops, config)
        ops[name] = OpPlan(config.devices, _cut(split.inputs, config), _cut(split.outputs, config))
    # weights stored sharded (FSDP's) stay so while their readers read them as FSDP's do
    return Plan(list(plan.devices), ops, plan.graph_sha256,
                extra={"placer": {"name": "plan", **still_stored(graph, plan, ops)}})


def replan_groups(graph: OpGraph, start: Plan, members: Sequence[Sequence[str]], options: Sequence[Config],
                  row: Sequence[int]) -> Plan:
    """`start` with each group `members[k]` replanned to `options[row[k]]` in graph order (a
    `row[k]` past the options keeps the group as it is): a learner's action, one config per group."""
    plan = start
    for ops, action in zip(members, row):
        if action < len(options):
            plan = replan(graph, plan, ops, options[action])
    return plan


def _pick(graph: OpGraph, name: str, ops: dict[str, OpPlan], config: Config) -> Split:
    node = graph.nodes[name]
    options = splits(node, graph, len(config.devices), config.parts) + [replicated(node)]
    held = [_held(graph, t, ops) for t in node.inputs]

    def score(s: Split) -> tuple[int, int]:
        changes = sum(1 for h, want in zip(held, _cut(s.inputs, config))
                      if h is not None and not _reads_as_held(h, config, want))
        return changes, _rank(graph, node.inputs, s, config.kind)

    return min(options, key=score)   # min keeps the first of equals: deterministic


def _cut(layouts: tuple[Layout, ...], config: Config) -> tuple[Layout, ...]:
    """The layouts with every shard cut by the config's parts (as they are, where it has none)."""
    if config.parts is None:
        return layouts
    return tuple(Shard(x.dim, config.parts) if isinstance(x, Shard) else x for x in layouts)


def _held(graph: OpGraph, tensor: str, ops: dict[str, OpPlan]) -> tuple[tuple[str, ...], Layout] | None:
    """Where and how the plan holds a computed tensor; None for a weight or graph input (held as read)."""
    producer = graph.producer.get(tensor) if tensor else None
    if producer is None or producer not in ops:
        return None
    op = ops[producer]
    k = graph.nodes[producer].outputs.index(tensor)
    return op.devices, (op.outputs[k] if op.outputs else REPLICATE)


def _reads_as_held(held: tuple[tuple[str, ...], Layout], config: Config, want: Layout) -> bool:
    """Whether the split reads the tensor with no copy between devices: as held, or cut from copies on its devices."""
    devices, layout = held
    if layout == REPLICATE:
        return set(config.devices) <= set(devices)
    return devices == config.devices and layout == want


def _rank(graph: OpGraph, inputs: Sequence[str], split: Split, kind: str) -> int:
    """0 for the kind's own splits, 1 for other splits, 2 for replication."""
    if all(x == REPLICATE for x in split.inputs + split.outputs):
        return 2
    shards_weight = any(t in graph.initializers and x != REPLICATE for t, x in zip(inputs, split.inputs))
    if kind == WEIGHTS:
        return 0 if shards_weight else 1
    batch = all(x == Shard(0) for x in split.outputs) and not shards_weight
    return 0 if batch else 1
