"""What a training run starts from, kept in its folder: `--resume` rebuilds none of it.

Before its first update a run profiles the devices (or reads the profile other runs share),
groups the graph, picks the warm start and, on a described cluster, runs local search. Each of
these goes into the run folder as soon as it is known: the profile as `profile.json`, the rest
in `start.pt` (written atomically, as the checkpoint is). A resumed run reads them back instead
of building them again from caches that other runs share and may have rewritten meanwhile, so
that it ends where an uninterrupted run ends. A run cut during local search keeps the search's
state there too, and goes on from it.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from placer.costmodel.profile import Profile
from placer.errors import PlacerError
from placer.graph.grouping import Grouping
from placer.placement import Placement
from placer.policy.budget import POLISH, SampleBudget
from placer.policy.checkpoint import differing_key, save_atomically
from placer.policy.summary_file import RunSummary
from placer.policy.search_warm_start import SearchedStart
from placer.policy.warm_start import WarmStart

FORMAT = "placer.run-start/1"
FILENAME = "start.pt"
PROFILE = "profile.json"


class RunStart:
    """The run folder's record of what the run started from; each part None until it is known."""

    def __init__(self, run_dir: Path, data: dict[str, Any] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.data = data or {"format": FORMAT}

    @classmethod
    def begin(cls, run_dir: Path, identity: dict[str, Any]) -> RunStart:
        """A new run's record, saved at once: the folder is a run that `--resume` accepts."""
        start = cls(run_dir, {"format": FORMAT, "identity": identity})
        start._save()
        return start

    @classmethod
    def resume(cls, run_dir: Path, identity: dict[str, Any], graph=None) -> RunStart:
        """The record of the run in `run_dir`, refused when it was started with other options
        (`graph`: the `OpGraph`, whose hash placer recorded before is its too, `differing_key`)."""
        path = Path(run_dir) / FILENAME
        if not path.is_file():   # a run from before the record existed: its summary says how local search ran
            return cls(run_dir, {"format": FORMAT, "identity": identity, **_from_summary(Path(run_dir))})
        try:
            data = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # torch raises many types for a damaged file
            raise PlacerError(f"{path} is corrupt ({type(exc).__name__}); train into a new --run-dir") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlacerError(f"{path} is not a placer run record; train into a new --run-dir")
        key = differing_key(data["identity"], identity, graph)
        if key is not None:
            raise PlacerError(f"{run_dir} was started with a different {key.replace('_', ' ')} "
                              f"({data['identity'].get(key)!r}, this run has {identity[key]!r}); resume with the "
                              "same options or train into a new --run-dir")
        data["identity"].update(identity)   # the graph's hash as it is now, so that it is not looked up again
        return cls(run_dir, data)

    def _save(self) -> None:
        save_atomically(self.data, self.run_dir / FILENAME)

    def forget_unless_learning(self) -> None:
        """Remove the record and the profile copy of a run that never began learning (no checkpoint:
        refused before it), so that the folder takes a new run again."""
        from placer.policy.checkpoint import FILENAME as CHECKPOINT

        if not (self.run_dir / CHECKPOINT).exists():
            for name in (FILENAME, PROFILE):
                (self.run_dir / name).unlink(missing_ok=True)

    # --- the profile ---

    def profile(self) -> Profile | None:
        path = self.run_dir / PROFILE
        return Profile.load(path) if path.is_file() else None

    def keep_profile(self, profile: Profile) -> Path:
        """The run's own copy of the profile it learns on."""
        path = self.run_dir / PROFILE
        tmp = path.with_suffix(".json.tmp")
        profile.save(tmp)
        os.replace(tmp, path)
        return path

    # --- the grouping and the warm start ---

    def grouping(self) -> Grouping | None:
        g = self.data.get("grouping")
        return Grouping(**g) if g is not None else None

    def keep_grouping(self, grouping: Grouping) -> None:
        self.data["grouping"] = asdict(grouping)
        self._save()

    def warm(self) -> WarmStart | None:
        w = self.data.get("warm")
        return None if w is None else WarmStart(**{**w, "grouping": Grouping(**w["grouping"])})

    def keep_warm(self, warm: WarmStart) -> None:
        self.data["warm"] = asdict(warm)   # its grouping as a dict too
        self.keep_grouping(warm.grouping)

    # --- the samples ---

    def budget(self, total: int | None, polish: float) -> SampleBudget:
        """The run's sample ledger (`placer.policy.budget`) for a session given `total` samples:
        what every phase drew in earlier sessions stays counted. A folder from before the ledger
        was kept here has its earlier polish in summary.json."""
        saved = self.data.get("budget")
        if saved is None:
            record = _summary(self.run_dir).get("polish") or {}
            self.data["polish"] = record or None
            saved = {"drawn": {POLISH: record["samples"]}} if record.get("samples") else None
        return SampleBudget.resumed(saved, total, polish)

    def keep_budget(self, budget: SampleBudget, polish: dict[str, Any] | None = None) -> None:
        """The ledger as it stands, with the polish's record once it has started (what `--resume`
        needs to count an earlier polish once)."""
        self.data["budget"] = budget.to_dict()
        if polish is not None:
            self.data["polish"] = dict(polish)
        self._save()

    @property
    def polish_record(self) -> dict[str, Any] | None:
        return self.data.get("polish")

    # --- local search ---

    def searched(self, total: int) -> SearchedStart | None:
        """Local search's finished run, as the learner's first phase of a run of `total` samples."""
        s = self.data.get("searched")
        if s is None:
            return None
        return SearchedStart(self.warm(), Placement.from_dict(s["placement"]), s["budget"], total, s["samples"],
                             s["local_optimum"])

    def keep_searched(self, searched: SearchedStart, samples_per_update: int) -> None:
        self.data["searched"] = {"placement": searched.placement.to_dict(), "budget": searched.budget,
                                 "samples": searched.samples, "local_optimum": searched.local_optimum}
        self.data["samples_per_update"] = samples_per_update
        self.data.pop("search_progress", None)
        self.keep_warm(searched.warm)

    @property
    def samples_per_update(self) -> int | None:
        """REINFORCE's update size as the run first worked it out from what local search left."""
        return self.data.get("samples_per_update")

    @property
    def search_progress(self) -> dict[str, Any] | None:
        """Where a local search cut by Ctrl-C stood (`local_search(resume=...)`), and its budget."""
        return self.data.get("search_progress")

    def keep_search_progress(self, budget: int, state: dict[str, Any]) -> None:
        self.data["search_progress"] = {"budget": budget, "state": state}
        self._save()


def _summary(run_dir: Path) -> dict[str, Any]:
    """The learner's figures in the run's summary.json (`RunSummary.details`), {} where there is none."""
    summary = RunSummary.read(run_dir)
    return summary.details if summary is not None else {}


def _from_summary(run_dir: Path) -> dict[str, Any]:
    """What a run folder made before `start.pt` existed kept of its local search in summary.json:
    its budget (retraced from the start, the same search) and REINFORCE's update size."""
    searched = _summary(run_dir).get("local_search_warm_start") or {}
    if "budget" not in searched:
        return {}
    return {"search_progress": {"budget": searched["budget"], "state": None},
            **({"samples_per_update": searched["samples_per_update"]} if "samples_per_update" in searched else {})}
