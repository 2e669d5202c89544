"""summary.json: what a training run reports, as one typed record with a schema version.

Both learners write it through `RunSummary` (`placer.policy.checkpoint.save_summary` is the one
writer), and `placer compare --include-rl` and `--resume` read it back through the same class.
The fields every run has are typed here; each learner's own figures (the seq2seq learner's
confirmation and learning curve, the graph policy's zero-shot and closing figures) sit in
`details`, flat beside them in the file, so that a file reads as it always has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from placer.errors import PlacerError

SCHEMA = 2   # 1: the files written before the schema was kept (no "schema" key), read the same way
FILENAME = "summary.json"


@dataclass
class RunSummary:
    """A run's summary. Figures are seconds; None where nothing ran."""

    learner: str                          # "seq2seq" or "graph policy"
    graph: str                            # the model's file
    reward: str                           # where the samples' rewards came from: simulated, real or hybrid
    samples: int                          # every sample the run drew, in all its phases
    samples_by_reward: dict[str, int]     # of them, simulated and real
    best_step_time: float | None          # the placement written to placement.json
    best_source: str | None               # what found it
    interrupted: bool = False
    samples_by_phase: dict[str, int] | None = None   # the sample ledger's phases (`placer.policy.budget`)
    devices: list[str] | None = None
    wall_time_s: float | None = None      # the run's training time over all its sessions
    grouping: str | None = None           # how ops were grouped, and the groups: what random search reuses
    groups: int | None = None
    group_members: list[list[str]] | None = None
    measurer: dict[str, Any] | None = None    # what measured the reported figures, and its protocol
    simulator: dict[str, Any] | None = None   # what simulated the samples' rewards, and its protocol
    details: dict[str, Any] = field(default_factory=dict)   # the learner's own figures

    def to_dict(self) -> dict[str, Any]:
        """The file's form: the schema, the typed fields, then the learner's figures beside them."""
        core = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "details"}
        return {"schema": SCHEMA, **core, **self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any], learner: str | None = None) -> RunSummary:
        """A summary from its file's form (any schema up to this one); `learner` where the writer knows it."""
        data = dict(data)
        schema = data.pop("schema", 1)
        if not isinstance(schema, int) or schema > SCHEMA:
            raise PlacerError(f"summary.json has schema {schema!r}, newer than this placer reads ({SCHEMA}); "
                              "upgrade placer")
        if "seconds" in data and "wall_time_s" not in data:   # the graph policy's name for it in schema 1
            data["wall_time_s"] = data.pop("seconds")
        data.setdefault("learner", learner or ("graph policy" if "zero_shot_step_time" in data else "seq2seq"))
        names = {f.name for f in fields(cls)} - {"details"}
        core = {k: data.pop(k) for k in list(data) if k in names}
        core.setdefault("samples_by_reward", {})
        for key in ("graph", "reward", "best_step_time", "best_source"):
            core.setdefault(key, None)
        core.setdefault("samples", 0)
        return cls(**core, details=data)

    @classmethod
    def read(cls, run_dir: Path) -> RunSummary | None:
        """The summary in `run_dir` (or beside the placement file `run_dir` names), None when there is
        none; an unreadable one is refused in one line."""
        run_dir = Path(run_dir)
        path = (run_dir.parent if run_dir.is_file() else run_dir) / FILENAME
        if not path.is_file():
            return None
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError):
            raise PlacerError(f"{path} is not a placer run summary; train into a new --run-dir, or point at "
                              "a placement.json file alone") from None

    # The learner's figures read by their summary.json key, as a user reads the file.
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.to_dict()

    def __setitem__(self, key: str, value: Any) -> None:
        """Set a figure by its key: a typed field where there is one, else the learner's."""
        if key in {f.name for f in fields(self)} - {"details"}:
            setattr(self, key, value)
        else:
            self.details[key] = value
