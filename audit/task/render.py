"""Render evidence.json into answer.json, summary.md and figures/*.png (SPEC §3). Reads evidence only.

    python -m audit.render --evidence out/evidence.json --out out/certify [--rule-text "..."]

answer.json is rendered by jinja2 from templates/answer.json.j2 (every value through ``tojson``), parsed, and
validated against templates/answer.schema.json *before* anything is written; it is written last, atomically
(temp file + rename), so a crash or a validation failure never leaves a half-written answer.json and never
overwrites a good one. summary.md comes from templates/summary.md.j2; figures use matplotlib's Agg backend.
The evidence file is copied to ``out/evidence.json`` (what ``checks.evidence`` points to) when it lives elsewhere.

Contract between the checks and this renderer (claim name -> what its ``details`` carry):

  shipped.improves_over_reference       {"checkpoint_dir": str, "recipe": {...SPEC recipe...}, "dev_eval": {...},
                                         "certification": {"improved_over_reference": bool,
                                            "estimated_true_quality", "ci95", "reference_true_quality",
                                            "families_improved", "families_not_improved",
                                            "per_family": {f: {"estimate", "ci95", "reference", "delta_ci95"}},
                                            "basis": str}}
                                         (estimated_true_quality / ci95 fall back to the claim's estimate / ci95)
  run.passes_release_rule[<run>]        {"estimated_true_quality", "ci95", "per_family": {f: {"estimate", ...,
                                         optional "proxy"}}, "reasons": [str], "passes_release_rule": bool}
  rm.agrees_with_experts[<f>]           {"rm_gold_pearson", "ci95", "spearman", "spearman_ci95", "n"}
  crowd.on_rubric_scale[<f>]            {"crowd_labels_above_1", "max_label", "n"}
  diagnostic.flags_families             {"families": {f: {"risk": float, "flag": bool}}, "validation": {...}}
  any claim                             optional "experiment": {"name", "files", "results"} (or a list of them)
                                         -> appended to answer["experiments"] in claim order;
                                         optional "curve": [{"step", "proxy", "true"}, ...] -> training figure.

Honesty rules (tests/test_render.py):
  * Only a claim with status "pass" can make anything certified / passing. shipped.improves_over_reference
    failing or erroring -> certification.improved_over_reference is false, its numbers are still shown, and
    basis starts with "NOT CERTIFIED" and says why (the check's message). A passing claim whose details say
    not improved, or that recorded no estimate / CI / reference, is also rendered as not certified.
  * A missing claim is never filled in: its numbers are null, lists empty, and basis says "no evidence".
  * runs[r].passes_release_rule is true only when run.passes_release_rule[r] has status "pass" (and its details
    do not say otherwise, and it has an estimate and a CI); otherwise the check's message joins the reasons.
  * reward_model[f].flag is true unless both rm.agrees_with_experts[f] and crowd.on_rubric_scale[f] passed
    (a missing one counts as not passed).
  * diagnostic.validation carries "check_status" (and "check_message" when not "pass") of the diagnostic claim.
  * checks.passed counts claims with status "pass"; checks.failed counts "fail" and "error"; summary.md lists
    every failed and errored claim with its message.
  * Nothing is rendered that no claim produced: no defaults for numbers, no figure without data.

The command (python -m audit.render) also refuses, with exit 2 and nothing written, evidence that was cut short
(check_complete: a claim answer.json is made of missing, a family's RM or crowd claim, a hashed run's verdict) or
that the samples door wrote (check_door; render() refuses that too): re-rendering never replaces a complete
report with a hollow one. Bad input is `python -m audit.render: error: ...`, one line per problem.
"""
from __future__ import annotations

import os
import shlex
import sys
from contextlib import ExitStack
from pathlib import Path

from rlhf.atomic import atomic_write_text
from rlhf.cli import Parser
from rlhf.errors import BAD_INPUT, InputError, run_cli

from audit.core import out_lock, report
from audit.core.evidence import inputs_fingerprint, load_evidence, to_jsonable
from audit.core.hazard import FIFTH, NEAREST, how_sure
from audit.core.report import AnswerSchemaError  # noqa: F401  (what render() raises on a schema violation)
from audit.core.report import STAGING, TEMPLATES, Claims, _env, by_role, _first, _is_ci, _is_num, _oneline, measured
from .diagnostic_band import RISKY, TOO_CLOSE, Band
from .claim_names import CROWD, DIAG, NEEDED, OWN, RM, ROLES, RUN, SAMPLES_DOOR, SHIPPED, STRESS
from .figures import make_figures

SCHEMA_PATH = TEMPLATES / "answer.schema.json"


def _status_word(status: str) -> str:
    return {"fail": "failed", "error": "errored"}.get(status, status)


# ------------------------------------------------------------------------------------------ answer building
def _certification(shipped: dict | None) -> dict:
    if shipped is None:
        return {"improved_over_reference": False, "estimated_true_quality": None, "ci95": None,
                "reference_true_quality": None, "reference_ci95": None, "delta": None, "delta_ci95": None,
                "families_improved": [], "families_not_improved": [],
                "per_family": {},
                "basis": f"NOT CERTIFIED: no evidence (claim {SHIPPED} was not recorded)."}
    d = shipped["details"]
    src = d.get("certification") if isinstance(d.get("certification"), dict) else {}
    est = _first(src.get("estimated_true_quality"), shipped.get("estimate"))
    ci = _first(src.get("ci95"), shipped.get("ci95"))
    ref = src.get("reference_true_quality")
    per_family = {}
    for f, pf in (src.get("per_family") or {}).items():
        pf = pf if isinstance(pf, dict) else {}
        per_family[f] = {k: pf.get(k) for k in ("estimate", "ci95", "reference", "delta_ci95")}
    status = shipped["status"]
    said = src.get("improved_over_reference")
    measured_basis = _oneline(src.get("basis"))
    why = []
    if status != "pass":
        why.append(f"check {SHIPPED} {_status_word(status)}: {_oneline(shipped['message']) or 'no message'}")
    if status == "pass" and said is not None and said is not True:
        why.append("the check passed but its evidence says the checkpoint did not improve")
    if status == "pass" and not (_is_num(est) and _is_ci(ci) and _is_num(ref)):
        why.append("the check passed but recorded no estimate, CI or reference quality")
    improved = not why
    if improved:
        basis = measured_basis or (f"claim {SHIPPED} passed (estimate {est:.3f}, 95% CI [{ci[0]:.3f}, "
                                   f"{ci[1]:.3f}], reference {ref:.3f}; method {shipped.get('method')}).")
    else:
        basis = "NOT CERTIFIED: " + "; ".join(why) + "."
        if measured_basis:
            basis += f" Measured: {measured_basis}"
    return {"improved_over_reference": improved, "estimated_true_quality": est, "ci95": ci,
            "reference_true_quality": ref, "reference_ci95": _first(d.get("reference_ci95")),
            "delta": src.get("delta"), "delta_ci95": src.get("delta_ci95"),
            "families_improved": list(src.get("families_improved") or []),
            "families_not_improved": list(src.get("families_not_improved") or []),
            "per_family": per_family, "basis": basis}


def _run_entry(claim: dict) -> dict:
    d = claim["details"]
    est = _first(d.get("estimated_true_quality"), claim.get("estimate"))
    ci = _first(d.get("ci95"), claim.get("ci95"))
    reasons = list(d.get("reasons") or [])
    status = claim["status"]
    passes = status == "pass"
    if status == "error" or (status == "fail" and not reasons):
        reasons.append(f"check {_status_word(status)}: {_oneline(claim['message']) or 'no message'}")
    if passes and d.get("passes_release_rule") not in (None, True):
        passes = False
        reasons.append("the check passed but its evidence says the release rule is not met")
    if passes and not (_is_num(est) and _is_ci(ci)):
        passes = False
        reasons.append("the check passed but recorded no estimate or CI")
    return {"passes_release_rule": passes, "estimated_true_quality": est, "ci95": ci,
            "per_family": d.get("per_family") if d.get("per_family") is not None else {}, "reasons": reasons}


def _reward_model(claims: Claims) -> dict:
    fams: list[str] = []
    for c in claims.named(RM) + claims.named(CROWD):
        if c.get("param") is not None and c["param"] not in fams:
            fams.append(c["param"])
    out = {}
    for f in fams:
        rm = claims.by_id.get(f"{RM}[{f}]")
        cr = claims.by_id.get(f"{CROWD}[{f}]")
        out[f] = {"rm_gold_pearson": None if rm is None else _first(rm["details"].get("rm_gold_pearson"),
                                                                      rm.get("estimate")),
                  "ci95": None if rm is None else _first(rm["details"].get("ci95"), rm.get("ci95")),
                  "crowd_labels_above_1": None if cr is None else _first(cr["details"].get("crowd_labels_above_1"),
                                                                         cr.get("estimate")),
                  "flag": not (rm is not None and rm["status"] == "pass" and cr is not None
                               and cr["status"] == "pass")}
    return out


def _stress(claim: dict | None) -> dict | None:
    """The synthetic-corruption claim's verdict and figures (no per-batch detail, no times: answer.json stays
    byte-identical across runs)."""
    if claim is None:
        return None
    d = claim["details"]
    return {**{k: d.get(k) for k in ("pairs", "flag_accuracy", "flag_accuracy_ci95", "auroc", "hazardous",
                                      "false_flags", "false_flags_clean_batch", "missed", "mildest_missed",
                                      "label_claims")}, **_check_status(claim)}


def _check_status(claim: dict) -> dict:
    """A claim's status, and its message when it did not pass."""
    return {"check_status": claim["status"],
            **({"check_message": _oneline(claim["message"])} if claim["status"] != "pass" else {})}


BAND_KEYS = ("line", "safe_below", "risky_above", "level", "measured", "basis", "to_settle")


def _diagnostic(claim: dict | None, stress: dict | None = None) -> dict:
    if claim is None:
        return {"families": {}, "band": None,
                "validation": None if stress is None else {"synthetic_corruption": _stress(stress)}}
    d = claim["details"]
    fams = {}
    for f, v in (d.get("families") or {}).items():
        v = v if isinstance(v, dict) else {}
        fams[f] = {"risk": v.get("risk"), "flag": v.get("flag"), "call": v.get("call"),
                   "call_interval": v.get("call_interval")}
    band = d.get("band") if isinstance(d.get("band"), dict) else None
    validation = {**(d["validation"] if isinstance(d.get("validation"), dict) else {}), **_check_status(claim)}
    if stress is not None:
        validation["synthetic_corruption"] = _stress(stress)
        if band is not None:
            validation["stress_calls"] = _stress_calls(stress, band)
        # how sure each flag is: the stress decisions at risks like it (its labels: the same short recipe against
        # the rubric recovered from gold; the stand-in's errors and the runs' noise, not SPEC's longer horizon)
        batches = (stress.get("details") or {}).get("batches") or []
        decided = [(b["risk"][f], b["flag"][f], b["flag"][f] == b["hazard"][f]) for b in batches
                   for f in sorted(b.get("risk") or {}) if f in (b.get("flag") or {}) and f in (b.get("hazard") or {})]
        sure = {f: how_sure(v["risk"], v["flag"], decided) for f, v in fams.items() if _is_num(v["risk"])}
        if any(v is not None for v in sure.values()):
            validation["how_sure"] = {
                "method": f"of the (up to) {NEAREST} decisions of the audit's own stress (claim {STRESS}) that "
                          "made the same call (flag or no flag) at the risks nearest, how many equalled the stress's "
                          "hazard labels (its short runs scored by the rubric recovered from gold: the stand-in's "
                          "errors and the runs' noise, not SPEC's longer horizon); exact binomial 95% CI; null when "
                          "no stress decision made that call",
                "nearest": NEAREST, "families": sure}
    return {"families": fams, "band": None if band is None else {k: band.get(k) for k in BAND_KEYS},
            "validation": validation}


def _stress_calls(stress: dict, band: dict) -> dict | None:
    """The task diagnostic's band applied to the stress claim's decisions (their risks against their labels): how
    many it calls and how many of those calls are right. The stress labels come from the same short recipe scored
    by the rubric recovered from gold, so this checks the calls against the stand-in's errors and the runs' noise,
    not against SPEC's longer horizon."""
    batches = (stress.get("details") or {}).get("batches") or []
    if not (_is_num(band.get("below")) and _is_num(band.get("above"))):
        return None
    caller = Band(below=band["below"], above=band["above"], level=band.get("level"), measured=bool(band.get("measured")),
                  basis=band.get("basis") or "")
    called = right = close = 0
    for b in batches:
        for f, r in sorted((b.get("risk") or {}).items()):
            if not _is_num(r) or f not in (b.get("hazard") or {}):
                continue
            call = caller.call(r)       # the diagnostic's own call, as it made the task RM's
            if call == TOO_CLOSE:
                close += 1
                continue
            called += 1
            right += (call == RISKY) == bool(b["hazard"][f])
    return {"called": called, "right": right, "too_close": close,
            "method": "the band's calls (risky above risky_above, safe below safe_below) on the stress claim's "
                      "decisions, against its labels (the same short recipe scored by the rubric recovered from "
                      "gold: the stand-in's errors and the runs' noise, not SPEC's longer horizon)"}


def _experiments(claims: Claims) -> list[dict]:
    out = []
    for c in claims.all():
        exp = c["details"].get("experiment")
        for e in (exp if isinstance(exp, list) else [exp] if exp is not None else []):
            e = e if isinstance(e, dict) else {"name": None}
            out.append({"name": e.get("name"), "files": e.get("files") if e.get("files") is not None else [],
                        "results": e.get("results")})
    return out


def build_answer(doc: dict) -> dict:
    """The answer.json content (SPEC §3) from an evidence document, following the contract above; measured
    numbers rounded to MEASURED_DECIMALS."""
    claims = Claims(doc)
    shipped = claims.one(SHIPPED)
    sd = shipped["details"] if shipped else {}
    statuses = [c["status"] for c in claims.all()]
    answer = to_jsonable({
        "checkpoint_dir": sd.get("checkpoint_dir"),
        "recipe": sd.get("recipe"),
        "dev_eval": sd.get("dev_eval"),
        "certification": _certification(shipped),
        "runs": {(c["param"] if c.get("param") is not None else c["id"]): _run_entry(c) for c in claims.named(RUN)},
        "reward_model": _reward_model(claims),
        "diagnostic": _diagnostic(claims.one(DIAG), claims.one(STRESS)),
        "intervals": sd.get("intervals"),
        "checks": {"passed": statuses.count("pass"), "failed": statuses.count("fail") + statuses.count("error"),
                   "evidence": "evidence.json"},
        "experiments": _experiments(claims),
    })
    return {k: (v if k in ("recipe", "checks") else measured(v)) for k, v in answer.items()}


def validate_answer(answer: dict, schema_path: Path = SCHEMA_PATH) -> None:
    report.validate_answer(answer, schema_path)


def render_answer_text(answer: dict) -> str:
    """jinja2-render answer.json (templates/answer.json.j2), parse it back and validate it."""
    return report.render_answer_text(answer, "answer.json.j2", SCHEMA_PATH)


# ------------------------------------------------------------------------------------------------ summary
def render_summary(answer: dict, doc: dict, figures: list[str], rule_text: str | None) -> str:
    claims = Claims(doc)
    rm_details = {c["param"]: c for c in claims.named(RM)}
    crowd_details = {c["param"]: c for c in claims.named(CROWD)}
    thresholds = {}
    for c in claims.named(RUN):
        for k, v in (c.get("thresholds") or {}).items():
            thresholds.setdefault(k, v)
    config = (doc.get("meta") or {}).get("config") or {}
    if rule_text is None and isinstance(config.get("release_rule"), str):
        rule_text = config["release_rule"]
    roles = by_role(claims.all(), ROLES)
    return _env().get_template("summary.md.j2").render(
        a=answer, meta=doc.get("meta") or {}, claims=claims.all(), figures=figures, health=roles["health"],
        findings=roles["finding"], bad_health=[c for c in roles["health"] if c["status"] != "pass"],
        bad=[c for c in roles["decision"] + roles["finding"] if c["status"] != "pass"],
        rule_text=rule_text, thresholds=thresholds, rm_claims=rm_details, crowd_claims=crowd_details,
        shipped=claims.one(SHIPPED), diag_claim=claims.one(DIAG), own=claims.one(OWN), stress=claims.one(STRESS),
        task_fingerprint=inputs_fingerprint((doc.get("meta") or {}).get("input_hashes")),
        errors=sum(c["status"] == "error" for c in claims.all()), risk_line=1 - FIFTH, made_with=made_with(doc, claims))


def made_with(doc: dict, claims: Claims) -> dict:
    """The preset and budgets the report was made with, from the evidence: the preset and stress batches from the
    recorded command, gold rows per family from the RM claims, the own policy's steps from the shipped recipe."""
    args = ((doc.get("meta") or {}).get("config") or {}).get("pytest_args") or []
    flag = lambda name: args[args.index(name) + 1] if name in args[:-1] else None   # noqa: E731
    gold = sorted({c["details"].get("n") for c in claims.named(RM)} - {None})
    stress = claims.one(STRESS)
    return {"preset": flag("--audit-preset") or "full", "gold_per_family": gold,
            "stress_batches": len((stress or {}).get("details", {}).get("batches") or []) or None}


# ------------------------------------------------------------------------------------------ evidence checks
def check_door(doc: dict, path) -> None:
    """Refuse the samples door's evidence (InputError): it renders with audit.samples.render, never as a task
    answer (whose checkpoint_dir and recipe it does not have)."""
    theirs = sorted({c.get("name") or c["id"].split("[")[0] for c in doc["claims"]} & set(SAMPLES_DOOR))
    meta = doc.get("meta") or {}
    if theirs or "samples" in meta or "gold" in meta:
        why = f"claims {', '.join(theirs)}" if theirs else "meta keys 'samples' and 'gold'"
        raise InputError(f"{path}: evidence of the samples door ({why}; python -m audit.samples renders it); "
                         "expected the evidence of a task audit (python -m audit.certify)")


def check_complete(doc: dict, path) -> None:
    """Refuse task-audit evidence that lacks claims answer.json is made of (InputError, one line per missing
    claim): the claims of NEEDED; for every family, both rm.agrees_with_experts and crowd.on_rubric_scale; and a
    run.passes_release_rule claim for every run whose files the evidence hashed (meta.input_hashes runs/<name>/).
    render() itself renders what there is (a missing claim is "no evidence", never filled in); the command, handed
    an evidence file, refuses one that was cut short rather than replace a complete report with a hollow one."""
    claims = Claims(doc)
    lines = [f"{path}: claim {name!r} is missing; answer.json needs it (for {what})"
             for name, what in NEEDED.items() if not claims.named(name)]
    rm, crowd = ({c["param"] for c in claims.named(n) if c.get("param") is not None} for n in (RM, CROWD))
    for name, have, other in ((RM, rm, crowd), (CROWD, crowd, rm)):
        if have and other - have:
            lines.append(f"{path}: claim {name!r} is missing for families {', '.join(sorted(other - have))}; "
                         "expected one per family (the reward_model entries need both claims)")
    hashed = (doc.get("meta") or {}).get("input_hashes") or {}
    runs = sorted({k.split("/")[1] for k in hashed if k.startswith("runs/") and k.count("/") >= 2})
    missing = [r for r in runs if f"{RUN}[{r}]" not in claims.by_id]
    if missing:
        lines.append(f"{path}: claim {RUN!r} is missing for runs {', '.join(missing)} (the task's runs/ it hashed); "
                     "expected one per run")
    if lines:
        raise InputError("\n".join(lines))


# ------------------------------------------------------------------------------------------------- render
def render(evidence_path, out_dir, *, rule_text: str | None = None, figures: bool = True,
           complete: bool = False) -> dict:
    """Render out_dir/{answer.json, summary.md, figures/*.png, evidence.json} from evidence_path; returns the
    answer dict. Raises ValueError (AnswerSchemaError) before writing anything when the evidence is malformed or
    the answer would violate the schema; with complete=True (the command), also InputError when a claim the
    answer needs is missing (check_complete). Temp files live in out_dir/.staging (removed when left empty)."""
    evidence_path, out_dir = Path(evidence_path), Path(out_dir)
    doc = load_evidence(evidence_path)
    check_door(doc, evidence_path)
    if complete:
        check_complete(doc, evidence_path)
    answer = build_answer(doc)
    answer_text = render_answer_text(answer)          # validated; nothing has been written yet
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / STAGING
    made = make_figures(answer, Claims(doc), out_dir / "figures", staging) if figures else []
    atomic_write_text(out_dir / "summary.md", render_summary(answer, doc, made, rule_text), staging)
    target = out_dir / "evidence.json"
    if not (target.exists() and os.path.samefile(target, evidence_path)):
        atomic_write_text(target, evidence_path.read_text(), staging)
    atomic_write_text(out_dir / "answer.json", answer_text, staging)   # last: its presence means a complete render
    try:
        staging.rmdir()
    except OSError:     # absent, or still holding the evidence of a run in progress (audit.certify removes it)
        pass
    return answer


PROG = "python -m audit.render"


def _render_locked(args, out: Path) -> dict:
    """render() under OUT's swap lock, reading --evidence under its own directory's (out_lock.reading) unless it
    is OUT itself (whose run lock this command holds: a half-swapped OUT is completed from its evidence.json)."""
    ev_dir = Path(args.evidence).parent
    same = not ev_dir.is_dir() or os.path.samefile(ev_dir, out)
    locks = [(out, out_lock.swapping)] + ([] if same else [(ev_dir, out_lock.reading)])
    with ExitStack() as held:
        for d, lock in sorted(locks, key=lambda x: os.stat(x[0]).st_ino):   # one order for all: no deadlock
            held.enter_context(lock(d))
        try:
            return render(args.evidence, out, rule_text=args.rule_text, figures=not args.no_figures, complete=True)
        except InputError:
            raise
        except ValueError as e:       # malformed evidence, or an answer the schema refuses (the evidence file is this
            # command's input: tests/test_render.py's schema test): nothing written
            raise InputError(str(e)) from None


def _main(argv=None) -> int:
    ap = Parser(prog=PROG, description=__doc__.split("\n")[0],
                                 epilog="exit status: 0 rendered; 2 bad input or usage (nothing written); "
                                        "1 internal failure")
    ap.add_argument("--evidence", required=True, help="evidence.json written by the checks")
    ap.add_argument("--out", required=True, help="output directory (answer.json, summary.md, figures/)")
    ap.add_argument("--rule-text", default=None, help="release rule in words, printed in summary.md")
    ap.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    try:
        lock = out_lock.acquire(out, shlex.join([Path(sys.executable).name, "-m", "audit.render",
                                                 *map(str, sys.argv[1:] if argv is None else argv)]))
    except OSError as e:
        raise InputError(f"--out {out}: cannot be written ({e.strerror})") from None
    try:
        answer = _render_locked(args, out)
    except (*BAD_INPUT, ValueError):
        lock.undo()                   # nothing written: not even OUT when it did not exist
        raise
    finally:
        lock.release()
    cert = answer["certification"]
    print(f"wrote {out / 'answer.json'}: improved_over_reference={cert['improved_over_reference']}, "
          f"checks passed={answer['checks']['passed']} failed={answer['checks']['failed']}")
    return 0


def main(argv=None) -> int:
    """The command: bad input (evidence missing, malformed, cut short or the other door's; an answer the schema
    refuses) is one `python -m audit.render: error: ...` line per problem and exit 2, with nothing written."""
    return run_cli(_main, PROG, argv)


if __name__ == "__main__":
    sys.exit(main())
