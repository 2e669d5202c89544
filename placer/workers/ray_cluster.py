"""Ray itself: importing it, joining a cluster or starting a local runtime, and the room it has.

Ray is an extra (`pip install -e '.[ray]'`): nothing else in placer imports it.
"""

from __future__ import annotations

import logging
import re
import socket
from typing import Any

from placer.errors import PlacerError
from placer.workers.spec import WorkerNeeds

ANSWER_TIMEOUT_S = 5.0   # a cluster address that does not answer in this long is refused


def require_ray() -> Any:
    """The `ray` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise PlacerError("--workers measures on Ray, which is not installed: pip install -e '.[ray]'") from None
    return ray


def connect(address: str | None) -> bool:
    """Join the cluster at `address` (HOST:PORT or auto), or start a local runtime when None.
    True when this call started Ray (so closing the pool shuts it down)."""
    ray = require_ray()
    if address is not None:
        check_answers(address)
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    except (ConnectionError, ValueError) as exc:
        raise PlacerError(f"cannot join the Ray cluster at {address}: {str(exc).splitlines()[0]} (is it the head's "
                          "address, and does this machine have the cluster's auth token?)") from None
    return True


def check_answers(address: str) -> None:
    """Refuse within seconds an address where no Ray cluster answers (ray.init would wait a
    minute and then exit the process)."""
    import grpc

    if address != "auto" and not re.fullmatch(r"[^\s:/]+:\d+", address):
        raise PlacerError(f"--ray-address takes HOST:PORT (like 10.0.0.1:6379) or auto, not {address!r}")
    host_port = _resolve(address)
    where = address if host_port == address else f"{address} ({host_port})"
    host, _, port = host_port.rpartition(":")
    fix = "start one with `ray start --head` or fix --ray-address"
    try:   # a refused or unreachable port fails at once
        socket.create_connection((host, int(port)), timeout=ANSWER_TIMEOUT_S).close()
    except OSError as exc:
        raise PlacerError(f"no Ray cluster answers at {where} ({exc}); {fix}") from None
    channel = grpc.insecure_channel(host_port)   # something listens: is it Ray's control service?
    try:
        grpc.channel_ready_future(channel).result(timeout=ANSWER_TIMEOUT_S)
    except grpc.FutureTimeoutError:
        raise PlacerError(f"no Ray cluster answers at {where} within {ANSWER_TIMEOUT_S:.0f} s; {fix}") from None
    finally:
        channel.close()


def _resolve(address: str) -> str:
    """'auto' -> the HOST:PORT of the cluster this machine last started or joined."""
    if address != "auto":
        return address
    # Ray's own lookup (RAY_ADDRESS, then the file `ray start` leaves); a private helper, so
    # any failure of it is read as "no cluster".
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die

        return canonicalize_bootstrap_address_or_die("auto")
    except Exception as exc:  # noqa: BLE001 - ConnectionError, or the helper moved
        raise PlacerError(f"--ray-address auto finds no running Ray cluster on this machine ({exc}); "
                          "start one with `ray start --head` or give HOST:PORT") from None


def room(needs: WorkerNeeds) -> int:
    """How many workers with `needs` the alive nodes of the cluster hold at most."""
    ray = require_ray()
    total = 0
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        have = node.get("Resources", {})
        fits = [int(have.get("CPU", 0) // needs.cores)] if needs.cores else []
        fits += [int(have.get("GPU", 0) // needs.gpus)] if needs.gpus else []
        total += min(fits) if fits else 1_000_000
    return total

