"""Contention: the overlap of devices' busy time, the fitted slowdown, and its use by the simulator and bound."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "placers"))
from placer_testkit import LinearCost, make_graph  # noqa: E402

from placer.costmodel.contention import contention_extra, fit_slowdown, overlap_seconds  # noqa: E402
from placer.costmodel.lower_bound import check_bound, lower_bound  # noqa: E402
from placer.costmodel.simulator import Simulator, simulate_batch  # noqa: E402


class SlowCost(LinearCost):
    """LinearCost whose devices run `slowdown` times slower while another device is busy."""

    def __init__(self, speed, slowdown, **kw):
        super().__init__(speed, **kw)
        self.slowdown = slowdown


def _random_dag(rng, n):
    spec = []
    for i in range(n):
        parents = sorted({f"n{j}" for j in rng.integers(0, i, size=min(i, 2))}) if i else []
        spec.append((f"n{i}", parents, float(rng.uniform(1e7, 1e9))))
    return make_graph(spec, numel=100)


def test_overlap_counts_only_the_seconds_another_device_is_busy_too():
    # device 0 busy [0, 4), device 1 busy [1, 2) and [3, 6): shared [1, 2) and [3, 4)
    got = overlap_seconds([0, 1, 3], [4, 2, 6], [0, 1, 1], 2)
    assert got.tolist() == pytest.approx([2.0, 2.0])
    assert overlap_seconds([0, 2], [2, 3], [0, 1], 2).tolist() == [0.0, 0.0]   # one after the other
    assert contention_extra([2.0, 1.0], [1.5, 1.2]) == pytest.approx(1.0)


def test_a_slowdown_stretches_split_placements_and_leaves_single_devices_alone():
    g = _random_dag(np.random.default_rng(1), 30)
    devices = ["cpu:0", "cpu:1"]
    plain = Simulator(g, devices, LinearCost(dict.fromkeys(devices, 1e9), latency=1e-6))
    slow = Simulator(g, devices, SlowCost(dict.fromkeys(devices, 1e9), dict.fromkeys(devices, 1.4), latency=1e-6))
    single = [0] * len(g.nodes)
    assert slow.simulate(single).step_time == plain.simulate(single).step_time
    split = [i % 2 for i in range(len(g.nodes))]
    base = plain.simulate(split, overlap=True)
    assert max(base.overlap) > 0
    assert slow.simulate(split).step_time == pytest.approx(base.step_time + 0.4 * max(base.overlap))
    rows = np.asarray([single, split])
    assert simulate_batch(slow, rows).step_time.tolist() == pytest.approx(
        [slow.simulate(r).step_time for r in rows.tolist()])


def test_the_fit_recovers_a_known_slowdown_from_synthetic_measurements():
    rng = np.random.default_rng(0)
    g = _random_dag(rng, 40)
    devices = ["cpu:0", "cpu:1"]
    plain = Simulator(g, devices, LinearCost(dict.fromkeys(devices, 1e9), latency=1e-6))
    truth = Simulator(g, devices, SlowCost(dict.fromkeys(devices, 1e9), dict.fromkeys(devices, 1.3), latency=1e-6))
    assigns = [rng.integers(0, 2, size=len(g.nodes)).tolist() for _ in range(6)] + [[0] * len(g.nodes)]
    base = [plain.simulate(a, overlap=True) for a in assigns]
    measured = [truth.simulate(a).step_time * (1 + rng.normal(0, 0.005)) for a in assigns]
    factors = fit_slowdown(np.asarray([r.overlap for r in base]), [r.step_time for r in base], measured,
                           groups=[0, 0], n_groups=1)
    assert factors[0] == pytest.approx(1.3, abs=0.03)
    # nothing to explain: no factor above 1
    none = fit_slowdown(np.asarray([r.overlap for r in base]), [r.step_time for r in base],
                        [r.step_time for r in base], groups=[0, 0], n_groups=1)
    assert none[0] == pytest.approx(1.0, abs=1e-3)


def test_no_contended_simulated_placement_beats_the_contended_lower_bound():
    rng = np.random.default_rng(2)
    for devices, slow in ((["cpu:0", "cpu:1"], [1.3, 1.3]), (["a", "b", "c"], [1.2, 1.6, 1.1])):
        g = _random_dag(rng, 30)
        cost = SlowCost(dict(zip(devices, [1e9, 2e9, 5e8])), dict(zip(devices, slow)), latency=1e-6)
        bound = lower_bound(g, devices, cost)
        plain = lower_bound(g, devices, LinearCost(cost.speed, latency=1e-6))
        assert bound.value >= plain.value
        sim = Simulator(g, devices, cost)
        steps = [sim.simulate(rng.integers(0, len(devices), size=len(g.nodes)).tolist()).step_time
                 for _ in range(60)]
        assert min(steps) >= bound.value * (1 - 1e-9)
    # two identical devices, all work parallel: the load bound is slowdown x half the work
    g = make_graph([(f"n{i}", [], 1e9) for i in range(4)])
    cost = SlowCost({"cpu:0": 1e9, "cpu:1": 1e9}, {"cpu:0": 1.5, "cpu:1": 1.5})
    assert lower_bound(g, ["cpu:0", "cpu:1"], cost).load == pytest.approx(1.5 * 2.0)


def test_a_measured_step_below_the_lower_bound_says_the_profile_is_stale():
    assert check_bound(0.100, {"m_sct": 0.120, "single:cpu:0": 0.150}) is None
    note = check_bound(0.100, {"m_sct": 0.095, "learned": 0.090, "single:cpu:0": 0.150, "failed": None})
    assert note is not None and note.startswith("learned measured 90.00 ms, below the lower bound of 100.00 ms")
    assert "2 of" in note and "stale" in note and "--refresh-profile" in note and "\n" not in note
    assert check_bound(0.100, {"m_sct": 0.099}, tolerance=0.02) is None
