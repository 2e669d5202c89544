"""TensorBoard helpers: the hyperparameter table a run starts with, and the picture of a placement."""

from __future__ import annotations

from typing import Any

import numpy as np

# One colour per device (RGB), cycled when there are more devices.
_PALETTE = np.array([[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40],
                     [148, 103, 189], [140, 86, 75], [227, 119, 194], [127, 127, 127]], dtype=np.uint8)


def hparams_table(values: dict[str, Any]) -> str:
    """A markdown table of name | value, as CleanRL writes its arguments."""
    rows = "\n".join(f"|{k}|{v}|" for k, v in values.items())
    return f"|param|value|\n|-|-|\n{rows}"


def placement_image(node_devices: list[int], n_devices: int, row_height: int = 24, min_width: int = 600) -> np.ndarray:
    """An HWC uint8 picture of a placement: one row per device, one column per op in topological
    order, coloured where the op runs on that device (white elsewhere)."""
    n = max(1, len(node_devices))
    scale = max(1, -(-min_width // n))
    image = np.full((n_devices * row_height, n * scale, 3), 255, dtype=np.uint8)
    for i, d in enumerate(node_devices):
        image[d * row_height:(d + 1) * row_height - 2, i * scale:(i + 1) * scale] = _PALETTE[d % len(_PALETTE)]
    return image


def log_update(writer: Any, state: Any, stats: Any, cache_hit_rate: float, hybrid: bool) -> None:
    """One update's figures, at the run's sample count: `charts/...` for what the user watches
    (`charts/simulated_...` while the reward is simulated), `losses/...` for what the engineer debugs."""
    h, step = state.history[-1], state.samples
    prefix = "charts/simulated_" if h["phase"] == "simulated" else "charts/"
    charts = {"reward_mean": h["reward_mean"], "reward_max": h["reward_max"],
              "step_time_sampled": h["sampled_step_time"], "best_step_time": h["best_step_time"],
              "greedy_step_time": h["greedy_step_time"], "failure_rate": h["failure_rate"],
              "cache_hit_rate": cache_hit_rate}
    for name, value in charts.items():
        if value is not None:
            writer.add_scalar(prefix + name, value, step)
    writer.add_scalar("charts/learning_rate", stats.lr, step)
    if hybrid:
        writer.add_scalar("charts/measured_for_real", float(h["phase"] == "real"), step)
    losses = {"policy_loss": stats.policy_loss, "entropy": stats.entropy, "entropy_per_group": h["entropy_per_group"],
              "imitation": stats.imitation_loss, "baseline": stats.baseline, "grad_norm": stats.grad_norm}
    for name, value in losses.items():
        writer.add_scalar("losses/" + name, value, step)
