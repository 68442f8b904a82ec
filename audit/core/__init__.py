"""The audit's core, shared by both front doors and importing neither: the generic statistics (stats, ppi, bounded,
release, hazard, seeded_draws), the evidence format (evidence), the pieces every report is rendered with (report),
the run of a door's claims in a pytest child followed by its report (claims_runner), and the comparison of two
answers (compare). Nothing here loads torch or knows this project's tokens and checkpoints."""
