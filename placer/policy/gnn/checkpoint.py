"""Graph policy checkpoints: the network's shape and weights, and what made them.

A checkpoint holds no graph or cluster: the same file places any graph on any number of devices.
The shipped one, `pretrained/policy.pt`, comes with `pretrained/policy.json` (the command that
made it and its held-out figures).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from placer.errors import PlacerError
from placer.policy.checkpoint import save_atomically
from placer.policy.gnn.model import GraphPlacementPolicy, PolicyConfig

FORMAT = "placer.gnn-policy/1"
PRETRAINED = Path(__file__).parent / "pretrained" / "policy.pt"


def save_policy(policy: GraphPlacementPolicy, path: str | Path, info: dict[str, Any] | None = None,
                extra: dict[str, Any] | None = None) -> Path:
    """Write `policy` to `path` with `info` (plain data: the command, figures); `extra` holds what
    resuming a run needs (optimizer state, counters) and is left out of a shipped checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # atomically, as a run's checkpoint: pre-training saves it when interrupted, and resumes from it
    return save_atomically({"format": FORMAT, "config": policy.config.to_dict(), "state_dict": policy.state_dict(),
                            "info": info or {}, **({"extra": extra} if extra else {})}, path)


def load_policy(path: str | Path = PRETRAINED) -> tuple[GraphPlacementPolicy, dict[str, Any]]:
    """The policy in `path` (default: the shipped one) and its info; `PlacerError` for a file that is not one."""
    policy, info, _ = load_checkpoint(path)
    return policy, info


def load_checkpoint(path: str | Path) -> tuple[GraphPlacementPolicy, dict[str, Any], dict[str, Any]]:
    """`load_policy` plus the resume state (empty for a shipped checkpoint)."""
    path = Path(path)
    if not path.is_file():
        hint = ("the package ships it; reinstall placer" if path == PRETRAINED
                else "give the policy.pt a placer pretrain run wrote")
        raise PlacerError(f"no graph policy checkpoint at {path}; {hint}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:   # torch raises many kinds for a file that is not a checkpoint
        raise PlacerError(f"cannot read {path} as a graph policy checkpoint ({exc}); give a policy.pt that placer "
                          "pretrain wrote") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PlacerError(f"{path} is not a graph policy checkpoint (format {FORMAT}); give a policy.pt that placer "
                          "pretrain wrote (a placer train checkpoint.pt is a per-graph seq2seq policy)")
    policy = GraphPlacementPolicy(PolicyConfig(**data["config"]))
    policy.load_state_dict(data["state_dict"])
    policy.eval()
    return policy, data.get("info", {}), data.get("extra", {})


def read_info(path: str | Path = PRETRAINED) -> dict[str, Any]:
    """The JSON beside a checkpoint (the command that made it, its held-out figures), or {}."""
    sidecar = Path(path).with_suffix(".json")
    return json.loads(sidecar.read_text()) if sidecar.is_file() else {}
