"""audit: certify an RLHF run against a possibly corrupted reward model (SPEC §3)."""
import rlhf  # noqa: F401,E402  (fixes the math libraries' run-to-run behaviour before anything computes)
