"""The one interpreter walk: run a straight-line program of steps over named values, dropping
each value after its last use (torch.fx's `Interpreter`, for `Step`s instead of fx nodes).

`walk` owns the loop (read a step's inputs, store its outputs, free what is no longer read);
each user plugs in its own "run a step": the reference interpreter and the executor's workers
run torch kernels on tensors, the simulator computes when each tensor arrives on each device.
An environment may be a dict subclass whose ``__missing__`` fetches a value on first read: that
is how an executor worker receives a tensor another device produced.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    """One unit of work: read the values `inputs` ('' = omitted), write `outputs`."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def last_uses(steps: Sequence[Step], keep: Collection[str] = ()) -> list[list[str]]:
    """frees[i]: the values that step i is the last to read or write, except those in `keep`.

    An output no later step reads dies with the step that makes it.
    """
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        for t in step.inputs:
            if t:
                last[t] = i
        for t in step.outputs:
            if t:
                last[t] = i
    frees: list[list[str]] = [[] for _ in steps]
    for t, i in last.items():
        if t not in keep:
            frees[i].append(t)
    return frees


def walk(steps: Sequence[Step], frees: Sequence[Sequence[str]], env: MutableMapping[str, Any],
         run_step: Callable[[int, list[Any]], Sequence[Any]]) -> Iterator[int]:
    """Run `steps` in order over `env` (value name -> value), yielding each step's index.

    For step i: its inputs are read from `env` (None for an omitted one), ``run_step(i, inputs)``
    gives its outputs, which are stored; then i is yielded (the caller may read them, publish
    them, check a deadline) and the values in ``frees[i]`` are dropped.
    """
    for i, step in enumerate(steps):
        outputs = run_step(i, [env[t] if t else None for t in step.inputs])
        for t, value in zip(step.outputs, outputs):
            if t:
                env[t] = value
        yield i
        for t in frees[i]:
            del env[t]
