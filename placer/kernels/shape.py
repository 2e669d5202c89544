"""Shape and layout kernels: Reshape, Flatten, Transpose, (Un)Squeeze, Concat, Split, Slice,
Expand, Tile, Shape, Size, DepthToSpace, SpaceToDepth.

Shape-like inputs (Reshape's shape, Slice's starts, ...) are small int64 tensors read on the host
with `.tolist()`; the executor keeps them on the CPU so that reading them never syncs a device.
"""

from __future__ import annotations

import math

import torch

from placer.kernels.registry import Node, register

_INT64_MAX = 2**63 - 1


def _ints(t: torch.Tensor | None) -> list[int] | None:
    return None if t is None else [int(v) for v in t.reshape(-1).tolist()]


@register("Reshape", since=1)
def _reshape1(node: Node):
    """Before opset 5 the shape was an attribute."""
    shape = list(node.attr("shape"))
    fn = _reshape(node)
    target = torch.tensor(shape, dtype=torch.int64)
    return lambda xs: fn([xs[0], target])


@register("Reshape", since=5, host_inputs=(1,))
def _reshape(node: Node):
    allowzero = node.attr("allowzero", 0)

    def reshape(xs):
        x, shape = xs[0], xs[1].tolist()
        if not allowzero and 0 in shape:
            shape = [x.shape[i] if v == 0 else v for i, v in enumerate(shape)]
        return [x.reshape(shape)]
    return reshape


@register("Flatten", since=1)
def _flatten(node: Node):
    axis = node.attr("axis", 1)

    def flatten(xs):
        x = xs[0]
        a = axis + x.dim() if axis < 0 else axis
        return [x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))]
    return flatten


@register("Transpose", since=1)
def _transpose(node: Node):
    perm = node.attr("perm")
    if perm is None:
        return lambda xs: [xs[0].permute(*reversed(range(xs[0].dim())))]
    perm = list(perm)
    return lambda xs: [xs[0].permute(perm)]


def _squeeze(x: torch.Tensor, axes: list[int] | None) -> torch.Tensor:
    if axes is None:
        return x.squeeze()
    return x.squeeze(tuple(a + x.dim() if a < 0 else a for a in axes)) if axes else x


@register("Squeeze", since=1)
def _squeeze1(node: Node):
    axes = node.attr("axes")
    axes = list(axes) if axes is not None else None
    return lambda xs: [_squeeze(xs[0], axes)]


@register("Squeeze", since=13, host_inputs=(1,))
def _squeeze13(node: Node):
    return lambda xs: [_squeeze(xs[0], _ints(xs[1]) if len(xs) > 1 else None)]


def _unsqueeze(x: torch.Tensor, axes: list[int]) -> torch.Tensor:
    rank = x.dim() + len(axes)
    shape = list(x.shape)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        shape.insert(a, 1)
    return x.reshape(shape)


@register("Unsqueeze", since=1)
def _unsqueeze1(node: Node):
    axes = list(node.attr("axes"))
    return lambda xs: [_unsqueeze(xs[0], axes)]


@register("Unsqueeze", since=13, host_inputs=(1,))
def _unsqueeze13(node: Node):
    return lambda xs: [_unsqueeze(xs[0], _ints(xs[1]))]


@register("Concat", since=1)
def _concat(node: Node):
    axis = node.attr("axis", 1)     # optional (default 1) before opset 4
    return lambda xs: [torch.cat([x for x in xs if x is not None], axis)]


def _split_sizes(dim: int, n: int, num_outputs: int | None) -> list[int]:
    if num_outputs:
        # opset 18: chunks of ceil(dim / n), the last one smaller.
        chunk = math.ceil(dim / num_outputs)
        sizes = [chunk] * (num_outputs - 1)
        return sizes + [dim - sum(sizes)]
    return [dim // n] * n


def _split(x: torch.Tensor, axis: int, split: list[int] | None, n: int,
           num_outputs: int | None) -> list[torch.Tensor]:
    sizes = split if split else _split_sizes(x.shape[axis], n, num_outputs)
    return list(torch.split(x, sizes, axis))


@register("Split", since=2)
def _split2(node: Node):
    axis, split = node.attr("axis", 0), node.attr("split")
    split = list(split) if split else None
    n = node.n_outputs
    return lambda xs: _split(xs[0], axis, split, n, None)


@register("Split", since=13, host_inputs=(1,))
def _split13(node: Node):
    axis, n, num_outputs = node.attr("axis", 0), node.n_outputs, node.attr("num_outputs")
    return lambda xs: _split(xs[0], axis, _ints(xs[1]) if len(xs) > 1 else None, n, num_outputs)


def _slice(x: torch.Tensor, starts: list[int], ends: list[int], axes: list[int] | None,
           steps: list[int] | None) -> torch.Tensor:
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    index: list[slice] = [slice(None)] * x.dim()
    flips: list[int] = []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = axis + x.dim() if axis < 0 else axis
        dim = x.shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            index[axis] = slice(start, max(end, start), step)
        else:
            # torch has no negative steps: slice the flipped axis instead.
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            fs, fe = dim - 1 - start, dim - 1 - end
            index[axis] = slice(fs, max(fe, fs), -step)
            flips.append(axis)
    if flips:
        x = x.flip(flips)
    return x[tuple(index)]


@register("Slice", since=1)
def _slice1(node: Node):
    starts, ends, axes = list(node.attr("starts")), list(node.attr("ends")), node.attr("axes")
    axes = list(axes) if axes is not None else None
    return lambda xs: [_slice(xs[0], starts, ends, axes, None)]


@register("Slice", since=10, host_inputs=(1, 2, 3, 4))
def _slice10(node: Node):
    def slice_(xs):
        axes = _ints(xs[3]) if len(xs) > 3 else None
        steps = _ints(xs[4]) if len(xs) > 4 else None
        return [_slice(xs[0], _ints(xs[1]), _ints(xs[2]), axes, steps)]
    return slice_


@register("Expand", since=8, host_inputs=(1,))
def _expand(node: Node):
    def expand(xs):
        x = xs[0]
        shape = torch.broadcast_shapes(x.shape, tuple(_ints(xs[1])))
        return [x.expand(shape)]
    return expand


@register("Tile", since=6, host_inputs=(1,))
def _tile(node: Node):
    return lambda xs: [xs[0].repeat(_ints(xs[1]))]


@register("Shape", since=1)
def _shape(node: Node):
    start, end = node.attr("start", 0), node.attr("end")
    # Made on the CPU: shapes feed Reshape/Slice/... which read them on the host.
    return lambda xs: [torch.tensor(xs[0].shape[start:end], dtype=torch.int64)]


@register("Size", since=1)
def _size(node: Node):
    return lambda xs: [torch.tensor(xs[0].numel(), dtype=torch.int64)]


@register("DepthToSpace", since=1)
def _depth_to_space(node: Node):
    bs, mode = node.attr("blocksize"), node.attr("mode", "DCR")

    def d2s(xs):
        x = xs[0]
        b, c, h, w = x.shape
        if mode == "DCR":
            y = x.reshape(b, bs, bs, c // (bs * bs), h, w).permute(0, 3, 4, 1, 5, 2)
        else:
            y = x.reshape(b, c // (bs * bs), bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
        return [y.reshape(b, c // (bs * bs), h * bs, w * bs)]
    return d2s


@register("SpaceToDepth", since=1)
def _space_to_depth(node: Node):
    bs, mode = node.attr("blocksize"), node.attr("mode", "DCR")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def s2d(xs):
        x = xs[0]
        b, c, h, w = x.shape
        y = x.reshape(b, c, h // bs, bs, w // bs, bs).permute(perm)
        return [y.reshape(b, c * bs * bs, h // bs, w // bs)]
    return s2d


@register("CenterCropPad", since=18, host_inputs=(1,))
def _center_crop_pad(node: Node):
    axes_attr = node.attr("axes")

    def center(xs):
        x, target = xs[0], _ints(xs[1])
        axes = list(range(x.dim())) if axes_attr is None else \
            [a + x.dim() if a < 0 else a for a in axes_attr]
        for a, size in zip(axes, target):
            dim = x.shape[a]
            if size < dim:       # crop: the extra element, if any, comes off the end
                x = x.narrow(a, (dim - size) // 2, size)
            elif size > dim:     # pad with zeros: the extra element, if any, goes at the end
                before = (size - dim) // 2
                pads = [0] * (2 * x.dim())
                pads[2 * (x.dim() - 1 - a)] = before
                pads[2 * (x.dim() - 1 - a) + 1] = size - dim - before
                x = torch.nn.functional.pad(x, pads)
        return [x]
    return center
