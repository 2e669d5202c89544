"""The pipelined step through the executor: each device's order under every schedule, the
micro-batches in flight and the memory they take, and results equal to the micro-batches run one
by one (gradients summed), bit for bit on one thread per device, under any placement."""

from __future__ import annotations

import random

import graphs
import numpy as np
import onnx
import pytest
import torch

from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.engines.failures import OutOfMemory
from placer.engines.torch.executor import PlacedExecutor, accounted_memory
from placer.graph.feeds import random_feeds
from placer.program.pipeline import Pipeline
from placer.kernels.prepare import prepare
from placer.program.training import TrainingSpec
from placer.placement import Placement
from testgraphs import branches

from .test_executor_zoo import SMALL

M = 4


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """x -> 8 x (MatMul, Relu) -> y: a chain of 17 nodes."""
    path = tmp_path_factory.mktemp("pipeline") / "chain.onnx"
    onnx.save(branches(1, 8, width=32, batch=4), path)
    return load_graph(path)


def stages(graph, p: int) -> Placement:
    """Contiguous stages of about equal node counts over cpu:0..p-1."""
    nodes = list(graph.nodes)
    devices = [f"cpu:{i}" for i in range(p)]
    return Placement(devices, {n: devices[i * p // len(nodes)] for i, n in enumerate(nodes)})


def micro_feeds(graph, m: int = M) -> list[dict]:
    return [random_feeds(graph, seed=k) for k in range(m)]


def one_thread(placement: Placement) -> list[str]:
    return [f"{d}[threads=1]" for d in placement.devices]


def blocks(executor, device: str) -> list[str]:
    """A device's order as blocks: F<k> for micro-batch k's forward steps, B<k> for its backward
    steps (loss and sums excluded), U for the updates; repeats merged."""
    out = []
    for step in executor.schedule.per_device[device].steps:
        if step.op_type in ("loss", "accumulate"):
            continue
        kind = {"backward": "B", "update": "U"}.get(step.op_type, "F")
        block = "U" if kind == "U" else f"{kind}{step.name.rsplit('#', 1)[1]}"
        if not out or out[-1] != block:
            out.append(block)
    return out


def in_flight(executor, device: str) -> int:
    """The most micro-batches whose autograd records (saved activations) are alive on `device` at
    once, walking its schedule with the executor's frees."""
    sched = executor.schedule.per_device[device]
    live: set[str] = set()
    most = 0
    for step, frees in zip(sched.steps, sched.frees):
        live.update(t for t in step.outputs if t.startswith("saved:"))
        most = max(most, len({t.rsplit("#", 1)[1] for t in live}))
        live.difference_update(frees)
    return most


def test_inference_runs_each_device_in_micro_batch_order(chain):
    with PlacedExecutor(chain, stages(chain, 2), pipeline=Pipeline(M)) as executor:
        for device in ("cpu:0", "cpu:1"):
            assert blocks(executor, device) == [f"F{k}" for k in range(M)]


def test_gpipe_runs_every_forward_then_every_backward_then_the_updates(chain):
    with PlacedExecutor(chain, stages(chain, 2), training=TrainingSpec(), pipeline=Pipeline(M, "gpipe")) as executor:
        for device in ("cpu:0", "cpu:1"):
            assert blocks(executor, device) == [f"F{k}" for k in range(M)] + [f"B{k}" for k in range(M)] + ["U"]


def test_1f1b_warms_up_p_minus_1_minus_s_forwards_then_alternates(chain):
    with PlacedExecutor(chain, stages(chain, 3), training=TrainingSpec(), pipeline=Pipeline(M, "1f1b")) as executor:
        assert blocks(executor, "cpu:0") == ["F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3", "U"]
        assert blocks(executor, "cpu:1") == ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3", "U"]
        assert blocks(executor, "cpu:2") == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3", "U"]


@pytest.mark.parametrize("p", [2, 3])
def test_gpipe_holds_every_micro_batch_and_1f1b_at_most_p_minus_s_on_stage_s(chain, p):
    placement = stages(chain, p)
    with PlacedExecutor(chain, placement, training=TrainingSpec(), pipeline=Pipeline(M, "gpipe")) as executor:
        assert [in_flight(executor, d) for d in placement.devices] == [M] * p
    with PlacedExecutor(chain, placement, training=TrainingSpec(), pipeline=Pipeline(M, "1f1b")) as executor:
        assert [in_flight(executor, d) for d in placement.devices] == [p - s for s in range(p)]


def test_accounted_peak_memory_under_1f1b_is_below_gpipes_and_grows_with_micro_batches(chain):
    placement = stages(chain, 2)
    peak = {(m, s): accounted_memory(chain, placement, training=TrainingSpec(), pipeline=Pipeline(m, s))
            for m in (2, M) for s in ("gpipe", "1f1b")}
    for d in placement.devices:
        assert peak[(M, "1f1b")][d].peak < peak[(M, "gpipe")][d].peak
        assert peak[(2, "gpipe")][d].peak < peak[(M, "gpipe")][d].peak
    # inference keeps each micro-batch's output to the end of the step, and nothing else
    inference = accounted_memory(chain, placement, pipeline=Pipeline(M))
    single = accounted_memory(chain, placement)
    out = chain.tensors["y"].nbytes
    assert inference["cpu:1"].peak == single["cpu:1"].peak + (M - 1) * out


def test_a_memory_cap_refuses_gpipe_where_1f1b_fits(chain):
    placement = stages(chain, 2)
    fits = accounted_memory(chain, placement, training=TrainingSpec(), pipeline=Pipeline(M, "1f1b"))
    cap = max(m.peak for m in fits.values())
    devices = [f"{d}[mem={cap}B]" for d in placement.devices]
    PlacedExecutor(chain, placement, devices, training=TrainingSpec(), pipeline=Pipeline(M, "1f1b")).close()
    with pytest.raises(OutOfMemory):
        PlacedExecutor(chain, placement, devices, training=TrainingSpec(), pipeline=Pipeline(M, "gpipe"))


def _random_placement(graph, devices, seed):
    rng = random.Random(seed)
    return Placement(devices, {n: rng.choice(devices) for n in graph.nodes})


def test_pipelined_inference_gives_each_micro_batch_its_own_outputs(chain):
    feeds = micro_feeds(chain)
    for placement in (stages(chain, 2), _random_placement(chain, ["cpu:0", "cpu:1"], 0)):
        with PlacedExecutor(chain, placement, one_thread(placement)) as executor:
            alone = [executor.run(f) for f in feeds]
        with PlacedExecutor(chain, placement, one_thread(placement), pipeline=Pipeline(M)) as executor:
            together = executor.run(feeds)
        assert set(together) == {f"y#{k}" for k in range(M)}
        for k in range(M):
            assert torch.equal(together[f"y#{k}"], alone[k]["y"])


def summed_one_by_one(graph, placement, feeds, spec):
    """The oracle: each micro-batch's training step alone, gradients and losses summed in order."""
    total: dict[str, torch.Tensor] = {}
    for f in feeds:
        with PlacedExecutor(graph, placement, one_thread(placement), training=spec) as executor:
            result = executor.run(f)
        for k, v in result.items():
            if k.startswith("grad:") or k == "loss":
                total[k] = v.clone() if k not in total else total[k] + v
    return total


def assert_same_gradients(graph, placement, spec, schedule):
    feeds = micro_feeds(graph)
    expected = summed_one_by_one(graph, placement, feeds, spec)
    with PlacedExecutor(graph, placement, one_thread(placement), training=spec,
                        pipeline=Pipeline(M, schedule)) as executor:
        got = executor.run(feeds)
    grads = [k for k in expected if k.startswith("grad:")]
    assert grads and set(grads) == {k for k in got if k.startswith("grad:")}
    for k in grads:
        assert torch.equal(got[k], expected[k]), f"{schedule}: {k} differs from the summed micro-batch gradients"
    torch.testing.assert_close(got["loss"], expected["loss"], rtol=1e-12, atol=0)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_gradients_equal_the_summed_micro_batch_gradients_under_any_placement(chain, schedule):
    assert_same_gradients(chain, stages(chain, 2), TrainingSpec(), schedule)
    # layers of one device on both sides of another's: 1F1B's textbook order would deadlock
    interleaved = Placement(["cpu:0", "cpu:1"], {n: f"cpu:{(i // 4) % 2}" for i, n in enumerate(chain.nodes)})
    assert_same_gradients(chain, interleaved, TrainingSpec(), schedule)
    assert_same_gradients(chain, _random_placement(chain, ["cpu:0", "cpu:1", "cpu:2"], 1), TrainingSpec(), schedule)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zoo")
    return {name: load_graph(graphs.export(name, folder / f"{name}.onnx", **SMALL[name]))
            for name in ("rnnlm", "transformer")}


@pytest.mark.parametrize("name", ["rnnlm", "transformer"])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_zoo_gradients_equal_the_summed_micro_batch_gradients(name, schedule, zoo):
    graph = zoo[name]
    assert_same_gradients(graph, _random_placement(graph, ["cpu:0", "cpu:1"], name), TrainingSpec(), schedule)


@pytest.mark.parametrize("name", ["rnnlm", "transformer"])
def test_zoo_accounted_peak_memory_under_1f1b_is_below_gpipes(name, zoo):
    graph = zoo[name]
    placement = stages(graph, 2)
    gpipe, one_f_one_b = (accounted_memory(graph, placement, training=TrainingSpec(), pipeline=Pipeline(M, s))
                          for s in ("gpipe", "1f1b"))
    # the first stage holds its activations of every micro-batch under GPipe, of two under 1F1B
    assert one_f_one_b["cpu:0"].peak < gpipe["cpu:0"].peak
    assert all(one_f_one_b[d].peak <= gpipe[d].peak for d in placement.devices)


def test_each_parameter_is_updated_once_with_the_summed_gradient(chain):
    placement = stages(chain, 2)
    spec = TrainingSpec()
    with PlacedExecutor(chain, placement, one_thread(placement), training=spec, pipeline=Pipeline(M)) as executor:
        got = executor.run(micro_feeds(chain))
    params = prepare(chain).params
    updated = [k for k in got if k.startswith("updated:")]
    assert len(updated) == len(chain.initializers)
    for k in updated:
        p = k.split(":", 1)[1]
        # SGD's first step: p - lr * grad (the momentum buffer starts as the gradient)
        torch.testing.assert_close(got[k], params[p] - spec.optimizer.learning_rate * got[f"grad:{p}"])


def test_wrong_number_of_micro_batch_inputs_is_refused(chain):
    with PlacedExecutor(chain, stages(chain, 2), pipeline=Pipeline(M)) as executor:
        with pytest.raises(PlacerError, match="micro-batches"):
            executor.run(micro_feeds(chain, M - 1))


@pytest.mark.parametrize("bad", [dict(micro_batches=0), dict(schedule="zigzag")])
def test_a_bad_pipeline_is_refused_in_one_line(bad):
    with pytest.raises(PlacerError):
        Pipeline(**bad)
