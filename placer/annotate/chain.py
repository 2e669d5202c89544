"""Read a split model's index, and run its stages one after another in ONNX Runtime (the plain
reference; `placer.engines.onnxruntime.load` runs them concurrently, with sessions built once)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from placer.annotate.split import INDEX_FILE, SPLIT_FORMAT
from placer.errors import PlacerError


def load_split_index(path: str | Path) -> tuple[Path, dict]:
    """The folder and parsed `split.json` of a split, from the folder or the JSON file's path."""
    path = Path(path)
    index_path = path / INDEX_FILE if path.is_dir() else path
    if not index_path.is_file():
        raise PlacerError(f"{index_path} does not exist; give the folder written by placer apply --split")
    index = json.loads(index_path.read_text())
    if index.get("format") != SPLIT_FORMAT:
        raise PlacerError(f"{index_path} is not a split index (format {SPLIT_FORMAT}); "
                          "give the folder written by placer apply --split")
    return index_path.parent, index


def providers_for(device: str) -> list[str]:
    """ONNX Runtime providers for a placer device: CUDA first for cuda devices, CPU always."""
    return (["CUDAExecutionProvider"] if device.startswith("cuda") else []) + ["CPUExecutionProvider"]


def run_split(path: str | Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run every stage in order, passing tensors along as `split.json` says; returns the graph's
    outputs by name."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise PlacerError("running a split model needs onnxruntime; pip install onnxruntime") from None
    folder, index = load_split_index(path)
    available = set(ort.get_available_providers())
    values: dict[str, np.ndarray] = dict(feeds)
    for stage in index["stages"]:
        providers = [p for p in providers_for(stage["device"]) if p in available]
        session = ort.InferenceSession(str(folder / stage["file"]), providers=providers)
        missing = [t for t in stage["inputs"] if t not in values]
        if missing:
            raise PlacerError(f"stage {stage['index']} needs {missing} which no feed or earlier stage gives; "
                              "feed every graph input")
        results = session.run(stage["outputs"], {t: values[t] for t in stage["inputs"]})
        values.update(zip(stage["outputs"], results))
    return {name: values[name] for name in index["outputs"]}
