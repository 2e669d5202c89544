"""The zoo jobs: the built-in benchmark graphs listed, and one exported to an ONNX file.

`export(ExportSettings("rnnlm", "lm.onnx", batch=2))` is what `placer zoo export` runs; `LISTING`
is what `placer zoo list` shows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from placer.errors import PlacerError
from placer.jobs.paths import check_writable


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model at its default options: its parameters, its inputs' shapes, the options."""

    name: str
    parameters: int
    input_shapes: dict[str, tuple[int, ...]]
    defaults: dict[str, int]
    description: str


# The zoo as `placer zoo list` shows it, written out: counting parameters and shaping inputs builds
# each model in torch, and a listing should load none. tests/zoo/test_cli.py pins every entry equal
# to the models' own (graphs.registry).
LISTING = (
    ZooEntry("inception_v3", 23_834_568, {"input": (1, 3, 299, 299)}, {"batch": 1},
             "Inception-v3 image classifier (torchvision layout, no aux head), 299x299"),
    ZooEntry("resnet50", 25_557_032, {"input": (1, 3, 224, 224)}, {"batch": 1},
             "ResNet-50 v1.5 image classifier (torchvision layout), 224x224"),
    ZooEntry("rnnlm", 14_452_496, {"tokens": (32, 20)}, {"batch": 32, "seq_len": 20, "vocab": 10000},
             "2-layer LSTM language model, 512 units, unrolled (one set of ops per cell and step)"),
    ZooEntry("nmt", 22_012_736, {"src_tokens": (16, 20), "tgt_tokens": (16, 20)},
             {"batch": 16, "seq_len": 20, "vocab": 8000},
             "LSTM encoder-decoder with attention (bidirectional encoder, 512 units), unrolled"),
    ZooEntry("transformer", 124_490_065, {"tokens": (1, 64)}, {"batch": 1, "seq_len": 64, "layers": 12, "vocab": 50257},
             "GPT-2-small-shaped decoder: 12 layers, d_model 768, 12 heads, tied LM head"),
    # built directly as ONNX (graphs.llama): any size, the large ones with no weights
    ZooEntry("llama", 119_104, {"tokens": (1, 16)},
             {"batch": 1, "seq_len": 16, "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "mlp": 160,
              "vocab": 256},
             "Llama-shaped decoder, tiny: 2 layers, hidden 64, 4 heads sharing 2 key-value heads"),
    ZooEntry("llama2_7b", 6_738_415_616, {"tokens": (1, 4096)},
             {"batch": 1, "seq_len": 4096, "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "mlp": 11008,
              "vocab": 32000},
             "Llama-2-7B shape: 32 layers, hidden 4096, 32 heads, MLP 11008; no weights"),
    ZooEntry("llama2_70b", 68_976_648_192, {"tokens": (1, 4096)},
             {"batch": 1, "seq_len": 4096, "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "mlp": 28672,
              "vocab": 32000},
             "Llama-2-70B shape: 80 layers, hidden 8192, 64 heads over 8 key-value heads, MLP 28672; no weights"),
)


@dataclass(frozen=True)
class ExportSettings:
    """The zoo model `name`, written to `output` (default NAME.onnx here) at its default options
    but those given (`layers` and `vocab` only where the model has them)."""

    name: str
    output: str | Path | None = None
    batch: int | None = None
    seq_len: int | None = None
    layers: int | None = None
    vocab: int | None = None


@dataclass(frozen=True)
class ExportResult:
    """The file written, its size and the seconds the export took."""

    path: Path
    size_bytes: int
    seconds: float


def export(settings: ExportSettings) -> ExportResult:
    """Export the model to its file, once the name and the path have been checked."""
    import time

    import graphs

    graphs.get(settings.name)  # an unknown name fails before anything is built
    path = check_writable(settings.output or f"{settings.name}.onnx", "-o")
    options = {key: value for key in ("layers", "vocab") if (value := getattr(settings, key)) is not None}
    start = time.perf_counter()
    try:
        graphs.export(settings.name, path, batch=settings.batch, seq_len=settings.seq_len, **options)
    except OSError as exc:
        raise PlacerError(f"cannot write {path}: {exc.strerror or exc}; choose another -o PATH") from exc
    seconds = time.perf_counter() - start
    data = path.with_name(path.name + ".data")   # a model over 2 GiB keeps its weights beside it
    return ExportResult(path, path.stat().st_size + (data.stat().st_size if data.is_file() else 0), seconds)
