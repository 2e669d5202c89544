"""How a run's sample count is split between its phases: one rule, written once.

A run given N samples spends them in phases: on a described cluster local search's own run first,
then the learner (REINFORCE, or the graph policy's fine-tune), then the polish (local search's
moves from the learned placement, in the simulator). The polish takes a share `polish` of what the
phases before it leave; the learner gets the rest, rounded in its favour.
"""

from __future__ import annotations

from placer.errors import PlacerError


def learner_share(left: int, polish: float) -> int:
    """Of the `left` samples, those the learner gets before the polish takes its share `polish`."""
    return left - int(left * polish)


# The polish's share by default, per learner. The seq2seq learner on a cluster: half of what local
# search leaves. The graph policy: on one graph a few hundred REINFORCE samples barely move it, and
# local search's moves from its placement pay more (the 14 held-out problems of
# benchmarks/generalisation.py at 500 samples, mean over local search at 500 with 64 moves per batch:
# 0.5 1.013, 0.75 1.005, 0.9 1.001; a quarter is kept for learning).
SEQ2SEQ_POLISH = 0.5
GRAPH_POLICY_POLISH = 0.75


def polish_share(polish: float | None, samples: int | None, simulated: bool, default: float) -> float:
    """The polish's share of the samples: `polish` as given, else `default` where every figure is
    `simulated` and there is a sample count, else none; refused in one line where it cannot run
    (a simulated polish cannot claim measured figures, and a share needs a count)."""
    share = polish if polish is not None else (default if simulated and samples else 0.0)
    if not 0.0 <= share < 1.0:
        raise PlacerError(f"--polish must be a share of the samples in [0, 1), not {share}")
    if share and not simulated:
        raise PlacerError("--polish moves in the simulator, so every figure must be simulated (--cluster, and "
                          "--reward simulated with --policy pretrained); drop --polish")
    if share and not samples:
        raise PlacerError("--polish spends a share of a sample count: add --samples N, or --polish 0")
    return share
