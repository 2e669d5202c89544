"""ResNet-50 (He et al. 2016), the layer layout of torchvision's `resnet50` (v1.5: the stride sits
on the 3x3 convolution of each bottleneck). 224x224 RGB input, 1000 classes, 25.6M parameters."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from graphs.init import init_conv_net
from graphs.spec import ZooModel


@dataclass(frozen=True)
class Options:
    batch: int = 1


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand (x4), plus the shortcut."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + shortcut)


class ResNet50(nn.Module):
    """Stem, four stages of 3/4/6/3 bottlenecks, global pool, classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages = []
        cin = 64
        for index, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
            layers = []
            for block in range(blocks):
                stride = 2 if index > 0 and block == 0 else 1
                layers.append(Bottleneck(cin, width, stride))
                cin = width * Bottleneck.expansion
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        init_conv_net(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(options: Options) -> nn.Module:
    """ResNet-50 with seeded weights (the caller seeds the RNG)."""
    return ResNet50()


def example_inputs(options: Options) -> tuple[torch.Tensor, ...]:
    """One random 224x224 RGB batch."""
    return (torch.randn(options.batch, 3, 224, 224),)


ENTRY = ZooModel(
    name="resnet50",
    description="ResNet-50 v1.5 image classifier (torchvision layout), 224x224",
    options=Options, model=build, example_inputs=example_inputs,
    input_names=("input",), output_names=("logits",),
)
