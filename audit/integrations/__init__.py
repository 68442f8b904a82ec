"""Logging a run's samples for `python -m audit.samples` from the trainer that makes them: `writer.SamplesWriter`
(plain Python, any loop) and `trl.SamplesCallback` (a transformers/TRL TrainerCallback; needs
`pip install rlhf-audit[trl]`). Nothing here is imported by the audit itself."""
