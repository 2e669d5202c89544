"""Collectives as NCCL runs them, written as steps of the lowered graph, one node per device per
step: a step's output read by the next device's step is a copy over their route, so the simulator
prices each ring step as a copy (the route's latency + the chunk over its slowest link) and queues
it on shared links like any copy.

Ring all-reduce over n devices (NCCL's ring algorithm): a reduce-scatter of n-1 steps, each device
sending one n-th of the bytes to the next and adding what it receives into its own part, then an
all-gather of n-1 steps handing the reduced n-ths on; each device sends 2(n-1)/n of the bytes, as
nccl-tests' bus bandwidth counts it. An all-gather or a reduce-scatter alone sends (n-1)/n. An
all-to-all sends each device's n-th for every other device straight to it. Gathering to (or
reducing onto) one device copies every piece to it (a reduction then sums them there, an
ordinary `Sum` op the cost model prices).
"""

from __future__ import annotations

from collections.abc import Sequence

from onnx import helper

from placer.graph.opgraph import OpNode, TensorInfo
from placer.plans.layout import Shard, piece_bounds, piece_shape, shard_sizes
from placer.plans.lowered import HelperCost, LoweredBuilder


def all_reduce(b: LoweredBuilder, devices: Sequence[str], parts: Sequence[str], info: TensorInfo,
               base: str) -> list[str]:
    """The sum of `parts` (device k's part, full-sized) whole on every device: one kernel, a ring
    reduce-scatter of the flattened tensor's n-ths, then a ring all-gather of the reduced n-ths."""
    n = len(devices)
    flat = Shard(0)   # the chunks are n-ths of the flattened tensor
    chunks = [(size,) for size in shard_sizes(info.numel, n)]
    reduced = _reduce_scatter_ring(b, devices, parts, chunks, info.dtype, base, flat, info.numel, flatten=1)
    return _all_gather_ring(b, devices, reduced, chunks, info, base, launch=False, axis=flat, flatten=1)


def reduce_scatter(b: LoweredBuilder, devices: Sequence[str], parts: Sequence[str], info: TensorInfo,
                   axis: int | Shard, base: str) -> list[str]:
    """The sum of `parts`, device k holding its k-th slice along `axis` (Shard(axis), or the Shard given)."""
    n, axis = len(devices), _shard(axis)
    return _reduce_scatter_ring(b, devices, parts, [piece_shape(info.shape, axis, k, n) for k in range(n)],
                                info.dtype, base, axis, info.shape[axis.dim])


def all_gather(b: LoweredBuilder, devices: Sequence[str], pieces: Sequence[str], info: TensorInfo,
               axis: int | Shard, base: str) -> list[str]:
    """The tensor whose slice k along `axis` (Shard(axis), or the Shard given) is `pieces[k]`, whole on
    every device."""
    n, axis = len(devices), _shard(axis)
    return _all_gather_ring(b, devices, pieces, [piece_shape(info.shape, axis, k, n) for k in range(n)],
                            info, base, launch=True, axis=axis)


def all_to_all(b: LoweredBuilder, devices: Sequence[str], pieces: Sequence[str], info: TensorInfo,
               source: int | Shard, target: int | Shard, base: str) -> list[str]:
    """From Shard(source) to Shard(target): each device cuts its piece along `target` and sends
    cut k to device k, which joins the n cuts it gets."""
    n, source, target = len(devices), _shard(source), _shard(target)
    cuts = []
    for i, (device, piece) in enumerate(zip(devices, pieces)):
        held = piece_shape(info.shape, source, i, n)
        outs = [b.tensor(f"{base}/all-to-all@{device}->{devices[k]}", piece_shape(held, target, k, n),
                         info.dtype) for k in range(n)]
        cuts.append(b.helper("AllToAll", device, [piece], outs, HelperCost.LAUNCH, base, axis=target.dim,
                             sizes=shard_sizes(held[target.dim], n, target.parts)))
    return [_join(b, device, [cuts[i][k] for i in range(n)], piece_shape(info.shape, target, k, n), info,
                  base, source.dim) for k, device in enumerate(devices)]


def _shard(axis: int | Shard) -> Shard:
    """An axis as its balanced Shard; a Shard (perhaps uneven) as it is."""
    return axis if isinstance(axis, Shard) else Shard(axis)


def gather(b: LoweredBuilder, root: str, pieces: Sequence[str], info: TensorInfo, axis: Shard, base: str) -> str:
    """The tensor whose slices along `axis` are `pieces`, whole on `root` (each piece copied there)."""
    out = b.tensor(f"{base}/gathered@{root}", info.shape, info.dtype)
    return b.helper("Gather", root, pieces, [out], HelperCost.LAUNCH, base, axis=axis.dim)[0]


def reduce(b: LoweredBuilder, root: str, parts: Sequence[str], info: TensorInfo, opset: int, base: str) -> str:
    """The sum of `parts`, whole on `root`: each part copied there and summed by an ONNX `Sum`."""
    out = b.tensor(f"{base}/reduced@{root}", info.shape, info.dtype)
    name = b.unique(f"{base}/Sum@{root}")
    proto = helper.make_node("Sum", list(parts), [out.name], name=name) if b.runnable else None
    b.add(OpNode(name, "Sum", "", opset, tuple(parts), (out.name,), proto, output_info=(out,),
                 flops=float((len(parts) - 1) * info.numel)), root)
    return out.name


def cut(b: LoweredBuilder, holder: str, whole: str, info: TensorInfo, layout: Shard, k: int, n: int,
        base: str) -> str:
    """Slice k of n of `whole` along the layout's axis, made on `holder` (a view: free)."""
    out = b.tensor(f"{base}/{layout}[{k}/{n}]@{holder}", piece_shape(info.shape, layout, k, n), info.dtype)
    start, size = piece_bounds(info.shape[layout.dim], layout, k, n)
    return b.helper("Slice", holder, [whole], [out], HelperCost.FREE, base, axis=layout.dim, start=start,
                    size=size)[0]


def _reduce_scatter_ring(b: LoweredBuilder, devices: Sequence[str], parts: Sequence[str],
                         chunks: Sequence[tuple[int, ...]], dtype: str, base: str, axis: Shard, length: int,
                         flatten: int = 0) -> list[str]:
    """Ring reduce-scatter: at step s device i sends the running sum of chunk (i - s - 1) mod n to
    device i + 1, which adds its own part of it; after n - 1 steps device i holds chunk i summed.
    Chunk c is slice c along `axis` (of `length`), of the flattened parts with `flatten`."""
    n = len(devices)
    sent: list[str] = []
    for s in range(n):
        last = s == n - 1
        now = []
        for i, device in enumerate(devices):
            c = i if last else (i - s - 1) % n
            inputs = [parts[i]] if s == 0 else [sent[(i - 1) % n], parts[i]]
            out = b.tensor(f"{base}/reduce-scatter{s}@{device}", chunks[c], dtype)
            start, size = piece_bounds(length, axis, c, n)
            now.append(b.helper("ReduceScatter", device, inputs, [out],
                                HelperCost.LAUNCH if s == 0 else HelperCost.FREE, base, axis=axis.dim,
                                start=start, size=size, flatten=flatten)[0])
        sent = now
    return sent


def _all_gather_ring(b: LoweredBuilder, devices: Sequence[str], pieces: Sequence[str],
                     shapes: Sequence[tuple[int, ...]], info: TensorInfo, base: str, launch: bool, axis: Shard,
                     flatten: int = 0) -> list[str]:
    """Ring all-gather: at step s device i hands piece (i - s) mod n on to device i + 1; after n - 1
    steps every device joins the n pieces (slices along `axis`, of the flattened tensor with
    `flatten`) into the whole tensor."""
    n = len(devices)
    held = [{i: piece} for i, piece in enumerate(pieces)]
    sent = list(pieces)
    for s in range(n - 1):
        now = []
        for i, device in enumerate(devices):
            out = b.tensor(f"{base}/all-gather{s}@{device}", shapes[(i - s) % n], info.dtype)
            cost = HelperCost.LAUNCH if s == 0 and launch else HelperCost.FREE
            now.append(b.helper("AllGather", device, [sent[i] if s == 0 else sent[(i - 1) % n]], [out], cost,
                                base)[0])
        sent = now
        for i in range(n):   # what device i received at this step: piece (i - 1 - s) mod n
            held[i][(i - 1 - s) % n] = sent[(i - 1) % n]
    return [_join(b, device, [held[i][k] for k in range(n)], info.shape, info, base, axis.dim, flatten)
            for i, device in enumerate(devices)]


def _join(b: LoweredBuilder, device: str, pieces: Sequence[str], shape: tuple[int, ...], info: TensorInfo,
          base: str, axis: int, flatten: int = 0) -> str:
    """The pieces a collective delivered to `device`, as one tensor there (NCCL writes them in
    place): joined along `axis`, or with `flatten` joined flat and shaped as the tensor."""
    out = b.tensor(f"{base}@{device}", shape, info.dtype)
    return b.helper("Join", device, pieces, [out], HelperCost.FREE, base, axis=axis, flatten=flatten,
                    shape=list(shape))[0]
