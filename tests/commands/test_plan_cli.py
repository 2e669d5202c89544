"""A plan file that splits ops, run and measured for real by `placer run` and `placer measure`
(its forward step; in ONNX Runtime the plans whose devices never talk), and refused in one line
where it cannot run."""

import numpy as np
import pytest

from placer.cli import main
from placer.kernels.loading import load_graph
from placer.plans.data_parallel import data_parallel
from placer.plans.plan import OpPlan, Plan
from placer.plans.rules import splits
from testgraphs import tiny_conv_file as _tiny_model_file

DEVICES = "cpu:0[threads=1],cpu:1[threads=1]"


def plans_of(model, folder):
    """The tiny model's data-parallel plan (its devices never talk), and one whose first Conv is
    split by output channels and gathered onto cpu:0 (a collective), saved; their paths."""
    graph = load_graph(model)
    data_parallel(graph, ["cpu:0", "cpu:1"]).save(folder / "dp.json")
    ops = {n: OpPlan(("cpu:0",)) for n in graph.nodes}
    (split,) = [s for s in splits(graph.nodes["conv_a"], graph, 2) if s.name == "output channels"]
    ops["conv_a"] = OpPlan(("cpu:0", "cpu:1"), split.inputs, split.outputs)
    Plan(["cpu:0", "cpu:1"], ops, graph.sha256).save(folder / "gathered.json")
    return folder / "dp.json", folder / "gathered.json"


@pytest.mark.parametrize("engine", ["torch", "onnxruntime"])
def test_a_plan_runs_and_measures_like_a_placement(tmp_path, capsys, engine):
    model = _tiny_model_file(tmp_path / "tiny.onnx", batch=4)
    plans = plans_of(model, tmp_path)
    assert main(["run", "--graph", str(model), "--device", "cpu", "--outputs", str(tmp_path / "whole.npz")]) == 0
    for plan in plans[:1] if engine == "onnxruntime" else plans:   # ONNX Runtime: the one whose devices never talk
        assert main(["run", "--graph", str(model), "--placement", str(plan), "--engine", engine,
                     "--outputs", str(tmp_path / "plan.npz")]) == 0
        np.testing.assert_allclose(np.load(tmp_path / "plan.npz")["y"], np.load(tmp_path / "whole.npz")["y"],
                                   atol=1e-5)
    capsys.readouterr()
    objectives = ["inference"] if engine == "onnxruntime" else ["inference", "training"]
    for objective in objectives:
        assert main(["measure", "--graph", str(model), "--placement", str(plans[0]), "--devices", DEVICES,
                     "--warmup", "0", "--repeats", "2", "--engine", engine, "--objective", objective]) == 0
        assert "plan of 5 ops (5 split) on cpu:0 (5), cpu:1 (5)" in capsys.readouterr().out


def test_a_plan_is_refused_in_one_line_where_it_cannot_run(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx", batch=4)
    dp, gathered = plans_of(model, tmp_path)
    for plan, extra, said in ((gathered, ["--engine", "onnxruntime"], "this one has collectives, which have no ONNX "
                                                                        "ops; run it with --engine torch"),
                              (dp, ["--micro-batches", "2"], "runs one batch a step, not micro-batches"),
                              (dp, ["--devices", "cpu:0"], "the plan uses cpu:1, which are not among the devices")):
        assert main(["measure", "--graph", str(model), "--placement", str(plan), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], (extra, err)
