"""Static shapes and dtypes for every tensor: bind the inputs' dynamic dimensions, run ONNX
shape inference with data propagation, and finish what it leaves unknown with one real run (of
an interpreter the caller passes in: the kernels live above this package)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper

from placer.errors import PlacerError
from placer.graph.feeds import generated_note, random_feeds
from placer.graph.opgraph import TensorInfo

log = logging.getLogger(__name__)

SYNTAX = "--input-shape NAME=1x3x224x224"


def _dims_text(dims: Iterable[onnx.TensorShapeProto.Dimension]) -> str:
    return "[" + ", ".join(_dim_text(d) for d in dims) + "]"


def _dim_text(d: onnx.TensorShapeProto.Dimension) -> str:
    if d.HasField("dim_value") and d.dim_value >= 0:
        return str(d.dim_value)
    return d.dim_param or "?"


def _is_static(d: onnx.TensorShapeProto.Dimension) -> bool:
    return d.HasField("dim_value") and d.dim_value >= 0


# Names exporters give unknown dimensions without meaning one size shared between tensors:
# PaddlePaddle's '?', ONNX shape inference's and tf2onnx's 'unk__N', torch's unnamed dynamic
# axes 'INPUT_dynamic_axes_N', paddle2onnx's 'p2o.DynamicDimension.N'.
_ANONYMOUS = re.compile(r"\?|unk__\d+|.+_dynamic_axes_\d+|p2o\.DynamicDimension\.\d+")


def is_symbol(d: onnx.TensorShapeProto.Dimension) -> bool:
    """Whether `d` is dynamic with a real symbolic name, one that may stand for the same size in
    several tensors (not '?', empty or a name an exporter generated for this axis alone)."""
    return not _is_static(d) and bool(d.dim_param) and not _ANONYMOUS.fullmatch(d.dim_param)


def _example(name: str, dims, symbols: Mapping[str, int]) -> str:
    """A filled-in --input-shape for an input: its static dims, bound symbols, 1 elsewhere."""
    values = [str(d.dim_value) if _is_static(d) else str(symbols.get(d.dim_param, 1)) for d in dims]
    return f"--input-shape {name}={'x'.join(values) or '1'}"


def bind_input_shapes(graph: onnx.GraphProto, input_shapes: Mapping[str, tuple[int, ...]],
                      weights: set[str]) -> dict[str, tuple[int, ...]]:
    """Write the shapes of `input_shapes` and the dimensions they bind into `graph` (in place).

    A given shape binds its input's own dimensions by position. A real symbolic dimension (see
    `is_symbol`) shared by several inputs, outputs or value_infos is bound once, everywhere;
    anonymous ones ('?', empty, generated names) bind nothing beyond their own axis. Returns each
    fed input's now-static shape. Unknown input names, rank mismatches, fixed dims set to another
    size, a symbol two inputs bind to different sizes and dims left dynamic are `PlacerError`."""
    real = [i for i in graph.input if i.name not in weights]
    names = [i.name for i in real]
    unknown = [n for n in input_shapes if n not in names]
    if unknown:
        raise PlacerError(f"--input-shape names {', '.join(repr(n) for n in unknown)}, which the model does not "
                          f"have as an input; its inputs are: {', '.join(names) or '(none)'}")

    symbols: dict[str, int] = {}
    bound_by: dict[str, str] = {}
    ambiguous: set[str] = set()   # a symbol one input sets to two sizes means no one size to share
    for value in real:
        if value.name not in input_shapes:
            continue
        want = tuple(input_shapes[value.name])
        if not value.type.HasField("tensor_type"):
            raise PlacerError(f"input {value.name!r} is not a tensor; placer can only bind tensor inputs")
        tt = value.type.tensor_type
        if not tt.HasField("shape"):
            continue  # rank unknown in the file: the given shape is taken whole
        dims = tt.shape.dim
        if len(dims) != len(want):
            raise PlacerError(
                f"--input-shape {value.name}={'x'.join(map(str, want))} has {len(want)} dimensions but input "
                f"{value.name!r} has {len(dims)} {_dims_text(dims)}; give {len(dims)}, e.g. "
                f"{_example(value.name, dims, symbols)}")
        own: dict[str, set[int]] = {}
        for axis, (d, w) in enumerate(zip(dims, want)):
            if _is_static(d) and d.dim_value != w:
                raise PlacerError(
                    f"--input-shape {value.name}=... sets axis {axis} to {w}, but the model fixes it at "
                    f"{d.dim_value} {_dims_text(dims)}; only dynamic dimensions can be chosen")
            if is_symbol(d):
                own.setdefault(d.dim_param, set()).add(w)
        for param, sizes in own.items():
            if len(sizes) > 1:
                ambiguous.add(param)
                continue
            (w,) = sizes
            if param in symbols and symbols[param] != w:
                raise PlacerError(
                    f"dimension {param!r} is bound to {symbols[param]} by input {bound_by[param]!r} and to "
                    f"{w} by input {value.name!r}; give them the same size")
            symbols[param] = w
            bound_by.setdefault(param, value.name)
    for param in ambiguous:
        symbols.pop(param, None)

    unbound: list[str] = []
    examples: list[str] = []
    bound: dict[str, tuple[int, ...]] = {}
    for value in real:
        if not value.type.HasField("tensor_type"):
            raise PlacerError(f"input {value.name!r} is not a tensor (it is a sequence, map or optional); "
                              "placer handles models whose inputs are tensors")
        tt = value.type.tensor_type
        if value.name in input_shapes:
            want = tuple(input_shapes[value.name])
            tt.ClearField("shape")
            tt.shape.SetInParent()   # a scalar's shape is present with no dimensions
            for w in want:
                tt.shape.dim.add().dim_value = w
            bound[value.name] = want
            continue
        if not tt.HasField("shape"):
            unbound.append(f"the shape of input {value.name!r} (the model does not give its rank)")
            examples.append(f"--input-shape {value.name}=1x3x224x224")
            continue
        _substitute(tt.shape.dim, symbols)
        missing = [(axis, d.dim_param) for axis, d in enumerate(tt.shape.dim) if not _is_static(d)]
        for axis, param in missing:
            what = f"dynamic dimension {param!r}" if param and param != "?" else "an unnamed dynamic dimension"
            unbound.append(f"{what} (input {value.name!r}, axis {axis} of {_dims_text(tt.shape.dim)})")
        if missing:
            examples.append(_example(value.name, tt.shape.dim, symbols))
        else:
            bound[value.name] = tuple(d.dim_value for d in tt.shape.dim)
    if unbound:
        raise PlacerError(f"unbound {'; '.join(unbound)}: bind it with {' '.join(examples)} "
                          f"(syntax {SYNTAX}, repeatable)")

    for value in list(graph.output) + list(graph.value_info):
        if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
            _substitute(value.type.tensor_type.shape.dim, symbols)
    return bound


def _substitute(dims, symbols: Mapping[str, int]) -> None:
    for d in dims:
        if is_symbol(d) and d.dim_param in symbols:
            d.dim_value = symbols[d.dim_param]


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference with data propagation (shape arithmetic through Shape/Gather/Concat).

    Inference that fails outright is retried without data propagation, then skipped: the real
    run of `complete_shapes` finishes whatever stays unknown."""
    for data_prop in (True, False):
        try:
            return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False,
                                                     data_prop=data_prop)
        except Exception as exc:  # onnx raises several types; all mean "no inference from here"
            log.info("shape inference (data_prop=%s) failed: %s", data_prop, str(exc).splitlines()[0])
    return model


def infer_static(model: onnx.ModelProto, opsets: Mapping[str, int],
                 rounds: int = 8) -> tuple[dict[str, TensorInfo], list[str]]:
    """Static infos of every tensor that inference can find, and the node outputs it cannot.

    Alternates ONNX shape inference with folding the shape arithmetic that became computable
    (see `placer.graph.fold`), until nothing new is learnt."""
    from placer.graph.fold import fold_constants

    infos, missing = static_infos(infer_shapes(model))
    current = model
    for _ in range(rounds):
        if not missing:
            break
        folded, values = fold_constants(current, infos, opsets)
        learnt = {n: TensorInfo(n, tuple(int(d) for d in v.shape), v.dtype.name)
                  for n, v in values.items() if n not in infos}
        if not learnt and len(folded.graph.node) == len(current.graph.node):
            break
        infos.update(learnt)
        current = folded
        more, _ = static_infos(infer_shapes(current))
        infos.update({n: i for n, i in more.items() if n not in infos})
        missing = [o for n in model.graph.node for o in n.output if o and o not in infos]
    return infos, missing


def dtype_name(elem_type: int) -> str:
    """numpy dtype name of an ONNX element type ('float32', 'int64', ...)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def static_infos(model: onnx.ModelProto) -> tuple[dict[str, TensorInfo], list[str]]:
    """Tensor infos that are complete in `model` (inputs, value_info, outputs, initializers), and
    the names of the top-level node outputs that are not."""
    graph = model.graph
    infos: dict[str, TensorInfo] = {}
    for t in graph.initializer:
        infos[t.name] = TensorInfo(t.name, tuple(int(d) for d in t.dims), dtype_name(t.data_type))
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        if value.name in infos or not value.type.HasField("tensor_type"):
            continue
        tt = value.type.tensor_type
        if tt.elem_type == 0 or not tt.HasField("shape") or not all(_is_static(d) for d in tt.shape.dim):
            continue
        infos[value.name] = TensorInfo(value.name, tuple(d.dim_value for d in tt.shape.dim),
                                       dtype_name(tt.elem_type))
    non_tensor = {v.name for v in list(graph.value_info) + list(graph.output)
                  if v.type.WhichOneof("value") not in (None, "tensor_type")}
    if non_tensor:
        shown = ", ".join(sorted(non_tensor)[:5])
        raise PlacerError(f"tensors {shown} are sequences, maps or optionals; placer handles graphs whose "
                          "top-level values are tensors (keep sequence ops inside Loop/If bodies)")
    missing = [o for n in graph.node for o in n.output if o and o not in infos]
    return infos, missing


def declared_output_infos(graph: onnx.GraphProto) -> dict[str, TensorInfo]:
    """The graph outputs whose declared type is a complete static shape and dtype."""
    result = {}
    for value in graph.output:
        tt = value.type.tensor_type if value.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type and tt.HasField("shape") and all(_is_static(d) for d in tt.shape.dim):
            result[value.name] = TensorInfo(value.name, tuple(d.dim_value for d in tt.shape.dim),
                                            dtype_name(tt.elem_type))
    return result


# run_model(model, feeds, outputs=[...]) -> {name: array}, as `placer.kernels.reference.run_model`.
ModelRunner = Callable[..., Mapping[str, Any]]


def complete_shapes(model: onnx.ModelProto, missing: list[str], inputs: list[TensorInfo],
                    run_model: ModelRunner | None,
                    given: Mapping[str, np.ndarray] | None = None) -> dict[str, TensorInfo]:
    """Shapes and dtypes of the `missing` tensors from one real run of `model` (weights loaded)
    by `run_model`, fed the `given` sample inputs and generated values for the rest (so an If's
    outputs get the shapes of the branch the given inputs take); without a runner, a
    `PlacerError` that names them. A failed run says which inputs were generated."""
    shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
    if run_model is None:
        raise PlacerError(f"shape inference leaves {len(missing)} tensors without a static shape ({shown}) and "
                          "no interpreter was given to finish them with a real run; export the model with "
                          "static shapes, or load it with placer.kernels.loading.load_graph")
    log.info("shape inference left %d tensors unknown; finishing them with one real run", len(missing))
    try:
        given = dict(given or {})
        values = run_model(model, {**random_feeds(i for i in inputs if i.name not in given), **given},
                           outputs=list(missing))
    except Exception as exc:  # a kernel failure must reach the user as one line, not a traceback
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PlacerError(f"shape inference leaves {len(missing)} tensors without a static shape ({shown}) "
                          f"and a real run to find them failed: {reason}"
                          f"{generated_note(i.name for i in inputs if i.name not in given)}") from None
    result: dict[str, TensorInfo] = {}
    for name in missing:
        value = values.get(name)
        if value is None:
            raise PlacerError(f"the shape of tensor {name!r} is unknown after shape inference and a real run; "
                              "export the model with static shapes")
        array = np.asarray(value)
        result[name] = TensorInfo(name, tuple(int(s) for s in array.shape), array.dtype.name)
    return result


def write_value_info(model: onnx.ModelProto, infos: Mapping[str, TensorInfo]) -> None:
    """Record `infos` of node outputs as the model's value_info (outputs updated in place)."""
    graph = model.graph
    outputs = {o.name: o for o in graph.output}
    keep = [v for v in graph.value_info if v.name not in infos]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    for name, info in infos.items():
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
        if name in outputs:
            outputs[name].type.CopyFrom(helper.make_tensor_type_proto(elem, list(info.shape)))
        else:
            graph.value_info.append(helper.make_tensor_value_info(name, elem, list(info.shape)))
