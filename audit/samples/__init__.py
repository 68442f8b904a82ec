"""The samples door (python -m audit.samples): certifies runs of any trainer from their logged samples and a gold
subset (docs/samples.md). Generic: no torch, no tokens or checkpoints of this project. Imports audit.core, never
audit.task."""
