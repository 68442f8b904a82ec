"""The claims a task audit's answer.json is made of (audit/task/render.py's contract), by name: what the renderer
and its figures look up in the evidence, and the claims that mark the other door's evidence."""

SHIPPED = "shipped.improves_over_reference"
RUN = "run.passes_release_rule"
RM = "rm.agrees_with_experts"
CROWD = "crowd.on_rubric_scale"
DIAG = "diagnostic.flags_families"
OWN = "own.passes_release_rule"
STRESS = "diagnostic.flags_synthetic_corruption"
# what answer.json is made of (the contract above): evidence without one of these is not a task audit's evidence
NEEDED = {SHIPPED: "checkpoint_dir, recipe, dev_eval, certification", RM: "reward_model", CROWD: "reward_model",
          DIAG: "diagnostic"}
# claims only the samples door records (checks/samples/): its evidence renders with audit.samples.render
SAMPLES_DOOR = ("proxy.agrees_with_gold", "proxy.on_common_scale", "gold.random_subset", "proxy.corruption_detection")
# the console and summary.md tell the audit's own health apart from its findings about the task (audit/core/claims_runner)
ROLES = {SHIPPED: "decision", OWN: "decision", "task.well_formed": "health", "rubric.predicts_heldout_gold": "health",
         DIAG: "health", STRESS: "health"}     # DIAG: the diagnostic's flags validated against the gold set
