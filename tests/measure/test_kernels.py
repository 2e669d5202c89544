"""The kernel registry and single kernels: binding, opset dispatch, unsupported ops, devices."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

from placer.errors import PlacerError
from placer.kernels import (bind_node, check_supported, host_inputs, is_supported,
                                    supported_ops, unsupported_ops)
from placer.kernels.reference import run_model

ISSUE_OPS = """Conv ConvTranspose BatchNormalization InstanceNormalization LayerNormalization Relu
LeakyRelu PRelu Sigmoid HardSigmoid HardSwish Tanh Clip Erf Gelu Softmax LogSoftmax MaxPool
AveragePool GlobalAveragePool GlobalMaxPool Gemm MatMul Add Sub Mul Div Pow Sqrt Exp Log Neg Abs
Reciprocal Floor Ceil Round Sign Min Max Sum Mean ReduceMean ReduceSum ReduceMax ReduceMin
ReduceProd ReduceL2 Concat Split Slice Gather GatherElements Reshape Flatten Transpose Squeeze
Unsqueeze Expand Tile Pad Resize Upsample Shape Size Cast CastLike Constant ConstantOfShape Range
Where Equal Less LessOrEqual Greater GreaterOrEqual Not And Or Identity Dropout Einsum TopK ArgMax
ArgMin CumSum Trilu DepthToSpace SpaceToDepth LSTM GRU""".split()


def t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a))


def i64(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def model_of(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_every_op_the_issue_names_has_a_kernel_at_opset_17_or_its_first_opset():
    missing = [op for op in ISSUE_OPS
               if not is_supported(op, 17) and not is_supported(op, onnx.defs.onnx_opset_version())]
    assert missing == []
    assert set(ISSUE_OPS) <= set(supported_ops())


def test_bound_node_keeps_the_attributes_it_was_bound_with():
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.5)
    fn = bind_node(node, 17)
    node.attribute[0].f = 0.1            # editing the proto afterwards changes nothing
    x = torch.tensor([-2.0, 3.0])
    assert fn([x])[0].tolist() == [-1.0, 3.0]


def test_conv_binds_groups_strides_and_asymmetric_pads():
    rng = np.random.default_rng(0)
    x = t(rng.standard_normal((1, 4, 7, 7)).astype(np.float32))
    w = t(rng.standard_normal((6, 2, 3, 3)).astype(np.float32))
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=2, strides=[2, 2], pads=[0, 1, 2, 1])
    y = bind_node(node, 17)([x, w])[0]
    expected = F.conv2d(F.pad(x, [1, 1, 0, 2]), w, stride=2, groups=2)
    torch.testing.assert_close(y, expected)


def test_conv_same_upper_pads_from_the_input_size():
    x = torch.ones(1, 1, 5, 5)
    w = torch.ones(1, 1, 2, 2)
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")
    y = bind_node(node, 17)([x, w])[0]
    assert y.shape == (1, 1, 5, 5)
    assert y[0, 0, -1, -1].item() == 1.0     # the extra pad goes at the end


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_reads_axes_from_an_attribute_before_13_and_an_input_from_13(opset):
    x = torch.zeros(1, 3, 1, 2)
    if opset < 13:
        node = helper.make_node("Squeeze", ["x"], ["y"], axes=[2])
        y = bind_node(node, opset)([x])[0]
    else:
        node = helper.make_node("Squeeze", ["x", "axes"], ["y"])
        y = bind_node(node, opset)([x, i64(2)])[0]
    assert tuple(y.shape) == (1, 3, 2)


def test_slice_attributes_at_opset_9_and_inputs_with_negative_steps_at_10():
    x = torch.arange(10)
    node9 = helper.make_node("Slice", ["x"], ["y"], starts=[2], ends=[-2], axes=[0])
    assert bind_node(node9, 9)([x])[0].tolist() == [2, 3, 4, 5, 6, 7]
    node10 = helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])
    y = bind_node(node10, 10)([x, i64(-1), i64(-2**63), i64(0), i64(-3)])[0]
    assert y.tolist() == [9, 6, 3, 0]


def test_clip_bounds_are_attributes_before_11_and_optional_inputs_from_11():
    x = torch.tensor([-5.0, 0.5, 5.0])
    assert bind_node(helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=1.0), 6)([x])[0].tolist() \
        == [-1.0, 0.5, 1.0]
    fn = bind_node(helper.make_node("Clip", ["x", "", "hi"], ["y"]), 13)
    assert fn([x, None, torch.tensor(2.0)])[0].tolist() == [-5.0, 0.5, 2.0]


def test_split_sizes_from_attribute_input_and_num_outputs():
    x = torch.arange(7)
    a = bind_node(helper.make_node("Split", ["x"], ["a", "b"], split=[3, 4]), 11)([x])
    b = bind_node(helper.make_node("Split", ["x", "s"], ["a", "b"]), 13)([x, i64(5, 2)])
    c = bind_node(helper.make_node("Split", ["x"], ["a", "b", "c"], num_outputs=3), 18)([x])
    assert [len(v) for v in a] == [3, 4]
    assert [len(v) for v in b] == [5, 2]
    assert [len(v) for v in c] == [3, 3, 1]


def test_softmax_before_13_normalises_over_all_trailing_dims():
    x = torch.randn(2, 3, 4)
    old = bind_node(helper.make_node("Softmax", ["x"], ["y"], axis=1), 11)([x])[0]
    new = bind_node(helper.make_node("Softmax", ["x"], ["y"], axis=1), 13)([x])[0]
    torch.testing.assert_close(old.sum((1, 2)), torch.ones(2))
    torch.testing.assert_close(new.sum(1), torch.ones(2, 4))


def test_reduce_axes_become_an_input_at_13_for_sum_and_18_for_the_others():
    x = torch.ones(2, 3)
    assert host_inputs("ReduceSum", 13) == {1} and host_inputs("ReduceMean", 17) == frozenset()
    s = bind_node(helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0), 13)([x, i64(1)])[0]
    m = bind_node(helper.make_node("ReduceMean", ["x"], ["y"], axes=[0], keepdims=0), 17)([x])[0]
    assert s.tolist() == [3.0, 3.0] and m.tolist() == [1.0, 1.0, 1.0]


def test_shape_and_size_are_made_on_the_cpu_as_int64():
    x = torch.zeros(2, 3, 4)
    shape = bind_node(helper.make_node("Shape", ["x"], ["s"], start=1), 15)([x])[0]
    assert shape.tolist() == [3, 4] and shape.dtype == torch.int64 and shape.device.type == "cpu"
    assert bind_node(helper.make_node("Size", ["x"], ["n"]), 13)([x])[0].item() == 24


def test_shape_like_inputs_are_declared_as_host_inputs():
    assert host_inputs("Reshape", 17) == {1}
    assert host_inputs("Slice", 17) == {1, 2, 3, 4}
    assert host_inputs("Resize", 17) == {1, 2, 3}
    assert host_inputs("Conv", 17) == frozenset()


def test_reshape_zero_copies_the_input_dim_unless_allowzero():
    x = torch.zeros(2, 3, 4)
    y = bind_node(helper.make_node("Reshape", ["x", "s"], ["y"]), 14)([x, i64(0, -1)])[0]
    assert tuple(y.shape) == (2, 12)
    e = torch.zeros(0, 3)
    z = bind_node(helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1), 14)([e, i64(3, 0)])[0]
    assert tuple(z.shape) == (3, 0)


def test_gather_accepts_negative_indices():
    x = torch.arange(12).reshape(3, 4)
    y = bind_node(helper.make_node("Gather", ["x", "i"], ["y"], axis=1), 13)([x, i64(-1, 0)])[0]
    assert y.tolist() == [[3, 0], [7, 4], [11, 8]]


def test_integer_div_truncates_toward_zero_like_onnx():
    y = bind_node(helper.make_node("Div", ["a", "b"], ["y"]), 14)([i64(-7, 7), i64(2, 2)])[0]
    assert y.tolist() == [-3, 3]


def test_gemm_with_transposes_alpha_and_beta():
    rng = np.random.default_rng(1)
    a, b, c = (t(rng.standard_normal(s).astype(np.float32)) for s in [(4, 3), (5, 4), (3, 5)])
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)
    y = bind_node(node, 13)([a, b, c])[0]
    torch.testing.assert_close(y, 0.5 * a.t() @ b.t() + 2.0 * c)


def test_dropout_in_inference_is_identity_with_a_true_mask():
    x = torch.randn(3)
    y, mask = bind_node(helper.make_node("Dropout", ["x"], ["y", "m"]), 13)([x])
    assert torch.equal(y, x) and mask.all()


def test_unsupported_ops_lists_each_missing_op_once_with_its_domain():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("NoSuchOp", ["a"], ["b"]),
             helper.make_node("NoSuchOp", ["b"], ["c"]),
             helper.make_node("FusedThing", ["c"], ["y"], domain="com.example")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    assert unsupported_ops(model) == ["NoSuchOp", "com.example::FusedThing"]
    assert unsupported_ops(nodes[:1]) == []
    with pytest.raises(PlacerError, match="NoSuchOp, com.example::FusedThing"):
        check_supported(model)
    with pytest.raises(PlacerError):
        run_model(model, {"x": np.zeros(2, np.float32)})   # refused before any node runs


def test_an_op_newer_than_the_models_opset_is_unsupported():
    assert not is_supported("Gelu", 17) and is_supported("Gelu", 20)
    with pytest.raises(PlacerError, match="Gelu"):
        bind_node(helper.make_node("Gelu", ["x"], ["y"]), 17)


def test_training_mode_dropout_zeroes_about_ratio_and_rescales_the_rest():
    fn = bind_node(helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=1), 13)
    x = torch.ones(20000)
    y, mask = fn([x, torch.tensor(0.3), torch.tensor(True)])
    assert abs((~mask).float().mean().item() - 0.3) < 0.02
    assert torch.allclose(y[mask], torch.full_like(y[mask], 1 / 0.7)) and not y[~mask].any()
    assert torch.equal(fn([x, torch.tensor(0.3), torch.tensor(False)])[0], x)


def test_batchnorm_before_opset_14_refuses_training_outputs():
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"])
    with pytest.raises(PlacerError, match="training"):
        bind_node(node, 9)


def test_data_inputs_on_different_devices_are_brought_together_and_host_inputs_are_left_alone():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    x = torch.randn(2, 3, device="cuda")
    y = bind_node(helper.make_node("Add", ["x", "c"], ["y"]), 17)([x, torch.ones(3)])[0]
    assert y.device.type == "cuda"
    r = bind_node(helper.make_node("Reshape", ["x", "s"], ["y"]), 17)([x, i64(3, 2)])[0]
    assert r.device.type == "cuda" and tuple(r.shape) == (3, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_kernels_on_cuda_match_the_cpu():
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "two"], ["s2"]),
             helper.make_node("Concat", ["s2", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    inits = [w, numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    cpu = run_model(model, feeds)["y"]
    gpu = run_model(model, feeds, device="cuda")["y"]
    np.testing.assert_allclose(gpu, cpu, rtol=1e-3, atol=1e-4)


def test_random_ops_draw_the_asked_distribution_reproducibly_when_seeded():
    p = torch.full((20000,), 0.25)
    bern = bind_node(helper.make_node("Bernoulli", ["p"], ["y"], seed=3.0), 15)
    y = bern([p])[0]
    assert set(y.unique().tolist()) <= {0.0, 1.0} and abs(y.mean().item() - 0.25) < 0.02
    again = bind_node(helper.make_node("Bernoulli", ["p"], ["y"], seed=3.0), 15)([p])[0]
    assert torch.equal(y, again)
    normal = bind_node(helper.make_node("RandomNormal", [], ["y"], shape=[20000], mean=2.0,
                                        scale=0.5), 1)([])[0]
    assert abs(normal.mean().item() - 2.0) < 0.02 and abs(normal.std().item() - 0.5) < 0.02


def test_kernels_are_differentiable_so_a_training_step_can_run_through_them():
    """Gradients through Conv, BatchNormalization, Gemm and the fused LSTM equal torch's own."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6)
    conv_w = torch.randn(4, 3, 3, 3, requires_grad=True)
    fc = torch.randn(5, 4 * 36, requires_grad=True)
    stats = [torch.ones(4), torch.zeros(4), torch.zeros(4), torch.ones(4)]
    conv = bind_node(helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), 17)
    bn = bind_node(helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]), 15)
    gemm = bind_node(helper.make_node("Gemm", ["f", "w"], ["y"], transB=1), 13)
    y = gemm([bn([conv([x, conv_w])[0], *stats])[0].flatten(1), fc])[0]
    y.sum().backward()
    cw, fw = conv_w.detach().requires_grad_(), fc.detach().requires_grad_()
    F.linear(F.batch_norm(F.conv2d(x, cw, padding=1), stats[2], stats[3], stats[0], stats[1])
             .flatten(1), fw).sum().backward()
    torch.testing.assert_close(conv_w.grad, cw.grad)
    torch.testing.assert_close(fc.grad, fw.grad)

    lstm = bind_node(helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=3), 14)
    w = torch.randn(1, 12, 2, requires_grad=True)
    r = torch.randn(1, 12, 3, requires_grad=True)
    seq = torch.randn(4, 2, 2)
    for step in range(2):   # twice: reordered weights must not be reused across graphs
        w.grad = None
        lstm([seq, w, r])[0].sum().backward()
        assert w.grad is not None and torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0


def test_opsets_before_7_use_their_legacy_attributes():
    x = torch.arange(24.0).reshape(2, 3, 4)
    y = bind_node(helper.make_node("Reshape", ["x"], ["y"], shape=[0, -1]), 4)([x])[0]
    assert tuple(y.shape) == (2, 12)
    # Legacy broadcasting aligns B at `axis`, which numpy-style broadcasting would not.
    z = bind_node(helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1), 6)(
        [x, torch.tensor([100.0, 200.0, 300.0])])[0]
    assert z[1, :, 3].tolist() == [115.0, 219.0, 323.0]
    assert tuple(bind_node(helper.make_node("Concat", ["a", "b"], ["y"]), 3)([x, x])[0].shape) == (2, 6, 4)


def test_check_supported_also_reports_attributes_a_kernel_cannot_run():
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"])
    model = model_of([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                              for n in ["x", "s", "b", "m", "v"]],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=9)
    with pytest.raises(PlacerError, match=r"BatchNormalization \(training-mode"):
        check_supported(model)
