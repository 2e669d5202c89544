"""What a finished run reports: its best placements measured again side by side, `placement.json`,
`greedy_placement.json`, `summary.json` and the result scalars in TensorBoard.

Training's own figures were taken at different times under different load, or by the simulator,
and the fastest of many noisy measurements is biased low; so with a `confirm` measurer the
fastest placements of each phase, the policy's greedy placement and every single device are
measured again side by side, in interleaved rounds (`placer.measure.rounds`), and those figures
decide the result and the speedup, with its paired interval and verdict (`placer.measure.intervals`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from placer.measure.intervals import Interval, format_interval, format_ratio, verdict_record, verdict_words
from placer.measure.measurement import Measurer, OpensPlacements, ReportsOnWorkers
from placer.measure.rounds import Candidate, RoundsProtocol, measure_in_rounds
from placer.placement import Placement
from placer.policy.checkpoint import save_summary
from placer.policy.summary_file import RunSummary
from placer.policy.phases import REAL, SIMULATED
from placer.policy.run_state import CONVERGED_ENTROPY, TrainState
from placer.policy.session import TrainingSession, describe_protocol


# How a run's closing rounds are measured: the seq2seq learner's and the graph policy's fine-tune's.
CLOSING_ROUNDS = RoundsProtocol(max_seconds=90.0)


def confirm_side_by_side(confirm: Measurer, session: TrainingSession,
                         rounds: RoundsProtocol = CLOSING_ROUNDS) -> dict[str, Any]:
    """Measure the fastest placements of training (of each phase), the greedy one and each single
    device again, side by side: in interleaved rounds when `confirm` runs placements for real (each
    figure then has its interval, and its paired ratio to the first single device), else one after
    the other."""
    state = session.state
    singles = {d: [i] * session.n_groups for i, d in enumerate(session.devices)}
    greedy = [{**state.greedy, "source": "policy greedy"}] if state.greedy and state.greedy["step_time"] else []
    phases = [(state.phase, greedy + state.top)] + ([(SIMULATED, state.simulated["top"])] if state.simulated else [])
    candidates, seen = [], list(singles.values())
    for phase, top in phases:
        for t in top:
            if t["group_devices"] in seen:
                continue
            seen.append(t["group_devices"])
            candidates.append({**t, "training_step_time": t["step_time"], "training_reward": phase})
    to_measure = {f"single:{d}": a for d, a in singles.items()}
    to_measure.update({f"candidate:{i}": c["group_devices"] for i, c in enumerate(candidates)})
    measured, ratio = measure_side_by_side(confirm, {name: session.expand(a) for name, a in to_measure.items()},
                                           rounds)
    single_measurements = {d: measured[f"single:{d}"] for d in singles}
    for i, c in enumerate(candidates):
        c["measurement"] = measured[f"candidate:{i}"]
        c["step_time"] = c["measurement"]["step_time"] if c["measurement"]["ok"] else None
        # its speedup over each single device: paired over the rounds both ran
        c["vs_single"] = {d: ratio(f"single:{d}", f"candidate:{i}") for d in singles}
    confirmed_greedy = None
    if state.greedy:
        same = [c["measurement"] for c in candidates if c["group_devices"] == state.greedy["group_devices"]]
        same += [single_measurements[d] for d, a in singles.items() if a == state.greedy["group_devices"]]
        confirmed_greedy = same[0] if same else None
    return {"candidates": candidates, "single_devices": single_measurements, "greedy": confirmed_greedy}


def measure_side_by_side(confirm: Measurer, placements: dict[str, Placement], rounds: RoundsProtocol):
    """name -> measurement (as a dict) of each placement, in interleaved rounds when `confirm`
    can open placements; and `ratio(a, b)`: a's time over b's, an `Interval` (paired over the
    rounds, else exact from the figures: a simulated confirmation), None where either failed."""
    if not isinstance(confirm, OpensPlacements):
        measured = {name: confirm.measure(p).to_dict() for name, p in placements.items()}
        return measured, partial(_exact_ratio, measured)
    record = confirm.run_record()
    result = measure_in_rounds([Candidate(name, partial(confirm.open, p), record) for name, p in placements.items()],
                               rounds, reference=next(iter(placements)))
    measured = {name: m.to_dict() for name, m in result.measurements.items()}
    return measured, lambda a, b: result.ratio(a, b) if measured[a]["ok"] and measured[b]["ok"] else None


def _exact_ratio(measured: dict[str, dict[str, Any]], a: str, b: str) -> Interval | None:
    ta, tb = _time_of(measured[a]), _time_of(measured[b])
    return Interval(ta / tb, ta / tb, ta / tb, 1) if ta and tb else None


def _time_of(m: dict[str, Any]) -> float | None:
    return m.get("step_time") if m.get("ok") else None


def write_outputs(session: TrainingSession, interrupted: bool,
                  confirmed: dict[str, Any] | None = None) -> tuple[Placement, RunSummary]:
    """placement.json (the best placement), greedy_placement.json and summary.json (the best
    against the single devices: the side-by-side figures of the confirmation when there is one,
    else those of training)."""
    graph, grouping, state, run_dir = session.graph, session.grouping, session.state, session.run_dir
    devices, n_groups, sources = session.devices, session.n_groups, session.sources
    singles = {d: _time_of(m) for d, m in state.single_device.items()}
    if confirmed is None:
        best = dict(state.best) if state.best else None
        single_measurements = state.single_device
    else:
        ran = [c for c in confirmed["candidates"] if c["step_time"] is not None]
        best = min(ran, key=lambda c: c["step_time"]) if ran else None
        single_measurements = confirmed["single_devices"]
    final_singles = {d: _time_of(m) for d, m in single_measurements.items()}
    ok = {d: t for d, t in final_singles.items() if t is not None}
    best_single = min(ok, key=ok.__getitem__) if ok else None
    if best_single is not None and (best is None or ok[best_single] <= best["step_time"]):
        # A single device is as fast as anything found: that is the answer, never something slower.
        d = devices.index(best_single)
        best = {"group_devices": [d] * n_groups, "measurement": single_measurements[best_single],
                "step_time": ok[best_single], "source": f"single device {best_single}"}
    if best is None:
        placement = Placement.single_device(list(graph.nodes), devices[0], graph.sha256, devices)
    else:
        placement = grouping.expand(best["group_devices"], devices, graph.sha256)
        placement.measurement = best["measurement"]
        placement.extra = {"source": best["source"], "objective": session.objective}
        placement.save(run_dir / "placement.json")
    if state.greedy is not None:
        greedy = grouping.expand(state.greedy["group_devices"], devices, graph.sha256)
        greedy.extra = {"source": "policy greedy", "samples": state.samples, "objective": session.objective}
        greedy.save(run_dir / "greedy_placement.json")
    best_time = best["step_time"] if best else None
    # a confirmed candidate's paired speedup over the best single device, judged (a single device: none)
    paired = (best or {}).get("vs_single", {}).get(best_single)
    reported_by = sources.confirm if confirmed is not None else sources.real
    sim = state.simulated if state.simulated else (
        {"samples": state.samples, "best": state.best, "single_device": state.single_device}
        if state.phase == SIMULATED else None)
    summary = RunSummary.from_dict({
        "graph": graph.source, "graph_sha256": graph.sha256, "devices": devices,
        "groups": n_groups, "grouping": grouping.method, "group_members": grouping.groups,
        # What the reported figures (best, single devices, speedup) were measured with.
        "measurer": {"kind": type(reported_by).__name__, "protocol": describe_protocol(reported_by)},
        "objective": session.objective,
        "reward": sources.plan.reward,
        "real_fraction": sources.plan.real_fraction if sources.plan.reward == "hybrid" else None,
        "simulator": {"kind": type(sources.simulated).__name__, "protocol": describe_protocol(sources.simulated)}
        if sources.simulated else None,
        "samples": state.samples, "updates": state.updates, "wall_time_s": state.wall_time_s,
        "samples_by_reward": {SIMULATED: state.phase_samples.get(SIMULATED, 0), REAL: state.phase_samples.get(REAL, 0)},
        "switched_to_real_at_sample": state.switched_at,
        "confirmed_side_by_side": confirmed is not None,
        "best_step_time": best_time, "best_source": best["source"] if best else None,
        "single_device_step_times": final_singles,
        "best_single_device": best_single,
        "best_single_device_step_time": ok.get(best_single) if best_single else None,
        "speedup_vs_best_single_device": ok[best_single] / best_time if best_single and best_time else None,
        "vs_best_single_device": speedup_record(paired) if paired is not None else None,
        # Training's own figures; "reward" says whether they were measured or simulated.
        "during_training": {"reward": state.phase,
                            "best_step_time": state.best["step_time"] if state.best else None,
                            "single_device_step_times": singles},
        "simulated_phase": {"samples": sim["samples"],
                            "simulated_best_step_time": sim["best"]["step_time"] if sim["best"] else None,
                            "simulated_single_device_step_times":
                                {d: _time_of(m) for d, m in sim["single_device"].items()}} if sim else None,
        "confirmed_candidates": [{"source": c["source"], "training_reward": c.get("training_reward", REAL),
                                  "training_step_time": c["training_step_time"], "step_time": c["step_time"]}
                                 for c in confirmed["candidates"]] if confirmed else None,
        "interrupted": interrupted,
        # A pool of measuring workers (`--workers`) says how many measurements it retried, which
        # workers it lost, and each worker's single-device figures.
        "workers": sources.real.report() if isinstance(sources.real, ReportsOnWorkers) else None,
        **_learning_figures(state, n_groups, confirmed, ok.get(best_single) if best_single else None),
        "learning_curve": [{k: h.get(k, REAL) if k == "phase" else h[k]
                            for k in ("samples", "phase", "best_step_time", "sampled_step_time")}
                           for h in state.history],
    }, learner="seq2seq")
    save_summary(run_dir, summary)
    return placement, summary


def speedup_record(speedup: Interval) -> dict[str, Any]:
    """A speedup as summary.json keeps it: its interval and its verdict (`verdict_record`)."""
    return {"speedup": speedup.to_dict(), **verdict_record(speedup)}


def speedup_text(summary: dict[str, Any]) -> str | None:
    """'speedup over the best single device (cpu:0): 1.32x [1.28, 1.35], faster', with the paired
    interval and verdict of the side-by-side confirmation when there is one."""
    if not summary.get("speedup_vs_best_single_device"):
        return None
    judged = summary.get("vs_best_single_device")
    figure = judged_text(judged) if judged else format_ratio(summary["speedup_vs_best_single_device"])
    return f"speedup over the best single device ({summary['best_single_device']}): {figure}"


def judged_text(judged: dict[str, Any]) -> str:
    """A `speedup_record` as a user reads it: '1.32x [1.28, 1.35], faster'."""
    return f"{format_interval(judged['speedup'])}, {verdict_words(Interval.from_dict(judged['speedup']))}"


def _learning_figures(state: TrainState, n_groups: int, confirmed: dict[str, Any] | None,
                      best_single_time: float | None) -> dict[str, Any]:
    """What says whether the policy learned: its own greedy placement (confirmed side by side when
    there was a confirmation), the best sample, the mean of the last 10% of samples, the entropy."""
    history = [h for h in state.history if h.get("phase", REAL) == state.phase]
    tail = history[len(history) - max(1, len(history) // 10):] if history else []
    sampled = [h["sampled_step_time"] for h in tail if h["sampled_step_time"] is not None]
    entropy = state.history[-1].get("entropy_per_group") if state.history else None
    greedy = None
    if state.greedy is not None:
        m = confirmed["greedy"] if confirmed and confirmed.get("greedy") else state.greedy["measurement"]
        step = m.get("step_time") if m.get("ok") else None
        greedy = {"step_time": step, "confirmed_side_by_side": bool(confirmed and confirmed.get("greedy")),
                  "training_step_time": state.greedy["step_time"], "training_reward": state.greedy["phase"],
                  "speedup_vs_best_single_device": best_single_time / step if step and best_single_time else None}
    return {"greedy": greedy,
            "best_sample_step_time": state.best["step_time"] if state.best else None,
            "mean_sampled_step_time_last_10pct": float(np.mean(sampled)) if sampled else None,
            "entropy_per_group": entropy,
            "converged": entropy is not None and entropy <= CONVERGED_ENTROPY,
            "stopped_early": state.stopped,
            "warm_start": state.warm_start}


def log_result(run_dir: Path, summary: RunSummary) -> None:
    """The run's reported figures (real ones when confirmed) as TensorBoard scalars at the last step."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(run_dir)) as writer:
        step = summary["samples"]
        prefix = "result" if summary["confirmed_side_by_side"] else "result_unconfirmed"
        if summary["best_step_time"] is not None:
            writer.add_scalar(f"{prefix}/best_step_time", summary["best_step_time"], step)
        if summary["best_single_device_step_time"] is not None:
            writer.add_scalar(f"{prefix}/best_single_device_step_time", summary["best_single_device_step_time"], step)
        if summary["speedup_vs_best_single_device"] is not None:
            writer.add_scalar(f"{prefix}/speedup_vs_best_single_device", summary["speedup_vs_best_single_device"], step)
        greedy = summary["greedy"]
        if greedy and greedy["step_time"] is not None:
            writer.add_scalar(f"{prefix}/greedy_step_time", greedy["step_time"], step)
        workers = summary["workers"]
        if workers:
            writer.add_scalar("workers/retried", workers["retried"], step)
            writer.add_scalar("workers/lost", len(workers["lost"]), step)
            writer.add_text("workers/lost", "; ".join(f"{r['worker']}: {r['reason']}" for r in workers["lost"])
                            or "none", step)
