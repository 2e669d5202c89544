"""The inspect job: a model loaded and every shape inferred, for a first look at it; with a
profile of it, what its profiling inputs made each If, Loop and Scan do.

`inspect(InspectSettings(ModelSettings("model.onnx")))` is what `placer inspect` runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from placer.errors import PlacerError
from placer.jobs.settings import ModelSettings


@dataclass(frozen=True)
class InspectSettings:
    """The model, and a `profile` of it (placer measure --profile; None: none)."""

    model: ModelSettings
    profile: str | None = None


@dataclass(frozen=True)
class InspectResult:
    """The `OpGraph`; with a profile, per control-flow node what ran when profiled (the branch
    taken, the iterations run) and how often (None: no profile given)."""

    graph: Any
    profiled_control_flow: dict[str, dict[str, int]] | None


def inspect(settings: InspectSettings) -> InspectResult:
    """Load the model; read the profile, checked to be of this graph."""
    from placer.costmodel.profile import Profile

    graph = settings.model.graph_only(weights="shapes")   # a first look runs nothing
    if not settings.profile:
        return InspectResult(graph, None)
    profile = Profile.load(settings.profile)
    if not graph.is_named_by(profile.graph_sha256):
        raise PlacerError(f"profile {settings.profile} is of another graph (sha256 {profile.graph_sha256[:12]}...); "
                          f"give a profile of {graph.source or 'this graph'} (placer measure --profile)")
    return InspectResult(graph, profile.control_flow)
