"""python -m world build|calibrate|zoo-check|grade ... (see each sub-command's --help)."""
from __future__ import annotations

import json
import sys

from rlhf.errors import run_cli

from rlhf.atomic import check_out_file
from rlhf.cli import Parser, positive_int, seed_arg
from .config import DISTRACTORS
from .zoo import VARIANTS, zoo_config


def _knob_flags(a) -> dict:
    """The build flags given on the command line, as WorldConfig overrides (None = not given)."""
    knobs = {"distractor": a.distractor, "distractor_few": a.distractor_few, "distractor_shared": a.distractor_shared,
             "p_rubric": a.p_rubric, "p_distractor": a.p_distractor, "gold_per_family": a.gold_per_family}
    if a.corruption is not None:
        try:
            knobs["corruption"] = json.loads(a.corruption)
        except json.JSONDecodeError as e:
            raise ValueError(f"--corruption: not valid JSON ({e.msg})")
        if not isinstance(knobs["corruption"], dict):
            raise ValueError("--corruption: expected a JSON object {family: {Corruption field: value}}")
    return {k: v for k, v in knobs.items() if v is not None}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["export-samples"]:     # its own parser: python -m world export-samples --help
        from .export_samples import main as export_samples
        sys.exit(export_samples(argv[1:]))
    ap = Parser(prog="python -m world", description=__doc__)      # bad flags and values: one line, exit 2
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build a world: DIR/task and DIR/oracle")
    b.add_argument("--out", required=True)
    b.add_argument("--seed", type=seed_arg, default=0)
    b.add_argument("--preset", default="canonical", choices=["canonical", "tiny"])
    b.add_argument("--variant", default="canonical", choices=list(VARIANTS),
                   help="a world-zoo variant of the generator (world/zoo.py, docs/zoo.md); the flags below "
                        "override its knobs")
    b.add_argument("--distractor", choices=list(DISTRACTORS), default=None,
                   help="distractor structure per position: one or two tokens (canonical), one, a few, or a full "
                        "LUT on another attribute")
    b.add_argument("--distractor-few", type=int, nargs=2, metavar=("LO", "HI"), default=None,
                   help="token count range per position for --distractor few")
    b.add_argument("--distractor-shared", action="store_true", default=None,
                   help="one distractor attribute per family for every position")
    b.add_argument("--p-rubric", type=float, default=None, help="share of rubric tokens in the demonstrations")
    b.add_argument("--p-distractor", type=float, default=None,
                   help="share of distractor tokens in the demonstrations (the rest is uniform noise)")
    b.add_argument("--gold-per-family", type=int, default=None, help="expert-labelled gold rows per family")
    b.add_argument("--corruption", default=None,
                   help='JSON {family: {Corruption field: value}}; replaces the variant\'s corruption (families not '
                        'named are honest; \'{}\' = a clean batch)')
    b.add_argument("--workers", type=positive_int, default=None, help="processes for the shipped runs (default 2)")
    b.add_argument("--quiet", action="store_true")
    c = sub.add_parser("calibrate", help="SPEC §2 figures of a built world, side by side with the original")
    c.add_argument("world")
    c.add_argument("--seed", type=seed_arg, default=0, help="seed of the Monte Carlo true-quality estimates")
    c.add_argument("--markdown", action="store_true", help="print the table as markdown")
    c.add_argument("--json", default=None, help="also write the figures as JSON here")
    z = sub.add_parser("zoo-check", help="a built world against SPEC §2's qualitative picture under kl002-s1500")
    z.add_argument("world")
    z.add_argument("--seed", type=seed_arg, default=0, help="seed of the Monte Carlo true-quality estimates")
    z.add_argument("--json", default=None, help="also write the figures and verdicts as JSON here")
    sub.add_parser("export-samples", help="a built world's runs as a samples table (python -m audit.samples), "
                   "its oracle truth kept apart")
    g = sub.add_parser("grade", help="judge a certification output against the oracle")
    g.add_argument("--world", required=True)
    g.add_argument("--submission", required=True)
    g.add_argument("--seed", type=seed_arg, default=12345, help="grade seed (fresh prompts, diagnosis batches)")
    g.add_argument("--diagnosis", choices=["full", "quick", "skip"], default="full")
    g.add_argument("--out", default=None, help="grade.json path (default SUBMISSION/grade.json)")
    a = ap.parse_args(argv)
    if a.cmd == "build":
        from .build import build
        try:
            cfg = zoo_config(a.preset, a.seed, a.variant, **_knob_flags(a))
        except ValueError as e:
            b.error(str(e))     # one line (rlhf.cli.Parser), as every world tool reports bad input
        if a.workers:
            cfg.workers = a.workers
        build(a.out, cfg, quiet=a.quiet)
    elif a.cmd == "zoo-check":
        check_out_file(a.json, "the --json file")
        from .zoo_check import main as zoo_check
        sys.exit(zoo_check(a.world, a.seed, a.json))
    elif a.cmd == "calibrate":
        check_out_file(a.json, "the --json file")
        from .calibrate import main as cal
        sys.exit(cal(a.world, a.seed, a.markdown, a.json))
    else:
        check_out_file(a.out, "the --out file")
        from .grade import main as grade
        sys.exit(grade(a.world, a.submission, a.seed, a.diagnosis, a.out))


if __name__ == "__main__":
    sys.exit(run_cli(main, "python -m world"))
