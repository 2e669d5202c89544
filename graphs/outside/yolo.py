"""A YOLO-style one-stage detector, as a user would export one (YOLOv8's layout at its smallest
width: a CSP backbone of C2f blocks, an SPPF block, a path-aggregation neck and a decoupled head
on three scales), with seeded weights. Not in the zoo: it stands for a model placer has not seen.

    python -m graphs.outside.yolo --out yolo.onnx --size 320
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx
import torch
from torch import nn

from graphs.outside import export_image_model

WIDTHS = (16, 32, 64, 128, 256)   # YOLOv8n's channels per stage
CLASSES = 80


class Conv(nn.Module):
    """Convolution, batch norm and SiLU: YOLO's one building block."""

    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1, self.cv2 = Conv(c, c, 3), Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """Split the channels in two, run n bottlenecks on one half, concatenate every stage."""

    def __init__(self, cin: int, cout: int, n: int, shortcut: bool = True) -> None:
        super().__init__()
        self.c = cout // 2
        self.cv1 = Conv(cin, 2 * self.c)
        self.cv2 = Conv((2 + n) * self.c, cout)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.cv1 = Conv(cin, cin // 2)
        self.cv2 = Conv(cin // 2 * 4, cout)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.pool(x)
        y2 = self.pool(y1)
        return self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))


class Detect(nn.Module):
    """Decoupled head per scale: box distribution (4 x 16 bins) and class scores, decoded to boxes."""

    def __init__(self, channels: tuple[int, ...], classes: int = CLASSES, bins: int = 16) -> None:
        super().__init__()
        c2, c3 = max(16, channels[0] // 4, 4 * bins), max(channels[0], min(classes, 100))
        self.bins, self.classes = bins, classes
        self.box = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * bins, 1))
                                 for c in channels)
        self.cls = nn.ModuleList(nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, classes, 1))
                                 for c in channels)
        self.register_buffer("proj", torch.arange(bins, dtype=torch.float32))

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        outputs = []
        for x, box, cls in zip(features, self.box, self.cls):
            b, _, h, w = x.shape
            dist = box(x).view(b, 4, self.bins, h * w).softmax(2)
            ltrb = (dist * self.proj.view(1, 1, -1, 1)).sum(2)           # expected distance per side
            ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                    indexing="ij")
            anchor = torch.stack([xs, ys]).view(1, 2, h * w) + 0.5
            stride = 320.0 / h
            boxes = torch.cat([anchor - ltrb[:, :2], anchor + ltrb[:, 2:]], 1) * stride
            outputs.append(torch.cat([boxes, cls(x).view(b, self.classes, h * w).sigmoid()], 1))
        return torch.cat(outputs, 2)


class YoloDetector(nn.Module):
    def __init__(self, widths: tuple[int, ...] = WIDTHS) -> None:
        super().__init__()
        w = widths
        self.stem = nn.Sequential(Conv(3, w[0], 3, 2), Conv(w[0], w[1], 3, 2), C2f(w[1], w[1], 1))
        self.p3 = nn.Sequential(Conv(w[1], w[2], 3, 2), C2f(w[2], w[2], 2))
        self.p4 = nn.Sequential(Conv(w[2], w[3], 3, 2), C2f(w[3], w[3], 2))
        self.p5 = nn.Sequential(Conv(w[3], w[4], 3, 2), C2f(w[4], w[4], 1), SPPF(w[4], w[4]))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top4 = C2f(w[4] + w[3], w[3], 1, shortcut=False)
        self.top3 = C2f(w[3] + w[2], w[2], 1, shortcut=False)
        self.down3 = Conv(w[2], w[2], 3, 2)
        self.bottom4 = C2f(w[2] + w[3], w[3], 1, shortcut=False)
        self.down4 = Conv(w[3], w[3], 3, 2)
        self.bottom5 = C2f(w[3] + w[4], w[4], 1, shortcut=False)
        self.detect = Detect((w[2], w[3], w[4]))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        p3 = self.p3(self.stem(images))
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        t4 = self.top4(torch.cat([self.up(p5), p4], 1))
        t3 = self.top3(torch.cat([self.up(t4), p3], 1))
        b4 = self.bottom4(torch.cat([self.down3(t3), t4], 1))
        b5 = self.bottom5(torch.cat([self.down4(b4), p5], 1))
        return self.detect([t3, b4, b5])


def export_yolo(path: str | Path, size: int = 320, batch: int = 1, seed: int = 0) -> Path:
    """Export the detector (seeded weights, batch norm folded) as ONNX with a static
    `batch x 3 x size x size` input named `images`; returns the path."""
    return export_image_model(YoloDetector, path, size, batch, seed, "detections")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the ONNX file to write")
    parser.add_argument("--size", type=int, default=320, help="input height and width (a multiple of 32)")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    path = export_yolo(args.out, args.size, args.batch)
    print(f"wrote {path} ({len(onnx.load(path).graph.node)} nodes)")


if __name__ == "__main__":
    main()
