import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "placers"))
from placer_testkit import LinearCost, make_graph  # noqa: E402

from placer.costmodel.lower_bound import lower_bound  # noqa: E402
from placer.costmodel.simulator import AnalyticCostModel, Simulator  # noqa: E402


def test_a_chain_cannot_beat_its_length_at_the_fastest_device():
    g = make_graph([("a", [], 1e9), ("b", ["a"], 2e9), ("c", ["b"], 3e9)])
    lb = lower_bound(g, ["slow", "fast"], LinearCost({"slow": 1e9, "fast": 2e9}))
    assert lb.critical_path == pytest.approx(3.0) and lb.value == pytest.approx(3.0)


def test_independent_work_is_bounded_by_its_share_on_equal_devices():
    g = make_graph([(f"n{i}", [], 1e9) for i in range(4)])
    lb = lower_bound(g, ["cpu:0", "cpu:1"], LinearCost({"cpu:0": 1e9, "cpu:1": 1e9}))
    assert lb.load == pytest.approx(2.0) and lb.critical_path == pytest.approx(1.0)
    assert lb.value == pytest.approx(2.0)


def test_the_lp_load_bound_accounts_for_a_slow_device_doing_less():
    g = make_graph([("a", [], 1e9), ("b", [], 1e9)])
    lb = lower_bound(g, ["fast", "slow"], LinearCost({"fast": 3e9, "slow": 1e9}))
    # fast takes 3/4 of the work: 0.75 * 2 nodes * 1/3 s = 0.5 s = 0.25 * 2 * 1 s on slow
    assert lb.load_method == "lp" and lb.load == pytest.approx(0.5)


def _random_dag(rng: np.random.Generator, n: int):
    spec = []
    for i in range(n):
        parents = sorted({f"n{j}" for j in rng.integers(0, i, size=min(i, 2))}) if i else []
        spec.append((f"n{i}", parents, float(rng.uniform(1e7, 1e9))))
    return make_graph(spec, numel=int(rng.integers(100, 100_000)))


def test_no_simulated_placement_beats_the_lower_bound():
    rng = np.random.default_rng(0)
    devices = ["cpu:0", "cpu:1", "cuda:0"]
    for _ in range(5):
        g = _random_dag(rng, 30)
        cost = AnalyticCostModel(devices)
        bound = lower_bound(g, devices, cost).value
        sim = Simulator(g, devices, cost)
        for _ in range(40):
            step = sim.simulate(rng.integers(0, len(devices), size=len(g.nodes)).tolist()).step_time
            assert step >= bound * (1 - 1e-9)
