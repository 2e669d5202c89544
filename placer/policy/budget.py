"""A run's samples (`--samples`): one ledger that every phase draws from, and the split rule.

A run given N samples spends them in phases, in this order: the graph policy's zero-shot start;
on a described cluster local search's own run; the learner (REINFORCE, or the graph policy's
fine-tune); the polish (local search's moves from the learned placement, in the simulator); the
plans (the plans users run and REINFORCE over plans, from the learned placement; on this
machine's devices its finalists measured; `placer.jobs.plan_phase`, `plan_phase_here`), whose
share is set aside before the learner starts; the graph policy's greedy chains at the end,
whose samples are set aside before the learner starts. A phase asks the ledger how many
samples it may draw in all (`allowance`) and records what it drew (`draw`); the ledger is saved
with the run and read back on `--resume`, so that a resumed run splits its samples exactly as an
uncut one. The one split rule: the polish takes a share `polish` of what the phases before the
learner leave, and the learner the rest, rounded in its favour.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from placer.errors import PlacerError

# The phases, in the order they draw; a run uses some of them.
ZERO_SHOT, LOCAL_SEARCH, REINFORCE, FINE_TUNE, POLISH, PLANS, GREEDY_END = (
    "zero_shot", "local_search", "reinforce", "fine_tune", "polish", "plans", "greedy_end")
PHASES = (ZERO_SHOT, LOCAL_SEARCH, REINFORCE, FINE_TUNE, POLISH, PLANS, GREEDY_END)
LEARNERS = (REINFORCE, FINE_TUNE)


def learner_share(left: int, polish: float) -> int:
    """Of the `left` samples, those the learner gets before the polish takes its share `polish`."""
    return left - int(left * polish)


@dataclass
class SampleBudget:
    """--samples (`total`; None: the run goes by time and nothing is counted against it), the
    polish's share, what each phase has drawn (`drawn`) and what later phases set aside (`reserved`)."""

    total: int | None
    polish: float = 0.0
    drawn: dict[str, int] = field(default_factory=dict)
    reserved: dict[str, int] = field(default_factory=dict)

    def draw(self, phase: str, samples: int) -> None:
        self.drawn[_known(phase)] = self.drawn.get(phase, 0) + samples

    def set_drawn(self, phase: str, samples: int) -> None:
        """What `phase` has drawn in all, as the phase counts it (the learner's own counter)."""
        self.drawn[_known(phase)] = samples

    def reserve(self, phase: str, samples: int) -> None:
        """Set `samples` aside for `phase`, which runs after phases that draw before it."""
        self.reserved[_known(phase)] = samples

    @property
    def spent(self) -> int:
        return sum(self.drawn.values())

    def left(self) -> int | None:
        return None if self.total is None else max(0, self.total - self.spent)

    def allowance(self, phase: str) -> int | None:
        """The samples `phase` may draw in all, what it drew already included: what the phases
        before it left, less what later phases set aside or drew already (an earlier session's
        polish stays counted when a resumed run learns on); the learner's less the polish's share."""
        if self.total is None:
            return None
        at = PHASES.index(_known(phase))
        before = sum(self.drawn.get(p, 0) for p in PHASES[:at])
        later = PHASES[at + 1:]
        room = max(0, self.total - before - sum(self.reserved.get(p, 0) for p in later))
        share = learner_share(room, self.polish) if phase in LEARNERS else room
        drawn_later = sum(max(0, self.drawn.get(p, 0) - self.reserved.get(p, 0)) for p in later)
        return max(0, min(share, room - drawn_later))

    def remaining(self, phase: str) -> int | None:
        """What `phase` may still draw."""
        allowed = self.allowance(phase)
        return None if allowed is None else max(0, allowed - self.drawn.get(phase, 0))

    def by_phase(self, *phases: str) -> dict[str, int]:
        """summary.json's `samples_by_phase`: each of `phases` with what it drew (0 when it did not run)."""
        return {p: self.drawn.get(p, 0) for p in phases}

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "polish": self.polish, "drawn": dict(self.drawn), "reserved": dict(self.reserved)}

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> SampleBudget:
        return cls(saved.get("total"), saved.get("polish", 0.0), dict(saved.get("drawn", {})),
                   dict(saved.get("reserved", {})))

    @classmethod
    def resumed(cls, saved: dict[str, Any] | None, total: int | None, polish: float) -> SampleBudget:
        """The ledger a run saved, for the session resuming it with `total` samples (a resume may give
        more) and its polish share: what every phase drew stays counted."""
        return replace(cls.from_dict(saved or {}), total=total, polish=polish)


def _known(phase: str) -> str:
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; one of {PHASES}")
    return phase


# The polish's share by default, per learner. The seq2seq learner on a cluster: half of what local
# search leaves. The graph policy: on one graph a few hundred REINFORCE samples barely move it, and
# local search's moves from its placement pay more (the 14 held-out problems of
# benchmarks/generalisation.py at 500 samples, mean over local search at 500 with 64 moves per batch:
# 0.5 1.013, 0.75 1.005, 0.9 1.001; a quarter is kept for learning).
SEQ2SEQ_POLISH = 0.5
GRAPH_POLICY_POLISH = 0.75
# The plans' share of --samples, set aside before the first phase: a plan
# search from the learned placement needs a few hundred plans (`placer.plans.search.SAMPLES`: 200)
PLAN_SHARE = 0.2


def polish_share(polish: float | None, samples: int | None, simulated: bool, default: float) -> float:
    """The polish's share of the samples: `polish` as given, else `default` where every figure is
    `simulated` and there is a sample count, else none; refused in one line where it cannot run
    (a simulated polish cannot claim measured figures, and a share needs a count)."""
    share = polish if polish is not None else (default if simulated and samples else 0.0)
    if not 0.0 <= share < 1.0:
        raise PlacerError(f"--polish must be a share of the samples in [0, 1), not {share}")
    if share and not simulated:
        raise PlacerError("--polish moves in the simulator, so every figure must be simulated (--cluster, and "
                          "--reward simulated with --policy pretrained); drop --polish")
    if share and not samples:
        raise PlacerError("--polish spends a share of a sample count: add --samples N, or --polish 0")
    return share
