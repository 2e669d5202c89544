"""A plan search on a few of a deep model's repeated blocks (placer.plans.reduced): plans map to
the reduced graph and back keeping stages contiguous, its memory check counts every block's
weights as the whole model's does, and compare's searched row on a reduced model is the plan's
simulation on the whole graph, never slower than the plan it started from."""

from __future__ import annotations

import json

import pytest

import graphs
from placer.cli import main
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.placement import Placement
from placer.plans import reduced as reduced_module
from placer.plans.plan import Plan
from placer.plans.pricing import simulate_plan
from placer.plans.reduced import ReducedScorer, reduce

GPUS = [f"cuda:{i}" for i in range(4)]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny Llama of 12 layers, its graph and that graph reduced to 4 of them."""
    model = graphs.export("llama", tmp_path_factory.mktemp("reduced") / "llama.onnx", layers=12)
    graph = load_graph(model)
    return model, graph, reduce(graph, 4, large=0)


def _stages(graph, reduced) -> Plan:
    """Layers 0-2 on cuda:0, 3-5 on cuda:1, ...; the rest on cuda:0 but the head, on cuda:3."""
    blocks = reduced.repeats.blocks
    nodes = {n: "cuda:0" for n in graph.nodes}
    nodes.update({n: GPUS[j // 3] for j, block in enumerate(blocks) for n in block})
    nodes.update({n: "cuda:3" for n in reduced.repeats.suffix})
    return Plan.from_placement(Placement(["cpu:0", *GPUS], nodes, graph.sha256))


def test_the_reduced_graph_keeps_four_blocks_and_reads_the_fourth_where_the_whole_read_the_last(llama):
    _, graph, reduced = llama
    assert reduced.blocks == 12 and reduced.kept == 4
    assert len(reduced.graph.nodes) == len(graph.nodes) - 8 * reduced.repeats.period
    first_after = reduced.graph.nodes[reduced.repeats.suffix[0]]
    assert any(t.startswith("layers.3.") for t in first_after.inputs)
    assert not any(n.startswith("layers.4.") for n in reduced.graph.nodes)


def test_a_pipeline_maps_to_one_block_a_stage_and_back_unchanged(llama):
    _, graph, reduced = llama
    plan = _stages(graph, reduced)
    small = reduced.to_reduced(plan)
    assert [small.ops[reduced.repeats.blocks[b][0]].devices for b in range(4)] == [(d,) for d in GPUS]
    assert reduced.to_full(small).ops == plan.ops


def test_the_reduced_memory_check_counts_every_blocks_weights_as_the_whole_model_does(llama):
    """Each device's peak, with the kept blocks' weights counted for the blocks they stand for and
    the tables every block reads counted as held, is never under the whole model's simulated peak
    (so a plan the whole model cannot hold fails), and over it by those tables at most."""
    _, graph, reduced = llama
    cluster = load_cluster("4xa100-nvlink")
    plan = _stages(graph, reduced)
    whole = simulate_plan(graph, plan, cluster)
    scored = ReducedScorer(reduced, cluster, 10).measurement(reduced.to_reduced(plan))
    assert scored.ok and whole.ok
    tables = sum(graph.tensors[t].nbytes for t in ("rope.cos", "rope.sin", "mask.causal"))
    for d in GPUS:
        assert whole.peak_memory[d] <= scored.peak_memory[d] <= whole.peak_memory[d] + tables


def test_compare_searches_a_deep_model_on_its_reduced_copy_and_reports_the_whole(llama, tmp_path, monkeypatch):
    model, graph, _ = llama
    monkeypatch.setattr(reduced_module, "LARGE", 0)
    out = tmp_path / "out"
    code = main(["compare", "--graph", str(model), "--cluster", "4xa100-nvlink", "--placers", "single,pipeline_dp",
                 "--plans", "tensor_parallel,plan_search", "--samples", "20", "--out", str(out), "--json"])
    assert code == 0
    rows = {r["name"]: r for r in json.loads((out / "compare.json").read_text())["rows"]}
    row = rows["plan_search"]
    assert "on 4 of its 12 repeated blocks" in row["note"]
    started = min(rows[n]["measurement"]["step_time"] for n in ("tensor_parallel", "pipeline_dp", "single:cuda:0"))
    assert row["measurement"]["ok"] and row["measurement"]["step_time"] <= started
    plan = Plan.load(out / "placements" / "plan_search.json")
    assert plan.graph_sha256 == graph.sha256 and set(plan.ops) == set(graph.nodes)
    again = simulate_plan(graph, plan, load_cluster("4xa100-nvlink"))
    assert again.step_time == pytest.approx(row["measurement"]["step_time"], rel=1e-12)


def test_a_dropped_layers_own_output_is_left_out_of_the_reduced_graph(llama, tmp_path):
    """A model that also returns a middle layer's output (as a cache is): the reduced copy drops that
    layer, so it drops that output, and its plans still lower and simulate."""
    import onnx

    model = onnx.load(llama[0])
    extra = next(n for n in model.graph.node if n.name == "layers.6.mlp.residual").output[0]
    model.graph.output.append(onnx.helper.make_tensor_value_info(extra, onnx.TensorProto.FLOAT, [1, 16, 64]))
    onnx.save(model, tmp_path / "cached.onnx")
    graph = load_graph(tmp_path / "cached.onnx")
    reduced = reduce(graph, 4, large=0)
    assert [o.name for o in reduced.graph.outputs] == [o.name for o in graph.outputs if o.name != extra]
    plan = Plan.from_placement(Placement(["cpu:0", *GPUS], {n: "cuda:0" for n in graph.nodes}, graph.sha256))
    assert ReducedScorer(reduced, load_cluster("4xa100-nvlink"), 2).measurement(reduced.to_reduced(plan)).ok


def test_a_start_its_row_simulated_is_not_simulated_again_on_the_whole_graph(llama, monkeypatch):
    """A reduced search simulates on the whole graph the plan it found; its start's figure is the
    start's row's, already simulated there (a 10,000-node plan takes seconds)."""
    from placer.evaluate import plan_search_rows
    from placer.plans.tensor_parallel import tensor_parallel

    _, graph, _ = llama
    monkeypatch.setattr(reduced_module, "LARGE", 0)
    cluster = load_cluster("4xa100-nvlink")
    start = tensor_parallel(graph, GPUS)
    row = simulate_plan(graph, start, cluster)
    simulated = []

    def counting(graph, plan, cluster):
        simulated.append(plan)
        return simulate_plan(graph, plan, cluster)

    monkeypatch.setattr(plan_search_rows, "simulate_plan", counting)
    (found,), _ = plan_search_rows.searched_rows(graph, cluster, GPUS, ["plan_search"], {}, {"tensor_parallel": start},
                                                 samples=6, measured={"tensor_parallel": row})
    assert len(simulated) == 1   # the plan found, not the start again
    assert f"from tensor_parallel ({row.step_time * 1e3:.3f} ms)" in found.note
    assert found.measurement.step_time <= row.step_time
