"""A training step's costs seen one node at a time, for the placers that place nodes.

HEFT, m-ETF, m-SCT, METIS and the others price a node and an edge. For the training objective a
node's time is everything that runs on its device because of it: its forward, its backward, its
outputs' loss terms and the updates of the parameters it owns (`placer.costmodel.sim_program`);
an edge between devices carries the tensor forward and its gradient back, so it costs two copies.
A weight read by nodes on several devices is sent from its update to each of the others (a
refresh): no edge joins those nodes, so this view leaves that copy out. The simulator and the
lower bound do not need this view: they walk the whole training step, refreshes included.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from placer.graph.opgraph import OpGraph, OpNode
from placer.costmodel.protocol import CostModel
from placer.costmodel.sim_program import training_program
from placer.program.training import TrainingSpec


class TrainingStepCosts:
    """`inner`'s costs of `training`'s step, summed per node (a `CostModel`)."""

    def __init__(self, graph: OpGraph, devices: Sequence[str], inner: CostModel, training: TrainingSpec) -> None:
        self.devices = list(devices)
        self.inner, self.training = inner, training
        program = training_program(graph, self.devices, inner, training)
        self.program = program   # what the cap-respecting placers budget memory by, step by step
        totals = np.zeros((len(graph.nodes), len(self.devices)))
        np.add.at(totals, np.asarray(program.node_of), np.asarray(program.times, dtype=float))
        self._index = {d: i for i, d in enumerate(self.devices)}
        self._totals = {n: row.tolist() for n, row in zip(graph.nodes, totals)}

    def op_time(self, node: OpNode, device: str) -> float:
        """Seconds of everything the node runs on `device` in a training step."""
        return self._totals[node.name][self._index[device]]

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """The tensor forward and its gradient back (a gradient has the tensor's bytes)."""
        return 2 * self.inner.transfer_time(nbytes, src, dst)

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        return self.inner.route(src, dst)
