"""`SimulatorTables`: what a `placer.costmodel.simulator.Simulator` precomputes, as read-only data.

Everything in it is independent of the placement. The simulator builds it once and reads it in
its own pass; the batched pass (`placer.costmodel.batch_simulator`) reads it and nothing else of
the simulator, so neither depends on the other's internals (the simulator imports the batched
pass, which therefore cannot import the simulator).

Indices: a step is one of the simulated program's (a node's own, or a training step's); a tensor
is one a step makes and another step reads or the program returns; an edge is a (tensor,
reading step) pair; a resident entry is data held for the whole step on every device running one
of its readers (weights, graph inputs, a training step's optimizer state); a pair of devices is
``src * devices + dst``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.program.walk import Step


@dataclass(frozen=True, eq=False)   # eq=False: hashed by identity, so a pass can cache what it derives
class SimulatorTables:
    """A simulator's placement-independent facts; every array is read-only."""

    devices: int                            # how many devices
    nodes: int                              # how many graph nodes (an assignment's length)
    steps: tuple[Step, ...]                 # the walked program: a step reads other steps' tensors
    frees: tuple[tuple[str, ...], ...]      # step -> the tensors last read there (`walk.last_uses`)
    ordered_per_placement: bool             # a 1F1B pipelined step: each placement has its own order
    step_node: np.ndarray                   # step -> the node whose device runs it
    op_time: np.ndarray                     # (steps, devices) seconds; inf where the step cannot run
    mem_caps: tuple[int | None, ...]        # device -> bytes (None: no cap)
    slowdown: tuple[float, ...]             # device -> contention factor (1: not modelled)
    links: int                              # how many links copies occupy
    pair_links: tuple[tuple[int, ...], ...]  # pair -> the links of its route
    out_tensors: tuple[tuple[int, ...], ...]  # step -> the tensors it makes
    t_producer: np.ndarray                  # tensor -> its producing step
    t_bytes: np.ndarray                     # tensor -> bytes where it is made
    t_copy_bytes: np.ndarray                # tensor -> bytes of a copy elsewhere (an updated parameter: its own)
    t_is_output: np.ndarray                 # tensor -> whether the program returns it (kept to the end)
    t_xfer: np.ndarray                      # (tensors, pairs) seconds to copy the tensor over the pair
    e_tensor: np.ndarray                    # edge -> its tensor (edges grouped by tensor)
    e_consumer: np.ndarray                  # edge -> its reading step
    r_bytes: np.ndarray                     # resident entry -> bytes
    r_edge: np.ndarray                      # reading of resident data -> its entry
    r_reader: np.ndarray                    # reading of resident data -> its reading step
    side: np.ndarray                        # step -> whether it runs beside its device's queue (`SimProgram.side`)

    def __post_init__(self) -> None:
        for value in vars(self).values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
