"""A fine-tune's closing rounds: with measured rewards, its placements measured again side by side.

Training measures each placement once, in its own batch, and keeps the fastest figure: of many
noisy figures, the luckiest, so biased low. So, as the seq2seq learner's run ends
(`placer.policy.run_summary`), the placement training picked, the policy's own (greedy) one, the
zero-shot one, the best list heuristic's and every single device are measured again together, in
interleaved rounds (`measure_side_by_side`, `CLOSING_ROUNDS`). Those figures, with their intervals
and paired verdicts (`placer.measure.intervals`), are the run's result, and the fastest of them
is the placement written.
"""

from __future__ import annotations

from typing import Any

from placer.measure.intervals import speedup_words
from placer.measure.measurement import Measurer
from placer.placement import Placement
from placer.policy.gnn.episode import Episode
from placer.policy.run_summary import CLOSING_ROUNDS, measure_side_by_side, speedup_record

PICKED, HEURISTIC, SINGLE = "best_found", "heuristic", "single:"


def closing_placements(episode: Episode, best: Placement, best_source: str, greedy: Placement,
                       zero_shot: Placement | None) -> dict[str, tuple[str, str, Placement | None]]:
    """name -> (label, source, placement) of what the closing rounds measure; training's pick
    first, so that it keeps an exact tie."""
    graph, names = episode.graph, episode.cluster.device_names
    heuristic = f"best list heuristic ({episode.best_name})"
    return {PICKED: ("best placement found", best_source, best),
            "greedy": ("fine-tuned (greedy)", "greedy", greedy),
            "zero_shot": ("zero-shot placement", "zero-shot", zero_shot),
            HEURISTIC: (heuristic, heuristic, episode.heuristic_placement()),
            **{SINGLE + d: (f"single device {d}", f"single device {d}",
                            Placement.single_device(list(graph.nodes), d, graph.sha256, names)) for d in names}}


def measure_closing(measurer: Measurer, placements: dict[str, tuple[str, str, Placement | None]],
                    picked_training_time: float) -> dict[str, Any]:
    """Measure `placements` (`closing_placements`) side by side, each distinct one once; what
    summary.json keeps of it: each one's figure with its interval and its speedup over the best
    single device, which is fastest, its verdicts against the best single device and the best list
    heuristic, and why, when it is not training's pick (which measured `picked_training_time`)."""
    distinct: dict[str, Placement] = {}
    same_as: dict[str, str] = {}
    for name, (_, _, placement) in placements.items():
        if placement is not None:
            twin = next((n for n, p in distinct.items() if p.nodes == placement.nodes), None)
            distinct.setdefault(twin or name, placement)
            same_as[name] = twin or name
    measured, ratio = measure_side_by_side(measurer, distinct, CLOSING_ROUNDS)

    def time_of(name: str) -> float | None:
        m = measured[same_as[name]]
        return m["step_time"] if m["ok"] else None

    ran = [n for n in same_as if time_of(n) is not None]
    singles = [n for n in ran if n.startswith(SINGLE)]
    best_single = min(singles, key=time_of, default=None)
    fastest = min(ran, key=time_of, default=None)

    def speedup(of: str | None, over: str | None) -> dict[str, Any] | None:
        """`of`'s speedup over `over`, paired over the rounds both ran, with its verdict."""
        if of is None or over is None or same_as[of] == same_as[over]:
            return None
        paired = ratio(same_as[over], same_as[of])
        return speedup_record(paired) if paired is not None else None

    rows = {name: {"label": label, "source": source, "step_time": time_of(name),
                   "interval": measured[same_as[name]]["interval"], "failure": measured[same_as[name]]["failure"],
                   "same_as": same_as[name] if same_as[name] != name else None,
                   "vs_best_single_device": speedup(name, best_single)}
            for name, (label, source, _) in placements.items() if name in same_as}
    protocol = next((m["protocol"] for m in measured.values() if m["ok"]), {})
    return {"protocol": protocol.get("rounds"), "rounds": protocol.get("rounds_run"), "capped": protocol.get("capped"),
            "placements": rows, "fastest": fastest, "best_single_device": best_single,
            "vs_best_single_device": speedup(fastest, best_single),
            "vs_best_heuristic": speedup(fastest, HEURISTIC if HEURISTIC in same_as else None),
            "note": _why_not_picked(rows, fastest, picked_training_time, ratio, same_as)}


def _why_not_picked(rows: dict[str, dict[str, Any]], fastest: str | None, picked_training_time: float, ratio,
                    same_as: dict[str, str]) -> str | None:
    """One line saying which placement is written and why, when it is not training's pick."""
    if fastest is None or same_as[fastest] == same_as[PICKED]:
        return None
    written, picked = rows[fastest], rows[PICKED]
    here = "failed here" if picked["step_time"] is None else \
        f"measured {ms_with_interval(picked)} here; against it the one written is " \
        f"{speedup_words(ratio(same_as[fastest], same_as[PICKED]))}"
    return (f"placement.json: {written['label']}, the fastest in the closing rounds ({ms_with_interval(written)}). "
            f"Not the best placement training found ({picked['source']}, {picked_training_time * 1e3:.3f} ms in "
            f"training: the fastest of many noisy figures, each measured once in its batch), which {here}")


def fastest_placement(placements: dict[str, tuple[str, str, Placement | None]], closing: dict[str, Any]) -> Placement:
    """The placement that measured fastest in the closing rounds, its figure and source in its extra."""
    name = closing["fastest"]
    row, placement = closing["placements"][name], placements[name][2]
    of_policy = name != HEURISTIC and not name.startswith(SINGLE)
    placement.extra.setdefault("placer", {}).update(
        measured_step_time=row["step_time"], measured_side_by_side=True,
        source=f"graph policy, fine-tuned ({row['source']})" if of_policy else row["source"])
    return placement


def ms_with_interval(row: dict[str, Any]) -> str:
    """A closing row's figure: '2.950 ms [2.912, 2.991]' ('2.950 ms' without an interval)."""
    i = row["interval"]
    bounds = f" [{i['low'] * 1e3:.3f}, {i['high'] * 1e3:.3f}]" if i and i["n"] >= 2 else ""
    return f"{row['step_time'] * 1e3:.3f} ms{bounds}"


def closing_figures(closing: dict[str, Any]) -> dict[str, Any]:
    """summary.json's figures from closing rounds where a placement ran (training's own go under
    "during_training")."""
    rows, fastest, single = closing["placements"], closing["fastest"], closing["best_single_device"]

    def time_of(name: str) -> float | None:
        return rows[name]["step_time"] if name in rows else None

    best, single_time = time_of(fastest), time_of(single) if single else None
    return {"confirmed_side_by_side": True, "best_step_time": best, "best_source": rows[fastest]["source"],
            "zero_shot_step_time": time_of("zero_shot"), "greedy_step_time": time_of("greedy"),
            "best_heuristic_step_time": time_of(HEURISTIC),
            "single_device_step_times": {n[len(SINGLE):]: r["step_time"] for n, r in rows.items()
                                         if n.startswith(SINGLE)},
            "best_single_device": single[len(SINGLE):] if single else None,
            "best_single_device_step_time": single_time,
            "speedup_vs_best_single_device": single_time / best if best and single_time else None,
            "vs_best_single_device": closing["vs_best_single_device"],
            "vs_best_heuristic": closing["vs_best_heuristic"],
            "side_by_side": closing}
