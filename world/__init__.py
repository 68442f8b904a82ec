"""world: builds synthetic task worlds (a task dir + its oracle) that replay the original RLHF task of SPEC §1-§2,
and grades submissions against the oracle. Only world/ and the tests of the replay may read an oracle."""
import rlhf  # noqa: F401,E402  (fixes the math libraries' run-to-run behaviour before anything computes)
