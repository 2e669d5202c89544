"""`placer train --policy pretrained|POLICY.pt`: the figures of the graph policy's fine-tune
(`placer.jobs.train`)."""

from __future__ import annotations


def print_figures(outcome) -> int:
    """The fine-tune's closing figures, each labelled as what it is (simulated or measured);
    measured again side by side when the closing rounds ran. The exit code: 1 when nothing ran."""
    s, run_dir = outcome.summary, outcome.run_dir
    if s.get("confirmed_side_by_side"):
        _print_side_by_side(s)
    else:
        _print_training_figures(outcome, outcome.figures)
    if s["best_step_time"] is None:
        print(f"no placement ran on the devices; see {run_dir / 'summary.json'}")
        return 1
    print(f"placement: {run_dir / 'placement.json'}   curves: tensorboard --logdir {run_dir.parent}")
    return 0


def _print_side_by_side(s: dict) -> None:
    """The closing rounds' figures: each placement's time with its interval and its speedup over the
    best single device, then the verdicts of the one written."""
    from placer.policy.gnn.closing import ms_with_interval
    from placer.policy.run_summary import judged_text, speedup_text

    side, trained = s["side_by_side"], s["during_training"]
    if trained["best_step_time"] is not None:
        print(f"  during training: best placement found {trained['best_step_time'] * 1e3:.3f} ms measured once "
              f"({trained['best_source']}; {s['samples']} samples measured, {s.wall_time_s:.0f} s)")
    how = f"{side['rounds']} interleaved rounds, 95% intervals" if side["rounds"] else "one after the other"
    print(f"measured again side by side at the end ({how}" + (f", stopped at the {side['capped']} cap" if side["capped"]
                                                             else "") + "; speedups over the best single device):")
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
        print(f"  {row['label']:<32} {figure}")
    print(side["note"] or f"placement.json: the {rows[side['fastest']]['label']}, the fastest in the closing rounds")
    if s["vs_best_single_device"]:
        print(speedup_text(s))
    if s["vs_best_heuristic"]:
        print(f"against the best list heuristic ({s['best_heuristic']}): {judged_text(s['vs_best_heuristic'])}")


def _print_training_figures(result, word: str) -> None:
    s = result.summary
    print(f"  zero-shot placement      {_ms(s['zero_shot_step_time'], word)}")
    if not result.interrupted:
        print(f"  fine-tuned (greedy)      {_ms(s['greedy_step_time'], word)}")
    print(f"  best placement found     {_ms(s['best_step_time'], word)} ({s['best_source']}, {s['samples']} samples "
          f"{word}, {s.wall_time_s:.0f} s)")
    if s["best_heuristic_step_time"] and s["best_step_time"]:
        print(f"  best list heuristic      {_ms(s['best_heuristic_step_time'], word)} ({s['best_heuristic']}): the "
              f"placement is {s['best_heuristic_step_time'] / s['best_step_time']:.3f}x as fast")


def _ms(seconds: float | None, word: str) -> str:
    return f"{seconds * 1e3:10.3f} ms {word}" if seconds is not None else f"    failed ({word})"
