"""--cluster: placing for described hardware in the simulator, and nothing real on hardware this
machine does not have."""

from __future__ import annotations

import json

import pytest

from placer.cli import main
from placer.jobs.compare import ALL_PLANS

from .test_compare import _tiny_model_file


def test_compare_on_a_described_cluster_is_simulated_and_says_so(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    code = main(["compare", "--graph", str(model), "--cluster", "paper-4xk40", "--json", "--no-plot",
                 "--out", str(out), "--placers", "single,m_etf,heft,random_search", "--samples", "50"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["info"]["simulated"] is True and data["info"]["cluster"] == "paper-4xk40"
    assert data["notes"][0].startswith("simulated:")
    assert data["devices"] == ["cpu:0", "cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    rows = {r["name"]: r for r in data["rows"]}
    assert {"single:cuda:0", "single:cpu:0", "m_etf", "heft", "random_search"} <= set(rows)
    for row in rows.values():   # a simulated figure is exact: the step time is the prediction
        assert row["status"] == "ok" and row["step_time_s"] == row["predicted_step_time_s"] > 0
        if row["name"] in ALL_PLANS:   # the bound is over placements: a plan that splits ops is not bounded by it
            assert row["ratio_to_lower_bound"] is None
        else:
            assert row["ratio_to_lower_bound"] >= 1.0
    assert rows["single:cuda:0"]["step_time_s"] < rows["single:cpu:0"]["step_time_s"]
    assert data["lower_bound"]["value"] > 0 and (out / "compare.json").is_file()


def test_anything_real_on_hardware_this_machine_does_not_have_is_refused_in_one_line(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    for argv in (["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "real",
                  "--run-dir", str(tmp_path / "run")],
                 ["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "simulated",
                  "--workers", "2", "--run-dir", str(tmp_path / "run2")],
                 ["measure", "--graph", str(model), "--cluster", "paper-4xk40"],
                 ["run", "--graph", str(model), "--cluster", "paper-4xk40"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "hardware this machine does not have" in err, err


def test_train_on_a_described_cluster_learns_in_the_simulator_and_its_closing_comparison_is_simulated(tmp_path,
                                                                                                     capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    code = main(["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "simulated",
                 "--samples", "64", "--run-dir", str(run), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "simulated again side by side" in printed and "measured" not in printed.split("simulating every")[0][-200:]
    compared = json.loads((run / "compare" / "compare.json").read_text())
    assert compared["info"]["simulated"] is True and compared["info"]["cluster"] == "paper-2xk40"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples_by_reward"]["real"] == 0


def test_polishing_the_learned_placement_counts_in_the_samples_and_never_makes_it_slower(tmp_path, capsys):
    from placer.costmodel.roofline import RooflineCostModel
    from placer.costmodel.simulator import Simulator
    from placer.graph.load import load_graph
    from placer.hardware import load_cluster
    from placer.placement import Placement

    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--cluster", "cpu-fast-slow-gpu", "--reward", "simulated",
                 "--samples", "128", "--polish", "0.5", "--run-dir", str(run), "--no-progress", "--no-compare"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    polish = summary["polish"]
    assert 0 < polish["samples"] <= 64 and polish["to_s"] <= polish["from_s"]
    assert summary["samples"] <= 128   # every simulated placement counts: the budget holds
    graph, cluster = load_graph(model), load_cluster("cpu-fast-slow-gpu")
    sim = Simulator(graph, cluster.device_names, RooflineCostModel(cluster, graph))
    index = {d: i for i, d in enumerate(cluster.device_names)}
    placed = Placement.load(run / "placement.json")
    assert sim.simulate([index[placed.nodes[n]] for n in graph.nodes]).step_time == polish["to_s"]
    assert main(["train", "--graph", str(model), "--cluster", "cpu-fast-slow-gpu", "--reward", "simulated",
                 "--polish", "0.5", "--run-dir", str(tmp_path / "nosamples"), "--budget", "1s"]) == 2
    assert "--samples" in capsys.readouterr().err


def test_a_budget_without_a_sample_count_trains_on_a_cluster_without_polishing(tmp_path):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    assert main(["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "simulated",
                 "--budget", "2s", "--run-dir", str(run), "--no-progress", "--no-compare"]) == 0
    assert "polish" not in json.loads((run / "summary.json").read_text())


def _placement_file(path, model, nodes):
    """A placement of the tiny model: node name -> device, every other node on cuda:0."""
    from placer.graph.load import load_graph
    from placer.placement import Placement

    graph = load_graph(model)
    nodes = {n: nodes.get(n, "cuda:0") for n in graph.nodes}
    Placement(sorted(set(nodes.values())), nodes, graph.sha256).save(path)
    return path, graph


def test_show_on_a_cluster_prints_the_simulated_step_and_memory_and_says_so(tmp_path, capsys):
    from placer.costmodel.roofline import RooflineCostModel
    from placer.costmodel.simulator import Simulator
    from placer.hardware import load_cluster

    model = _tiny_model_file(tmp_path / "tiny.onnx")
    placement, graph = _placement_file(tmp_path / "p.json", model, {"conv_b": "cuda:1", "sig_b": "cuda:1"})
    assert main(["show", "--graph", str(model), "--placement", str(placement), "--cluster", "paper-2xk40"]) == 0
    out = capsys.readouterr().out
    assert "predicted on cluster paper-2xk40 (simulated" in out and "nothing was run or measured" in out
    assert "cuda:1" in out and "/ 12.0 GiB" in out
    assert main(["show", "--graph", str(model), "--placement", str(placement), "--cluster", "paper-2xk40",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cluster = load_cluster("paper-2xk40")
    sim = Simulator(graph, cluster.device_names, RooflineCostModel(cluster, graph))
    index = {d: i for i, d in enumerate(cluster.device_names)}
    expected = sim.simulate([index["cuda:1" if n.endswith("_b") else "cuda:0"] for n in graph.nodes]).step_time
    assert data["simulated"] is True and data["cluster"] == "paper-2xk40"
    assert data["predicted"]["step_time_s"] == expected
    assert data["predicted"]["memory_capacity"]["cuda:0"] == 12 * 2**30
    assert [d["device"] for d in data["devices"]] == cluster.device_names   # the cluster's devices, in its order


def test_show_on_a_cluster_whose_memory_is_too_small_predicts_the_failure(tmp_path, capsys):
    from .test_cluster_cli import BOX

    model = _tiny_model_file(tmp_path / "tiny.onnx")
    small = tmp_path / "small.toml"
    small.write_text(BOX.replace('model = "tesla-k40"', 'model = "tiny-gpu"') + """
[models.tiny-gpu]
name = "A GPU with 1 KiB"
kind = "cuda"
peak_flops = { float32 = "1 TFLOPS" }
memory_bandwidth = "100 GB/s"
memory = "1 KiB"
launch_overhead = "5 us"
source = "test"
""")
    assert main(["show", "--graph", str(model), "--device", "cuda:0", "--cluster", str(small), "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["predicted"]
    assert predicted["step_time_s"] is None and predicted["failure"] == "oom"
    assert main(["show", "--graph", str(model), "--device", "cuda:0", "--cluster", str(small)]) == 0
    assert "the step fails: oom" in capsys.readouterr().out


def test_apply_on_a_cluster_writes_the_clusters_devices_into_the_model(tmp_path, capsys):
    import onnx

    from placer.annotate.read import read_placement

    model = _tiny_model_file(tmp_path / "tiny.onnx")
    placement, graph = _placement_file(tmp_path / "p.json", model, {"conv_b": "cuda:3", "sig_b": "cuda:3"})
    out = tmp_path / "placed.onnx"
    assert main(["apply", "--graph", str(model), "--placement", str(placement), "--cluster", "paper-4xk40",
                 "-o", str(out)]) == 0
    assert "for cluster paper-4xk40 (cpu:0, cuda:0, cuda:1, cuda:2, cuda:3)" in capsys.readouterr().out
    (config,) = onnx.load(str(out)).configuration
    assert list(config.device) == ["cpu:0", "cuda:0", "cuda:1", "cuda:2", "cuda:3"] and config.num_devices == 5
    stored = read_placement(onnx.load(str(out)))
    assert stored.devices == list(config.device) and stored.nodes["conv_b"] == "cuda:3"
    assert stored.nodes["conv_a"] == "cuda:0"


@pytest.mark.parametrize("command", ["show", "apply"])
def test_a_placement_on_a_device_the_cluster_lacks_is_one_line_naming_it(tmp_path, capsys, command):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    placement, _ = _placement_file(tmp_path / "p.json", model, {"conv_b": "cuda:3"})
    argv = [command, "--graph", str(model), "--placement", str(placement), "--cluster", "paper-2xk40"]
    assert main(argv + (["-o", str(tmp_path / "placed.onnx")] if command == "apply" else [])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cuda:3" in err and "'paper-2xk40'" in err and "--map cuda:3=" in err
    # --map renames it onto one the cluster has
    assert main(argv + ["--map", "cuda:3=cuda:1"] + (["-o", str(tmp_path / "p.onnx")] if command == "apply"
                                                     else [])) == 0


@pytest.mark.parametrize("argv", [
    ["compare", "--engine", "onnxruntime"], ["compare", "--timeout", "5"], ["compare", "--min-rounds", "8"],
    ["compare", "--refresh-profile"], ["compare", "--blocks", "2"],
    # typed with the value it has anyway: still meaningless there, still refused
    ["compare", "--blocks", "3"], ["compare", "--block", "3"], ["compare", "--timeout", "60"],
    ["train", "--reward", "simulated", "--timeout", "60"],
    ["train", "--reward", "simulated", "--engine", "onnxruntime"],
    ["train", "--reward", "simulated", "--repeats", "9"], ["train", "--reward", "simulated", "--timeout", "5"],
    ["train", "--reward", "simulated", "--cost-model", "analytic"],
], ids=lambda argv: " ".join(argv))
def test_an_option_that_does_nothing_on_a_described_cluster_is_refused_in_one_line(tmp_path, capsys, argv):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    where = ["--out", str(tmp_path / "out")] if argv[0] == "compare" else ["--run-dir", str(tmp_path / "run")]
    assert main([argv[0], "--graph", str(model), "--cluster", "paper-2xk40", *argv[1:], *where]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and argv[-1 if argv[-1].startswith("--") else -2] in err
    assert "nothing on cluster 'paper-2xk40'" in err and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def run_on_2xk40(tmp_path_factory):
    """A run trained for paper-2xk40, in the simulator."""
    root = tmp_path_factory.mktemp("trained")
    model = _tiny_model_file(root / "tiny.onnx")
    assert main(["train", "--graph", str(model), "--cluster", "paper-2xk40", "--reward", "simulated", "--samples",
                 "16", "--run-dir", str(root / "run"), "--no-progress", "--no-compare"]) == 0
    return model, root / "run"


def test_compare_refuses_a_run_trained_for_another_cluster_naming_both(tmp_path, capsys, run_on_2xk40):
    model, run = run_on_2xk40
    capsys.readouterr()
    common = ["compare", "--graph", str(model), "--include-rl", str(run), "--no-plot", "--placers", "single",
              "--out", str(tmp_path / "out")]
    assert main(common + ["--cluster", "2xt4-pcie"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'paper-2xk40', not for cluster '2xt4-pcie'" in err
    assert "--cluster paper-2xk40" in err and "--devices" not in err
    assert main(common) == 2   # this machine is not the cluster either
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'paper-2xk40', not on this machine" in err
    assert main(common + ["--cluster", "paper-2xk40", "--json"]) == 0
    assert "learned" in {r["name"] for r in json.loads(capsys.readouterr().out)["rows"]}


def test_compare_on_a_cluster_refuses_a_run_trained_on_this_machine(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    run.mkdir()
    _placement_file(run / "placement.json", model, {})
    (run / "summary.json").write_text(json.dumps({"devices": ["cpu:0", "cpu:1"], "samples": 10,
                                                  "measurer": {"kind": "PairedMeasurer", "protocol": {}}}))
    assert main(["compare", "--graph", str(model), "--cluster", "paper-2xk40", "--include-rl", str(run),
                 "--no-plot", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "this machine's devices (cpu:0, cpu:1), not for cluster 'paper-2xk40'" in err


@pytest.mark.parametrize("command", ["show", "apply", "compare", "train"])
@pytest.mark.parametrize("bad", ["malformed", "unknown-model", "missing-device"])
def test_a_bad_cluster_file_given_to_a_command_is_one_line_and_exit_2(tmp_path, capsys, command, bad):
    from .test_cluster_cli import BOX

    text = {"malformed": 'name = "x"\n[[device\n',
            "unknown-model": BOX.replace('"tesla-k40"', '"tesla-k99"'),
            "missing-device": BOX.replace('["cuda:0", "cpu:0"]', '["cuda:1", "cpu:0"]')}[bad]
    fragment = {"malformed": "is not valid TOML", "unknown-model": "unknown model 'tesla-k99'",
                "missing-device": "neither a device"}[bad]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    extra = {"show": ["--device", "cuda:0"], "apply": ["--device", "cuda:0", "-o", str(tmp_path / "p.onnx")],
             "compare": ["--no-plot", "--out", str(tmp_path / "out")],
             "train": ["--reward", "simulated", "--run-dir", str(tmp_path / "run")]}[command]
    assert main([command, "--graph", str(model), "--cluster", str(path), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and fragment in captured.err, captured.err


def test_compare_where_no_row_fits_exits_2_with_one_line_and_keeps_the_table(tmp_path, capsys):
    """Every device too small for the model: compare says so in one line, exits 2, and saves the
    table with each row's failure."""
    from .test_cluster_cli import BOX

    model = _tiny_model_file(tmp_path / "tiny.onnx")
    small = tmp_path / "small.toml"
    small.write_text(BOX.replace('model = "tesla-k40"', 'model = "tiny-gpu"')
                     .replace('model = "xeon-e5-2699-v3"', 'model = "tiny-cpu"') + "".join(f"""
[models.tiny-{kind}]
name = "A {kind} with 1 KiB"
kind = "{kind}"
peak_flops = {{ float32 = "1 TFLOPS" }}
memory_bandwidth = "100 GB/s"
memory = "1 KiB"
launch_overhead = "5 us"
source = "test"
""" for kind in ("cpu", "gpu")).replace('kind = "gpu"', 'kind = "cuda"'))
    out = tmp_path / "out"
    code = main(["compare", "--graph", str(model), "--cluster", str(small), "--out", str(out), "--no-plot"])
    captured = capsys.readouterr()
    (line,) = [l for l in captured.err.splitlines() if l.startswith("error:")]
    assert code == 2 and line.startswith("error: no placement or plan ran: all ") and "oom" in line
    assert "fastest:" not in captured.out and (out / "table.txt").is_file()


def test_compare_prices_the_plans_asked_for_on_a_cluster(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx")
    out = tmp_path / "out"
    argv = ["compare", "--graph", str(model), "--out", str(out), "--no-plot", "--placers", "single", "--json"]
    assert main([*argv, "--cluster", "paper-2xk40", "--plans", "data_parallel"]) == 0
    rows = {r["name"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert "plan_search" not in rows and "fsdp" not in rows
    assert main([*argv, "--cluster", "paper-2xk40", "--plans", "none"]) == 0
    assert not {r["name"] for r in json.loads(capsys.readouterr().out)["rows"]} & {"data_parallel", "plan_search"}
    assert main([*argv, "--cluster", "paper-2xk40", "--plans", "ddp"]) == 2
    assert "unknown plan 'ddp'" in capsys.readouterr().err
