"""A model larger than one GPU: the zoo transformer on a cluster file of 4 A100s whose memory holds
under 1/2.5 of its step. DDP replicates the weights and does not fit, and says so naming a
device; tensor and pipeline plans fit (FSDP on a training step); placer's searched plan fits and
is the fastest row that does."""

from __future__ import annotations

import json
from functools import partial

import pytest

import graphs
from placer.cli import main
from placer.costmodel.roofline import RooflineCostModel
from placer.graph.load import load_graph
from placer.hardware import load_cluster
from placer.placers.partitioners import pipeline_dp
from placer.plans.pipeline_data import pipeline_data_within
from placer.plans.plan import Plan
from placer.plans.pricing import simulate_plan

GPUS = [f"cuda:{i}" for i in range(4)]
NEEDS = 2.6   # the transformer's weights over one GPU's memory: it needs at least 2.5 GPUs


def cluster_file(memory_bytes: int) -> str:
    """4 A100s (datasheet figures, but `memory_bytes` each) joined pairwise by NVLink, on an EPYC host."""
    devices = '[[device]]\nname = "cpu:0"\nmodel = "epyc-7742"\n' + "".join(
        f'[[device]]\nname = "{d}"\nmodel = "small-a100"\n' for d in GPUS)
    pairs = [(a, b, "100 GB/s", "5 us") for i, a in enumerate(GPUS) for b in GPUS[i + 1:]]
    links = "".join(f'[[link]]\nname = "{a}-{b}"\nmembers = ["{a}", "{b}"]\nbandwidth = "{bw}"\nlatency = "{lat}"\n'
                    f'source = "as 4xa100-nvlink"\n'
                    for a, b, bw, lat in pairs + [(d, "cpu:0", "31.5 GB/s", "10 us") for d in GPUS])
    return (f'name = "4x-small-a100"\ndescription = "4 A100s with {memory_bytes} bytes each"\nsource = "test"\n'
            + devices + links + f"""[models.small-a100]
name = "A100 SXM4, its memory cut"
kind = "cuda"
peak_flops = {{ float32 = "19.5 TFLOPS", float64 = "9.7 TFLOPS" }}
tensor_flops = {{ float32 = "156 TFLOPS", float16 = "312 TFLOPS" }}
memory_bandwidth = "1555 GB/s"
memory_bytes = {memory_bytes}
launch_overhead = "5 us"
source = "NVIDIA A100 datasheet (2020) but for its memory"
""")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The transformer (2 blocks of d_model 768, a batch of 4) and a cluster file whose GPUs hold
    1/`NEEDS` of its weights."""
    where = tmp_path_factory.mktemp("larger")
    model = graphs.export("transformer", where / "transformer.onnx", batch=4, seq_len=8, layers=2, vocab=64)
    graph = load_graph(model)
    cap = int(sum(t.nbytes for t in graph.initializers.values()) / NEEDS)
    (where / "small.toml").write_text(cluster_file(cap))
    return model, where / "small.toml", graph, cap


def compared(model, cluster, out, *more: str) -> dict[str, dict]:
    """`placer compare --cluster`'s rows by name."""
    code = main(["compare", "--graph", str(model), "--cluster", str(cluster), "--placers", "single,m_etf,pipeline_dp",
                 "--samples", "60", "--json", "--no-plot", "--out", str(out), *more])
    assert code == 0
    return {r["name"]: r for r in json.loads((out / "compare.json").read_text())["rows"]}


@pytest.fixture(scope="module")
def compare_out(case, tmp_path_factory):
    model, cluster, _, _ = case
    out = tmp_path_factory.mktemp("compare")
    return compared(model, cluster, out), out


@pytest.fixture(scope="module")
def rows(compare_out):
    return compare_out[0]


def test_each_plan_rows_plan_is_saved_and_simulates_as_its_row(compare_out, case):
    """A user told to use a plan gets its file, where compare saves placements."""
    rows, out = compare_out
    _, cluster, graph, _ = case
    for name in ("tensor_parallel", "pipeline_data", "plan_search"):
        plan = Plan.load(out / "placements" / f"{name}.json")
        assert set(plan.ops) == set(graph.nodes)
        again = simulate_plan(graph, plan, load_cluster(str(cluster)))
        assert again.step_time == pytest.approx(rows[name]["step_time_s"], rel=1e-12)
        assert rows[name]["ratio_to_lower_bound"] is None   # the bound is over placements
    assert rows["pipeline_dp"]["ratio_to_lower_bound"] >= 1


def test_the_model_needs_at_least_two_and_a_half_gpus(rows, case):
    cap = case[3]
    single = rows["single:cuda:0"]
    assert single["status"].startswith("oom: cuda:0") and single["peak_memory"]["cuda:0"] >= 2.5 * cap


def test_ddp_does_not_fit_and_its_row_says_which_device_in_one_line(rows, case):
    cap = case[3]
    ddp = rows["data_parallel"]
    assert ddp["step_time_s"] is None and "\n" not in ddp["status"]
    assert ddp["status"].startswith("oom: cuda:0 needs") and f"over its cap of {cap}" in ddp["status"]
    assert all(ddp["peak_memory"][d] > cap for d in GPUS)   # every replica holds all the weights


@pytest.mark.parametrize("name", ["tensor_parallel", "pipeline_data", "plan_search"])
def test_the_plans_fit_every_gpu(rows, case, name):
    cap = case[3]
    row = rows[name]
    assert row["status"] == "ok" and row["step_time_s"] > 0, row["status"]
    assert all(0 < row["peak_memory"][d] <= cap for d in GPUS), row["peak_memory"]


def test_placers_plan_is_the_fastest_row_that_fits(rows):
    fitting = {n: r["step_time_s"] for n, r in rows.items() if r["status"] == "ok"}
    assert "plan_search" in fitting and fitting["plan_search"] == min(fitting.values()), fitting
    assert fitting["plan_search"] < fitting["tensor_parallel"]


def test_pipeline_data_cuts_more_stages_where_two_do_not_fit(case):
    _, path, graph, cap = case
    cluster = load_cluster(str(path))
    partition = partial(pipeline_dp, cost=RooflineCostModel(cluster, graph))
    roomy = pipeline_data_within(graph, GPUS, partition, {d: 1 << 40 for d in GPUS})
    assert roomy.extra["placer"]["stages"] == [GPUS[:2], GPUS[2:]]   # two stages of two replicas where they fit
    tight = pipeline_data_within(graph, GPUS, partition, {d: cap for d in GPUS})
    assert tight.extra["placer"]["stages"] == [[d] for d in GPUS]   # else a stage per GPU, each op whole
    assert all(op.whole for op in tight.ops.values())


def test_a_training_step_ddp_does_not_fit_and_fsdp_and_placers_plan_do(case, tmp_path):
    model, _, graph, _ = case
    cap = int(3 * sum(t.nbytes for t in graph.initializers.values()) / NEEDS)   # weights, gradients, momentum
    (tmp_path / "training.toml").write_text(cluster_file(cap))
    rows = compared(model, tmp_path / "training.toml", tmp_path / "out", "--objective", "training")
    assert rows["single:cuda:0"]["status"].startswith("oom: cuda:0") and rows["single:cuda:0"]["peak_memory"][
        "cuda:0"] >= 2.5 * cap
    assert rows["data_parallel"]["status"].startswith("oom: cuda:0 needs") and f"over its cap of {cap}" in rows[
        "data_parallel"]["status"]
    for name in ("fsdp", "plan_search"):   # FSDP holds a quarter of the weights, gradients and momentum
        assert rows[name]["status"] == "ok" and all(rows[name]["peak_memory"][d] <= cap for d in GPUS), rows[name]
    fitting = {n: r["step_time_s"] for n, r in rows.items() if r["status"] == "ok"}
    assert fitting["plan_search"] == min(fitting.values()), fitting
