"""Shared zoo exports: each model is exported once per session (small options where they exist)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import graphs
from testgraphs import ZOO_SMALL

SMALL = ZOO_SMALL


@pytest.fixture(scope="session")
def small() -> dict[str, dict[str, int]]:
    """name -> the SMALL options of that zoo model."""
    return SMALL


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder in which inception_v3 at default options was exported once via `resolve`."""
    root = tmp_path_factory.mktemp("placer-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLACER_CACHE", str(root))
        graphs.resolve("inception_v3.onnx")
    return root


@pytest.fixture(scope="session")
def small_export(tmp_path_factory: pytest.TempPathFactory, zoo_cache: Path) -> Callable[[str], Path]:
    """name -> ONNX file of that zoo model at its SMALL options, exported once per session
    (inception_v3 comes from the session's cache export, so it is exported only once)."""
    folder = tmp_path_factory.mktemp("zoo-small")
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            if name == "inception_v3":
                done[name] = next(zoo_cache.rglob("inception_v3.onnx"))
            else:
                done[name] = graphs.export(name, folder / f"{name}.onnx", **SMALL[name])
        return done[name]

    return get
