"""`RealSpec`: each worker builds the `RealMeasurer` of the run, training steps included."""

from __future__ import annotations

import pytest
import torch

from placer.measure.measurer import MeasureProtocol, RealMeasurer
from placer.program.training import OptimizerSpec, TrainingSpec
from placer.placement import Placement
from placer.workers import RayMeasurer, RealSpec

ray = pytest.importorskip("ray")

TRAINING = MeasureProtocol(warmup=0, repeats=1, objective="training")
ADAM = TrainingSpec(optimizer=OptimizerSpec("adam", lr=0.05), targets={"y": torch.ones(16, 256)})


def same_but_times(a, b) -> None:
    """Everything a measurement says but its timings: success, failure, peaks, protocol."""
    drop = ("step_time", "spread", "times", "reason")
    assert {k: v for k, v in a.to_dict().items() if k not in drop} == \
           {k: v for k, v in b.to_dict().items() if k not in drop}


def test_a_spec_carries_its_training_step_to_the_worker(graph):
    spec = RealSpec(["cpu:0"], graph=graph, protocol=TRAINING, training=ADAM)
    built = ray.cloudpickle.loads(ray.cloudpickle.dumps(spec)).build()   # as an actor gets it
    assert built.training.optimizer == ADAM.optimizer and built.training.loss == ADAM.loss
    assert torch.equal(built.training.targets["y"], ADAM.targets["y"])


def test_training_steps_on_two_workers_measure_as_on_one_measurer(graph):
    """The training step's memory (Adam's state, gradients, saved activations) is over a cap the
    forward pass fits under: the workers fail it as out-of-memory, as one measurer does."""
    single = Placement.single_device(list(graph.nodes), "cpu:0", graph.sha256, ["cpu:0"])
    for devices, ok in ((["cpu:0[threads=1]"], True), (["cpu:0[threads=1,mem=300000]"], False)):
        plain = RealMeasurer(graph, devices, protocol=TRAINING, training=ADAM)
        with RayMeasurer(RealSpec(devices, graph=graph, protocol=TRAINING, training=ADAM), workers=2) as pool:
            got = pool.measure_many([single, single])
        expected = plain.measure(single)
        assert expected.ok is ok and expected.protocol["optimizer"] == "adam"
        for m in got:
            same_but_times(m, expected)
