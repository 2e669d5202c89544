"""The parts a training step adds: trained parameters, the loss, the optimizer (against torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from placer.errors import PlacerError
from placer.graph.load import load_graph
from placer.kernels.prepare import prepare
from placer.engines.torch.training import apply_update, build_optimizer, check_targets, loss_term_and_grad
from placer.program.training import Loss, OptimizerSpec, trained_parameters
from .conftest import make_model


def test_trained_parameters_are_the_float_initializers_on_float_paths(branchy):
    _, graph = branchy
    # the integer shape constants (zero, axes0, minus1) feed only the Reshape's shape path
    assert trained_parameters(graph) == ["w1", "b1", "w2", "w3", "fc"]


def _side_paths_model():
    """y = Pad(x * w * count): `count` is an integer computed from a float initializer through
    Cast-to-int and from another through Shape; Pad reads a float initializer on the host."""
    f = np.float32
    inits = [numpy_helper.from_array(np.ones((4,), f), "w"),
             numpy_helper.from_array(np.full((1,), 2.0, f), "via_cast"),
             numpy_helper.from_array(np.zeros((3,), f), "via_shape"),
             numpy_helper.from_array(np.array(0.5, f), "pad_value"),
             numpy_helper.from_array(np.array([0, 1], np.int64), "pads")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"], name="mul"),
             helper.make_node("Cast", ["via_cast"], ["n"], to=TensorProto.INT64, name="cast"),
             helper.make_node("Shape", ["via_shape"], ["s"], name="shape"),
             helper.make_node("Add", ["n", "s"], ["count"], name="add_int"),
             helper.make_node("Cast", ["count"], ["count_f"], to=TensorProto.FLOAT, name="cast_back"),
             helper.make_node("Mul", ["xw", "count_f"], ["xs"], name="scale"),
             helper.make_node("Pad", ["xs", "pads", "pad_value"], ["y"], name="pad")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5]),
                        helper.make_tensor_value_info("count", TensorProto.INT64, [1])], inits)
    return load_graph(model)


def test_integer_shape_and_host_read_paths_carry_no_gradient():
    graph = _side_paths_model()
    prepared = prepare(graph, fold=False)
    assert trained_parameters(graph, prepared.host_inputs) == ["w"]
    # without knowing Pad reads its constant value on the host, that float initializer would count
    assert trained_parameters(graph) == ["w", "pad_value"]


def test_mse_term_and_its_gradient_equal_torch():
    rng = np.random.default_rng(0)
    y = torch.from_numpy(rng.standard_normal((3, 5)).astype(np.float32))
    t = torch.from_numpy(rng.standard_normal((3, 5)).astype(np.float32))
    for target in (None, t):
        value, grad = loss_term_and_grad(Loss(), "y", y, target)
        ref_y = y.clone().requires_grad_(True)
        ref = torch.nn.functional.mse_loss(ref_y, torch.zeros_like(y) if target is None else target) / 2
        ref.backward()
        torch.testing.assert_close(value, ref.detach())
        torch.testing.assert_close(grad, ref_y.grad)


@pytest.mark.parametrize("logits_shape, labels_shape, axis", [((4, 7), (4,), 1), ((2, 7, 3), (2, 3), 1),
                                                              ((2, 3, 7), (2, 3), 2)])
def test_cross_entropy_finds_the_classes_axis_from_the_labels(logits_shape, labels_shape, axis):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(logits_shape, generator=gen)
    labels = torch.randint(0, 7, labels_shape, generator=gen)
    value, grad = loss_term_and_grad(Loss("cross_entropy"), "logits", logits, labels)
    ref_logits = logits.clone().requires_grad_(True)
    ref = torch.nn.functional.cross_entropy(ref_logits.movedim(axis, 1), labels)
    ref.backward()
    torch.testing.assert_close(value, ref.detach())
    torch.testing.assert_close(grad, ref_logits.grad)


def test_targets_are_checked_against_the_float_outputs(branchy):
    _, graph = branchy
    mse, ce = Loss("mse"), Loss("cross_entropy")
    with pytest.raises(PlacerError, match="not float outputs"):
        check_targets(mse, graph, {"nope": torch.zeros(2, 10)})
    with pytest.raises(PlacerError, match=r"shape \(2, 10\)"):
        check_targets(mse, graph, {"probs": torch.zeros(2, 3)})
    with pytest.raises(PlacerError, match="needs integer labels for a logits output"):
        check_targets(ce, graph, {})
    with pytest.raises(PlacerError, match="integer labels for 'probs'"):
        check_targets(ce, graph, {"probs": torch.zeros(2)})
    with pytest.raises(PlacerError, match="fits no classes axis"):
        check_targets(ce, graph, {"probs": torch.zeros(3, dtype=torch.int32)})
    labels = check_targets(ce, graph, {"probs": torch.zeros(2, dtype=torch.int32)})
    assert labels["probs"].dtype == torch.int64
    assert ce.outputs(graph, labels) == ["probs"]
    assert mse.outputs(graph, {}) == ["probs", "a_relu"]
    with pytest.raises(PlacerError, match="unknown loss"):
        Loss("l1")


def _params_and_grads(steps: int):
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(3, 4, generator=gen), torch.randn(5, generator=gen), torch.randn(2, 2, generator=gen)]
    grads = [[torch.randn(p.shape, generator=gen) for p in params] for _ in range(steps)]
    return params, grads


@pytest.mark.parametrize("spec, reference", [
    (OptimizerSpec(), lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9)),
    (OptimizerSpec("adam"), lambda ps: torch.optim.Adam(ps, lr=0.001)),
    (OptimizerSpec("sgd", lr=0.1, momentum=0.0), lambda ps: torch.optim.SGD(ps, lr=0.1)),
])
def test_per_device_optimizers_equal_one_torch_optimizer_over_all_parameters(spec, reference):
    params, grads = _params_and_grads(steps=3)
    ours = [p.clone() for p in params]
    theirs = [p.clone().requires_grad_(True) for p in params]
    # the parameters live on two devices, each with its own optimizer and state
    per_device = [(ours[:2], build_optimizer(spec, ours[:2])), (ours[2:], build_optimizer(spec, ours[2:]))]
    ref = reference(theirs)
    for step in grads:
        start = 0
        for device_params, optimizer in per_device:
            apply_update(optimizer, device_params, step[start:start + len(device_params)])
            start += len(device_params)
        for p, g in zip(theirs, step):
            p.grad = g.clone()
        ref.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b.detach())


def test_sgd_momentum_follows_its_formula():
    p, g1, g2 = torch.ones(3), torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.5, 0.5, 0.5])
    spec = OptimizerSpec()
    optimizer = build_optimizer(spec, [p])
    apply_update(optimizer, [p], [g1])
    torch.testing.assert_close(p, 1 - 0.01 * g1)
    apply_update(optimizer, [p], [g2])
    torch.testing.assert_close(p, 1 - 0.01 * g1 - 0.01 * (0.9 * g1 + g2))
    assert p.grad is None


def test_a_parameter_no_gradient_reached_is_left_alone():
    p, q = torch.ones(2), torch.ones(2)
    optimizer = build_optimizer(OptimizerSpec("adam"), [p, q])
    apply_update(optimizer, [p, q], [torch.ones(2), None])
    torch.testing.assert_close(q, torch.ones(2))
    assert not torch.equal(p, torch.ones(2))


def test_optimizer_state_bytes_and_defaults():
    assert OptimizerSpec().state_bytes(100) == 100
    assert OptimizerSpec(momentum=0.0).state_bytes(100) == 0
    assert OptimizerSpec("adam").state_bytes(100) == 200
    assert OptimizerSpec().learning_rate == 0.01 and OptimizerSpec("adam").learning_rate == 0.001
    assert OptimizerSpec().to_dict() == {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9}
    with pytest.raises(PlacerError, match="unknown optimizer"):
        OptimizerSpec("rmsprop")
    with pytest.raises(PlacerError, match="must be positive"):
        OptimizerSpec(lr=0.0)
