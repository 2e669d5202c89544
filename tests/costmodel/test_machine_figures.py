"""This machine measured as a cluster file's figures (`placer cluster describe-local`): the
hand-over a crossing adds in the engine, identical devices sharing figures, and the contention
chains that share no tensor."""

from __future__ import annotations

import pytest

from placer.costmodel.machine_figures import CONTENTION_BLOCKS, _alike_devices_alike, _chains_graph, _engine_handover
from placer.devices import parse_devices


def test_the_hand_over_is_what_a_crossing_adds_to_a_step_in_the_engine(monkeypatch):
    """describe-local's hand-over: chains alternating between two devices against the same chains
    on one, per crossing: the small tensors' give the latency, the large ones' the bandwidth (a fake
    measurer: 50 us a crossing plus 1 ns a byte)."""
    import placer.measure.measurer as measurer_module
    from placer.measure.measurement import Measurement

    class Fake:
        def __init__(self, graph):
            self.nbytes = next(iter(graph.nodes.values())).output_bytes

        def measure(self, placement):
            devices = list(placement.nodes.values())
            crossings = sum(1 for a, b in zip(devices, devices[1:]) if a != b)
            return Measurement(ok=True, step_time=1e-3 + crossings * (50e-6 + self.nbytes * 1e-9))

    monkeypatch.setattr(measurer_module, "measurer_for", lambda engine, graph, *args, **kwargs: Fake(graph))
    devices = parse_devices("cpu:0[threads=1],cpu:1[threads=1]")
    latency, bandwidth = _engine_handover(devices)
    assert latency == pytest.approx(50e-6 + 1024e-9) and bandwidth == pytest.approx(1e9)


def test_identical_devices_share_the_best_figures_but_the_median_contention():
    devices = parse_devices("cpu:0[threads=1],cpu:1[threads=1],cpu:2[threads=1]")
    measured = {"cpu:0": {"float32": 1e11, "launch": 2e-6, "contention": 1.00},
                "cpu:1": {"float32": 2e11, "launch": 1e-6, "contention": 1.10},
                "cpu:2": {"float32": 3e11, "launch": 3e-6, "contention": 1.30}}
    alike = _alike_devices_alike(measured, devices, {d.name: 1 for d in devices})
    # noise only slows GEMMs and launches down: the best; contention it moves either way: the median
    assert all(f == {"float32": 3e11, "launch": 1e-6, "contention": 1.10} for f in alike.values())


def test_the_contention_chains_share_no_tensor_so_a_step_of_both_is_two_devices_busy_at_once():
    one, two = _chains_graph(1), _chains_graph(2)
    assert len(two.nodes) == 2 * len(one.nodes) == 2 * 4 * CONTENTION_BLOCKS and len(two.outputs) == 2
    # the side-by-side placement puts chain1 on the second device: no edge may join the chains
    # (a crossing would add its hand-over to the step and read as contention)
    chain = {n: n.startswith("chain1") for n in two.nodes}
    assert sum(chain.values()) == len(one.nodes)
    assert all(chain[u] == chain[v] for u, v in two.dag.edges)
