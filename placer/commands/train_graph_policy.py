"""`placer train --policy pretrained|POLICY.pt`: the figures of the graph policy's fine-tune
(`placer.jobs.train`)."""

from __future__ import annotations


def print_figures(outcome) -> int:
    """The fine-tune's closing figures (`placer.policy.gnn.figures`). The exit code: 1 when nothing ran."""
    from placer.policy.gnn.figures import figure_lines

    s, run_dir = outcome.summary, outcome.run_dir
    print("\n".join(figure_lines(s, outcome.interrupted, outcome.figures)))
    if s["best_step_time"] is None:
        print(f"no placement ran on the devices; see {run_dir / 'summary.json'}")
        return 1
    print(f"placement: {run_dir / 'placement.json'}   curves: tensorboard --logdir {run_dir.parent}")
    return 0
