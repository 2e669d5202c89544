"""A MobileNetV2-style classifier, as a user would export one (Sandler et al., 2018: a 3x3 stem,
inverted residual blocks of a 1x1 expansion, a 3x3 depthwise convolution and a 1x1 linear
projection with a shortcut where shapes allow, a 1x1 head, pooling and a linear classifier),
with seeded weights. Not in the zoo: it stands for a model placer has not seen, with ops the zoo
has few of (depthwise grouped convolutions, Clip for ReLU6).

    python -m graphs.outside.mobilenet --out mobilenet.onnx --size 224
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx
import torch
from torch import nn

from graphs.outside import export_image_model

# MobileNetV2's table 2: expansion t, output channels c, repeats n, first stride s
BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
CLASSES = 1000


def _conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """Expand (1x1), filter each channel (3x3 depthwise), project (1x1, no activation)."""

    def __init__(self, cin: int, cout: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = cin * expansion
        layers = [] if expansion == 1 else [_conv(cin, hidden, 1)]
        layers += [_conv(hidden, hidden, 3, stride, groups=hidden), _conv(hidden, cout, 1, act=False)]
        self.body = nn.Sequential(*layers)
        self.shortcut = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.shortcut else y


class MobileNetV2(nn.Module):
    def __init__(self, width: float = 1.0, classes: int = CLASSES) -> None:
        super().__init__()

        def scaled(c: int) -> int:   # channels rounded to a multiple of 8, as the paper's code does
            return max(8, int(c * width + 4) // 8 * 8)

        cin = scaled(32)
        layers: list[nn.Module] = [_conv(3, cin, 3, 2)]
        for t, c, n, s in BLOCKS:
            for i in range(n):
                layers.append(InvertedResidual(cin, scaled(c), s if i == 0 else 1, t))
                cin = scaled(c)
        head = max(1280, scaled(1280)) if width > 1.0 else 1280
        layers.append(_conv(cin, head, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(head, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images).mean((2, 3)))


def export_mobilenet(path: str | Path, size: int = 224, batch: int = 1, width: float = 1.0, seed: int = 0) -> Path:
    """Export the classifier (seeded weights, batch norm folded) as ONNX with a static
    `batch x 3 x size x size` input named `images`; returns the path."""
    return export_image_model(lambda: MobileNetV2(width), path, size, batch, seed, "logits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the ONNX file to write")
    parser.add_argument("--size", type=int, default=224, help="input height and width (a multiple of 32)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--width", type=float, default=1.0, help="the width multiplier (channels scaled by it)")
    args = parser.parse_args()
    path = export_mobilenet(args.out, args.size, args.batch, args.width)
    print(f"wrote {path} ({len(onnx.load(path).graph.node)} nodes)")


if __name__ == "__main__":
    main()
