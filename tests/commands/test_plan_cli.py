"""A plan file that splits ops, run and measured for real by `placer run` and `placer measure`
(the torch engine's forward step), and refused in one line where it cannot run."""

import numpy as np

from placer.cli import main
from placer.kernels.loading import load_graph
from placer.plans.data_parallel import data_parallel
from testgraphs import tiny_conv_file as _tiny_model_file

DEVICES = "cpu:0[threads=1],cpu:1[threads=1]"


def test_a_plan_runs_and_measures_like_a_placement(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx", batch=4)
    data_parallel(load_graph(model), ["cpu:0", "cpu:1"]).save(tmp_path / "dp.json")
    assert main(["run", "--graph", str(model), "--placement", str(tmp_path / "dp.json"),
                 "--outputs", str(tmp_path / "plan.npz")]) == 0
    assert main(["run", "--graph", str(model), "--device", "cpu", "--outputs", str(tmp_path / "whole.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "plan.npz")["y"], np.load(tmp_path / "whole.npz")["y"], atol=1e-5)
    capsys.readouterr()
    assert main(["measure", "--graph", str(model), "--placement", str(tmp_path / "dp.json"), "--devices", DEVICES,
                 "--warmup", "0", "--repeats", "2"]) == 0
    assert "plan of 5 ops (5 split) on cpu:0 (5), cpu:1 (5)" in capsys.readouterr().out


def test_a_plan_is_refused_in_one_line_where_it_cannot_run(tmp_path, capsys):
    model = _tiny_model_file(tmp_path / "tiny.onnx", batch=4)
    data_parallel(load_graph(model), ["cpu:0", "cpu:1"]).save(tmp_path / "dp.json")
    argv = ["measure", "--graph", str(model), "--placement", str(tmp_path / "dp.json")]
    for extra, said in ((["--engine", "onnxruntime"], "measure plans with --engine torch"),
                        (["--objective", "training"], "not yet its training step"),
                        (["--devices", "cpu:0"], "the plan uses cpu:1, which are not among the devices given")):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], (extra, err)
