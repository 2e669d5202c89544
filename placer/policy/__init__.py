"""The seq2seq placement policy, its REINFORCE training, checkpoints and TensorBoard logging."""

from placer.policy.hparams import Hyperparameters
from placer.policy.seq2seq import Seq2SeqPolicy

__all__ = ["Hyperparameters", "Seq2SeqPolicy"]
