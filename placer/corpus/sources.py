"""The corpus's graphs: zoo families through their export options, layered random DAGs and models
from outside the zoo. A source names a graph and knows how to make it; exports are cached on disk
(the zoo's cache folder, keyed by everything that changes their bytes) and loaded graphs in memory.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from placer.corpus.random_dags import draw_spec, random_dag
from placer.graph.opgraph import OpGraph

log = logging.getLogger(__name__)

# family -> zoo options per size; "small" builds in seconds (each export ~1-3 s once, then cached)
ZOO_FAMILIES: dict[str, dict[str, list[dict[str, int]]]] = {
    "inception_v3": {"small": [], "full": [{"batch": 1}, {"batch": 4}]},
    "resnet50": {"small": [{"batch": 1}], "full": [{"batch": 1}, {"batch": 8}]},
    "rnnlm": {"small": [{"batch": 4, "seq_len": 4, "vocab": 500}],
              "full": [{"batch": 32, "seq_len": 20, "vocab": 2000}, {"batch": 64, "seq_len": 10, "vocab": 2000},
                       {"batch": 16, "seq_len": 40, "vocab": 2000}]},
    "nmt": {"small": [{"batch": 4, "seq_len": 4, "vocab": 500}],
            "full": [{"batch": 16, "seq_len": 10, "vocab": 2000}, {"batch": 64, "seq_len": 20, "vocab": 2000}]},
    "transformer": {"small": [{"layers": 2, "seq_len": 16, "vocab": 1000}],
                    "full": [{"layers": 4, "seq_len": 128, "vocab": 8000},
                             {"layers": 8, "seq_len": 64, "batch": 4, "vocab": 8000}]},
    # Llama-shaped decoders (RMSNorm, rotary, grouped-query attention, SwiGLU), shallow to deep: the
    # shapes large models have, at sizes whose exports take seconds (the deep ones without weights)
    "llama": {"small": [{"layers": 2}],
              "full": [{"layers": 4, "hidden": 512, "heads": 8, "kv_heads": 8, "mlp": 1376, "seq_len": 256,
                        "vocab": 8000},
                       {"layers": 8, "hidden": 1024, "heads": 16, "kv_heads": 4, "mlp": 2816, "seq_len": 512,
                        "vocab": 16000},
                       {"layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 4, "mlp": 5632, "seq_len": 1024,
                        "vocab": 32000},
                       {"layers": 24, "hidden": 1024, "heads": 8, "kv_heads": 2, "mlp": 2816, "seq_len": 2048,
                        "batch": 2, "vocab": 32000}]},
}
# Large graphs judged zero-shot (held_out_items(size="large")), none learned on: deep GPT-2-shaped
# Transformers (a held-out family) and the Llama-2-7B shape, wider and longer than any training Llama
LARGE_HELD_OUT = [("transformer", {"layers": 24, "seq_len": 128, "vocab": 8000}),
                  ("transformer", {"layers": 48, "seq_len": 128, "vocab": 8000}),
                  ("llama", {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "mlp": 11008,
                             "seq_len": 4096, "vocab": 32000})]
RANDOM_DAGS = {"small": 4, "full": 12}   # full: about as many items as the zoo families give
OUTSIDE = {"small": [("mobilenet", {"size": 64, "width": 0.5})],
           "full": [("mobilenet", {"size": 224}), ("yolo", {"size": 320})]}


@dataclass(frozen=True)
class GraphSource:
    """One graph of the corpus: its unique name, its family and how to make its ONNX model."""

    name: str
    family: str
    make: Callable[[], onnx.ModelProto | Path] = field(compare=False, repr=False)

    def load(self) -> OpGraph:
        return _load(self)


@functools.lru_cache(maxsize=64)
def _load(source: GraphSource) -> OpGraph:
    """Loaded once per process: the learner meets a graph many times. Shapes only: the corpus is
    placed by the simulator, so a large model's external weights are never read."""
    from placer.kernels.loading import load_graph

    return load_graph(source.make(), weights="shapes")


def cached_export(key: dict, filename: str, write: Callable[[Path], object], module: str) -> Path:
    """The file `write(path)` makes, made once into the zoo cache under a folder keyed by `key`,
    the torch version and the source of `module` (the code that defines the model): a changed
    definition makes a new file, never a stale one."""
    import torch

    from graphs import cache_dir
    from graphs.export import OPSET

    code = inspect.getsource(__import__(module, fromlist=["_"]))
    digest = hashlib.sha256(json.dumps([key, torch.__version__, OPSET, code], sort_keys=True).encode()).hexdigest()
    path = cache_dir() / "corpus" / digest[:12] / filename
    if not path.is_file():
        log.info("exporting %s to the corpus cache %s", filename, path.parent)
        write(path)
    return path


def zoo_source(family: str, options: dict[str, int]) -> GraphSource:
    """A zoo model at these export options."""
    import graphs

    tag = "-".join(f"{k}{v}" for k, v in sorted(options.items()))
    name = f"{family}-{tag}" if tag else family
    return GraphSource(name, family, lambda: cached_export(
        {"zoo": family, "options": options}, f"{name}.onnx",
        lambda path: graphs.export(family, path, **options), f"graphs.{family}"))


def outside_source(model: str, options: dict) -> GraphSource:
    """A model from graphs/outside/ (not in the zoo), exported at these options."""
    module = f"graphs.outside.{model}"
    tag = "-".join(f"{k}{v}" for k, v in sorted(options.items()))
    name = f"{model}-{tag}"

    def write(path: Path) -> None:
        exporter = getattr(__import__(module, fromlist=["_"]), f"export_{model}")
        exporter(path, **options)

    return GraphSource(name, "outside", lambda: cached_export({"outside": model, "options": options},
                                                              f"{name}.onnx", write, module))


def random_dag_sources(seed: int, count: int, small: bool) -> list[GraphSource]:
    """`count` layered random DAGs drawn from `seed` (made in memory: no file to cache)."""
    rng = np.random.default_rng([seed, 29])
    sources = []
    for i in range(count):
        spec = draw_spec(rng, small)
        dag_seed = int(rng.integers(2**31))
        sources.append(GraphSource(f"{spec.name}-{dag_seed}", "random_dag",
                                   functools.partial(random_dag, spec, dag_seed)))
    return sources


def family_sources(family: str, size: str, seed: int = 0) -> list[GraphSource]:
    """Every source of `family` ("random_dag", "outside" or a zoo name) at `size`."""
    if family == "random_dag":
        return random_dag_sources(seed, RANDOM_DAGS[size], size == "small")
    if family == "outside":
        return [outside_source(model, options) for model, options in OUTSIDE[size]]
    return [zoo_source(family, options) for options in ZOO_FAMILIES[family][size]]


FAMILIES = (*ZOO_FAMILIES, "random_dag", "outside")
