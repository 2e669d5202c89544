"""The onnxruntime engine computes what ORT computes on the whole model, under any placement."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from placer.errors import PlacerError
from placer.graph.load import parse_input_shapes
from placer.kernels.loading import load_graph
from placer.graph.feeds import random_feeds
from placer.placement import Placement
from placer.engines.onnxruntime.partition import STAGES, depth_stages
from placer.engines.onnxruntime.placed import OrtPlacement
from testgraphs import branches

from .conftest import CPUS, assert_same, random_placement, shape_model, whole_model_outputs

# Small zoo models on several random placements; the big CNNs on one 2- and one 3-device placement.
CASES = ([pytest.param(name, k, seed, id=f"{name}-{k}dev-{seed}")
          for name in ("rnnlm", "nmt", "transformer") for k in (2, 3) for seed in (0, 1)]
         + [pytest.param(name, k, 0, id=f"{name}-{k}dev-0", marks=pytest.mark.slow)
            for name in ("inception_v3", "resnet50") for k in (2, 3)])


@pytest.fixture(scope="module")
def zoo_graphs(zoo_file):
    loaded = {}

    def get(name):
        if name not in loaded:
            graph = load_graph(zoo_file(name))
            feeds = random_feeds(graph, seed=0)
            loaded[name] = graph, feeds, whole_model_outputs(zoo_file(name), feeds)
        return loaded[name]

    return get


@pytest.mark.parametrize(("name", "k", "seed"), CASES)
def test_a_random_placement_of_a_zoo_model_gives_the_whole_models_outputs(zoo_graphs, name, k, seed):
    graph, feeds, expected = zoo_graphs(name)
    with OrtPlacement(graph, random_placement(graph, k, seed + 10 * k), CPUS[:k]) as placed:
        assert len({p.device for p in placed.partitions}) == k
        assert_same(placed.run_arrays(feeds, timeout_s=10), expected)


def test_a_dynamo_export_with_symbolic_dims_splits_and_gives_the_whole_models_outputs(dynamo_file):
    model = onnx.load(dynamo_file)
    assert any(d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim)
    graph = load_graph(dynamo_file, parse_input_shapes(["x=3x7x8", "mask=3x7"]))
    feeds = random_feeds(graph, seed=3)
    expected = whole_model_outputs(dynamo_file, feeds)   # the file as exported, symbolic dims and all
    for k, seed in ((2, 0), (3, 1)):
        with OrtPlacement(graph, random_placement(graph, k, seed), CPUS[:k]) as placed:
            assert len(placed.partitions) > k
            assert_same(placed.run_arrays(feeds, timeout_s=10), expected)


def test_every_node_on_one_device_is_one_session_of_the_whole_bound_model(zoo_file):
    graph = load_graph(zoo_file("rnnlm"))
    alone = Placement.single_device(list(graph.nodes), "cpu:1", graph.sha256, devices=["cpu:0", "cpu:1"])
    with OrtPlacement(graph, alone, CPUS[:2]) as placed:
        (piece,) = placed.engine.pieces
        assert [p.nodes for p in placed.partitions] == [list(graph.nodes)] and piece.device.name == "cpu:1"
        assert [i.name for i in piece.session.get_inputs()] == [i.name for i in graph.model.graph.input
                                                               if i.name not in graph.initializers]
        feeds = random_feeds(graph, seed=0)
        assert_same(placed.run_arrays(feeds, timeout_s=10), whole_model_outputs(graph.model, feeds))


def test_one_branch_per_device_is_two_partitions_and_the_join_a_third():
    graph = load_graph(branches(2, depth=3))
    placement = Placement(["cpu:0", "cpu:1"], {n: "cpu:1" if n.startswith(("mm1", "relu1")) else "cpu:0"
                                               for n in graph.nodes}, graph.sha256)
    with OrtPlacement(graph, placement, CPUS[:2]) as placed:
        parts = [(p.device, len(p.nodes), p.inputs) for p in placed.partitions]
        assert parts == [("cpu:0", 6, ["x"]), ("cpu:1", 6, ["x"]), ("cpu:0", 1, ["r0_2", "r1_2"])]
        feeds = random_feeds(graph, seed=0)
        assert_same(placed.run_arrays(feeds, timeout_s=10), whole_model_outputs(graph.model, feeds))


def test_a_shape_of_another_devices_tensor_is_folded_and_waits_on_nothing():
    # the shape nodes on cpu:1 read `a` (made on cpu:0); placer folds them, so cpu:1 reads only x
    graph = load_graph(shape_model())
    nodes = {n: "cpu:1" for n in graph.nodes} | {"relu": "cpu:0"}
    with OrtPlacement(graph, Placement(["cpu:0", "cpu:1"], nodes, graph.sha256), CPUS[:2]) as placed:
        assert [(p.device, p.nodes, p.inputs) for p in placed.partitions] == [
            ("cpu:0", ["relu"], ["x"]), ("cpu:1", ["neg", "reshape"], ["x"])]
        assert placed.partitions[1].constants == ["target"]
        feeds = random_feeds(graph, seed=1)
        assert_same(placed.run_arrays(feeds, timeout_s=10), whole_model_outputs(graph.model, feeds))


def _rnnlm_by_layer(graph):
    """rnnlm's first LSTM layer on cpu:0, the second and the projection on cpu:1; each node's
    time step as its stage (the export lists the nodes step by step, each step ending in the
    projection; constants at stage 0, where they are read from)."""
    nodes, stages, step = {}, {}, 0
    for name, op in graph.nodes.items():
        nodes[name] = "cpu:1" if name.startswith(("/cells.1", "/decoder")) else "cpu:0"
        stages[name] = 0 if op.op_type == "Constant" else step
        step += name.startswith("/decoder")
    for name, op in graph.nodes.items():   # the join of the steps' projections: after the last step
        if op.op_type in ("Unsqueeze", "Concat"):
            nodes[name], stages[name] = "cpu:1", step
    return Placement(["cpu:0", "cpu:1"], nodes, graph.sha256), stages


def _hands_over_early(partitions) -> bool:
    """cpu:1's first partition waits on none of cpu:0's last: cpu:1 starts before cpu:0 ends."""
    first = next(p for p in partitions if p.device == "cpu:1")
    last = [p for p in partitions if p.device == "cpu:0"][-1]
    return last.index != 0 and not set(first.inputs) & set(last.outputs)


def test_stages_hand_a_layers_first_steps_over_before_the_layer_ends(zoo_file):
    graph = load_graph(zoo_file("rnnlm"))
    placement, stages = _rnnlm_by_layer(graph)
    feeds = random_feeds(graph, seed=0)
    expected = whole_model_outputs(zoo_file("rnnlm"), feeds)
    with OrtPlacement(graph, placement, CPUS[:2], stages={}) as uncut:
        # cpu:1 waits for all of the first layer: one partition each
        assert [p.device for p in uncut.partitions] == ["cpu:0", "cpu:1"]
    for given in (stages, None):   # a stage per time step, and the default bands of depth
        with OrtPlacement(graph, placement, CPUS[:2], stages=given) as staged:
            assert len(staged.partitions) > 2 and _hands_over_early(staged.partitions)
            assert_same(staged.run_arrays(feeds, timeout_s=10), expected)


def test_default_stages_are_bands_of_depth_and_a_shallow_graph_stays_uncut(zoo_file):
    graph = load_graph(zoo_file("nmt"))
    bands = depth_stages(graph, set())
    assert max(bands.values()) + 1 == STAGES
    for name, op in graph.nodes.items():   # a band never decreases along an edge
        assert all(bands[graph.producer[t]] <= bands[name] for t in op.inputs if t in graph.producer)
    assert set(depth_stages(load_graph(branches(2, depth=3)), set()).values()) == {0}


def test_bands_that_let_no_device_start_sooner_leave_the_partitions_uncut():
    # one deep chain per device, joined at the end: each crosses over at its end only
    graph = load_graph(branches(2, depth=40, width=8))
    placement = Placement(["cpu:0", "cpu:1"], {n: "cpu:1" if n.startswith(("mm1", "relu1")) else "cpu:0"
                                               for n in graph.nodes}, graph.sha256)
    assert max(depth_stages(graph, set()).values()) > 0
    with OrtPlacement(graph, placement, CPUS[:2]) as placed:
        assert [(p.device, len(p.nodes)) for p in placed.partitions] == [("cpu:0", 80), ("cpu:1", 80), ("cpu:0", 1)]


def test_where_the_stages_copies_of_the_weights_break_a_cap_the_partitions_stay_uncut(zoo_file):
    graph = load_graph(zoo_file("rnnlm"))
    placement, _ = _rnnlm_by_layer(graph)
    with OrtPlacement(graph, placement, CPUS[:2], stages={}) as uncut:
        fits = max(uncut.peak_memory.values())
    with OrtPlacement(graph, placement, CPUS[:2]) as staged:
        assert max(staged.peak_memory.values()) > fits   # the recurrent weights, once per stage
    capped = [f"cpu:{k}[threads=1,mem={fits}]" for k in range(2)]
    with OrtPlacement(graph, placement, capped) as placed:
        assert [p.device for p in placed.partitions] == ["cpu:0", "cpu:1"]
        feeds = random_feeds(graph, seed=0)
        assert_same(placed.run_arrays(feeds, timeout_s=10), whole_model_outputs(zoo_file("rnnlm"), feeds))


def test_a_stage_below_its_producers_is_refused_in_one_line(zoo_file):
    graph = load_graph(zoo_file("rnnlm"))
    placement, stages = _rnnlm_by_layer(graph)
    last = next(n for n in reversed(list(graph.nodes)) if n.startswith("/decoder"))
    with pytest.raises(PlacerError, match=r"stage 0 of /decoder\S* is below stage \d+ of .*a node's stage must "
                                          r"be at least its producers'"):
        OrtPlacement(graph, placement, CPUS[:2], stages={**stages, last: 0})


def test_outputs_repeat_over_steps_with_sessions_built_once(zoo_file):
    graph = load_graph(zoo_file("rnnlm"))
    feeds = random_feeds(graph, seed=0)
    with OrtPlacement(graph, random_placement(graph, 2, 5), CPUS[:2]) as placed:
        sessions = [p.session for p in placed.engine.pieces]
        first = placed.run_arrays(feeds, timeout_s=10)
        for _ in range(3):
            np.testing.assert_array_equal(placed.run_arrays(feeds, timeout_s=10)["logits"], first["logits"])
        assert [p.session for p in placed.engine.pieces] == sessions


@pytest.mark.gpu
@pytest.mark.skipif("CUDAExecutionProvider" not in __import__("onnxruntime").get_available_providers(),
                    reason="needs onnxruntime-gpu and a GPU")
def test_a_gpu_and_the_cpu_give_the_whole_models_outputs():
    graph = load_graph(branches(2, depth=3))
    placement = Placement(["cuda:0", "cpu"], {n: "cpu" if n.startswith(("mm1", "relu1")) else "cuda:0"
                                              for n in graph.nodes}, graph.sha256)
    feeds = random_feeds(graph, seed=0)
    with OrtPlacement(graph, placement, ["cuda:0", "cpu[threads=1]"]) as placed:
        assert {p.device.kind for p in placed.engine.pieces} == {"cuda", "cpu"}
        assert_same(placed.run_arrays(feeds, timeout_s=10), whole_model_outputs(graph.model, feeds))


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity") or len(__import__("os").sched_getaffinity(0)) < 2,
                    reason="needs two cores to pin to")
def test_each_virtual_cpu_devices_thread_is_pinned_to_its_own_core():
    import os

    graph = load_graph(branches(2, depth=2))
    placement = Placement(["cpu:0", "cpu:1"], {n: "cpu:1" if n.startswith(("mm1", "relu1")) else "cpu:0"
                                               for n in graph.nodes}, graph.sha256)
    with OrtPlacement(graph, placement, CPUS[:2]) as placed:
        placed.run_arrays(random_feeds(graph, seed=0), timeout_s=10)
        masks = {device: set(cores) for device, cores in placed.engine.worker_cores().items()}
    assert len(masks["cpu:0"]) == len(masks["cpu:1"]) == 1 and masks["cpu:0"] != masks["cpu:1"]
    assert os.sched_getaffinity(0) >= masks["cpu:0"] | masks["cpu:1"]   # the caller keeps its own mask
