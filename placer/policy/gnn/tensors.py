"""The graph policy's inputs as torch tensors, made once per graph and cluster."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from placer.policy.gnn.features import GraphFeatures


@dataclass
class FeatureTensors:
    """`GraphFeatures` as torch tensors, made once per graph and cluster."""

    groups: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    edge_bytes: torch.Tensor
    device: torch.Tensor
    pair: torch.Tensor
    group_time: torch.Tensor   # inf replaced by 0 (masked anyway)
    ideal_load: float          # the fastest time of every group, shared out over the devices
    mask: torch.Tensor

    @classmethod
    def of(cls, f: GraphFeatures) -> "FeatureTensors":
        finite = np.where(np.isfinite(f.group_time), f.group_time, 0.0)
        best = np.where(f.mask, f.group_time, np.inf).min(axis=1)
        ideal = float(np.sum(best[np.isfinite(best)])) / max(len(f.devices), 1)
        return cls(torch.from_numpy(f.groups), torch.from_numpy(f.edge_index), torch.from_numpy(f.edge_attr),
                   torch.from_numpy(f.edge_bytes).float(), torch.from_numpy(f.device), torch.from_numpy(f.pair),
                   torch.from_numpy(finite).float(), max(ideal, 1e-12), torch.from_numpy(f.mask))
