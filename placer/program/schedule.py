"""Static per-device schedules of a placed graph: what each worker runs, in which order, which
tensors cross devices and when each one can be dropped.

A schedule is pure data computed once per placement; the executor's workers run it with
`placer.program.walk.walk` and `placer.program.memory` accounts peak memory from it. It is built
from generic `Step`s (a callable's input and output tensor names) rather than from ONNX nodes, so
a backward pass is more steps in the same list (see `PlacedExecutor`); when a tensor is dropped
is the walk's last-use rule (`last_uses`), per device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placer.program.walk import Step, last_uses


@dataclass
class DeviceSchedule:
    """What one device's worker does during a step, in its static order."""

    device: str
    steps: list[Step] = field(default_factory=list)
    consts: list[str] = field(default_factory=list)   # parameters and folded constants resident here
    feeds: list[str] = field(default_factory=list)    # graph inputs copied here at the start
    recv: list[list[str]] = field(default_factory=list)     # recv[i]: remote tensors step i needs first
    publish: list[list[str]] = field(default_factory=list)  # publish[i]: outputs of step i read elsewhere
    frees: list[list[str]] = field(default_factory=list)    # frees[i]: dropped after step i (last use)
    outputs: list[str] = field(default_factory=list)  # graph outputs this device produces


@dataclass
class Schedule:
    """Every device's schedule plus the tensors that move between devices."""

    devices: list[str]
    per_device: dict[str, DeviceSchedule]
    home: dict[str, str]                       # produced tensor -> device that produces it
    crossings: list[tuple[str, str, str]]      # (tensor, src, dst), once per destination device
    outputs: list[str]                         # graph output names, in graph order

    def consumers_elsewhere(self, tensor: str) -> list[str]:
        """Devices other than the producer's that read `tensor`."""
        return [dst for t, _, dst in self.crossings if t == tensor]


def build_schedule(steps: list[Step], assignment: dict[str, str], devices: list[str],
                   consts: set[str], feeds: set[str], outputs: list[str]) -> Schedule:
    """Split `steps` (a valid topological order) by `assignment` (step name -> device).

    `consts` are tensors every device can hold a copy of (parameters, folded constants), `feeds`
    the graph inputs; anything else a step reads must be produced by an earlier step.
    """
    per = {d: DeviceSchedule(d) for d in devices}
    home: dict[str, str] = {}
    produced_at: dict[str, int] = {}   # tensor -> index of its step in its device's schedule
    crossings: list[tuple[str, str, str]] = []
    crossed: set[tuple[str, str]] = set()
    # where each tensor is available on each device: (device, tensor) seen
    present: set[tuple[str, str]] = set()
    wanted_outputs = set(outputs)

    for step in steps:
        dev = assignment[step.name]
        sched = per[dev]
        recv: list[str] = []
        for t in dict.fromkeys(step.inputs):
            if not t or (dev, t) in present:
                continue
            present.add((dev, t))
            if t in consts:
                sched.consts.append(t)
            elif t in feeds:
                sched.feeds.append(t)
            elif t in home:
                recv.append(t)
                if (t, dev) not in crossed:
                    crossed.add((t, dev))
                    crossings.append((t, home[t], dev))
                    # published right after the step that produces it
                    per[home[t]].publish[produced_at[t]].append(t)
            else:
                raise ValueError(f"step {step.name!r} reads {t!r} before any step produces it")
        sched.steps.append(step)
        sched.recv.append(recv)
        sched.publish.append([])
        for t in step.outputs:
            if t:
                home[t] = dev
                present.add((dev, t))
                produced_at[t] = len(sched.steps) - 1
                if t in wanted_outputs:
                    sched.outputs.append(t)

    for sched in per.values():
        # A tensor read only elsewhere is dropped after the step that publishes it (the exchange
        # keeps it alive until every destination has taken it); constants and graph outputs stay.
        sched.frees = last_uses(sched.steps, keep=set(sched.consts) | wanted_outputs)
    return Schedule(devices=list(devices), per_device=per, home=home, crossings=crossings,
                    outputs=list(outputs))
