"""python -m world build|calibrate|grade ... (see each sub-command's --help)."""
from __future__ import annotations

import argparse
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m world", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build a world: DIR/task and DIR/oracle")
    b.add_argument("--out", required=True)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--preset", default="canonical", choices=["canonical", "tiny"])
    b.add_argument("--workers", type=int, default=None, help="processes for the shipped runs (default 2)")
    b.add_argument("--quiet", action="store_true")
    c = sub.add_parser("calibrate", help="SPEC §2 figures of a built world, side by side with the original")
    c.add_argument("world")
    c.add_argument("--seed", type=int, default=0, help="seed of the Monte Carlo true-quality estimates")
    c.add_argument("--markdown", action="store_true", help="print the table as markdown")
    c.add_argument("--json", default=None, help="also write the figures as JSON here")
    g = sub.add_parser("grade", help="judge a certification output against the oracle")
    g.add_argument("--world", required=True)
    g.add_argument("--submission", required=True)
    g.add_argument("--seed", type=int, default=12345, help="grade seed (fresh prompts, diagnosis batches)")
    g.add_argument("--diagnosis", choices=["full", "quick", "skip"], default="full")
    g.add_argument("--out", default=None, help="grade.json path (default SUBMISSION/grade.json)")
    a = ap.parse_args(argv)
    if a.cmd == "build":
        from .build import build
        from .config import preset
        cfg = preset(a.preset, a.seed)
        if a.workers:
            cfg.workers = a.workers
        build(a.out, cfg, quiet=a.quiet)
    elif a.cmd == "calibrate":
        from .calibrate import main as cal
        sys.exit(cal(a.world, a.seed, a.markdown, a.json))
    else:
        from .grade import main as grade
        sys.exit(grade(a.world, a.submission, a.seed, a.diagnosis, a.out))


if __name__ == "__main__":
    main()
