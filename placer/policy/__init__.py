"""The seq2seq placement policy, its REINFORCE training, checkpoints and TensorBoard logging."""
