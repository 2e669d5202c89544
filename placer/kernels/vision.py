"""Detection and spatial-sampling kernels: NonMaxSuppression, RoiAlign, GridSample, AffineGrid,
Col2Im."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from placer.kernels.registry import Node, register


def _corners(boxes: torch.Tensor, center: bool) -> torch.Tensor:
    """Boxes as (y_min, x_min, y_max, x_max) from either ONNX box format."""
    if center:
        xc, yc, w, h = boxes.unbind(-1)
        return torch.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], -1)
    y1, x1, y2, x2 = boxes.unbind(-1)
    return torch.stack([torch.minimum(y1, y2), torch.minimum(x1, x2),
                        torch.maximum(y1, y2), torch.maximum(x1, x2)], -1)


def _iou(b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of (n, 4) corner boxes; 0 where either box is empty."""
    y1, x1, y2, x2 = b.unbind(-1)
    area = (y2 - y1) * (x2 - x1)
    ih = (torch.minimum(y2[:, None], y2[None]) - torch.maximum(y1[:, None], y1[None])).clamp_min(0)
    iw = (torch.minimum(x2[:, None], x2[None]) - torch.maximum(x1[:, None], x1[None])).clamp_min(0)
    inter = ih * iw
    union = area[:, None] + area[None] - inter
    ok = (area[:, None] > 0) & (area[None] > 0) & (union > 0)
    return torch.where(ok, inter / torch.where(ok, union, torch.ones_like(union)),
                       torch.zeros_like(inter))


@register("NonMaxSuppression", since=10, host_inputs=(2, 3, 4))
def _nms(node: Node):
    center = bool(node.attr("center_point_box", 0))

    def nms(xs):
        xs = list(xs) + [None] * (5 - len(xs))
        boxes, scores, max_out, iou_thr, score_thr = xs
        limit = int(max_out.reshape(-1).tolist()[0]) if max_out is not None and max_out.numel() else 0
        iou_t = float(iou_thr.reshape(-1).tolist()[0]) if iou_thr is not None and iou_thr.numel() else 0.0
        score_t = float(score_thr.reshape(-1).tolist()[0]) \
            if score_thr is not None and score_thr.numel() else None
        if limit <= 0:
            return [torch.zeros((0, 3), dtype=torch.int64, device=boxes.device)]
        # The greedy selection is sequential by nature and its output size depends on the data:
        # IoUs are computed in one batch per class, the loop runs once per *kept* box.
        corners = _corners(boxes.float(), center)
        selected: list[tuple[int, int, int]] = []
        for b in range(scores.shape[0]):
            iou_all = _iou(corners[b]).cpu()
            for c in range(scores.shape[1]):
                s = scores[b, c].float().cpu()
                order = torch.sort(s, descending=True, stable=True).indices
                if score_t is not None:
                    order = order[s[order] > score_t]
                if order.numel() == 0:
                    continue
                over = iou_all[order][:, order] > iou_t
                alive = torch.ones(order.numel(), dtype=torch.bool)
                kept = 0
                while kept < limit:
                    rest = torch.nonzero(alive)
                    if rest.numel() == 0:
                        break
                    i = int(rest[0, 0])
                    selected.append((b, c, int(order[i])))
                    kept += 1
                    alive &= ~over[i]
                    alive[i] = False
        out = torch.tensor(selected, dtype=torch.int64).reshape(-1, 3)
        return [out.to(boxes.device)]
    return nms


@register("RoiAlign", since=10)
def _roi_align(node: Node):
    mode = node.attr("mode", "avg")
    oh, ow = node.attr("output_height", 1), node.attr("output_width", 1)
    ratio = node.attr("sampling_ratio", 0)
    scale = node.attr("spatial_scale", 1.0)
    # Opset 10 had no half-pixel offset; 16 added the attribute with half_pixel as default.
    half_pixel = node.opset >= 16 and node.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"

    def axis_samples(start, size, bins, grid, G, limit):
        """Per ROI, bin and sample: (low index, high index, low weight, high weight)."""
        R = start.shape[0]
        binsz = size / bins
        p = torch.arange(bins, device=start.device, dtype=start.dtype).reshape(1, bins, 1)
        i = torch.arange(G, device=start.device, dtype=start.dtype).reshape(1, 1, G)
        g = grid.to(start.dtype).reshape(R, 1, 1)
        pos = start.reshape(R, 1, 1) + p * binsz.reshape(R, 1, 1) + (i + 0.5) * binsz.reshape(R, 1, 1) / g.clamp_min(1)
        valid = (i < g) & (pos >= -1.0) & (pos <= limit)
        pos = pos.clamp_min(0)
        low = pos.floor().long()
        at_edge = low >= limit - 1
        low = torch.where(at_edge, torch.full_like(low, limit - 1), low)
        high = torch.where(at_edge, low, low + 1)
        pos = torch.where(at_edge, low.to(pos.dtype), pos)
        frac = pos - low.to(pos.dtype)
        zero = torch.zeros_like(frac)
        return low, high, torch.where(valid, 1 - frac, zero), torch.where(valid, frac, zero), i < g

    def roi_align(xs):
        x, rois, batch = xs
        N, C, H, W = x.shape
        R = rois.shape[0]
        r = rois.to(torch.float64 if x.dtype == torch.float64 else torch.float32) * scale
        if half_pixel:
            r = r - 0.5
        x1, y1, x2, y2 = r.unbind(1)
        rw, rh = x2 - x1, y2 - y1
        if not half_pixel:
            rw, rh = rw.clamp_min(1.0), rh.clamp_min(1.0)
        if ratio > 0:
            gh = torch.full((R,), ratio, device=x.device)
            gw = gh
            Gh = Gw = ratio
        else:
            gh, gw = torch.ceil(rh / oh).long(), torch.ceil(rw / ow).long()
            # The adaptive grid size depends on the boxes: read its maximum once.
            Gh, Gw = (max(int(v), 1) for v in torch.stack([gh.max(), gw.max()]).tolist()) \
                if R else (1, 1)
        yl, yh, wyl, wyh, vy = axis_samples(y1, rh, oh, gh, Gh, H)   # (R, oh, Gh)
        xl, xh, wxl, wxh, vx = axis_samples(x1, rw, ow, gw, Gw, W)   # (R, ow, Gw)
        flat = x.permute(0, 2, 3, 1).reshape(N * H * W, C)
        base = (batch.to(x.device).long() * H * W).reshape(R, 1, 1, 1, 1)
        acc = None
        for yi, wy in ((yl, wyl), (yh, wyh)):
            for xi, wx in ((xl, wxl), (xh, wxh)):
                idx = base + (yi * W).reshape(R, oh, Gh, 1, 1) + xi.reshape(R, 1, 1, ow, Gw)
                w = wy.reshape(R, oh, Gh, 1, 1) * wx.reshape(R, 1, 1, ow, Gw)
                v = flat[idx.reshape(-1)].reshape(R, oh, Gh, ow, Gw, C) * w.unsqueeze(-1).to(x.dtype)
                acc = v if acc is None else (acc + v if mode == "avg" else torch.maximum(acc, v))
        in_grid = (vy.reshape(R, 1, Gh, 1, 1) & vx.reshape(R, 1, 1, 1, Gw)).unsqueeze(-1)
        if mode == "avg":
            count = (gh * gw).clamp_min(1).to(x.dtype).reshape(R, 1, 1, 1)
            out = torch.where(in_grid, acc, torch.zeros_like(acc)).sum((2, 4)) / count
        else:
            out = torch.where(in_grid, acc, torch.full_like(acc, -math.inf)).amax((2, 4))
            out = torch.where(torch.isinf(out), torch.zeros_like(out), out)
        return [out.permute(0, 3, 1, 2).contiguous()]
    return roi_align


_GRID_MODES = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest",
               "bicubic": "bicubic", "cubic": "bicubic"}


@register("GridSample", since=16)
def _grid_sample(node: Node):
    mode = _GRID_MODES[node.attr("mode", "linear" if node.opset >= 20 else "bilinear")]
    padding = node.attr("padding_mode", "zeros")
    corners = bool(node.attr("align_corners", 0))
    return lambda xs: [F.grid_sample(xs[0], xs[1].to(xs[0].dtype), mode=mode, padding_mode=padding,
                                     align_corners=corners)]


@register("AffineGrid", since=20, host_inputs=(1,))
def _affine_grid(node: Node):
    corners = bool(node.attr("align_corners", 0))

    def grid(xs):
        size = [int(v) for v in xs[1].tolist()]
        return [F.affine_grid(xs[0], size, align_corners=corners)]
    return grid


@register("Col2Im", since=18, host_inputs=(1, 2))
def _col2im(node: Node):
    dil, pads, strides = node.attr("dilations"), node.attr("pads"), node.attr("strides")

    def col2im(xs):
        x, image, block = xs[0], [int(v) for v in xs[1].tolist()], [int(v) for v in xs[2].tolist()]
        n = len(image)
        p = list(pads or [0] * 2 * n)
        begins, ends = p[:n], p[n:]
        d, s = list(dil or [1] * n), list(strides or [1] * n)
        if n == 2 and begins == ends:
            return [F.fold(x, image, block, dilation=d, padding=begins, stride=s)]
        return [_col2im_nd(x, image, block, d, begins, ends, s)]
    return col2im


def _col2im_nd(x: torch.Tensor, image: list[int], block: list[int], dil: list[int],
               begins: list[int], ends: list[int], strides: list[int]) -> torch.Tensor:
    """Col2Im for any number of spatial dims: one index_add of every column entry."""
    n = len(image)
    grid = [(image[i] + begins[i] + ends[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
            for i in range(n)]
    dev = x.device
    # Position along each dim of (kernel offset k, block location l): l*stride + k*dil - pad.
    pos = []
    for i in range(n):
        k = torch.arange(block[i], device=dev).reshape(-1, 1)
        l = torch.arange(grid[i], device=dev).reshape(1, -1)
        pos.append(l * strides[i] + k * dil[i] - begins[i])
    flat = torch.zeros((), dtype=torch.long, device=dev)
    ok = torch.ones((), dtype=torch.bool, device=dev)
    for i in range(n):
        # Dims of the result: (k_0..k_{n-1}, l_0..l_{n-1}); put dim i's k and l in place.
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = block[i], grid[i]
        pi = pos[i].reshape(shape)
        flat = flat * image[i] + pi
        ok = ok & (pi >= 0) & (pi < image[i])
    flat, ok = flat.reshape(-1), ok.reshape(-1)
    N, CK, L = x.shape
    C = CK // math.prod(block)
    cols = x.reshape(N, C, -1)[..., ok]
    out = torch.zeros(N, C, math.prod(image), dtype=x.dtype, device=dev)
    out.index_add_(2, flat[ok], cols)
    return out.reshape(N, C, *image)
