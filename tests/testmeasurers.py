"""Deterministic fakes of the devices: for the graph policy's fine-tune with measured rewards
(`Machine`: set figures in training, set step times in the closing rounds, a record of what ran
when), and a measurer that stops a run at a set measurement (`StopAfter`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from placer.costmodel.roofline import cluster_measurer
from placer.placement import Placement


def single(placement: Placement) -> bool:
    """Every node on one device."""
    return len(set(placement.nodes.values())) == 1


def odd_heuristic(episode):
    """`episode` with a best list heuristic's placement that no policy placement repeats (the first
    node on the first device, the rest on the second), so that the closing rounds can time it apart."""
    assign = np.ones(len(episode.graph.nodes), dtype=np.int64)
    assign[0] = 0
    return dataclasses.replace(episode, best_assign=assign)


class Machine:
    """Measured rewards without measuring, deterministic. In training a placement measures its
    roofline figure, but the first sample measures `luck` times that (lucky); in the closing rounds
    each step of a placement takes `closing(placement)` seconds (the lucky one `lucky_closing`).
    `opened` lists the placements the rounds built, `steps` which of them each step ran, and
    `interrupt_at` presses Ctrl-C at that step."""

    def __init__(self, episode, closing, luck: float = 1.0, lucky_closing: float | None = None,
                 interrupt_at: int | None = None) -> None:
        self.simulated = cluster_measurer(episode.cluster, episode.graph)
        self.devices = self.simulated.devices
        self.closing, self.luck, self.lucky_closing, self.interrupt_at = closing, luck, lucky_closing, interrupt_at
        self.measured, self.lucky, self.opened, self.steps = 0, None, [], []

    def measure(self, placement: Placement):
        self.measured += 1
        if self.measured == 3:   # the zero-shot and the heuristic's placement come first
            self.lucky = dict(placement.nodes)
        m = self.simulated.measure(placement)
        if placement.nodes == self.lucky:
            m.step_time *= self.luck
        return m

    def run_record(self):
        return {"objective": "inference"}

    def open(self, placement: Placement):
        index, machine = len(self.opened), self
        self.opened.append(placement)
        lucky = placement.nodes == self.lucky and self.lucky_closing is not None
        seconds = self.lucky_closing if lucky else self.closing(placement)

        class Run:
            peak_memory: dict = {}

            def step(self):
                machine.steps.append(index)
                if len(machine.steps) == machine.interrupt_at:
                    raise KeyboardInterrupt   # as if Ctrl-C landed in this step
                return seconds

            def close(self):
                pass

        return Run()


class StopAfter:
    """A measurer that raises `exc` on its n-th measurement: Ctrl-C, or a measurer that cannot go on
    (a pool with no worker left)."""

    def __init__(self, inner, n: int, exc: BaseException) -> None:
        self.inner, self.devices, self.left, self.exc = inner, inner.devices, n, exc

    def measure(self, placement):
        self.left -= 1
        if self.left == 0:
            raise self.exc
        return self.inner.measure(placement)
