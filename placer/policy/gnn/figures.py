"""The graph policy's fine-tune, as the lines `placer train --policy pretrained` ends with: each
figure labelled as what it is (simulated or measured), measured again side by side when the
closing rounds ran."""

from __future__ import annotations

from placer.policy.gnn.closing import ms_with_interval
from placer.policy.summary_file import RunSummary


def figure_lines(s: RunSummary, interrupted: bool, word: str) -> list[str]:
    """The closing figures of the fine-tune whose summary is `s` (`word`: simulated or measured)."""
    if s.get("confirmed_side_by_side"):
        return _side_by_side_lines(s)
    return _training_lines(s, interrupted, word)


def _side_by_side_lines(s: RunSummary) -> list[str]:
    """The closing rounds' figures: each placement's time with its interval and its speedup over the
    best single device, then the verdicts of the one written."""
    from placer.policy.run_summary import judged_text, speedup_text

    side, trained, lines = s["side_by_side"], s["during_training"], []
    if trained["best_step_time"] is not None:
        lines.append(f"  during training: best placement found {trained['best_step_time'] * 1e3:.3f} ms measured "
                     f"once ({trained['best_source']}; {s.samples} samples measured, {s.wall_time_s:.0f} s)")
    how = f"{side['rounds']} interleaved rounds, 95% intervals" if side["rounds"] else "one after the other"
    capped = f", stopped at the {side['capped']} cap" if side["capped"] else ""
    lines.append(f"measured again side by side at the end ({how}{capped}; speedups over the best single device):")
    rows = side["placements"]
    for name, row in rows.items():
        if row["same_as"]:
            figure = f"the same placement as the {rows[row['same_as']]['label']}"
        elif row["step_time"] is None:
            figure = f"failed ({row['failure']})"
        else:
            judged = row["vs_best_single_device"]
            figure = ms_with_interval(row) + (f"   {judged_text(judged)}" if judged
                                              else "   the best single device" if name == side["best_single_device"]
                                              else "")
        lines.append(f"  {row['label']:<32} {figure}")
    lines.append(side["note"] or
                 f"placement.json: the {rows[side['fastest']]['label']}, the fastest in the closing rounds")
    if s["vs_best_single_device"]:
        lines.append(speedup_text(s))
    if s["vs_best_heuristic"]:
        lines.append(f"against the best list heuristic ({s['best_heuristic']}): "
                     f"{judged_text(s['vs_best_heuristic'])}")
    return lines


def _training_lines(s: RunSummary, interrupted: bool, word: str) -> list[str]:
    """Training's own figures, where no closing rounds measured them again."""
    lines = [f"  zero-shot placement      {_ms(s['zero_shot_step_time'], word)}"]
    if not interrupted:
        lines.append(f"  fine-tuned (greedy)      {_ms(s['greedy_step_time'], word)}")
    lines.append(f"  best placement found     {_ms(s.best_step_time, word)} ({s.best_source}, {s.samples} samples "
                 f"{word}, {s.wall_time_s:.0f} s)")
    if s["best_heuristic_step_time"] and s.best_step_time:
        lines.append(f"  best list heuristic      {_ms(s['best_heuristic_step_time'], word)} ({s['best_heuristic']}): "
                     f"the placement is {s['best_heuristic_step_time'] / s.best_step_time:.3f}x as fast")
    return lines


def _ms(seconds: float | None, word: str) -> str:
    return f"{seconds * 1e3:10.3f} ms {word}" if seconds is not None else f"    failed ({word})"
