"""Real rewards are paired with a reference measured in the same rounds: a placement's figure does
not depend on how fast the machine was when its batch ran."""

import pytest

from placer.measure.paired_measurer import PairedMeasurer
from placer.measure.rounds import RoundsProtocol
from placer.placement import Placement

ROUNDS = RoundsProtocol(warmup=0, min_rounds=6, max_rounds=6)


class Machine:
    """`open` a placement, step it: its cost (nodes on cpu:1 cost 2, on cpu:0 1, in parallel they
    take the larger) times the machine's slowness, which the test sets between batches."""

    devices = ["cpu:0", "cpu:1"]
    training = None

    def __init__(self):
        self.slowness = 1.0

    def run_record(self):
        return {"objective": "inference"}

    def open(self, placement):
        counts = placement.device_counts()
        cost = max(counts.get("cpu:0", 0) * 1.0, counts.get("cpu:1", 0) * 2.0) * 1e-3
        machine = self

        class Run:
            peak_memory = {}

            def step(self):
                return cost * machine.slowness

            def close(self):
                pass

        return Run()


def _placement(on_1: int):
    nodes = {f"n{i}": ("cpu:1" if i < on_1 else "cpu:0") for i in range(4)}
    return Placement(devices=Machine.devices, nodes=nodes)


def test_the_same_placement_gets_the_same_figure_when_the_machine_is_twice_as_slow(tmp_path):
    machine = Machine()
    reference = _placement(0)           # everything on cpu:0: 4 ms
    paired = PairedMeasurer(machine, reference, ROUNDS, anchor_file=tmp_path / "anchor.json")
    split = _placement(1)               # max(3, 2) = 3 ms
    first = paired.measure_many([split])[0]
    machine.slowness = 2.0
    second, other = paired.measure_many([split, _placement(2)])
    assert first.step_time == pytest.approx(3e-3) and second.step_time == pytest.approx(3e-3)
    assert second.times[0] == pytest.approx(6e-3)          # what the clock said: twice as slow
    assert other.step_time == pytest.approx(4e-3)          # max(2, 4) ms in the anchor's unit
    assert second.paired["value"] == pytest.approx(0.75) and second.protocol["anchor_s"] == pytest.approx(4e-3)


def test_the_anchor_survives_a_resumed_run(tmp_path):
    machine = Machine()
    PairedMeasurer(machine, _placement(0), ROUNDS, anchor_file=tmp_path / "anchor.json").measure(_placement(1))
    machine.slowness = 3.0
    resumed = PairedMeasurer(machine, _placement(0), ROUNDS, anchor_file=tmp_path / "anchor.json")
    assert resumed.measure(_placement(1)).step_time == pytest.approx(3e-3)


def test_a_failing_placement_is_a_measured_failure_beside_the_reference(tmp_path):
    machine = Machine()
    bad = _placement(1)
    bad.nodes["n0"] = "cuda:7"
    real_open = machine.open

    def open_or_fail(placement):
        if "cuda:7" in placement.nodes.values():
            raise RuntimeError("no such device")
        return real_open(placement)

    machine.open = open_or_fail
    failed, ok = PairedMeasurer(machine, _placement(0), ROUNDS).measure_many([bad, _placement(1)])
    assert not failed.ok and failed.failure == "kernel_error" and ok.ok


def test_a_large_batch_is_measured_in_chunks_never_holding_more_than_max_open_placements(tmp_path):
    from placer.measure.paired_measurer import MAX_OPEN

    class Counting(Machine):
        """Counts the placements open at once (each open run holds an engine's memory)."""

        def __init__(self):
            super().__init__()
            self.open_now = self.most_open = 0

        def open(self, placement):
            run, machine = super().open(placement), self
            machine.open_now += 1
            machine.most_open = max(machine.most_open, machine.open_now)
            inner_close = run.close

            def close():
                machine.open_now -= 1
                inner_close()

            run.close = close
            return run

    machine = Counting()
    batch = [_placement(i % 5) for i in range(3 * MAX_OPEN + 1)]
    got = PairedMeasurer(machine, _placement(0), ROUNDS, anchor_file=tmp_path / "anchor.json").measure_many(batch)
    assert machine.most_open == MAX_OPEN + 1 and machine.open_now == 0   # a chunk and its reference
    assert [m.step_time for m in got] == pytest.approx([max(4 - i % 5, 2 * (i % 5)) * 1e-3 for i in range(len(batch))])
