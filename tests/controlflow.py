"""Models with control flow, as users bring them: torch.jit.script exports with a data-dependent
If and a decoding Loop (torch writes it as a while loop: a condition, no trip count), the same
decoder as a Loop with both a trip count and a condition that ends it early (torch cannot emit
both, so it is written with onnx.helper from the module's weights), and a Scan written with
onnx.helper (torch exports none) whose body holds a nested If. Models whose inputs' values decide
the work: a voice-activity detector's If on an int64 sample rate (`export_rate_gate`), and a
division by an integer input that generated zeros fail (`divide_by_count`)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn


class Gate(nn.Module):
    """One of two heads, chosen by the data."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(6, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if bool(h.sum() > 6.0):   # small inputs take the else branch, large ones the then branch
            y = self.b(h) * 2.0
        else:
            y = torch.tanh(self.c(h)) - h
        return y


class Decode(nn.Module):
    """At most `steps` steps of a recurrent cell, stopping once its state settles."""

    def __init__(self, steps: int = 6) -> None:
        super().__init__()
        self.cell, self.out, self.steps = nn.Linear(8, 8), nn.Linear(8, 4), steps

    def forward(self, h):
        acc = torch.zeros_like(h)
        for _ in range(self.steps):
            h = torch.tanh(self.cell(h))
            acc = acc + h
            if bool(h.abs().mean() < 0.3):
                break
        return self.out(acc)


MODULES = {"gate": (Gate, (3, 6)), "decode": (Decode, (3, 8)), "bounded": (lambda: Decode(steps=2), (3, 8))}


def export_scripted(name: str, path: Path) -> tuple[nn.Module, onnx.ModelProto]:
    """The module `name` of MODULES (seeded weights) in ONNX at `path` (input x, output y):
    scripted and exported by torch, or for "bounded" the Loop torch cannot write (`bounded_decode`)."""
    make, shape = MODULES[name]
    torch.manual_seed(0)
    module = make().eval()
    if name == "bounded":
        model = bounded_decode(module)
        onnx.save(model, str(path))
        return module, model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(module), (torch.randn(shape),), str(path), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["y"])
    return module, onnx.load(str(path))


def bounded_decode(module: Decode) -> onnx.ModelProto:
    """`module` as ONNX with one Loop of trip count `module.steps` whose body ends it early once the
    state settles (mean |h| < 0.3): what `for _ in range(steps): ... break` means, which torch
    exports as a while loop. The weights keep the module's parameter names, read from the outer scope."""
    f = TensorProto.FLOAT
    state = [3, 8]
    body = helper.make_graph([
        helper.make_node("Gemm", ["h_in", "cell.weight", "cell.bias"], ["g"], transB=1),
        helper.make_node("Tanh", ["g"], ["h_out"]),
        helper.make_node("Add", ["acc_in", "h_out"], ["acc_out"]),
        helper.make_node("Abs", ["h_out"], ["a"]),
        helper.make_node("ReduceMean", ["a"], ["m"], keepdims=0),
        helper.make_node("Less", ["m", "settled"], ["done"]),
        helper.make_node("Not", ["done"], ["go"]),
    ], "step", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                helper.make_tensor_value_info("h_in", f, state), helper.make_tensor_value_info("acc_in", f, state)],
        [helper.make_tensor_value_info("go", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", f, state), helper.make_tensor_value_info("acc_out", f, state)])
    nodes = [helper.make_node("Mul", ["x", "zero"], ["acc0"], name="zeros"),
             helper.make_node("Loop", ["steps", "true", "x", "acc0"], ["h", "acc"], name="decode", body=body),
             helper.make_node("Gemm", ["acc", "out.weight", "out.bias"], ["y"], name="out", transB=1)]
    weights = {name: p.detach().numpy() for name, p in module.named_parameters()}
    literals = {"steps": np.array(module.steps, np.int64), "true": np.array(True), "zero": np.array(0.0, np.float32),
                "settled": np.array(0.3, np.float32)}
    graph = helper.make_graph(nodes, "bounded_decode", [helper.make_tensor_value_info("x", f, state)],
                              [helper.make_tensor_value_info("y", f, [3, 4])],
                              initializer=[numpy_helper.from_array(v, k) for k, v in {**weights, **literals}.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def scan_model() -> onnx.ModelProto:
    """s_t = If(sum(a_t) > 0, tanh(a_t), alpha * a_t) with a_t = s_{t-1} W + x_t, over x's first
    axis; outputs the last state and every state. W and alpha are read from the outer scopes."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    then_g = helper.make_graph([helper.make_node("Tanh", ["a"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", f, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Mul", ["a", "alpha"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", f, [2, 4])])
    body = helper.make_graph([
        helper.make_node("MatMul", ["s_in", "W"], ["m"]),
        helper.make_node("Add", ["m", "x_t"], ["a"]),
        helper.make_node("ReduceSum", ["a"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["s_out"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Identity", ["s_out"], ["y_t"]),
    ], "body", [helper.make_tensor_value_info("s_in", f, [2, 4]), helper.make_tensor_value_info("x_t", f, [2, 4])],
        [helper.make_tensor_value_info("s_out", f, [2, 4]), helper.make_tensor_value_info("y_t", f, [2, 4])])
    nodes = [helper.make_node("Relu", ["x"], ["xr"], name="relu"),
             helper.make_node("Scan", ["s0", "xr"], ["s_last", "ys"], name="scan", num_scan_inputs=1, body=body),
             helper.make_node("MatMul", ["ys", "W"], ["y"], name="head")]
    graph = helper.make_graph(
        nodes, "scan", [helper.make_tensor_value_info("s0", f, [2, 4]), helper.make_tensor_value_info("x", f, [5, 2, 4])],
        [helper.make_tensor_value_info("s_last", f, [2, 4]), helper.make_tensor_value_info("y", f, [5, 2, 4])],
        initializer=[numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
                     numpy_helper.from_array(np.array(0.5, np.float32), "alpha"),
                     numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def constant_loop(draw: bool) -> onnx.ModelProto:
    """y = x + Loop(3 trips, no data input) stacking a [2, 3] tensor per trip: a RandomNormal draw
    (`draw`) or a constant. Every input of the Loop is a constant, so only the draw keeps it from folding."""
    f = TensorProto.FLOAT
    make = (helper.make_node("RandomNormal", [], ["r"], shape=[2, 3]) if draw else
            helper.make_node("Constant", [], ["r"], value=numpy_helper.from_array(np.ones((2, 3), np.float32))))
    body = helper.make_graph([make, helper.make_node("Identity", ["cond"], ["go"])], "trip",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                             [helper.make_tensor_value_info("go", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("r", f, [2, 3])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "true"], ["rs"], name="loop", body=body),
         helper.make_node("Add", ["x", "rs"], ["y"], name="add")], "constant_loop",
        [helper.make_tensor_value_info("x", f, [3, 2, 3])], [helper.make_tensor_value_info("y", f, [3, 2, 3])],
        initializer=[numpy_helper.from_array(np.array(3, np.int64), "trips"),
                     numpy_helper.from_array(np.array(True), "true")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def feeds(model: onnx.ModelProto, seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    """Random float inputs of the model's declared shapes."""
    rng = np.random.default_rng(seed)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    return {name: (scale * rng.standard_normal(shape)).astype(np.float32) for name, shape in shapes.items()}


class RateGate(nn.Module):
    """A voice-activity detector's shape (inputs x 1x512, state 2x1x16, sr an int64 scalar): its
    network sits in an If on the sample rate. 16000 cuts x into four 128-sample frames; any other
    rate takes x's first sr // 8000 * 256 samples as two frames, which only 8000 can do. So the
    outputs' shapes follow the branch (prob 4x1 or 2x1), and generated inputs (sr = 0) fail."""

    def __init__(self) -> None:
        super().__init__()
        self.wide, self.narrow, self.head = nn.Linear(128, 16), nn.Linear(128, 16), nn.Linear(16, 1)

    def forward(self, x, state, sr):
        if bool(sr == 16000):
            h = torch.relu(self.wide(x.reshape(4, 128)))
        else:
            h = torch.tanh(self.narrow(x[:, :int(sr) // 8000 * 256].reshape(2, 128)))
        h = h + state[0]
        return torch.sigmoid(self.head(h)), state * 0.5 + h.mean(0)


def export_rate_gate(path: Path) -> Path:
    """`RateGate` (seeded weights), scripted and exported by torch to `path`: inputs x, state,
    sr; outputs prob, new_state."""
    torch.manual_seed(0)
    module = RateGate().eval()
    example = (torch.randn(1, 512), torch.zeros(2, 1, 16), torch.tensor(16000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(module), example, str(path), dynamo=False, opset_version=17,
                          input_names=["x", "state", "sr"], output_names=["prob", "new_state"])
    return path


def rate_inputs(sr: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Sample inputs of `RateGate` at sample rate `sr`."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, 512)).astype(np.float32),
            "state": rng.standard_normal((2, 1, 16)).astype(np.float32), "sr": np.array(sr, dtype=np.int64)}


def divide_by_count() -> onnx.ModelProto:
    """y = x * (8 / n) with n an int64 scalar input: static shapes (it loads on generated inputs),
    but the generated n = 0 is an integer division by zero when it runs."""
    nodes = [helper.make_node("Div", ["eight", "n"], ["share"], name="divide"),
             helper.make_node("Cast", ["share"], ["scale"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "scale"], ["y"], name="scale_x")]
    graph = helper.make_graph(nodes, "divide_by_count",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              initializer=[numpy_helper.from_array(np.array(8, np.int64), "eight")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model
