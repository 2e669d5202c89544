"""Reductions (Reduce*), ArgMax/ArgMin, CumSum and TopK."""

from __future__ import annotations

import torch

from placer.kernels.registry import Node, register


def _sum_square(x, dims, keep):
    return (x * x).sum(dims, keepdim=keep)


def _l1(x, dims, keep):
    return x.abs().sum(dims, keepdim=keep)


def root(s: torch.Tensor, p: float) -> torch.Tensor:
    """s ** (1 / p) of a sum of |x| ** p: where s is 0 its gradient is 0, not the NaN of an
    infinite derivative times x's zero one."""
    zero = s == 0
    return torch.where(zero, 0, torch.where(zero, 1, s).pow(1.0 / p))


def _l2(x, dims, keep):
    return root((x * x).sum(dims, keepdim=keep), 2)


def _log_sum(x, dims, keep):
    return x.sum(dims, keepdim=keep).log()


def _log_sum_exp(x, dims, keep):
    return torch.logsumexp(x, dims, keepdim=keep)


def _prod(x, dims, keep):
    # torch.prod reduces one dim at a time; go from the last so the remaining dims stay valid.
    for d in sorted(dims, reverse=True):
        x = x.prod(d, keepdim=keep)
    return x


def _mean(x, dims, keep):
    return x.mean(dims, keepdim=keep) if x.dtype.is_floating_point else \
        (x.sum(dims, keepdim=keep) // max(1, _count(x, dims))).to(x.dtype)


def _count(x, dims):
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


_REDUCERS = {
    "ReduceSum": lambda x, d, k: x.sum(d, keepdim=k),
    "ReduceMean": _mean,
    "ReduceMax": lambda x, d, k: x.amax(d, keepdim=k),
    "ReduceMin": lambda x, d, k: x.amin(d, keepdim=k),
    "ReduceProd": _prod,
    "ReduceL1": _l1, "ReduceL2": _l2, "ReduceSumSquare": _sum_square,
    "ReduceLogSum": _log_sum, "ReduceLogSumExp": _log_sum_exp,
}


def _reduce(fn, x: torch.Tensor, axes: list[int] | None, keep: bool, noop_empty: bool):
    if not axes:
        if noop_empty:
            return x
        axes = list(range(x.dim()))
    dims = sorted({a + x.dim() if a < 0 else a for a in axes})
    if x.dim() == 0:
        return fn(x.reshape(1), [0], False)
    if any(x.shape[d] == 0 for d in dims) and fn in (_REDUCERS["ReduceMax"], _REDUCERS["ReduceMin"]):
        # Empty reductions: ONNX defines -inf / +inf (or the dtype's extremes).
        shape = [1 if i in dims else s for i, s in enumerate(x.shape)] if keep else \
            [s for i, s in enumerate(x.shape) if i not in dims]
        is_max = fn is _REDUCERS["ReduceMax"]
        if x.dtype == torch.bool:
            fill = not is_max
        elif x.dtype.is_floating_point:
            fill = -float("inf") if is_max else float("inf")
        else:
            fill = torch.iinfo(x.dtype).min if is_max else torch.iinfo(x.dtype).max
        return torch.full(shape, fill, dtype=x.dtype, device=x.device)
    return fn(x, dims, keep)


def _reduce_attr(node: Node):
    fn = _REDUCERS[node.op_type]
    axes, keep = node.attr("axes"), bool(node.attr("keepdims", 1))
    axes = list(axes) if axes is not None else None
    noop = bool(node.attr("noop_with_empty_axes", 0))
    return lambda xs: [_reduce(fn, xs[0], axes, keep, noop)]


def _reduce_input(node: Node):
    fn = _REDUCERS[node.op_type]
    keep, noop = bool(node.attr("keepdims", 1)), bool(node.attr("noop_with_empty_axes", 0))

    def run(xs):
        axes = None
        if len(xs) > 1 and xs[1] is not None:
            axes = [int(a) for a in xs[1].reshape(-1).tolist()]
        return [_reduce(fn, xs[0], axes, keep, noop)]
    return run


for _op in _REDUCERS:
    register(_op, since=1)(_reduce_attr)
    # Axes became an input at 13 for ReduceSum, at 18 for the others.
    register(_op, since=13 if _op == "ReduceSum" else 18, host_inputs=(1,))(_reduce_input)


@register("ArgMax", "ArgMin", since=1)
def _argmax(node: Node):
    axis, keep = node.attr("axis", 0), bool(node.attr("keepdims", 1))
    last = bool(node.attr("select_last_index", 0))
    fn = torch.argmax if node.op_type == "ArgMax" else torch.argmin

    def arg(xs):
        x = xs[0]
        if not last:
            return [fn(x, axis, keepdim=keep)]
        # The last extreme is the first one of the reversed axis.
        n = x.shape[axis]
        return [n - 1 - fn(x.flip(axis), axis, keepdim=keep)]
    return arg


@register("CumSum", since=11, host_inputs=(1,))
def _cumsum(node: Node):
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))

    def cumsum(xs):
        x = xs[0]
        axis = int(xs[1].reshape(-1).tolist()[0])
        axis = axis + x.dim() if axis < 0 else axis
        if reverse:
            x = x.flip(axis)
        y = torch.cumsum(x, axis, dtype=x.dtype)
        if exclusive:
            y = torch.cat([torch.zeros_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, y.shape[axis] - 1)], axis)
        if reverse:
            y = y.flip(axis)
        return [y]
    return cumsum


@register("TopK", since=1)
def _topk1(node: Node):
    k, axis = node.attr("k"), node.attr("axis", -1)
    return lambda xs: list(torch.topk(xs[0], k, axis, largest=True, sorted=True))


@register("TopK", since=10, host_inputs=(1,))
def _topk10(node: Node):
    axis = node.attr("axis", -1)
    # `sorted=0` allows any order, so always returning sorted values is valid for both settings.
    largest = bool(node.attr("largest", 1))

    def topk(xs):
        k = int(xs[1].reshape(-1).tolist()[0])
        x = xs[0]
        # ONNX breaks ties by the lower index: a stable sort gives exactly that.
        values, indices = torch.sort(x, dim=axis, descending=largest, stable=True)
        return [values.narrow(axis, 0, k), indices.narrow(axis, 0, k)]
    return topk


@register("CumProd", since=26, host_inputs=(1,))
def _cumprod(node: Node):
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))

    def cumprod(xs):
        x = xs[0]
        axis = int(xs[1].reshape(-1).tolist()[0])
        axis = axis + x.dim() if axis < 0 else axis
        if reverse:
            x = x.flip(axis)
        y = torch.cumprod(x, axis, dtype=x.dtype)
        if exclusive:
            y = torch.cat([torch.ones_like(y.narrow(axis, 0, 1)),
                           y.narrow(axis, 0, y.shape[axis] - 1)], axis)
        if reverse:
            y = y.flip(axis)
        return [y]
    return cumprod
