"""Every kernel with float inputs and float outputs has a backward: torch autograd through the
kernel, checked against central differences on the ONNX backend suite's node cases (the ones
test_conformance.py runs), or the op is declared in NO_BACKWARD.

Each case runs with its float inputs (those the kernel does not read on the host) as leaves; the
gradient of ``sum(w_k * y_k)`` over the float outputs ``y_k`` (fixed random ``w_k``) is compared
with central differences of a few entries of each input, in float64 where the kernel runs it.
"""

from __future__ import annotations

import math
import random
import warnings
from collections import defaultdict

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper
from onnx.backend.test.loader import load_model_tests

from placer.graph.structure import canonical_domain
from placer.kernels import bind_node, host_inputs
from placer.kernels.dtypes import to_torch
from placer.kernels.registry import opset_versions
from placer.program.training import NO_BACKWARD

CASES_PER_OP = 3        # node cases checked per op: a seeded sample
ENTRIES = 3             # entries of each input compared with central differences
# node cases always checked: each made a kernel's gradient fail once
REGRESSIONS = {"test_attention_23_boolmask_fullymasked_row_nan_robustness", "test_l2normalization_axis_0",
               "test_batchnorm_example_training_mode", "test_batchnorm_epsilon", "test_nllloss_NCd1d2_with_weight",
               "test_sce_NCd1d2d3d4d5_mean_weight", "test_unique_not_sorted_without_axis",
               "test_pow_types_float32_uint64"}
# the dtypes a training step differentiates (training.FLOAT_DTYPES)
TRAINED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _float_outputs(outputs) -> list[torch.Tensor]:
    return [y for y in outputs if y is not None and y.dtype in TRAINED_DTYPES]


def _tensor(value) -> torch.Tensor:
    return to_torch(numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value)


def _node_case(model: onnx.ModelProto, arrays) -> tuple[str, object, list, list[int]] | None:
    """(op, bound kernel, inputs, positions to differentiate by) of a one-node model, or None
    when it has no kernel, cannot take these inputs, or has no float input to differentiate or
    no float output (an integer path: ArgMax, comparisons, Shape, NonMaxSuppression)."""
    if len(model.graph.node) != 1:
        return None
    node = model.graph.node[0]
    domain = canonical_domain(node.domain)
    opset = opset_versions(model).get(domain, 1)
    host = host_inputs(node.op_type, opset, domain)
    try:
        kernel = bind_node(node, opset)
        feeds = dict(zip([i.name for i in model.graph.input], [_tensor(a) for a in arrays]))
        inputs = [feeds.get(t) if t else None for t in node.input]
        while inputs and inputs[-1] is None:
            inputs.pop()
        with torch.no_grad():
            float_outputs = _float_outputs(kernel(list(inputs)))
    except Exception:   # no kernel, string or sequence data, uint64 arithmetic: not checked here
        return None
    diff = [i for i, t in enumerate(inputs)
            if t is not None and t.dtype in TRAINED_DTYPES and t.numel() and i not in host]
    return (node.op_type, kernel, inputs, diff) if diff and float_outputs else None


def _extra_models() -> list[tuple[str, onnx.ModelProto, list[np.ndarray]]]:
    """Ops whose node cases have no float input to differentiate by, and zero slices under a root."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    x[:, 1:] = 0   # zero windows: the root of their sum has an infinite derivative there
    square = rng.standard_normal((4, 5)).astype(np.float32)
    square[1:] = 0

    def one(op, n_inputs, **attrs):
        names = [f"in{i}" for i in range(n_inputs)]
        graph = helper.make_graph([helper.make_node(op, names, ["out"], **attrs)], op,
                                  [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in names],
                                  [helper.make_tensor_value_info("out", onnx.TensorProto.UNDEFINED, None)])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    return [("test_globallppool_zero_channel", one("GlobalLpPool", 1, p=3), [x]),
            ("test_lppool_zero_channel", one("LpPool", 1, p=2, kernel_shape=[2, 2]), [x]),
            ("test_reduce_l2_zero_row", one("ReduceL2", 1, axes=[1]), [square]),
            ("test_trilu_float", one("Trilu", 1, upper=0), [square])]


def _cases() -> dict[str, list[tuple[str, object, list, list[int]]]]:
    """op -> [(case name, kernel, inputs, differentiated positions)]: the REGRESSIONS and
    CASES_PER_OP more of the suite's node cases, and ours."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # numpy warnings of the suite's own case generators
        models = [(c.name, c.model, c.data_sets[0][0]) for c in load_model_tests(kind="node")
                  if c.model is not None and c.data_sets]
    by_op = defaultdict(list)
    for name, model, arrays in models:
        case = _node_case(model, arrays)
        if case is not None:
            by_op[case[0]].append((name, *case[1:]))
    plain = (torch.float32, torch.float64)
    for op, cases in by_op.items():
        random.Random(op).shuffle(cases)
        regressions = [c for c in cases if c[0] in REGRESSIONS]
        # float32/64 and small ones first
        cases.sort(key=lambda c: (not all(c[2][i].dtype in plain for i in c[3]),
                                  sum(c[2][i].numel() for i in c[3]) > 4096))
        cases[:] = regressions + [c for c in cases if c[0] not in REGRESSIONS][:CASES_PER_OP]
    for name, model, arrays in _extra_models():
        op, *case = _node_case(model, arrays)
        by_op[op].append((name, *case))
    return {op: cases for op, cases in sorted(by_op.items()) if cases}


CASES = _cases()


# (step, tolerance) of the differences by the outputs' precision; float64 outputs are compared
# in float32's terms too, as a kernel may compute in float32 inside (Attention's softmax_precision)
_FLOAT64, _FLOAT32, _HALF = (1e-6, 1e-4), (1e-2, 5e-2), (1e-1, 2e-1)


def _loss(kernel, inputs, weights) -> torch.Tensor:
    torch.manual_seed(0)   # a random kernel (training-mode Dropout) draws the same mask every call
    ys = _float_outputs(kernel(list(inputs)))
    if [y.shape for y in ys] != [w.shape for w in weights]:
        return torch.tensor(math.nan)   # outputs shaped by the values (Unique): no difference to take
    return sum(torch.where(w != 0, w * y.double(), 0).sum() for y, w in zip(ys, weights))


def _inputs_to_check(kernel, inputs, diff, rng) -> tuple[list, list[torch.Tensor]]:
    """The inputs differentiated by with a relative jitter (it breaks ties: Max, MaxPool), in
    float64 where the kernel runs it; and the kernel's float outputs on them."""
    wide = [x.double() * (1 + 1e-3 * torch.randn(x.shape, generator=rng, dtype=torch.float64)) if i in diff else x
            for i, x in enumerate(inputs)]
    with torch.no_grad():
        try:
            return wide, _float_outputs(kernel(list(wide)))
        except Exception:   # no float64 kernel: the inputs' own types
            own = [x.to(inputs[i].dtype) for i, x in enumerate(wide)]
            return own, _float_outputs(kernel(list(own)))


def _verdict(a: float, scale: float, loss_at, base: float, eps: float, tol: float) -> tuple[str, float]:
    """('agrees' | 'differs' | 'no derivative', the central difference): gradient entry `a`
    against the differences of `loss_at(step)` around `base`."""
    up, down = loss_at(eps), loss_at(-eps)
    central = (up - down) / (2 * eps)
    if not math.isfinite(central):
        return "no derivative", central    # the edge of the op's domain
    if not math.isfinite(a):
        return "differs", central
    # central, else one-sided (a kink such as Relu's at 0 between the two)
    if any(abs(a - n) <= tol * (scale + abs(n)) for n in (central, (up - base) / eps, (base - down) / eps)):
        return "agrees", central
    if abs(loss_at(eps / 10) - loss_at(-eps / 10)) > abs(up - down) / 2:
        return "no derivative", central    # a jump (x / |x| at 0)
    return "differs", central


def gradient_mismatches(kernel, inputs, diff) -> tuple[list[str], int]:
    """The entries whose autograd gradient disagrees with finite differences, and how many were compared."""
    rng = torch.Generator().manual_seed(0)
    inputs, ys = _inputs_to_check(kernel, inputs, diff, rng)
    if not ys:
        return [], 0
    lowest = min(torch.finfo(y.dtype).eps for y in ys)
    regimes = [_FLOAT64, _FLOAT32] if lowest < 1e-10 else [_FLOAT32] if lowest < 1e-5 else [_HALF]
    # outputs that are not finite (Cast's inf and NaN cases, Acosh at 1) are left out of the loss,
    # and the gradients of the inputs at such an edge of the op's domain are not compared
    weights = [torch.randn(y.shape, generator=rng, dtype=torch.float64) * y.isfinite() for y in ys]
    at_edge = not all(bool(y.isfinite().all()) for y in ys)

    leaves = {i: inputs[i].detach().clone().requires_grad_(True) for i in diff}
    with torch.enable_grad():
        ys = _float_outputs(kernel([leaves.get(i, x) for i, x in enumerate(inputs)]))
        if not all(y.requires_grad for y in ys):   # the training step's backward refuses such an output
            return ["a float output carries no gradient"], 0
        loss = _loss(kernel, [leaves.get(i, x) for i, x in enumerate(inputs)], weights)
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)

    def loss_moved(i, flat, step):
        x = inputs[i].detach().clone()
        x.view(-1)[flat] += step
        with torch.no_grad():
            return float(_loss(kernel, [x if j == i else v for j, v in enumerate(inputs)], weights))

    base = float(_loss(kernel, inputs, weights))
    if float(_loss(kernel, inputs, weights)) != base:
        return [], 0   # a kernel with its own generator (a seeded Dropout) draws anew every call
    bad, compared = [], 0
    for (i, leaf), grad in zip(leaves.items(), grads):
        analytic = torch.zeros_like(leaf, dtype=torch.float64) if grad is None else grad.double()
        scale = 1.0 + float(analytic.nan_to_num(0, 0, 0).abs().max())
        for flat in torch.randperm(leaf.numel(), generator=rng)[:ENTRIES].tolist():
            a = float(analytic.reshape(-1)[flat])
            if at_edge and not math.isfinite(a):
                continue
            for eps, tol in regimes:
                verdict, numeric = _verdict(a, scale, lambda step: loss_moved(i, flat, step), base, eps, tol)
                if verdict != "differs":
                    break
            compared += verdict != "no derivative"
            if verdict == "differs":
                bad.append(f"input {i}[{flat}]: autograd {a:.6g}{' (none)' if grad is None else ''}, "
                           f"numeric {numeric:.6g}")
    return bad, compared


@pytest.mark.parametrize("op", sorted(CASES))
def test_backward_through_the_kernel_matches_finite_differences(op):
    if op in NO_BACKWARD:
        pytest.skip(f"{op} is declared to have no backward")
    failures, compared = [], 0
    for name, kernel, inputs, diff in CASES[op]:
        bad, n = gradient_mismatches(kernel, inputs, diff)
        failures += [f"{name}: {b}" for b in bad]
        compared += n
    assert not failures, "\n".join(failures)
    assert compared > 0, f"no entry of {op}'s inputs was compared"


def test_the_check_reaches_every_kind_of_kernel():
    # the suite's node cases (and ours) give this many ops a float input to differentiate by
    assert len(CASES) >= 135 and sum(len(cases) for cases in CASES.values()) >= 300
    assert {"Conv", "LSTM", "GRU", "Resize", "Attention", "MatMul", "Softmax", "Gather", "Slice",
            "Concat", "Split"} <= set(CASES)
