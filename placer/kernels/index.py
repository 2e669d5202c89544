"""Indexing kernels: Gather, GatherElements, GatherND, Scatter*, NonZero, OneHot, Trilu, Compress."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register


def _positive(idx: torch.Tensor, size: int) -> torch.Tensor:
    """ONNX allows negative indices (from the end); torch's index ops do not."""
    idx = idx.long()
    return torch.where(idx < 0, idx + size, idx)


@register("Gather", since=1)
def _gather(node: Node):
    axis = node.attr("axis", 0)

    def gather(xs):
        x, idx = xs
        a = axis + x.dim() if axis < 0 else axis
        flat = _positive(idx.reshape(-1), x.shape[a]).to(x.device)
        y = torch.index_select(x, a, flat)
        return [y.reshape(x.shape[:a] + idx.shape + x.shape[a + 1:])]
    return gather


@register("GatherElements", since=11)
def _gather_elements(node: Node):
    axis = node.attr("axis", 0)

    def gather(xs):
        x, idx = xs
        a = axis + x.dim() if axis < 0 else axis
        return [torch.gather(x, a, _positive(idx, x.shape[a]))]
    return gather


def _linear_index(idx: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Index tuples in the last dim of idx over `shape` -> flat row-major indices."""
    k = idx.shape[-1]
    strides = [math.prod(shape[i + 1:k]) for i in range(k)]
    size = torch.tensor(shape[:k], device=idx.device)
    idx = idx.long()
    idx = torch.where(idx < 0, idx + size, idx)
    return (idx * torch.tensor(strides, device=idx.device)).sum(-1)


@register("GatherND", since=11)
def _gather_nd(node: Node):
    batch_dims = node.attr("batch_dims", 0)

    def gather_nd(xs):
        x, idx = xs
        bshape = x.shape[:batch_dims]
        nb = math.prod(bshape)
        k = idx.shape[-1]
        inner = x.shape[batch_dims:]
        xf = x.reshape((nb, math.prod(inner[:k])) + tuple(inner[k:]))
        lin = _linear_index(idx.reshape(nb, -1, k), tuple(inner)).to(x.device)
        rows = torch.arange(nb, device=x.device).unsqueeze(1).expand_as(lin)
        y = xf[rows, lin]
        return [y.reshape(tuple(idx.shape[:-1]) + tuple(inner[k:]))]
    return gather_nd


_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@register("ScatterND", since=11)
def _scatter_nd(node: Node):
    reduction = node.attr("reduction", "none")

    def scatter_nd(xs):
        x, idx, upd = xs
        k = idx.shape[-1]
        rest = tuple(x.shape[k:])
        flat = x.reshape((-1,) + rest).clone()
        lin = _linear_index(idx, tuple(x.shape)).reshape(-1).to(x.device)
        u = upd.reshape((-1,) + rest)
        if reduction == "none":
            flat.index_copy_(0, lin, u)
        elif reduction == "add":
            flat.index_add_(0, lin, u)
        else:
            idx = lin.reshape((-1,) + (1,) * len(rest)).expand_as(u)
            flat.scatter_reduce_(0, idx, u, _REDUCE[reduction], include_self=True)
        return [flat.reshape(x.shape)]
    return scatter_nd


@register("ScatterElements", "Scatter", since=9)
def _scatter_elements(node: Node):
    axis, reduction = node.attr("axis", 0), node.attr("reduction", "none")

    def scatter(xs):
        x, idx, upd = xs
        a = axis + x.dim() if axis < 0 else axis
        idx = _positive(idx, x.shape[a])
        if reduction == "none":
            return [torch.scatter(x, a, idx, upd)]
        return [torch.scatter_reduce(x, a, idx, upd, _REDUCE[reduction], include_self=True)]
    return scatter


@register("NonZero", since=9)
def _nonzero(node: Node):
    # The output's size depends on the data: this op syncs with the device by nature.
    return lambda xs: [torch.nonzero(xs[0]).t().contiguous()]


@register("OneHot", since=9, host_inputs=(1,))
def _onehot(node: Node):
    axis = node.attr("axis", -1)

    def onehot(xs):
        idx, depth, values = xs
        depth = int(depth.reshape(-1).tolist()[0])
        idx = idx.long()
        idx = torch.where(idx < 0, idx + depth, idx)
        valid = (idx >= 0) & (idx < depth)
        hot = F.one_hot(torch.where(valid, idx, torch.zeros_like(idx)), depth).bool()
        hot = hot & valid.unsqueeze(-1)
        y = torch.where(hot, values[1], values[0])
        a = axis + y.dim() if axis < 0 else axis
        return [y.movedim(-1, a)]
    return onehot


@register("Trilu", since=14, host_inputs=(1,))
def _trilu(node: Node):
    upper = node.attr("upper", 1)

    def trilu(xs):
        k = int(xs[1].reshape(-1).tolist()[0]) if len(xs) > 1 and xs[1] is not None else 0
        return [torch.triu(xs[0], k) if upper else torch.tril(xs[0], k)]
    return trilu


@register("Compress", since=9)
def _compress(node: Node):
    axis = node.attr("axis")

    def compress(xs):
        x, cond = xs
        if axis is None:
            x = x.reshape(-1)
            a = 0
        else:
            a = axis + x.dim() if axis < 0 else axis
        keep = torch.nonzero(cond.reshape(-1)[: x.shape[a]]).reshape(-1)
        return [torch.index_select(x, a, keep.to(x.device))]
    return compress


@register("ReverseSequence", since=10)
def _reverse_sequence(node: Node):
    batch_axis, time_axis = node.attr("batch_axis", 1), node.attr("time_axis", 0)

    def reverse(xs):
        x, lengths = xs
        steps = x.shape[time_axis]
        t = torch.arange(steps, device=x.device)
        L = lengths.to(x.device).long()
        shape = [1] * x.dim()
        shape[time_axis], shape[batch_axis] = steps, x.shape[batch_axis]
        tt = t.reshape([steps if i == time_axis else 1 for i in range(x.dim())])
        LL = L.reshape([x.shape[batch_axis] if i == batch_axis else 1 for i in range(x.dim())])
        index = torch.where(tt < LL, LL - 1 - tt, tt).expand(x.shape)
        return [torch.gather(x, time_axis, index)]
    return reverse


@register("Unique", since=11)
def _unique(node: Node):
    axis, sort = node.attr("axis"), bool(node.attr("sorted", 1))

    def unique(xs):
        x = xs[0]
        # torch.unique has no backward: it finds the positions, and Y is gathered from them
        a = 0 if axis is None else axis % x.dim()
        source = x.reshape(-1) if axis is None else x
        _, inverse, counts = torch.unique(source.detach(), sorted=True, return_inverse=True,
                                          return_counts=True, dim=None if axis is None else a)
        n = source.shape[a]
        # First occurrence of each unique value: the smallest position that maps to it.
        first = torch.full((counts.shape[0],), n, dtype=torch.int64, device=x.device)
        first = first.scatter_reduce(0, inverse, torch.arange(n, device=x.device), "amin")
        if not sort:
            order = torch.argsort(first)
            rank = torch.empty_like(order)
            rank[order] = torch.arange(order.shape[0], device=x.device)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        return [torch.index_select(source, a, first), first, inverse, counts]
    return unique


@register("TensorScatter", since=24)
def _tensor_scatter(node: Node):
    axis_attr, circular = node.attr("axis", -2), node.attr("mode", "linear") == "circular"

    def tensor_scatter(xs):
        past, update = xs[0], xs[1]
        write = xs[2] if len(xs) > 2 and xs[2] is not None else None
        axis = axis_attr % past.dim()
        steps = update.shape[axis]
        shape = [1] * past.dim()
        shape[axis] = steps
        index = torch.arange(steps, device=past.device).reshape(shape)
        if write is not None:
            # One write offset per batch entry (dim 0).
            index = index + write.to(past.device).long().reshape([-1] + [1] * (past.dim() - 1))
        if circular:
            index = index % past.shape[axis]
        return [torch.scatter(past, axis, index.expand(update.shape), update)]
    return tensor_scatter
