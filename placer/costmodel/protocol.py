"""`CostModel`: predicted time of each op on each device and of each transfer between devices.

The simulator and the cost-aware placers read time only through this protocol, so an analytic
model (deterministic, for tests) and a profiled one (measured on the real devices) plug in alike.
`training_step_time` prices the steps a training step adds to the forward pass, and `route` says which
links a copy occupies, so that copies over a shared link queue in the simulator.
"""

from __future__ import annotations

from typing import Protocol

from placer.graph.opgraph import OpNode


class CostModel(Protocol):
    devices: list[str]   # device names this model knows

    def op_time(self, node: OpNode, device: str) -> float:
        """Seconds `node` takes on `device` (inf where it cannot run there)."""
        ...

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """Seconds to move `nbytes` from `src` to `dst` (0 when they are the same device)."""
        ...

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        """The links a copy from `src` to `dst` occupies while it runs (a full-duplex link named
        once per direction); each carries one copy at a time, so copies whose routes share a link
        (a PCIe host bridge, a machine's network link) wait for each other. A model without shared
        links gives each ordered pair its own (`own_link`)."""
        ...

    def training_step_time(self, step: str, kind: str, node: OpNode, nbytes: int, device: str) -> float:
        """Seconds of a training step's `step` (`kind`: backward, loss, accumulate or update;
        `placer.program.training_plan` names them) on `device`: `node` is the forward node whose
        device runs it, `nbytes` the gradient (or loss output) bytes it reads."""
        ...


def own_link(src: str, dst: str) -> tuple[str, ...]:
    """The route of a copy over a link of its own: the directed link from `src` to `dst`."""
    return (f"{src}->{dst}",)


def op_times(cost: CostModel, node: OpNode, devices: list[str]) -> list[float]:
    """`node`'s seconds on each of `devices`: the cost model's own `op_times` where it has one (the
    roofline model prices identical devices once: 8 H100s and 2 CPUs are 2 prices, not 10), else
    `op_time` device by device."""
    # the class's own: a wrapper that hands other names to its base (__getattr__) and prices ops
    # itself must not get its base's op_times
    many = getattr(type(cost), "op_times", None)
    if many is not None:
        return many(cost, node, devices)
    return [cost.op_time(node, d) for d in devices]
