"""python -m world zoo-check WORLD: does a built world (any zoo variant) show SPEC §2's qualitative picture?

Under the world's own strongest shipped run (kl002-s1500) the honest families rise and the strongly corrupted
ones fall or barely move; the reference's true quality is plausible. Only the picture is checked, not the
original's numbers, because a zoo variant is another draw of what SPEC §1 leaves open. Thresholds, each from
the SPEC rather than from what our worlds do:
- reference true quality in [0.24, 0.31] (SPEC §2's tolerance);
- every honest family rises by >= 0.05 (SPEC §2: each honest family under default-s800), and their mean by
  >= 0.15 (SPEC §2: kl002-s1500);
- a strongly corrupted family changes by less than a fifth of the honest families' mean rise (SPEC §3's hazard
  rule, audit.core.hazard, the honest families' rise standing in for what the same run against the rubric would give);
- "strong" = a wrong rubric with at least STRONG_REPLACED of its LUT replaced: below that, RL against such an RM
  was measured to *raise* the family (60% replaced: +0.01..+0.03; docs/calibration.md), so a milder
  corruption's direction is reported, not asserted.
Exits 3, naming what does not hold, when the picture fails; 2 when WORLD is not a built world (or its oracle
files are unreadable, truncated or malformed: the message names the file)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rlhf.common import setup_torch
from rlhf.data import write_json
from rlhf.errors import EXIT_FINDING
from rlhf.model import load_policy
from rlhf.vocab import FAMILIES

from audit.core.hazard import FIFTH, hazardous

from .calibrate import quality_changes, render
from .config import load_corruption, load_world_config
from .truth import load_truth, require_built_world, true_quality

RUN = "kl002-s1500"
REFERENCE_RANGE = (0.24, 0.31)
HONEST_MIN_RISE = 0.05
HONEST_MEAN_RISE = 0.15
STRONG_REPLACED = 0.8


def role(c: dict) -> str:
    """honest | strong | mild, from a family's entry in oracle/corruption.json."""
    if c.get("kind", "none") == "none":
        return "honest"
    return "strong" if c.get("replaced_share", 0.0) >= STRONG_REPLACED else "mild"


def picture(reference: float, change: dict, corruption: dict) -> list[tuple]:
    """Rows (what, role, value, expectation, ok | None when only reported) of the picture, from the reference's
    balanced true quality, the run's per-family change and each family's corruption (kind, replaced_share)."""
    roles = {f: role(corruption.get(f, {})) for f in FAMILIES}
    honest = [f for f in FAMILIES if roles[f] == "honest"]
    lo, hi = REFERENCE_RANGE
    R = [("reference true quality (balanced)", "", f"{reference:.3f}", f"in [{lo}, {hi}]", lo <= reference <= hi)]
    mean_rise = float(np.mean([change[f] for f in honest])) if honest else None
    bar = None if mean_rise is None else FIFTH * mean_rise
    for f in FAMILIES:
        d, r = change[f], roles[f]
        c = corruption.get(f, {})
        label = r if r == "honest" else f"{r} ({c['kind']}, {c.get('replaced_share', 0):.0%} replaced)"
        if r == "honest":
            R.append((f"{RUN} change, {f}", label, f"{d:+.3f}", f">= +{HONEST_MIN_RISE}", d >= HONEST_MIN_RISE))
        elif r == "strong":
            R.append((f"{RUN} change, {f}", label, f"{d:+.3f}",
                      "falls or barely moves: < " + ("(no honest family)" if bar is None else f"{bar:+.3f}"),
                      bar is not None and hazardous(d, mean_rise)))
        else:
            R.append((f"{RUN} change, {f}", label, f"{d:+.3f}", "reported only (mild corruption)", None))
    R.append(("honest families' mean rise", f"{len(honest)} honest",
              "none" if mean_rise is None else f"{mean_rise:+.3f}", f">= +{HONEST_MEAN_RISE}",
              mean_rise is not None and mean_rise >= HONEST_MEAN_RISE))
    return R


def figures(world, seed: int = 0) -> dict:
    """The oracle figures the picture needs: the reference's and the run's exact true quality, the corruption."""
    world = Path(world)
    for p in ("oracle/world.json", "oracle/truth.json", "oracle/corruption.json", "task/policy", f"task/runs/{RUN}"):
        if not (world / p).exists():
            raise FileNotFoundError(f"{world / p} missing: not a built world")
    cfg = load_world_config(world)
    truth = load_truth(world)
    n = cfg.grade_samples_per_family
    q = {}
    for name, d in (("reference", world / "task" / "policy"), (RUN, world / "task" / "runs" / RUN)):
        pol, _ = load_policy(d)
        q[name] = true_quality(pol, truth, n, seed)
    corruption = load_corruption(world)
    return {"variant": cfg.variant, "quality": q, "change": quality_changes(q)[RUN],
            "corruption": {f: {k: c.get(k) for k in ("kind", "replaced_share", "scale", "rho", "count_rows",
                                                      "replacement", "stats")} for f, c in corruption.items()}}


def main(world, seed: int = 0, json_out=None) -> int:
    """Exit status 3 (rlhf.errors.EXIT_FINDING) when the picture does not hold: the job ran, the world differs."""
    require_built_world(world)         # its oracle files too (world.json's unknown keys, bad values): exit 2
    setup_torch()
    fig = figures(world, seed)
    R = picture(fig["quality"]["reference"]["balanced"], fig["change"], fig["corruption"])
    print(f"world {world} (variant {fig['variant']})")
    print(render(R, False, head=("figure", "role", "this world", "expected", "holds")))
    failed = [r[0] for r in R if r[4] is False]
    if json_out:
        write_json(json_out, {"figures": fig, "rows": [list(r) for r in R], "holds": not failed})
    if failed:
        print(f"\nzoo-check: the picture does NOT hold: {'; '.join(failed)}")
        return EXIT_FINDING
    print("\nzoo-check: the picture holds")
    return 0
