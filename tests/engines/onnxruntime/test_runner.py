"""`placer.engines.onnxruntime.load`: a split model run with its stages at once, sessions built once."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import placer.engines.onnxruntime
from placer.annotate.split import write_split
from placer.errors import PlacerError
from placer.kernels.loading import load_graph
from placer.graph.feeds import random_feeds
from placer.placement import Placement
from testgraphs import branches

from .conftest import assert_same, random_placement, whole_model_outputs


@pytest.fixture(scope="module")
def two_branches(tmp_path_factory):
    """branches(2, ...) split with one branch per device (the join on cpu:0): (folder, feeds, expected)."""
    model = branches(2, depth=6, width=512, batch=64)
    graph = load_graph(model)
    placement = Placement(["cpu:0", "cpu:1"], {n: "cpu:1" if n.startswith(("mm1", "relu1")) else "cpu:0"
                                               for n in graph.nodes}, graph.sha256)
    folder = tmp_path_factory.mktemp("split")
    write_split(model, placement, graph, folder)
    feeds = random_feeds(graph, seed=0)
    return folder, feeds, whole_model_outputs(model, feeds)


def test_each_branch_runs_on_its_device_and_the_join_after_both(two_branches):
    """What holds however busy the machine is: the devices, and the join after both branches."""
    folder, feeds, expected = two_branches
    with placer.engines.onnxruntime.load(folder, devices=["cpu:0[threads=1]", "cpu:1[threads=1]"]) as runner:
        assert_same(runner.run(feeds, timeout_s=10), expected)
        first, second, join = runner.last_step
        assert {first.device, second.device} == {"cpu:0", "cpu:1"} and join.device == "cpu:0"
        assert join.start >= max(first.end, second.end)


@pytest.mark.timing
def test_the_two_branches_run_at_the_same_time_on_their_devices(two_branches):
    """Real timing: on a machine whose cores other processes hold, the two threads may take turns
    in every try, so this runs with `-m timing`, not in the default suite."""
    folder, feeds, expected = two_branches
    with placer.engines.onnxruntime.load(folder, devices=["cpu:0[threads=1]", "cpu:1[threads=1]"]) as runner:
        for _ in range(3):
            assert_same(runner.run(feeds, timeout_s=10), expected)
            first, second, join = runner.last_step
            if first.start < second.end and second.start < first.end:
                break
        assert {first.device, second.device} == {"cpu:0", "cpu:1"} and join.device == "cpu:0"
        # the branches' intervals overlap; the join starts after both have ended
        assert first.start < second.end and second.start < first.end
        assert join.start >= max(first.end, second.end)


def test_a_zoo_model_split_at_random_runs_as_the_whole_model(zoo_file, tmp_path):
    path = zoo_file("nmt")
    graph = load_graph(path)
    write_split(onnx.load(path), random_placement(graph, 3, 7), graph, tmp_path / "parts")
    feeds = random_feeds(graph, seed=2)
    with placer.engines.onnxruntime.load(tmp_path / "parts" / "split.json") as runner:
        assert len(runner.engine.pieces) > 3
        assert_same(runner.run(feeds, timeout_s=10), whole_model_outputs(path, feeds))
        assert_same(runner.run(feeds, timeout_s=10), whole_model_outputs(path, feeds))


def test_a_device_map_runs_a_split_made_for_another_machine(tmp_path):
    model = branches(2, depth=2)
    graph = load_graph(model)
    placement = Placement(["cuda:0", "cuda:1"], {n: "cuda:1" if n.startswith(("mm1", "relu1")) else "cuda:0"
                                                 for n in graph.nodes}, graph.sha256)
    write_split(model, placement, graph, tmp_path)
    feeds = random_feeds(graph, seed=0)
    with placer.engines.onnxruntime.load(tmp_path, device_map={"cuda:0": "cpu:0", "cuda:1": "cpu:1"}) as runner:
        assert sorted(d.name for d in runner.devices) == ["cpu:0", "cpu:1"]
        assert_same(runner.run(feeds, timeout_s=10), whole_model_outputs(model, feeds))
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(PlacerError, match="onnxruntime-gpu"):
            placer.engines.onnxruntime.load(tmp_path)


def test_missing_inputs_and_foreign_devices_are_one_line_errors(two_branches):
    folder, feeds, _ = two_branches
    with pytest.raises(PlacerError, match="run no stage"):
        placer.engines.onnxruntime.load(folder, devices=["cpu:5[threads=1]"])
    with placer.engines.onnxruntime.load(folder) as runner, pytest.raises(PlacerError, match=r"no value given for the inputs \['x'\]"):
        runner.run({})
    with pytest.raises(PlacerError, match="placer apply --split"):
        placer.engines.onnxruntime.load(folder / "nothing_here")


def test_outputs_are_numpy_arrays_of_the_models_dtypes(two_branches):
    folder, feeds, expected = two_branches
    with placer.engines.onnxruntime.load(folder) as runner:
        got = runner.run(feeds, timeout_s=10)
    assert isinstance(got["y"], np.ndarray) and got["y"].dtype == expected["y"].dtype
