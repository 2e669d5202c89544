"""Checkpoints of a training run: everything `--resume` needs to continue exactly.

One file, `checkpoint.pt` in the run folder, written atomically (temporary file, then rename) so
that an interrupted save never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from placer.errors import PlacerError
from placer.policy.summary_file import FILENAME as FILENAME_SUMMARY, RunSummary

FORMAT = "placer.checkpoint/1"
FILENAME = "checkpoint.pt"


def save_atomically(data: dict[str, Any], path: Path) -> Path:
    """`torch.save` to a temporary file beside `path`, then a rename: an interrupted save leaves the
    previous file whole."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(data, tmp)
    os.replace(tmp, path)
    return path


def save_json(path: Path, data: dict[str, Any]) -> Path:
    """A JSON file written atomically: a Ctrl-C while it is written leaves the previous one whole."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def save_summary(run_dir: Path, summary: RunSummary) -> Path:
    """summary.json in the run folder, its one writer (`RunSummary.to_dict`), written atomically: a
    resume reads it back."""
    return save_json(Path(run_dir) / FILENAME_SUMMARY, summary.to_dict())


def save_checkpoint(run_dir: Path, data: dict[str, Any]) -> Path:
    """Write `data` (policy, optimiser, baseline, cache, RNG states, counters) to the run folder."""
    return save_atomically({"format": FORMAT, **data}, Path(run_dir) / FILENAME)


def differing_key(recorded: dict[str, Any], expect: dict[str, Any], graph=None) -> str | None:
    """The first key of `expect` whose value `recorded` has not, or None; the graph hash recorded
    matches when it names `graph` (`OpGraph.is_named_by`: a run begun before the hash changed)."""
    for key, value in expect.items():
        found = recorded.get(key)
        if found != value and not (key == "graph_sha256" and found and graph is not None and graph.is_named_by(found)):
            return key
    return None


def load_checkpoint(run_dir: Path, expect: dict[str, Any], defaults: dict[str, Any] | None = None,
                    graph=None) -> dict[str, Any]:
    """Read the run folder's checkpoint; refuse a corrupt one or one made for something else.

    `expect` maps keys (graph hash, devices, grouping, policy shape) to the values this run has;
    `defaults` gives the value of a key that checkpoints written by older versions lack; `graph`
    (the `OpGraph`) accepts the graph hash placer recorded for it before (`differing_key`).
    """
    path = Path(run_dir) / FILENAME
    if not path.is_file():
        raise PlacerError(f"no checkpoint in {run_dir} to resume from; drop --resume to start a new run there")
    try:
        data = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises many types for a damaged file
        raise PlacerError(f"checkpoint {path} is corrupt ({type(exc).__name__}); "
                          "delete it or train into a new --run-dir") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PlacerError(f"{path} is not a placer checkpoint; delete it or train into a new --run-dir")
    for key, value in (defaults or {}).items():
        data.setdefault(key, value)
    key = differing_key(data, expect, graph)
    if key is not None:
        raise PlacerError(f"checkpoint {path} was made with a different {key.replace('_', ' ')} "
                          f"({data.get(key)!r}, this run has {expect[key]!r}); resume with the same options "
                          "or train into a new --run-dir")
    return data
