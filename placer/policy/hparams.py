"""The learner's hyperparameters: every one a documented option with the published default.

Defaults follow the hierarchical placer's published code (TensorFlow grappler,
`hierarchical_controller_hparams`: hidden 512, bidirectional encoder, forget bias 1.0,
temperature 1.0, tanh constant 1.0, Adam lr 0.1 decayed x0.95 every 50 updates from update 400,
gradient bound 1.0, baseline decay 0.9, failures counted as 100 s). The entropy weight and the
number of samples per update are ours: the published code had no entropy term and one sample
per controller, with several controllers in parallel.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


def _opt(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class Hyperparameters:
    """What shapes learning; written to TensorBoard as a table when a run starts."""

    hidden_size: int = _opt(512, "LSTM hidden units of the encoder (each direction) and decoder")
    temperature: float = _opt(1.0, "softmax temperature of the decoder's logits")
    tanh_constant: float = _opt(1.0, "logits squashed to tanh_constant * tanh(logits); 0 turns it off")
    forget_bias: float = _opt(1.0, "initial forget-gate bias of the LSTMs")
    lr: float = _opt(0.01, "Adam learning rate")
    lr_decay: float = _opt(0.95, "learning rate factor applied every lr_decay_every updates")
    lr_decay_every: int = _opt(50, "updates between learning-rate decays")
    lr_decay_start: int = _opt(400, "update at which the learning rate starts decaying")
    grad_clip: float = _opt(1.0, "gradient norm bound")
    baseline_decay: float = _opt(0.9, "decay of the moving-average reward baseline")
    entropy_coef: float = _opt(0.01, "weight of the entropy bonus in the loss")
    samples_per_update: int = _opt(4, "placements sampled and measured per policy update")
    failure_time: float = _opt(100.0, "step time (s) a failed placement is rewarded as")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def help(cls) -> dict[str, str]:
        """Option name -> its help text."""
        return {f.name: f.metadata["help"] for f in fields(cls)}
