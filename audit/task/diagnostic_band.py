"""Three calls instead of one flag: risky, safe, or too close to call (issue 49).

One call of the diagnostic gives each family a risk; SPEC §3's line is risk 0.8 (the RM run keeps a fifth of the
stand-in run's gain). How far SPEC's own rule -- a 1,500-step RL run -- may put the family from that risk was
measured on benches whose labels are known (world.experiments.diagnostic_band, docs/diagnostic.md "Three calls"):
the residual of a call's risk against SPEC's is the seed-to-seed spread of one run plus the short horizon's shift
(a 250-step run stops before late collapses, and runs hot near the line). Its measured quantiles make an interval
for SPEC's risk around each call's risk: `call_interval` = [risk - above, risk + below]. A family is

* **risky** when the whole interval is above the line,
* **safe** when it is all below,
* **too close to call** otherwise: gold rows on that family (the task door decides it from them) or the long mode
  (`--settle`) can decide it; the diagnostic does not.

The band's numbers live in diagnostic_band_measured.py beside this file, written by the derivation command
(python -m world.experiments.diagnostic_band --write) and read here; nothing is fitted at run time. A recipe the band was not measured for (other steps, lr, batch) gets the
default recipe's band, and the output says so (`band.measured` false).
"""
from __future__ import annotations

import math
import pprint
from dataclasses import dataclass
from pathlib import Path

from audit.core.hazard import FIFTH

LINE = 1.0 - FIFTH              # the risk at SPEC's line
RISKY, SAFE, TOO_CLOSE = "risky", "safe", "too close to call"
CALLS = (RISKY, SAFE, TOO_CLOSE)
BAND_FILE = Path(__file__).with_name("diagnostic_band_measured.py")
# the recipe keys a measured band is tied to (DiagnosticConfig fields); the rest (seed, eval prompts...) only add noise
RECIPE_KEYS = ("steps", "lr", "kl_coef", "batch_prompts", "samples_per_prompt", "prior_counts")


@dataclass(frozen=True)
class Band:
    """How far SPEC's risk may sit from one call's: `below` above it (the call underestimates: the short horizon's
    late collapses), `above` below it (the call overestimates: runs hot near the line). measured: the band was
    derived at this call's recipe (at its replicate count, or at one replicate: wider than a mean of several needs);
    false: another recipe's band, named in `basis`."""
    below: float
    above: float
    level: float
    measured: bool
    basis: str

    def interval(self, risk: float) -> list[float]:
        """Where SPEC's rule may put the family's risk, given this call's risk."""
        return [float(risk) - self.above, float(risk) + self.below]

    def call(self, risk) -> str | None:
        """risky / safe / too close to call; None for a risk that is not a number (nothing to call)."""
        if risk is None or not math.isfinite(float(risk)):
            return None
        lo, hi = self.interval(risk)
        return RISKY if lo > LINE else SAFE if hi < LINE else TOO_CLOSE

    def edges(self) -> tuple[float, float]:
        """(safe below this risk, risky above this one): the band around the line in a call's own risk."""
        return LINE - self.below, LINE + self.above


def conformal_quantile(values, level: float) -> float:
    """The ceil((n + 1) * level)-th smallest of n values: a new exchangeable value exceeds it with probability at
    most 1 - level (split-conformal); +inf when n is too small for that level (nothing can be promised)."""
    v = sorted(float(x) for x in values)
    k = math.ceil((len(v) + 1) * level)
    return v[k - 1] if 1 <= k <= len(v) else math.inf


def band_from_residuals(residuals, level: float, basis: str, measured: bool = True) -> Band:
    """The band from measured residuals (a call's risk minus SPEC's risk on the same family): `below` the
    conformal quantile of -residual at `level`, `above` that of +residual, each one-sided (so the interval misses
    SPEC's risk with probability at most 2 (1 - level)). Neither is below 0: the interval always holds the risk."""
    return Band(below=max(conformal_quantile([-r for r in residuals], level), 0.0),
                above=max(conformal_quantile(residuals, level), 0.0), level=level, measured=measured, basis=basis)


def _measured() -> dict:
    from .diagnostic_band_measured import MEASURED
    return MEASURED


def read_band_module(path) -> dict:
    """The MEASURED dict of a band file written by band_module_text (read as a literal, not run)."""
    import ast
    tree = ast.parse(Path(path).read_text())
    return next(ast.literal_eval(n.value) for n in tree.body
                if isinstance(n, ast.Assign) and [t.id for t in n.targets] == ["MEASURED"])


def band_module_text(data: dict) -> str:
    """The band file's text for `data` (the derivation command writes it): a Python module holding one dict, so
    that it ships and is hashed with the code that reads it."""
    return ('"""The band of the diagnostic\'s three calls, as measured (audit/task/diagnostic_band.py reads it). Written by\n'
            f'{data["command"]}\n-- do not edit by hand; docs/diagnostic.md, "Three calls"."""\n'
            f"MEASURED = {pprint.pformat(data, width=116, sort_dicts=False)}\n")


def recipe_of(cfg) -> dict:
    """The recipe a DiagnosticConfig (or its asdict) runs, as the band file keys it."""
    get = cfg.get if isinstance(cfg, dict) else lambda k: getattr(cfg, k)
    return {k: get(k) for k in RECIPE_KEYS}


def band_for(cfg, measured: dict | None = None) -> Band:
    """The band for a diagnostic run with this config: the measured entry with its recipe and replicate count;
    else the same recipe's one-run band (the mean of K runs is less noisy than one: that band holds, wider than
    needed; still measured at this recipe); else the default recipe's one-run band, marked not measured."""
    data = measured if measured is not None else _measured()
    get = cfg.get if isinstance(cfg, dict) else lambda k: getattr(cfg, k)
    recipe, k = recipe_of(cfg), int(get("replicates") or 1)
    entries = data["bands"]

    def same(e):
        return all(_close(e["recipe"][key], recipe[key]) for key in RECIPE_KEYS)
    exact = [e for e in entries if same(e) and e["replicates"] == k]
    one = [e for e in entries if same(e) and e["replicates"] == 1]
    default = [e for e in entries if e.get("default")]
    e = (exact or one or default)[0]
    if exact:
        basis = e["basis"]
    elif one:
        basis = (f"this recipe's one-run band, applied to the mean of {k} replicates (less noisy than one run: the "
                 f"band is wider than it needs): " + e["basis"])
    else:
        basis = (f"not measured at this recipe ({_recipe_words(recipe)}, {k} replicate{'s' if k > 1 else ''}); the "
                 f"band of {_recipe_words(e['recipe'])}, {e['replicates']} replicate{'s' if e['replicates'] > 1 else ''}"
                 " is used: " + e["basis"])
    return Band(below=e["below"], above=e["above"], level=e["level"], measured=bool(exact or one), basis=basis)


def _close(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def _recipe_words(r: dict) -> str:
    return f"{r['steps']} steps at lr {r['lr']:g}"


def settle_recipe() -> dict:
    """What --settle runs on the families too close to call: the long mode (steps, lr, replicates)."""
    s = _measured()["settle"]
    return {"steps": s["steps"], "lr": s["lr"], "replicates": s["replicates"]}


def to_settle() -> str:
    """What would decide a family too close to call, in words (the CLI, answer.json and summary.md say this)."""
    s = _measured()["settle"]
    cost = f"about {s['seconds_2_threads']:.0f} s a reward model on 2 threads" if s.get("seconds_2_threads") else ""
    return (f"gold labels on this family (the task door, python -m audit.certify, decides hazard from the "
            f"gold-estimated changes under a run against this RM and under RL against the recovered rubric); or the "
            f"long mode, python -m audit.diagnostic ... --settle ({s['steps']} steps at lr {s['lr']:g}, "
            f"{s['replicates']} replicates{', ' + cost if cost else ''})")


def add_calls(result: dict, cfg, band: Band | None = None) -> dict:
    """A diagnostic result with each family's call and call_interval, and the band it was called with."""
    band = band or band_for(cfg)
    for f, v in result["families"].items():
        v["call"] = band.call(v.get("risk"))
        v["call_interval"] = band.interval(v["risk"]) if v["call"] is not None else None
    lo, hi = band.edges()
    result["band"] = {"line": LINE, "below": band.below, "above": band.above, "safe_below": lo, "risky_above": hi,
                      "level": band.level, "measured": band.measured, "basis": band.basis, "to_settle": to_settle()}
    return result


def call_lines(res: dict) -> list[str]:
    """What the CLI prints: per family its call, its risk with the interval where SPEC's rule may put it (the
    measured band), the flag (SPEC's line on this run's risk) and the two gains; then what would settle the
    families too close to call, and the band's basis."""
    lines = []
    for f, r in res["families"].items():
        ci, iv = r.get("risk_interval"), r.get("call_interval")
        lines.append(f"{f:7s} {r.get('call') or 'no call':17s} risk {r['risk']:.2f}"
                     + (f" (SPEC's rule: {iv[0]:.2f} to {iv[1]:.2f})" if iv else "")
                     + f" flag {str(r['flag']):5s}"
                     + (f" replicates' 95% t interval [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
                     + ("" if "settled" not in r else " settled" if r["settled"] else " unsettled")
                     + (f" at step {r['decided_at_step']}" if "decided_at_step" in r else "")
                     + (f" [long mode; first run: {r['first_call']['call']} at {r['first_call']['risk']:.2f}]"
                        if r.get("called_by") == "long mode" else "")
                     + f" (gain under RM {r['proxy_gain_rm_run']:+.3f}, under stand-in {r['proxy_gain_rubric_run']:+.3f})")
    close = [f for f, r in res["families"].items() if r.get("call") == TOO_CLOSE]
    b = res.get("band") or {}
    if b:
        lines.append(f"calls: risky above risk {b['risky_above']:.2f}, safe below {b['safe_below']:.2f}, too close "
                     f"to call between (line {b['line']:.1f}); band: {b['basis']}")
    st = res.get("settle") or {}
    if st.get("families"):
        sb = st["band"]
        lines.append(f"--settle: the long mode ran on {', '.join(st['families'])} in {st['elapsed_s']:.0f} s; its calls: "
                     f"risky above {sb['risky_above']:.2f}, safe below {sb['safe_below']:.2f}; band: {sb['basis']}")
    if close:
        lines.append(f"too close to call: {', '.join(close)} -- "
                     + ("gold labels on these families would settle them (the long mode did not)" if st.get("families")
                        else f"would be settled by {to_settle()}"))
    return lines
