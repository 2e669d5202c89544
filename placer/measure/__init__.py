"""Measuring only: `Measurement` and the `Measurer` protocols, the real measurer over any engine,
interleaved rounds, intervals and verdicts, paired real rewards."""
