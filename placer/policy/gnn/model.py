"""`GraphPlacementPolicy`: a graph neural network that places any graph on any cluster.

Groups are embedded by message passing over the op-group DAG (PyTorch Geometric's
`TransformerConv`, attention weighted by the bytes crossing each edge); devices by a small network
over their datasheet and link figures, with the mean over the cluster added (DeepSets), so that a
device is seen beside the others. Every (group, device) pair gets one logit from the two
embeddings, the cost model's time of that group there and the current placement, so the same
weights serve any number of groups and devices.

Decoding is iterative improvement (as GiPH): round 0 places every group at once from nothing,
then each further round places every group again seeing the placement of the round before (which
device holds each group's neighbours' bytes, each device's load and the load a group would add).
One pass of message passing serves every round; a round is one (groups x devices) scoring, so
Inception-v3 places in a few milliseconds of network time. Each round's placement is a complete
one: training rewards every round, and `place` keeps the fastest round in the simulator.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch_geometric.nn import TransformerConv

from placer.env.absolute_features import DEVICE_FEATURES, GROUP_FEATURES, PAIR_FEATURES
from placer.policy.gnn.features import EDGE_FEATURES
from placer.policy.gnn.tensors import FeatureTensors

STATE_FEATURES = 5   # on this device now, neighbours' bytes there, its load, the load with this group, not placed


@dataclass(frozen=True)
class PolicyConfig:
    """The network's shape: what a checkpoint needs to rebuild it."""

    hidden: int = 64
    layers: int = 3
    heads: int = 2
    rounds: int = 3

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))


class GraphPlacementPolicy(nn.Module):
    """Logits per (group, device), for every round of improvement (see the module doc)."""

    def __init__(self, config: PolicyConfig = PolicyConfig()) -> None:
        super().__init__()
        self.config = config
        H = config.hidden
        self.group_in = _mlp(GROUP_FEATURES, H, H)
        self.convs = nn.ModuleList(TransformerConv(H, H // config.heads, heads=config.heads, edge_dim=EDGE_FEATURES)
                                   for _ in range(config.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(H) for _ in range(config.layers))
        self.device_in = _mlp(DEVICE_FEATURES, H, H)
        self.device_context = nn.Linear(H, H)
        self.group_proj = nn.Linear(2 * H, H)   # the group and the graph's mean
        self.device_proj = nn.Linear(H, H, bias=False)
        self.pair_proj = nn.Linear(PAIR_FEATURES + STATE_FEATURES, H, bias=False)
        self.score = _mlp(H, H, 1)

    # --- the network ---------------------------------------------------------------------------

    def encode(self, x: FeatureTensors) -> tuple[torch.Tensor, torch.Tensor]:
        """Group embeddings (G, H) after message passing, device embeddings (D, H) in their cluster."""
        h = self.group_in(x.groups)
        for conv, norm in zip(self.convs, self.norms):
            h = norm(h + torch.relu(conv(h, x.edge_index, x.edge_attr)))
        e = self.device_in(x.device)
        e = e + self.device_context(e.mean(dim=0, keepdim=True))
        g = self.group_proj(torch.cat([h, h.mean(dim=0, keepdim=True).expand_as(h)], dim=1))
        return g, self.device_proj(e)

    def state(self, x: FeatureTensors, assign: torch.Tensor) -> torch.Tensor:
        """(K, G, D, STATE_FEATURES) of the current placements `assign` (K, G); a group at index D
        is not placed yet (round 0 from nothing)."""
        G, D = x.mask.shape
        on = torch.nn.functional.one_hot(assign, D + 1)[..., :D].float()          # (K, G, D)
        src, dst = x.edge_index
        near = torch.zeros_like(on).index_add_(1, src, on[:, dst] * x.edge_bytes[None, :, None])
        near = near / near.sum(dim=2, keepdim=True).clamp_min(1.0)
        load = (on * x.group_time).sum(dim=1, keepdim=True) / x.ideal_load        # (K, 1, D)
        moved = load + (1.0 - on) * x.group_time / x.ideal_load
        unplaced = (assign == D).float()[:, :, None].expand_as(on)
        return torch.stack([on, near, torch.log1p(load).expand_as(on), torch.log1p(moved), unplaced], dim=3)

    def logits(self, x: FeatureTensors, encoded: tuple[torch.Tensor, torch.Tensor],
               assign: torch.Tensor) -> torch.Tensor:
        """(K, G, D) masked logits of one round, given the previous round's placements (K, G)."""
        g, e = encoded
        pair = torch.cat([x.pair.expand(assign.shape[0], -1, -1, -1), self.state(x, assign)], dim=3)
        hidden = torch.relu(g[None, :, None, :] + e[None, None, :, :] + self.pair_proj(pair))
        out = self.score(hidden).squeeze(3)
        return out.masked_fill(~x.mask, -math.inf)

    # --- rounds of improvement -----------------------------------------------------------------

    @staticmethod
    def unplaced(x: FeatureTensors, samples: int) -> torch.Tensor:
        """(K, G) starting placements of nothing: round 0 places from scratch."""
        G, D = x.mask.shape
        return torch.full((samples, G), D, dtype=torch.long)

    @torch.no_grad()
    def sample(self, x: FeatureTensors, samples: int, generator: torch.Generator | None = None,
               greedy: bool = False, initial: torch.Tensor | None = None, stay: float = 0.0) -> torch.Tensor:
        """(K, R, G) device indices: every round's placement of K samples (greedy: the most likely),
        each improving on the one before; round 0 on `initial` (K, G) (default: nothing placed).
        `stay`: a bonus on the logit of each placed group's current device, so that a sampled
        round moves fewer groups, mostly those the policy most wants moved (an improvement step,
        as GiPH's)."""
        encoded = self.encode(x)
        assign = initial if initial is not None else self.unplaced(x, samples)
        rounds = []
        for _ in range(self.config.rounds):
            logits = self.logits(x, encoded, assign)
            if stay:
                placed = assign < logits.shape[2]   # D: not placed yet
                current = torch.zeros_like(logits).scatter_(2, assign.clamp(max=logits.shape[2] - 1)[..., None], 1.0)
                logits = logits + stay * current * placed[..., None]
            if greedy:
                assign = logits.argmax(dim=2)
            else:
                probs = torch.softmax(logits, dim=2).reshape(-1, logits.shape[2])
                assign = torch.multinomial(probs, 1, generator=generator).reshape(logits.shape[:2])
            rounds.append(assign)
        return torch.stack(rounds, dim=1)

    def log_prob(self, x: FeatureTensors, actions: torch.Tensor,
                 initial: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability (K, R) of each round's placement of `actions` (K, R, G) and the mean
        entropy per group (K, R), with gradients: the previous round's placement (round 0:
        `initial`) is each round's state."""
        encoded = self.encode(x)
        previous = initial if initial is not None else self.unplaced(x, actions.shape[0])
        logps, entropies = [], []
        for r in range(actions.shape[1]):
            logits = self.logits(x, encoded, actions[:, r - 1] if r else previous)
            logp = torch.log_softmax(logits, dim=2)
            chosen = logp.gather(2, actions[:, r, :, None]).squeeze(2)
            p = logp.exp()
            entropies.append(-(p * torch.where(x.mask, logp, torch.zeros_like(logp))).sum(dim=2).mean(dim=1))
            logps.append(chosen.sum(dim=1))
        return torch.stack(logps, dim=1), torch.stack(entropies, dim=1)

    def place(self, graph, cluster, cost=None, greedy: bool = True, seed: int = 0):
        """A `Placement` of `graph` on `cluster`: every round's placement (greedy, or sampled with
        `seed`) simulated with `cost` (default: the cluster's roofline model), the fastest kept."""
        from placer.policy.gnn.placing import place

        return place(self, graph, cluster, cost, greedy=greedy, seed=seed)
