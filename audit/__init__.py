"""audit: certify an RLHF run against a possibly corrupted reward model (SPEC §3)."""
