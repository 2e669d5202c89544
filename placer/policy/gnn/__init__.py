"""The graph policy: one network that places any graph on any cluster (issue 29).

`features.py` (what it sees), `model.py` (`GraphPlacementPolicy`), `episode.py` (a graph on a
cluster, simulated), `placing.py` (zero-shot placing), `learn.py` (REINFORCE), `pretrain.py` (across
the corpus), `rollouts.py` (rollouts on Ray workers), `checkpoint.py` (files, the shipped one).
"""

from placer.policy.gnn.checkpoint import PRETRAINED, load_policy, save_policy
from placer.policy.gnn.model import GraphPlacementPolicy, PolicyConfig

__all__ = ["GraphPlacementPolicy", "PolicyConfig", "load_policy", "save_policy", "PRETRAINED"]
