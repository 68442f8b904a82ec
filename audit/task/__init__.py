"""The checkpoint door (python -m audit.certify): audits a task directory -- the reward model, its crowd labels,
the gold set, the reference policy and the shipped runs of this project's token world (docs/task-format.md) --
recovers the expert rubric, estimates every policy's true quality, runs the gold-free diagnostic and its stress
test, trains and ships the audit's own policy, and renders answer.json. Imports audit.core, never audit.samples."""
