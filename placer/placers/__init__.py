"""Non-learned placers, the yardsticks a learned placement is measured against.

`PLACERS` maps a name to a `PlacerSpec`: the function, whether it respects memory caps and
whether it needs a cost model. Every placer has the signature of `placer.placers.base.Placer`.
"""

from __future__ import annotations

from dataclasses import dataclass

from placer.placers.base import (Caps, Placer, book_peak_memory, caps_from_devices, executor_peak_memory,
                                 node_memory)
from placer.placers.exact import exact
from placer.placers.expert import expert
from placer.placers.heft import heft
from placer.placers.local_search import local_search
from placer.placers.m_etf import m_etf
from placer.placers.m_sct import m_sct
from placer.placers.metis import metis
from placer.placers.partitioners import pipeline_balanced, pipeline_dp, pipeline_params
from placer.placers.random_search import random_search, random_search_curve
from placer.placers.simple import random_placement, round_robin, single_device
from placer.placers.topo import m_topo, memory_greedy


@dataclass(frozen=True)
class PlacerSpec:
    """A registered placer and what it promises."""

    name: str
    place: Placer
    respects_memory: bool   # consults the caps and raises PlacerError when the graph cannot fit
    needs_cost: bool        # requires a CostModel
    summary: str


PLACERS: dict[str, PlacerSpec] = {spec.name: spec for spec in [
    PlacerSpec("single", single_device, False, False, "every node on one device"),
    PlacerSpec("random", random_placement, False, False, "each node on a uniformly random device"),
    PlacerSpec("round_robin", round_robin, False, False, "groups dealt to devices in turn"),
    PlacerSpec("metis", metis, False, False, "METIS k-way partition: balanced cost, fewest bytes cut"),
    PlacerSpec("m_topo", m_topo, True, False, "Baechi m-TOPO: topological fill, even memory share"),
    PlacerSpec("m_etf", m_etf, True, True, "Baechi m-ETF: earliest-task-first list scheduling"),
    PlacerSpec("m_sct", m_sct, True, True, "Baechi m-SCT: favourite children (greedy form of the LP)"),
    PlacerSpec("memory_greedy", memory_greedy, True, False, "fill devices in order up to their caps"),
    PlacerSpec("heft", heft, True, True, "HEFT critical-path list scheduling"),
    PlacerSpec("pipeline_dp", pipeline_dp, True, True,
               "PipeDream's DP: contiguous stages, the slowest stage (transfers included) minimised"),
    PlacerSpec("pipeline_balanced", pipeline_balanced, False, True,
               "GPipe/torchgpipe balance by time: a contiguous stage per device"),
    PlacerSpec("pipeline_params", pipeline_params, False, False,
               "DeepSpeed balance by parameters: a contiguous stage per device"),
    PlacerSpec("random_search", random_search, True, True,
               "best of N random group placements in the simulator (--samples; the yardstick for learning)"),
    PlacerSpec("local_search", local_search, True, True,
               "first-improvement group then node moves from the best baseline (exact solver included), "
               "within --samples simulated"),
    PlacerSpec("exact", exact, True, True,
               "CP-SAT over <= 40 groups: placement and order, transfers and caps, time-limited; reports its gap"),
    PlacerSpec("expert", expert, False, True,
               "the human expert of Mirhoseini et al. 2017: RNN layers one per GPU, else the fastest device"),
]}

__all__ = ["PLACERS", "PlacerSpec", "Placer", "Caps", "caps_from_devices", "node_memory", "book_peak_memory",
           "executor_peak_memory",
           "single_device", "random_placement", "round_robin", "metis", "m_topo", "m_etf", "m_sct",
           "memory_greedy", "heft", "pipeline_dp", "pipeline_balanced", "pipeline_params", "random_search",
           "random_search_curve", "local_search", "exact", "expert"]
