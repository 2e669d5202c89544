"""The all-reduce of replicated weights' gradients in a training step, in buckets as PyTorch DDP
makes it: each device's gradient of its replica is a `Partial()` of the true one.

The replicas (`placer.plans.replicas`) are taken in the order their gradients are ready, those on
the same devices together, and cut into buckets of `bucket_bytes` (DDP's `bucket_cap_mb`, 25 MiB:
a bucket is closed once it holds that many bytes or more). Each bucket is flattened on every
device and all-reduced by a ring (`placer.plans.collectives.all_reduce`), whose steps run on the
devices' communication streams (`SimProgram.side`): a bucket's all-reduce starts once the backward
steps making its gradients are done, and overlaps the backward steps still to run. The optimizer's
steps come last, once every bucket is reduced (DDP's backward returns only then), each device
updating its replicas from the reduced buckets. A bucket's flattened gradients are views of them
(no bytes of their own); the reduced bucket is a tensor of its own, as DDP's bucket is beside the
gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from placer.costmodel.sim_program import SimProgram
from placer.graph.opgraph import OpGraph, OpNode, TensorInfo
from placer.placement import Placement
from placer.plans import collectives
from placer.plans.lowered import HelperCost
from placer.plans.program_steps import StepBuilder, ordered, splice

DDP_BUCKET_BYTES = 25 * 2**20   # torch.nn.parallel.DistributedDataParallel's bucket_cap_mb=25


def buckets(ready: Sequence[str], nbytes: Callable[[str], int], bucket_bytes: int) -> list[list[str]]:
    """`ready` (weights, in the order their gradients are ready) in buckets of `bucket_bytes` or
    more each, the last holding what is left."""
    out: list[list[str]] = [[]]
    held = 0
    for w in ready:
        out[-1].append(w)
        held += nbytes(w)
        if held >= bucket_bytes:
            out.append([])
            held = 0
    return [b for b in out if b]


def with_gradient_sync(program: SimProgram, graph: OpGraph, placement: Placement, devices: Sequence[str],
                       copies: dict[str, dict[str, str]], launch: Callable[[OpNode, str], float],
                       bucket_bytes: int = DDP_BUCKET_BYTES) -> SimProgram:
    """`program` (a training step of `graph`, the lowered graph with `copies`' replicas) with each
    trained weight's replicas' gradients all-reduced in buckets before their updates.
    `launch(node, device)`: the seconds a collective's kernel launch takes on `device`."""
    steps = program.steps
    position = {s.name: i for i, s in enumerate(steps)}
    made_at = {t: i for i, s in enumerate(steps) for t in s.outputs if t}
    synced = {w: c for w, c in copies.items() if all(f"update:{r}" in position for r in c.values())}
    if not synced:
        return program
    ready = sorted(synced, key=lambda w: max(made_at[f"grad:{r}"] for r in synced[w].values()))
    made = StepBuilder.over(program, graph)
    after: dict[int, list[int]] = {}   # program step -> the collective steps (of `made`) right after it
    reads: dict[str, str] = {}         # a replica's gradient -> the reduced bucket its update reads
    on: dict[str, str] = {}            # a replica's gradient -> its device
    rings: dict[tuple[str, ...], list[str]] = {}   # a bucket holds weights replicated on the same devices
    for w in ready:
        rings.setdefault(tuple(synced[w]), []).append(w)
    last: dict[str, tuple[int, str]] = {}   # device -> its last bucket to be ready: (step, reduced bucket)
    sized = [(ring, bucket) for ring, group in rings.items()
             for bucket in buckets(group, lambda w: graph.initializers[next(iter(synced[w].values()))].nbytes,
                                   bucket_bytes)]
    for b, (ring, bucket) in enumerate(sized):
        grads = {d: [f"grad:{synced[w][d]}" for w in bucket] for d in ring}
        total = sum(program.size(g) for g in grads[ring[0]])
        dtype = graph.initializers[synced[bucket[0]][ring[0]]].dtype
        info = TensorInfo(f"bucket{b}", (total // np.dtype(dtype).itemsize,), dtype)
        first = len(made.steps)
        flat = [made.helper("Flatten", d, grads[d], [made.tensor(f"grad-bucket{b}@{d}", info.shape, dtype)],
                            HelperCost.FREE, f"grad-bucket{b}")[0] for d in ring]
        made.sizes.update((t, 0) for t in flat)   # the gradients' own bytes: they are the bucket's views
        reduced = collectives.all_reduce(made, list(ring), flat, info, f"grad-bucket{b}/all-reduce")
        trigger = max(made_at[g] for gs in grads.values() for g in gs)
        for d, out in zip(ring, reduced):
            reads.update((g, out) for g in grads[d])
            on.update((g, d) for g in grads[d])
            last[d] = max(last.get(d, (-1, "")), (trigger, out))
        after.setdefault(trigger, []).extend(range(first, len(made.steps)))
    updates = [i for i, s in enumerate(steps) if s.op_type == "update" and s.inputs[1] in reads]
    # backward() returns, and the optimizer steps, once every bucket is reduced: each update waits
    # for the last bucket on its device too
    inputs = {i: tuple(dict.fromkeys((steps[i].inputs[0], reads[steps[i].inputs[1]], *steps[i].inputs[2:],
                                      last[on[steps[i].inputs[1]]][1]))) for i in updates}
    return splice(program, graph, placement, devices, made, ordered(steps, {}, after, updates), inputs,
                  range(len(made.steps)), launch)
