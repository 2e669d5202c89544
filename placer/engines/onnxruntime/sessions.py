"""ONNX Runtime sessions for placer devices: providers, threads and options, built once."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as _state

from placer.devices import Device
from placer.errors import PlacerError

# What InferenceSession raises for a model it refuses (ORT's own exception types, not RuntimeError)
_LOAD_ERRORS = (_state.Fail, _state.InvalidArgument, _state.InvalidGraph, _state.NotImplemented,
                _state.RuntimeException, _state.EPFail)
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")

GPU_INSTALL = ("pip uninstall -y onnxruntime && pip install onnxruntime-gpu "
               "(the CUDA build of ONNX Runtime, for cuda devices)")


def providers_for(device: Device) -> list:
    """The execution providers of a session on `device`: CUDA with its device id (CPU as fallback
    for the ops CUDA lacks), or the CPU alone. A missing CUDA provider is a `PlacerError`."""
    if device.kind != "cuda":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise PlacerError(f"{device.name} needs the CUDA execution provider, which this onnxruntime "
                          f"({ort.__version__}) lacks; {GPU_INSTALL}, or map it to the CPU")
    return [("CUDAExecutionProvider", {"device_id": device.index or 0}), "CPUExecutionProvider"]


def session_options(device: Device, threads: int, *, spinning: bool = True, cores: frozenset[int] = frozenset(),
                    profile_prefix: str | None = None) -> ort.SessionOptions:
    """Options of a session on `device`: `threads` intra-op threads on a CPU (one on a GPU, for the
    ops that fall back to the CPU), one inter-op thread, sequential execution. Without `spinning`
    idle pool threads sleep at once: a device running several sessions in turn, or a machine
    shared by several devices, does not lose a core to a pool that waits for work. With `cores`
    (the device's, `placer.engines.affinity`) the pool's threads stay on them, as the device's own
    thread does."""
    options = ort.SessionOptions()
    if cores and device.kind == "cpu" and threads > 1:
        # one entry per pool thread (the caller's thread is the first of `threads`); ORT counts from 1
        ids = ",".join(str(c + 1) for c in sorted(cores))
        options.add_session_config_entry("session.intra_op_thread_affinities", ";".join([ids] * (threads - 1)))
    options.intra_op_num_threads = threads if device.kind == "cpu" else 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3   # errors only: a partition's unused-initializer warnings are noise
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return options


def build_session(model: onnx.ModelProto | str | Path, device: Device, options: ort.SessionOptions
                  ) -> ort.InferenceSession:
    """An `InferenceSession` of `model` (a ModelProto or a file) on `device`; a model ONNX Runtime
    cannot load (an op or type it lacks, a check of its own that placer's engine does not make) is
    a `PlacerError` in one line."""
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    providers = providers_for(device)   # a missing CUDA provider says so itself
    try:
        return ort.InferenceSession(source, options, providers=providers)
    except _LOAD_ERRORS as exc:
        # "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find ...": the reason follows the code
        reason = _ORT_PREFIX.sub("", (str(exc).strip().splitlines() or [type(exc).__name__])[0])
        raise PlacerError(f"ONNX Runtime {ort.__version__} cannot load the model on {device.name}: {reason}; "
                          "run it with placer's own engine instead (--engine torch)") from None
