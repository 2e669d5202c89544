"""What runs a graph: the user's sample inputs (--inputs, `inputs=`), checked against the model,
and seeded random inputs for those they leave out.

    read_inputs(path)                 -> {name: array} of an .npz file
    check_sample_inputs(arrays, ...)  -> the arrays that feed a step, each checked against its input
    step_feeds(graph, seed=0)         -> {input name: array}: the graph's sample inputs, the rest random
    random_feeds(graph, seed=0)       -> {input name: array}: generated only
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

import numpy as np
import onnx

from placer.devices import physical_memory
from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph, TensorInfo

# What generated inputs hold, for messages that say a run was on them.
GENERATED = "standard normal floats, zeros for integers, False for booleans"
# `name#k`: the array of input `name` for micro-batch k of a pipelined step (`placer run`).
_MICRO_BATCH = re.compile(r"(?P<name>.+)#(?P<k>\d+)")


def read_inputs(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an .npz file (name -> array); an unreadable file is a one-line `PlacerError`."""
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as exc:
        raise PlacerError(f"cannot read --inputs {path} ({exc.strerror or exc}); give an .npz written by numpy.savez "
                          "(one array per input name)") from None
    except ValueError:   # numpy takes any other file for pickled data
        data = None
    if not isinstance(data, np.lib.npyio.NpzFile):   # an .npy holds one nameless array
        raise PlacerError(f"cannot read --inputs {path}: it is not an .npz file; save the inputs with "
                          "numpy.savez(path, name=array, ...), one array per input name")
    with data:
        return {k: data[k] for k in data.files}


def check_sample_inputs(given: Mapping[str, np.ndarray], graph: onnx.GraphProto, weights: set[str],
                        label: str) -> dict[str, np.ndarray]:
    """`given` (name -> array), each checked against the model input of its name: the name, the
    dtype, the rank and every dimension the model fixes (dynamic ones the array binds). Anything
    that does not fit is a one-line `PlacerError` naming the array, raised before any work;
    `label` says where the arrays came from (--inputs FILE)."""
    declared = {i.name: i.type for i in graph.input if i.name not in weights}
    checked: dict[str, np.ndarray] = {}
    for name, array in given.items():
        if name not in declared:
            raise PlacerError(f"{label} holds an array named {name!r}, which is no input of the model; its inputs "
                              f"are {', '.join(declared) or '(none)'}: rename the array to its input's name, or leave it out")
        checked[name] = np.asarray(array)
        _check_array(name, checked[name], declared[name], label)
    return checked


def split_micro_batches(given: Mapping[str, np.ndarray], micro_batches: int,
                        label: str) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """`given` split into the arrays of every micro-batch and, per micro-batch k of a pipelined
    step, those named `name#k` (keyed `name`). `name#k` past the last micro-batch, or on a step
    that is not pipelined, is a one-line `PlacerError`."""
    every: dict[str, np.ndarray] = {}
    each: list[dict[str, np.ndarray]] = [{} for _ in range(micro_batches)]
    for name, array in given.items():
        micro = _MICRO_BATCH.fullmatch(name)
        if micro is None:
            every[name] = array
        elif int(micro.group("k")) < micro_batches and micro_batches > 1:
            each[int(micro.group("k"))][micro.group("name")] = array
        else:
            raise PlacerError(f"{label} holds {name!r}, an array for micro-batch {micro.group('k')}, but the step has "
                              f"{micro_batches} micro-batch{'es' if micro_batches > 1 else ''} (numbered from 0; "
                              f"placer run --micro-batches M pipelines it); name it {micro.group('name')!r} to feed "
                              "every step")
    return every, each


def check_micro_batch_inputs(graph: OpGraph, arrays: Mapping[str, np.ndarray], k: int, label: str) -> None:
    """Micro-batch k's own arrays checked against the loaded graph's inputs (as `check_sample_inputs`
    checks the others against the file): same name, dtype and shape as the input."""
    infos = {i.name: i for i in graph.inputs}
    for name, array in arrays.items():
        info = infos.get(name)
        if info is None:
            raise PlacerError(f"{label} holds {name}#{k}, but the model has no input {name!r}; its inputs are "
                              f"{', '.join(infos)}: rename the array, or leave it out")
        if array.dtype != np.dtype(info.dtype) or tuple(array.shape) != tuple(info.shape):
            raise PlacerError(f"{label}: array {name}#{k} is {array.dtype.name} {_shape_text(array.shape)}, but input "
                              f"{name!r} is {info.dtype} {_shape_text(info.shape)}; give it that dtype and shape")


def _check_array(name: str, array: np.ndarray, declared: onnx.TypeProto, label: str) -> None:
    if not declared.HasField("tensor_type"):
        raise PlacerError(f"input {name!r} is not a tensor; placer feeds tensor inputs only, leave {name!r} out of {label}")
    tt = declared.tensor_type
    if tt.elem_type:
        want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if array.dtype != want:
            raise PlacerError(f"{label}: array {name!r} is {array.dtype.name}, but the model's input is {want.name}; "
                              f"save it as {want.name} (numpy: array.astype('{want.name}'))")
    if not tt.HasField("shape"):
        return
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
    fits = len(dims) == array.ndim and all(d is None or d == a for d, a in zip(dims, array.shape))
    if not fits:
        raise PlacerError(f"{label}: array {name!r} has shape {_shape_text(array.shape)}, but the model's input is "
                          f"{_shape_text(dims)} ('?': any size); give an array of that shape")


def _shape_text(dims: Iterable[int | None]) -> str:
    dims = list(dims)
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]" + ("" if dims else " (a scalar)")


def step_feeds(graph: OpGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """What a step of `graph` is fed: its sample inputs (`OpGraph.sample_inputs`), and for the
    inputs they leave out, `random_feeds` from `seed`."""
    return {**random_feeds(graph, seed), **graph.sample_inputs}


def generated_inputs(graph: OpGraph) -> list[str]:
    """The inputs of `graph` no sample input gives: a step feeds them generated values."""
    return [i.name for i in graph.inputs if i.name not in graph.sample_inputs]


def generated_note(generated: Iterable[str]) -> str:
    """What a failed run adds when some of its inputs were generated: which, and how to give real
    ones (empty when none was)."""
    names = list(generated)
    if not names:
        return ""
    return (f"; it ran on generated values of {', '.join(names)} ({GENERATED}), and the model may need real "
            "ones: give them with --inputs FILE.npz (inputs= in Python)")


def random_feeds(graph: OpGraph | Iterable[TensorInfo], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input (or for the given `TensorInfo`s, as loading has them
    before the graph exists): standard normal floats (the real part of complex ones), zeros for
    integer inputs (always a valid token id or index), False for booleans. An unbound dimension,
    a 0-sized one and inputs larger than this machine's memory are a `PlacerError` in one line."""
    inputs = list(graph.inputs if isinstance(graph, OpGraph) else graph)
    for info in inputs:
        if any(d < 0 for d in info.shape):
            raise PlacerError(f"input {info.name!r} has an unbound dimension {info.shape}; "
                              f"bind it with --input-shape {info.name}=...")
        if 0 in info.shape:   # a model may fix a dimension at 0, and --inputs may hold an empty array
            raise PlacerError(f"input {info.name!r} has shape {list(info.shape)}: a dimension of size 0 leaves "
                              "the step nothing to compute, so placer cannot run or place it; give every dimension "
                              "a size of 1 or more (a model that fixes one at 0 needs exporting again)")
    # refused before numpy tries to allocate them: a traceback after minutes of swapping otherwise
    need, memory = sum(info.nbytes for info in inputs), physical_memory()
    if memory is not None and need > memory:
        big = max(inputs, key=lambda info: info.nbytes)
        raise PlacerError(f"the inputs take {need / 2**30:.4g} GiB ({big.name!r} is {big.dtype} {list(big.shape)}), "
                          f"more than this machine's memory ({memory / 2**30:.4g} GiB); bind smaller dimensions "
                          "with --input-shape")
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in inputs:
        dtype = np.dtype(info.dtype)
        if dtype.kind in "fc":
            feeds[info.name] = rng.standard_normal(info.shape).astype(dtype)
        else:
            feeds[info.name] = np.zeros(info.shape, dtype=dtype)
    return feeds
