"""audit: certify an RLHF run against a possibly corrupted reward model (SPEC §3).

Two front doors on one core:
  audit/core/     generic statistics, evidence, report pieces, the claims runner, compare; imports neither door
  audit/task/     the checkpoint door: a task directory of this project's token world (python -m audit.certify)
  audit/samples/  the samples door: logged samples of any trainer plus a gold subset (python -m audit.samples)
The modules at this root are the commands' names (python -m audit.certify, .render, .compare, .diagnostic,
.bench_stress); each hands over to the door that does the work. Their claims run under pytest from checks/task/
and checks/samples/. Nothing here imports world/ or reads a world's oracle (tests/test_layout.py)."""
import rlhf  # noqa: F401,E402  (fixes the math libraries' run-to-run behaviour before anything computes)
