"""The training step through the executor: per-node backward steps on each node's device give the
gradients and updates that torch autograd gives over the whole graph, and under random 2- and
3-device placements the same as on one device."""

from __future__ import annotations

import random

import graphs
import numpy as np
import pytest
import torch

from placer.graph.load import load_graph
from placer.engines.torch.executor import PlacedExecutor, StepProfile
from placer.graph.feeds import random_feeds
from placer.kernels.prepare import prepare
from placer.engines.torch.training import build_optimizer, check_targets, loss_term
from placer.kernels.registry import host_read_inputs
from placer.program.training import Loss, OptimizerSpec, TrainingSpec, trained_parameters
from placer.placement import Placement

from .test_executor_zoo import NAMES, SLOW, SMALL


def _train(graph, placement, feeds, spec, prepared=None, threads=None):
    devices = [f"{d}[threads={threads}]" if threads else d for d in placement.devices]
    with PlacedExecutor(graph, placement, devices, prepared=prepared, training=spec) as executor:
        return {k: v.detach().cpu().clone() for k, v in executor.run(feeds).items()}


def autograd_over_the_whole_graph(graph, feeds, spec: TrainingSpec):
    """The oracle: every kernel run in one autograd graph from leaf parameters, then one
    `torch.autograd.grad` of the loss and one torch optimizer over all parameters."""
    return torch_eager_steps(graph, feeds, spec, 1)[0]


def torch_eager_steps(graph, feeds, spec: TrainingSpec, steps: int) -> list[dict[str, torch.Tensor]]:
    """`autograd_over_the_whole_graph` for `steps` training steps in a row, the parameters and
    the optimizer's state carried from one to the next: each step's loss, gradients and weights."""
    prepared = prepare(graph, fold=False)
    loss_outputs = spec.loss.outputs(graph, spec.targets)
    trained = trained_parameters(graph, host_read_inputs(graph), loss_outputs)
    leaves = {p: prepared.params[p].clone().requires_grad_(True) for p in trained}
    optimizer = build_optimizer(spec.optimizer, list(leaves.values()))
    results = []
    for _ in range(steps):
        env = {**prepared.params, **leaves, **{k: torch.as_tensor(v) for k, v in feeds.items()}}
        for name, node in graph.nodes.items():
            outputs = prepared.kernels[name]([env[t] if t else None for t in node.inputs])
            env.update((t, v) for t, v in zip(node.outputs, outputs) if t)
        loss = sum(loss_term(spec.loss, o, env[o], spec.targets.get(o)) for o in loss_outputs)
        grads = torch.autograd.grad(loss, [leaves[p] for p in trained])
        result = {"loss": loss.detach().double()}
        for p, g in zip(trained, grads):
            result[f"grad:{p}"] = g
            leaves[p].grad = g
        optimizer.step()
        result.update({f"updated:{p}": leaves[p].detach().clone() for p in trained})
        results.append(result)
    return results


def _assert_same(got, expected, what, rtol=1e-4):
    assert set(got) == set(expected), what
    for k, v in expected.items():
        scale = float(v.abs().max()) if v.numel() else 1.0
        torch.testing.assert_close(got[k], v.to(got[k].dtype), rtol=rtol, atol=rtol * scale + 1e-8,
                                   msg=lambda m, k=k: f"{what}: {k}: {m}")


def _random_placements(graph, seed, counts=(2, 3)):
    rng = random.Random(seed)
    nodes = list(graph.nodes)
    for n_devices in counts:
        devices = [f"cpu:{i}" for i in range(n_devices)]
        yield Placement(devices, {n: rng.choice(devices) for n in nodes})


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_branchy_training_step_equals_autograd_and_is_the_same_under_any_placement(branchy, optimizer):
    _, graph = branchy
    feeds = random_feeds(graph, seed=1)
    spec = TrainingSpec(optimizer=OptimizerSpec(optimizer))
    single = _train(graph, Placement.single_device(list(graph.nodes), "cpu:0", devices=["cpu:0"]), feeds, spec)
    _assert_same(single, autograd_over_the_whole_graph(graph, feeds, spec), "single device vs autograd")
    assert float(single["loss"]) > 0 and any(float(v.abs().sum()) > 0 for k, v in single.items() if k != "loss")
    for seed in range(3):
        for placement in _random_placements(graph, seed):
            _assert_same(_train(graph, placement, feeds, spec), single, f"{len(placement.devices)} devices")


def test_targets_and_cross_entropy_reach_the_gradients(branchy):
    _, graph = branchy
    feeds = random_feeds(graph, seed=2)
    labels = {"probs": torch.tensor([3, 7])}
    spec = TrainingSpec(loss=Loss("cross_entropy"), targets=check_targets(Loss("cross_entropy"), graph, labels))
    single = _train(graph, Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"]), feeds, spec)
    _assert_same(single, autograd_over_the_whole_graph(graph, feeds, spec), "cross entropy")
    # a_relu is not a logits output with labels: only fc and the convs before probs train, all of them
    assert float(single["grad:fc"].abs().sum()) > 0


def test_the_shared_prepared_graph_is_not_updated(branchy):
    _, graph = branchy
    prepared = prepare(graph)
    before = prepared.params["fc"].clone()
    feeds = random_feeds(graph)
    result = _train(graph, Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"]), feeds,
                    TrainingSpec(), prepared=prepared)
    torch.testing.assert_close(prepared.params["fc"], before)
    assert not torch.equal(result["updated:fc"], before)


def _zoo_feeds(name, graph):
    _, inputs = graphs.build_model(name, **SMALL.get(name, {}))
    return {n: x.numpy() for n, x in zip(graphs.get(name).input_names, inputs)}


@pytest.fixture(scope="module")
def zoo_path(tmp_path_factory):
    """name -> the zoo model's ONNX file at the small options, exported once for this module's
    tests (a CNN's export takes seconds)."""
    folder = tmp_path_factory.mktemp("zoo_training")

    def path(name):
        target = folder / f"{name}.onnx"
        return target if target.is_file() else graphs.export(name, target, **SMALL.get(name, {}))
    return path


@pytest.mark.parametrize("name", NAMES)
def test_zoo_training_step_is_the_same_under_random_placements(name, zoo_path):
    graph = load_graph(zoo_path(name))
    feeds = _zoo_feeds(name, graph)
    spec = TrainingSpec()
    prepared = prepare(graph)
    # one thread everywhere: kernels sum in the same order on every device, so any difference is a bug
    # (ResNet-50's gradients differ by 1.6e-3 of their scale between 1 and 2 threads)
    single = _train(graph, Placement.single_device(list(graph.nodes), "cpu:0", devices=["cpu:0"]), feeds, spec,
                    prepared, threads=1)
    # the CNNs (seconds per step at one thread) on 3 devices only
    for placement in _random_placements(graph, name, (3,) if name in SLOW else (2, 3)):
        _assert_same(_train(graph, placement, feeds, spec, prepared, threads=1), single,
                     f"{name} over {len(placement.devices)} devices", rtol=1e-6)


def _torch_gradient_of(initializer: np.ndarray, params: dict[str, torch.Tensor], name: str):
    """The torch parameter an initializer holds (same name, or its transpose: a Linear exported
    as MatMul) and how to map its gradient; None when it holds none (folded or sliced)."""
    value = torch.from_numpy(np.array(initializer))
    if name in params and params[name].shape == value.shape and torch.equal(params[name].detach(), value):
        return params[name], lambda g: g
    for p in params.values():
        if p.dim() == 2 and p.T.shape == value.shape and torch.equal(p.detach().T, value):
            return p, lambda g: g.T
    return None


def _fused_onto_initializers(module, graph):
    """`module` (eval mode) with each Conv+BatchNorm fused into one Conv, as the exporter folds them,
    each fused parameter then given the exact value of the initializer it equals. The exporter's
    folding rounds differently from torch's (an rsqrt): the two differ in the last bit (1.2e-7
    at most on the zoo), so they are matched by allclose. Returns the fused module and
    initializer name -> its parameter."""
    from torch.fx.experimental.optimization import fuse

    fused = fuse(module, inplace=True)   # the module is ours: no copy of its weights
    initializers = {p: np.array(graph.initializer_array(p)) for p in graph.initializers}
    params = {}
    for param in fused.parameters():
        value = param.detach().numpy()
        # candidates by their first values (whole-tensor comparisons with every same-shaped one
        # took 17 s on Inception-v3), then exactly one, equal all through (numpy: torch's threads
        # made each comparison ten times slower on a shared machine)
        (match,) = [p for p, v in initializers.items() if v.shape == value.shape
                    and np.allclose(v.flat[:8], value.flat[:8], rtol=1e-5, atol=1e-7)]
        np.testing.assert_allclose(initializers[match], value, rtol=1e-5, atol=1e-7, err_msg=match)
        with torch.no_grad():
            param.copy_(torch.from_numpy(initializers[match]))
        params[match] = param.requires_grad_(True)   # a bias the fusion made has requires_grad off
    return fused, params


@pytest.mark.parametrize("name", NAMES)
def test_zoo_gradients_equal_torch_autograd_on_the_zoo_module(name, zoo_path):
    from .conftest import onnxruntime_outputs

    graph = load_graph(zoo_path(name))
    module, inputs = graphs.build_model(name, **SMALL.get(name, {}))
    params = dict(module.named_parameters())
    if name in SLOW:   # the CNNs: the export folded batch-norm into the convolutions
        module, params = _fused_onto_initializers(module, graph)
    feeds = {n: x.numpy() for n, x in zip(graphs.get(name).input_names, inputs)}
    out = module(*inputs)
    # the module computes what the ONNX file computes
    (expected_out,) = onnxruntime_outputs(graph.model, feeds).values()
    np.testing.assert_allclose(out.detach().numpy(), expected_out, rtol=1e-4, atol=1e-4 * np.abs(expected_out).max())
    (torch.mean(out ** 2) / 2).backward()
    ours = _train(graph, Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"]), feeds, TrainingSpec())
    compared = 0
    for p in graph.initializers:
        if f"grad:{p}" not in ours:
            continue
        match = _torch_gradient_of(graph.initializer_array(p), params, p)
        if match is None:
            continue
        tensor, as_initializer = match
        expected = as_initializer(tensor.grad).numpy()
        # numpy: torch's comparison, threaded, took 1.7 s of Inception-v3's on a shared machine
        np.testing.assert_allclose(ours[f"grad:{p}"].numpy(), expected, rtol=1e-3,
                                   atol=1e-4 * np.abs(expected).max() + 1e-9, err_msg=p)
        compared += 1
    # every trained initializer but a sliced position table is one of the module's parameters
    assert compared >= len([k for k in ours if k.startswith("grad:")]) - 1 > 0


class _SmallCNN(torch.nn.Module):
    """Conv, Tanh, average pooling and a Linear head (a Gemm in ONNX): smooth, so that central
    differences are accurate."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.head(torch.flatten(torch.nn.functional.avg_pool2d(torch.tanh(self.conv(x)), 2), 1))


class _SmallLSTM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def _export(module, example, path):
    torch.manual_seed(0)
    module = module.eval()
    with torch.no_grad():
        torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return path


def _onnxruntime_loss(model, feeds) -> float:
    """The default loss (mean(y^2)/2 summed over the outputs) of onnxruntime's forward pass."""
    from .conftest import onnxruntime_outputs

    return sum(float(np.mean(y.astype(np.float64) ** 2) / 2) for y in onnxruntime_outputs(model, feeds).values())


@pytest.mark.parametrize("module, shape", [(_SmallCNN, (2, 3, 8, 8)), (_SmallLSTM, (2, 4, 6))],
                         ids=["cnn_gemm", "lstm"])
def test_gradients_match_central_differences_of_onnxruntime(module, shape, tmp_path):
    import onnx
    from onnx import numpy_helper

    torch.manual_seed(0)
    net = module()
    path = _export(net, torch.randn(shape), tmp_path / "model.onnx")
    graph = load_graph(path)
    assert {"Gemm", "LSTM"} & {n.op_type for n in graph.nodes.values()}
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    ours = _train(graph, Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"]), feeds, TrainingSpec())
    model = onnx.load(path)
    rng = np.random.default_rng(1)
    eps = 1e-2
    checked = 0
    for init in model.graph.initializer:
        if f"grad:{init.name}" not in ours:
            continue
        original = numpy_helper.to_array(init).copy()
        for flat in rng.choice(original.size, size=min(2, original.size), replace=False):
            losses = []
            for sign in (1, -1):
                value = original.copy()
                value.flat[flat] += sign * eps
                init.CopyFrom(numpy_helper.from_array(value, init.name))
                losses.append(_onnxruntime_loss(model, feeds))
            init.CopyFrom(numpy_helper.from_array(original, init.name))
            numeric = (losses[0] - losses[1]) / (2 * eps)
            analytic = float(ours[f"grad:{init.name}"].reshape(-1)[flat])
            assert analytic == pytest.approx(numeric, rel=2e-2, abs=2e-4), f"{init.name}[{flat}]"
            checked += 1
    assert checked >= 6


def test_ops_without_a_backward_on_a_gradient_path_are_refused_in_one_error():
    from onnx import TensorProto, helper, numpy_helper

    from placer.errors import PlacerError

    from .conftest import make_model

    w = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"], name="mul"),
             helper.make_node("RandomNormalLike", ["xw"], ["noise"], name="noise_a"),
             helper.make_node("RandomUniformLike", ["xw"], ["jitter"], name="noise_b"),
             helper.make_node("Sum", ["xw", "noise", "jitter"], ["y"], name="sum"),
             # off the gradient path (its input is a graph input only): not refused
             helper.make_node("RandomNormalLike", ["x"], ["z"], name="noise_x")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
                        helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])], [w])
    graph = load_graph(model)
    placement = Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"])
    with pytest.raises(PlacerError, match=r"none: RandomNormalLike \(noise_a\); RandomUniformLike \(noise_b\);"):
        PlacedExecutor(graph, placement, ["cpu"], training=TrainingSpec())
    with PlacedExecutor(graph, placement, ["cpu"]) as executor:   # inference runs it
        assert set(executor.run({"x": np.ones(4, np.float32)})) == {"y", "z"}


def _mul_relu_graph():
    """y = Relu(x * w) over float32[256]: every tensor and gradient is 1 KiB."""
    from onnx import TensorProto, helper, numpy_helper

    from .conftest import make_model

    w = numpy_helper.from_array(np.linspace(-1, 1, 256).astype(np.float32), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["a"], name="mul"), helper.make_node("Relu", ["a"], ["y"], name="relu")]
    return load_graph(make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256])],
                                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])], [w]))


@pytest.mark.parametrize("optimizer, peak", [("sgd", 7 * 1024), ("adam", 8 * 1024)])
def test_training_peak_counts_saved_activations_gradients_and_optimizer_state(optimizer, peak):
    graph = _mul_relu_graph()
    placement = Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"])
    with PlacedExecutor(graph, placement, ["cpu"]) as executor:
        assert executor.predicted_memory["cpu"].peak == 3 * 1024   # w; x and a, then a and y
    spec = TrainingSpec(optimizer=OptimizerSpec(optimizer))
    with PlacedExecutor(graph, placement, ["cpu"], training=spec) as executor:
        estimate = executor.predicted_memory["cpu"]
    # resident: w and its state (1 or 2 KiB); at relu's backward x and a are still saved for mul's
    # backward, y for relu's, with grad:y and the new grad:a
    assert estimate.resident == 1024 + OptimizerSpec(optimizer).state_bytes(1024)
    assert (estimate.peak, estimate.peak_step) == (peak, "backward:relu")


def test_an_over_cap_training_placement_is_out_of_memory_before_it_runs():
    from placer.engines.failures import OutOfMemory

    graph = _mul_relu_graph()
    placement = Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"])
    devices = ["cpu[mem=4KiB]"]
    with PlacedExecutor(graph, placement, devices) as executor:   # inference fits
        executor.run({"x": np.ones(256, np.float32)})
    with pytest.raises(OutOfMemory, match=r"cpu needs about 7.0 KiB \(peak at 'backward:relu'\) but its cap is 4.0 KiB"):
        PlacedExecutor(graph, placement, devices, training=TrainingSpec())


def test_a_weight_with_many_readers_sums_its_gradients_as_they_arrive():
    """y = x * w * w * w * w: w's four contributions go into a running sum, so no more than two
    of them are ever alive (all four until the end cost rnnlm's decoder a page fault per page)."""
    from onnx import TensorProto, helper, numpy_helper

    from placer.program.walk import last_uses

    from .conftest import make_model

    w = np.linspace(0.5, 1.5, 256).astype(np.float32)
    nodes = [helper.make_node("Mul", [f"a{i}", "w"], [f"a{i + 1}" if i < 3 else "y"], name=f"mul{i}") for i in range(4)]
    graph = load_graph(make_model(nodes, [helper.make_tensor_value_info("a0", TensorProto.FLOAT, [256])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])],
                                  [numpy_helper.from_array(w, "w")]))
    placement = Placement.single_device(list(graph.nodes), "cpu", devices=["cpu"])
    x = np.linspace(-1, 1, 256).astype(np.float32)
    with PlacedExecutor(graph, placement, ["cpu"], training=TrainingSpec()) as executor:
        steps = executor.schedule.per_device["cpu"].steps
        got = executor.run({"a0": x})["grad:w"]
    live, most = set(), 0
    for step, frees in zip(steps, last_uses(steps)):
        live |= {t for t in step.outputs if t.startswith("grad:w@") and "@sum:" not in t}   # not partial sums
        most = max(most, len(live))
        live -= set(frees)
    assert most == 2
    wt = torch.tensor(w, requires_grad=True)
    (torch.mean((torch.tensor(x) * wt ** 4) ** 2) / 2).backward()
    torch.testing.assert_close(got, wt.grad)


def _outputs_without_a_producer_graph():
    """y = x * w * w over float32[8], whose outputs are also w (read by both Muls), b (read by
    nothing) and the input x: three outputs that no node makes."""
    from onnx import TensorProto, helper, numpy_helper

    from .conftest import make_model

    def value(name):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [8])

    inits = [numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "w"),
             numpy_helper.from_array(np.linspace(2, 3, 8).astype(np.float32), "b")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["a"], name="m1"), helper.make_node("Mul", ["a", "w"], ["y"], name="m2")]
    return load_graph(make_model(nodes, [value("x")], [value(n) for n in ("y", "w", "b", "x")], inits))


@pytest.mark.parametrize("m1, m2", [("cpu:0", "cpu:0"), ("cpu:0", "cpu:1"), ("cpu:1", "cpu:0")],
                         ids=["one_device", "two_devices", "two_devices_swapped"])
def test_an_initializer_that_is_an_output_gets_its_loss_gradient_and_its_update(m1, m2):
    graph = _outputs_without_a_producer_graph()
    x = np.linspace(0.5, 1.5, 8).astype(np.float32)
    placement = Placement(["cpu:0", "cpu:1"], {"m1": m1, "m2": m2})
    with PlacedExecutor(graph, placement, training=TrainingSpec()) as executor:
        got = {k: v.clone() for k, v in executor.run({"x": x}).items()}
        # w's update where its gradient is summed, with its first reader; b, read by nothing,
        # on the first node's device
        assert executor.plan.owner == {"w": m1, "b": m1}
    w, b = (torch.tensor(graph.initializer_array(p)).requires_grad_(True) for p in ("w", "b"))
    xt = torch.tensor(x)
    loss = sum(torch.mean(t ** 2) / 2 for t in (xt * w * w, w, b, xt))
    loss.backward()
    expected = {"loss": loss.detach().double(), "grad:w": w.grad.clone(), "grad:b": b.grad.clone()}
    build_optimizer(OptimizerSpec(), [w, b]).step()
    expected.update({"updated:w": w.detach(), "updated:b": b.detach()})
    _assert_same(got, expected, f"m1 on {m1}, m2 on {m2}")


def _shared_weight_graph():
    """y = tanh(x @ w) @ w + b: the weight w read by both MatMuls."""
    from onnx import TensorProto, helper, numpy_helper

    from .conftest import make_model

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.5, "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm1"),
             helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
             helper.make_node("MatMul", ["t", "w"], ["u"], name="mm2"),
             helper.make_node("Add", ["u", "b"], ["y"], name="add")]
    return load_graph(make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("mm1, mm2", [("cpu:0", "cpu:0"), ("cpu:0", "cpu:1"), ("cpu:1", "cpu:0")],
                         ids=["one_device", "two_devices", "two_devices_swapped"])
def test_three_training_steps_in_a_row_equal_three_steps_of_torch_eager(mm1, mm2, optimizer):
    """w is read on both devices: after each update its owner sends the new value to the other
    device, so from the second step on both read the weights the update made."""
    graph = _shared_weight_graph()
    feeds = random_feeds(graph, seed=4)
    spec = TrainingSpec(optimizer=OptimizerSpec(optimizer, lr=0.1))
    placement = Placement(["cpu:0", "cpu:1"], {"mm1": mm1, "tanh": mm1, "mm2": mm2, "add": mm2})
    traced = StepProfile()
    with PlacedExecutor(graph, placement, training=spec) as executor:
        got = [{k: v.detach().clone() for k, v in executor.run(feeds, profile=traced if k == 0 else None).items()}
               for k in range(3)]
        refreshes = [s.name for s in executor.plan.steps if s.op_type == "refresh"]
        crossings = executor.schedule.crossings
    # w's update runs with its last contributor, backward:mm1; b is read on its owner only
    assert executor.plan.owner["w"] == mm1
    assert refreshes == ([] if mm1 == mm2 else [f"refresh:w@{mm2}"])
    # the new w crosses to mm2's device inside the step, which the refresh there waits for
    assert (("updated:w", mm1, mm2) in crossings) == (mm1 != mm2)
    assert {n: traced.node_device[n] for n in refreshes} == {n: mm2 for n in refreshes}
    expected = torch_eager_steps(graph, feeds, spec, 3)
    for step, (g, e) in enumerate(zip(got, expected), 1):
        _assert_same(g, e, f"step {step}, mm1 on {mm1}, mm2 on {mm2}", rtol=1e-5)
    assert not torch.equal(expected[2]["loss"], expected[1]["loss"])   # the steps do differ


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_three_pipelined_training_steps_on_two_devices_equal_three_on_one(schedule):
    """Pipelined, the refresh runs once, after the update that follows every micro-batch."""
    from placer.program.pipeline import Pipeline

    graph = _shared_weight_graph()
    feeds = [random_feeds(graph, seed=k) for k in range(2)]
    spec, pipeline = TrainingSpec(optimizer=OptimizerSpec(lr=0.1)), Pipeline(2, schedule)

    def three_steps(where):
        with PlacedExecutor(graph, Placement(["cpu:0", "cpu:1"], where), training=spec,
                            pipeline=pipeline) as executor:
            return [{k: v.detach().clone() for k, v in executor.run(feeds).items()} for _ in range(3)]
    one = three_steps({n: "cpu:0" for n in graph.nodes})
    two = three_steps({"mm1": "cpu:0", "tanh": "cpu:0", "mm2": "cpu:1", "add": "cpu:1"})
    for step, (t, o) in enumerate(zip(two, one), 1):
        _assert_same(t, o, f"step {step}", rtol=1e-5)


def _two_outputs_labels_for_one_model():
    """logits = x @ w + b (labelled) and y1 = (x @ w) * s (no labels), with w and p outputs too:
    cross-entropy covers logits only, so w and b train, s (only y1 depends on it) and p (an
    output read by nothing) do not."""
    from onnx import TensorProto, helper, numpy_helper

    from .conftest import make_model

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in (("w", (4, 3)), ("b", (3,)), ("s", (3,)), ("p", (3,)))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Mul", ["h", "s"], ["y1"], name="m1"),
             helper.make_node("Add", ["h", "b"], ["logits"], name="add")]
    outputs = [("logits", [2, 3]), ("y1", [2, 3]), ("w", [4, 3]), ("p", [3])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], inits)


def _cross_entropy_of_logits_by_torch(graph, x, labels):
    """loss, grad:<p> and updated:<p> of w and b by torch autograd and torch.optim.SGD."""
    w, b = (torch.tensor(graph.initializer_array(p)).requires_grad_(True) for p in ("w", "b"))
    loss = torch.nn.functional.cross_entropy(torch.tensor(x) @ w + b, torch.tensor(labels))
    loss.backward()
    expected = {"loss": loss.detach().double(), "grad:w": w.grad.clone(), "grad:b": b.grad.clone()}
    torch.optim.SGD([w, b], lr=0.01, momentum=0.9).step()
    return {**expected, "updated:w": w.detach(), "updated:b": b.detach()}


_PLACEMENTS = [{"mm": "cpu:0", "m1": "cpu:0", "add": "cpu:0"}, {"mm": "cpu:0", "m1": "cpu:1", "add": "cpu:1"},
               {"mm": "cpu:1", "m1": "cpu:0", "add": "cpu:0"}]


@pytest.mark.parametrize("where", _PLACEMENTS, ids=["one_device", "two_devices", "two_devices_swapped"])
def test_cross_entropy_trains_only_what_the_labelled_outputs_depend_on(where):
    graph = load_graph(_two_outputs_labels_for_one_model())
    x, labels = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4), np.array([2, 0])
    spec = TrainingSpec(loss=Loss("cross_entropy"),
                        targets=check_targets(Loss("cross_entropy"), graph, {"logits": torch.tensor(labels)}))
    got = _train(graph, Placement(["cpu:0", "cpu:1"], where), {"x": x}, spec)
    _assert_same(got, _cross_entropy_of_logits_by_torch(graph, x, labels), str(where))


def test_placer_run_cross_entropy_with_labels_for_one_output(tmp_path):
    import onnx

    from placer.cli import main

    model = _two_outputs_labels_for_one_model()
    onnx.save(model, tmp_path / "m.onnx")
    graph = load_graph(tmp_path / "m.onnx")
    x, labels = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4), np.array([2, 0])
    np.savez(tmp_path / "in.npz", x=x)
    np.savez(tmp_path / "t.npz", logits=labels)
    Placement(["cpu:0", "cpu:1"], _PLACEMENTS[1], graph.sha256).save(tmp_path / "p.json")
    assert main(["run", "--graph", str(tmp_path / "m.onnx"), "--placement", str(tmp_path / "p.json"),
                 "--inputs", str(tmp_path / "in.npz"), "--objective", "training", "--loss", "cross_entropy",
                 "--targets", str(tmp_path / "t.npz"), "--outputs", str(tmp_path / "out.npz")]) == 0
    got = {k: torch.from_numpy(v) for k, v in np.load(tmp_path / "out.npz").items()}
    _assert_same(got, _cross_entropy_of_logits_by_torch(graph, x, labels), "placer run")
