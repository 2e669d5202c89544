"""Training with the pool as the measurer: the same run as with one measurer, also when a worker
dies mid-run, and a resumed run on workers continues exactly."""

from __future__ import annotations

import pytest
import torch

from placer.graph.grouping import group_graph
from placer.costmodel.simulator import SimulatedMeasurer
from placer.policy.checkpoint import FILENAME
from placer.policy.hparams import Hyperparameters
from placer.policy.trainer import train
from placer.workers import NoWorkersLeft, RayMeasurer
from testworkers import DEVICES, SimSpec

HP = Hyperparameters(hidden_size=16, lr=0.01, samples_per_update=4, warm_start="none")
SAMPLES = 24


def run(graph, measurer, run_dir, samples: int = SAMPLES, resume: bool = False):
    return train(graph, measurer, group_graph(graph, 6, 2), run_dir, HP, samples=samples, seed=3,
                 reward="real", resume=resume)


def same_run(a_dir, b_dir) -> None:
    a = torch.load(a_dir / FILENAME, weights_only=False)
    b = torch.load(b_dir / FILENAME, weights_only=False)
    assert a["state"]["history"] == b["state"]["history"] and len(a["state"]["history"]) >= 3
    assert a["state"]["best"] == b["state"]["best"] and a["cache"] == b["cache"]
    assert all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])


@pytest.fixture(scope="module")
def plain(graph, tmp_path_factory):
    """The reference: the same run measured in this process, one placement at a time."""
    run_dir = tmp_path_factory.mktemp("plain")
    return run(graph, SimulatedMeasurer(graph, DEVICES), run_dir), run_dir


def test_training_on_workers_is_the_same_run_as_on_one_measurer(graph, plain, tmp_path):
    with RayMeasurer(SimSpec(DEVICES, graph=graph), workers=3) as pool:
        result = run(graph, pool, tmp_path)
        assert pool.report()["measured"] > SAMPLES // 2     # the batches did go to the workers
    same_run(plain[1], tmp_path)
    assert result.placement.nodes == plain[0].placement.nodes


def test_a_worker_dying_mid_run_changes_nothing_but_the_retry_count(graph, plain, faulty, tmp_path):
    with RayMeasurer(faulty("die", at=6), workers=3) as pool:
        result = run(graph, pool, tmp_path)
        report = pool.report()
    assert report["retried"] == 1 and len(report["lost"]) == 1 and report["workers_alive"] == 2
    assert result.summary["samples"] == plain[0].summary["samples"] == SAMPLES
    same_run(plain[1], tmp_path)


def test_a_run_resumed_on_workers_continues_exactly(graph, plain, tmp_path):
    with RayMeasurer(SimSpec(DEVICES, graph=graph), workers=2) as pool:
        run(graph, pool, tmp_path, samples=SAMPLES // 2)
        run(graph, pool, tmp_path, resume=True)
    same_run(plain[1], tmp_path)


def test_a_run_whose_workers_are_all_lost_stops_and_resumes_exactly(graph, plain, faulty, tmp_path):
    """Both workers die mid-run: the run stops with NoWorkersLeft, and --resume on new workers
    gives the run that never stopped."""
    with RayMeasurer(faulty("die_always", at=9), workers=2) as pool:
        with pytest.raises(NoWorkersLeft, match="--resume"):
            run(graph, pool, tmp_path)
    with RayMeasurer(SimSpec(DEVICES, graph=graph), workers=2) as pool:
        run(graph, pool, tmp_path, resume=True)
    same_run(plain[1], tmp_path)
