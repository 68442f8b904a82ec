"""The release-rule tables of world.experiments.rounds_coverage (`tables`): a reference and four candidate runs x six
families with true changes drawn near and far from the rule's thresholds, labelled in rounds of 10 up to 200 a cell
where a label can still change a decision (audit.samples.decisions, the door's own layer) against the fixed design at
25/50/100 a cell on the same rows. Also what the grid shares: the cap, the rounds, the cells' data."""
from __future__ import annotations

import itertools

import numpy as np

from audit.core import bounded, sequential as seq
from audit.samples.decisions import Evidence, cells_to_label, ship, verdict
from audit.samples.estimates import combine
from world.experiments.interval_coverage import CONFIDENCE, KINDS, labels, proxy

CAP = 200
ROUND = 10
LOOKS = tuple(range(ROUND, CAP + 1, ROUND))
POOLS = (100, 10_000)
MARGIN, GAIN_LOWER, MIN_GAIN = -0.03, 0.0, 0.05        # the release rule's defaults (audit.core.release)
FIXED = (25, 50, 100)


def cell_data(kind, mu, rho, reps, pool, rng):
    """Labels and proxies of `reps` replicates of a cell: CAP rows to label and `pool` beyond the cap."""
    y = labels(kind, mu, (reps, CAP + pool), rng)
    f = proxy(y, kind, mu, rho, rng)
    return y.astype(float), f.astype(float)


# ------------------------------------------------------------------------------------------------ the tables
TYPES = ("clear_pass", "near_gain", "near_margin", "clear_family_fail", "no_gain", "near_pass")


def _run_deltas(kind: str, rng) -> np.ndarray:
    """True per-family changes of a candidate of one kind (six families)."""
    if kind == "clear_pass":
        return rng.uniform(0.12, 0.25) + rng.normal(0, 0.03, 6).clip(-0.08, 0.08)
    if kind == "near_pass":
        return rng.uniform(0.07, 0.11) + rng.normal(0, 0.02, 6).clip(-0.05, 0.05)
    if kind == "near_gain":
        return rng.uniform(0.03, 0.07) + rng.normal(0, 0.02, 6).clip(-0.05, 0.05)
    if kind == "near_margin":
        d = rng.uniform(0.1, 0.2) + rng.normal(0, 0.02, 6)
        d[rng.integers(6)] = rng.uniform(-0.06, 0.0)
        return d
    if kind == "clear_family_fail":
        d = rng.uniform(0.05, 0.2) + rng.normal(0, 0.02, 6)
        d[rng.integers(6)] = rng.uniform(-0.3, -0.15)
        return d
    if kind == "no_gain":
        return rng.normal(0, 0.02, 6)
    raise ValueError(kind)


def table_spec(seed: int, index: int) -> dict:
    """A table's truth: label kind, pool rows, per family the reference's mean and proxy correlation, and four
    candidates of drawn kinds ("far" tables: clear kinds only; "near": at least one near a threshold)."""
    rng = np.random.default_rng([seed, 4848, index])
    near = index % 2 == 1
    kinds = [str(k) for k in rng.choice(["clear_pass", "clear_family_fail", "no_gain"], 4)]
    if near:
        kinds[int(rng.integers(4))] = str(rng.choice(["near_gain", "near_margin", "near_pass"]))
    ref = rng.uniform(0.25, 0.7, 6)
    runs = {}
    for j, k in enumerate(kinds):
        d = _run_deltas(k, rng)
        runs[f"run{j}"] = {"kind": k, "means": [float(v) for v in np.clip(ref + d, 0.02, 0.98)]}
    return {"index": index, "class": "near" if near else "far", "label_kind": str(rng.choice(KINDS)),
            "pool": int(rng.choice(POOLS)), "rho": [float(v) for v in rng.uniform(0.3, 0.8, 6)],
            "reference": [float(v) for v in ref], "runs": runs}


def exact(spec: dict) -> dict:
    """Per run: the true family changes, balanced gain and the rule on them (no sampling error)."""
    out = {}
    for r, v in spec["runs"].items():
        d = np.array(v["means"]) - np.array(spec["reference"])
        bal = float(d.mean())
        out[r] = {"deltas": d, "balanced": bal,
                  "passes": bal >= MIN_GAIN and bal > GAIN_LOWER and bool(np.all(d > MARGIN))}
    return out


def run_table(spec: dict, reps: int, seed: int, draws: int) -> dict:
    rng = np.random.default_rng([seed, 4849, spec["index"]])
    kind, pool = spec["label_kind"], spec["pool"]
    names = ["reference"] + list(spec["runs"])
    means = {"reference": spec["reference"], **{r: v["means"] for r, v in spec["runs"].items()}}
    data, tracks = {}, {}
    for r in names:
        for f in range(6):
            y, fx = cell_data(kind, means[r][f], spec["rho"][f], reps, pool, rng)
            data[(r, f)] = (y, fx)
            tracks[(r, f)] = seq.track(y[:, :CAP], fx[:, :CAP], fx[:, CAP:], 0.0, 1.0, CAP)
    truth = exact(spec)
    cands = list(spec["runs"])
    fam_terms = {(r, f): [(1.0, (r, f)), (-1.0, ("reference", f))] for r in cands for f in range(6)}
    bal_terms = {r: [(1 / 6, (r, f)) for f in range(6)] + [(-1 / 6, ("reference", f)) for f in range(6)]
                 for r in cands}
    pair_terms = {(a, b): [(1 / 6, (a, f)) for f in range(6)] + [(-1 / 6, (b, f)) for f in range(6)]
                  for a, b in itertools.permutations(cands, 2)}

    # --- rounds: every quantity's standing at every tuple count, precomputed (the construction depends on
    # positions only, so a look at any count is the same whatever the allocation was)
    def standing(terms, taus):
        s = seq.prepare([(w, tracks[c]) for w, c in terms])
        out = {tau: s.rejected(tau, LOOKS) for tau in taus}
        return s, out
    fam = {k: standing(t, (MARGIN,)) for k, t in fam_terms.items()}
    bal = {r: standing(t, (GAIN_LOWER, MIN_GAIN)) for r, t in bal_terms.items()}
    pair = {k: standing(t, (0.0,))[1][0.0] for k, t in pair_terms.items() if k[0] < k[1]}
    cell_cov = {c: seq.prepare([(1.0, tracks[c])]).rejected(float(means[c[0]][c[1]]), LOOKS) for c in tracks}
    fam_cov = {k: fam[k][0].rejected(float(truth[k[0]]["deltas"][k[1]]), LOOKS) for k in fam_terms}
    bal_cov = {r: bal[r][0].rejected(truth[r]["balanced"], LOOKS) for r in cands}

    rows = []
    for i in range(reps):
        row = {}
        for mode in LOOPS:
            counts = _loop(i, tracks, cands, fam, bal, pair, mode)
            ev = _rounds_evidence(i, counts, cands, fam, bal, pair)
            state = _decide(ev, cands)
            row[mode] = {"labels": int(sum(counts.values())),
                         "run_labels": {r: int(sum(counts[(r, f)] for f in range(6))) for r in names},
                         "passes": {r: bool(state["verdicts"][r]["passes"][0]) for r in cands},
                         "settled": {r: bool(state["verdicts"][r]["settled"][0]) for r in cands},
                         "ship": state["ship"]["run"][0], "ship_settled": bool(state["ship"]["settled"][0]),
                         "cover": _coverage(i, counts, cands, cell_cov, fam_cov, bal_cov)}
        row["fixed"] = {}
        rows.append(row)

    # --- the fixed designs on the same rows: the first n of each cell's order labelled, the rest unlabelled
    for n in FIXED:
        parts = {c: bounded.ppi_cells(y[:, :n], fx[:, :n], fx[:, n:], 0.0, 1.0, seed=seed,
                                      key=("rounds-fixed", spec["index"], c, n), draws=draws)
                 for c, (y, fx) in data.items()}
        ci = lambda terms: combine([(w, parts[c].parts) for w, c in terms], CONFIDENCE)   # noqa: E731
        fam_ci = {k: ci(t) for k, t in fam_terms.items()}
        bal_ci = {r: ci(t) for r, t in bal_terms.items()}
        pair_ci = {k: ci(t) for k, t in pair_terms.items()}
        ev = {"family": {r: {f: Evidence.from_interval(fam_ci[(r, f)]["estimate"], *fam_ci[(r, f)]["ci95"], MARGIN)
                             for f in range(6)} for r in cands},
              "balanced_ci": {r: Evidence.from_interval(bal_ci[r]["estimate"], *bal_ci[r]["ci95"], GAIN_LOWER)
                              for r in cands},
              "gain": {r: Evidence.from_interval(bal_ci[r]["estimate"], *bal_ci[r]["ci95"], MIN_GAIN) for r in cands},
              "separated": lambda a, b: pair_ci[(a, b)]["ci95"][0] > 0}
        state = _decide(ev, cands)
        within = lambda c, v: (c["ci95"][0] <= v) & (v <= c["ci95"][1])   # noqa: E731
        cell_ok = np.mean([within(parts[c].interval(CONFIDENCE), float(means[c[0]][c[1]])) for c in parts], 0)
        fam_ok = np.mean([within(fam_ci[k], float(truth[k[0]]["deltas"][k[1]])) for k in fam_terms], 0)
        bal_ok = np.mean([within(bal_ci[r], truth[r]["balanced"]) for r in cands], 0)
        for i, row in enumerate(rows):
            row["fixed"][str(n)] = {
                "labels": n * len(tracks), "passes": {r: bool(state["verdicts"][r]["passes"][i]) for r in cands},
                "settled": {r: bool(state["verdicts"][r]["settled"][i]) for r in cands},
                "ship": state["ship"]["run"][i], "ship_settled": bool(state["ship"]["settled"][i]),
                "cover": {"cells": float(cell_ok[i]), "family_deltas": float(fam_ok[i]), "balanced_deltas": float(bal_ok[i])}}
    return {"spec": spec, "exact": {r: {"balanced": v["balanced"], "passes": v["passes"]} for r, v in truth.items()},
            "reps": reps, "seed": seed, "rows": rows}


LOOPS = ("decisions", "verdicts")     # label where a verdict or the shipped choice is open / where a verdict is


def look_index(n: int) -> int:
    """The index into LOOKS of a tuple count (a multiple of ROUND here)."""
    return max(0, n // ROUND - 1)


def _loop(i, tracks, cands, fam, bal, pair, mode) -> dict:
    """Replicate i labelled in rounds: 10 a cell first, then 10 more in every cell where a label can still change
    an open decision, until none is open or those cells are at the cap. The counts a cell at the end."""
    counts = {c: ROUND for c in tracks}
    while True:
        state = _decide(_rounds_evidence(i, counts, cands, fam, bal, pair), cands)
        plan = set()
        for r in cands:
            plan |= state["cells"][r][0]
        chosen = state["ship"]["run"][0]
        if mode == "decisions" and not state["ship"]["settled"][0] and chosen is not None \
                and state["ship"]["open_runs"][0]:
            for r in [chosen] + state["ship"]["open_runs"][0]:
                plan |= {(r, f) for f in range(6)}
        plan = {c for c in plan if counts[c] < CAP}
        if not plan:
            return counts
        for c in plan:
            counts[c] = min(CAP, counts[c] + ROUND)


def _rounds_evidence(i, counts, cands, fam, bal, pair) -> dict:
    """The rounds' evidence for replicate i at the current counts, shaped as _decide wants it (arrays of length 1)."""
    one = lambda v: np.array([v])                                    # noqa: E731
    ev = {"family": {}, "balanced_ci": {}, "gain": {}}
    for r in cands:
        ev["family"][r] = {}
        for f in range(6):
            s, rej = fam[(r, f)]
            n = min(counts[(r, f)], counts[("reference", f)])
            k = look_index(n)
            above, below = rej[MARGIN]
            est = float(np.clip(s.estimate_path[i, n - 1], -1, 1))
            ev["family"][r][f] = Evidence(one(est), one(above[i, k]), one(below[i, k]), MARGIN)
        s, rej = bal[r]
        n = min(min(counts[(r, f)], counts[("reference", f)]) for f in range(6))
        k = look_index(n)
        est = float(s.estimate_path[i, n - 1])
        ev["balanced_ci"][r] = Evidence(one(est), one(rej[GAIN_LOWER][0][i, k]), one(rej[GAIN_LOWER][1][i, k]),
                                        GAIN_LOWER)
        ev["gain"][r] = Evidence(one(est), one(rej[MIN_GAIN][0][i, k]), one(rej[MIN_GAIN][1][i, k]), MIN_GAIN)

    def separated(a, b):
        """a's balanced quality shown above b's: the pair (a, b) shown above 0, or (b, a) shown below it."""
        k = look_index(min(min(counts[(a, f)], counts[(b, f)]) for f in range(6)))
        above, below = pair[(a, b)] if a < b else pair[(b, a)][::-1]
        return one(above[i, k])
    ev["separated"] = separated
    return ev


def _decide(ev: dict, cands: list) -> dict:
    verdicts, cells = {}, {}
    for r in cands:
        v = verdict(ev["family"][r], ev["balanced_ci"][r], ev["gain"][r], MIN_GAIN)
        verdicts[r] = v

        def cells_of(key, r=r):
            if key[0] == "family":
                return [(r, key[1]), ("reference", key[1])]
            return [(r, f) for f in range(6)] + [("reference", f) for f in range(6)]
        cells[r] = cells_to_label(v["conditions"], v["settled"], cells_of)
    passes = {r: verdicts[r]["passes"] for r in cands}
    quality = {r: ev["gain"][r].estimate for r in cands}
    sh = ship(passes, quality, ev["separated"])
    all_settled = np.all([verdicts[r]["settled"] for r in cands], 0)
    sh["settled"] = sh["settled"] & all_settled
    return {"verdicts": verdicts, "cells": cells, "ship": sh}


def _coverage(i, counts, cands, cell_cov, fam_cov, bal_cov) -> dict:
    def ok(rej, n):
        lo, hi = rej
        k = look_index(n)
        return not (lo[i, k] or hi[i, k])
    cells = [ok(cell_cov[c], n) for c, n in counts.items()]
    fams = [ok(fam_cov[(r, f)], min(counts[(r, f)], counts[("reference", f)])) for r in cands for f in range(6)]
    bals = [ok(bal_cov[r], min(min(counts[(r, f)], counts[("reference", f)]) for f in range(6))) for r in cands]
    return {"cells": float(np.mean(cells)), "family_deltas": float(np.mean(fams)), "balanced_deltas": float(np.mean(bals))}


def summarise_tables(results: list[dict]) -> dict:
    """Per table class and overall: labels (rounds vs fixed), decisions, settledness, unsafe passes, coverage."""
    out = {}
    for cls in ("far", "near", "all"):
        res = [t for t in results if cls == "all" or t["spec"]["class"] == cls]
        if not res:
            continue
        s = {"tables": len(res), "replicates": sum(t["reps"] for t in res)}
        for mode in LOOPS:
            per_table_ratio, left_open, fixed_settled, differ, ship_open, fixed_ship = [], 0, 0, 0, 0, 0
            for t in res:
                ratios = []
                for row in t["rows"]:
                    fx, rd = row["fixed"]["100"], row[mode]
                    everything = all(fx["settled"].values()) and (fx["ship_settled"] or mode == "verdicts")
                    for r in fx["settled"]:
                        if fx["settled"][r]:
                            fixed_settled += 1
                            left_open += not rd["settled"][r]
                            differ += rd["settled"][r] and rd["passes"][r] != fx["passes"][r]
                    if fx["ship_settled"]:
                        fixed_ship += 1
                        ship_open += not rd["ship_settled"]
                    if everything:
                        ratios.append(rd["labels"] / fx["labels"])
                if ratios:
                    per_table_ratio.append(float(np.mean(ratios)))
            s[mode] = {"median_over_tables_labels_ratio": float(np.median(per_table_ratio)) if per_table_ratio else None,
                       "tables": len(per_table_ratio), "verdicts_fixed100_settles": fixed_settled,
                       "left_open": left_open, "settled_otherwise": differ, "ships_fixed100_settles": fixed_ship,
                       "ships_left_open": ship_open}
        for design in [f"rounds ({m})" for m in LOOPS] + [f"fixed {n}" for n in FIXED]:
            rows = [(t, row[design[8:-1]] if design.startswith("rounds") else row["fixed"][design.split()[1]])
                    for t in res for row in t["rows"]]
            cand = [(t, d, r) for t, d in rows for r in d["passes"]]
            s[design] = {
                "mean_labels_per_cell": float(np.mean([d["labels"] for _, d in rows])) / 30,
                "passes": sum(d["passes"][r] for _, d, r in cand),
                "exact_passes_among_them": sum(d["passes"][r] and t["exact"][r]["passes"] for t, d, r in cand),
                "unsafe_passes": sum(d["passes"][r] and not t["exact"][r]["passes"] for t, d, r in cand),
                "verdicts_settled": float(np.mean([d["settled"][r] for _, d, r in cand])),
                "ship_settled": float(np.mean([d["ship_settled"] for _, d in rows])),
                "coverage": {k: float(np.mean([d["cover"][k] for _, d in rows]))
                             for k in ("cells", "family_deltas", "balanced_deltas")}}
        kinds = {}
        for t in res:
            for r, v in t["spec"]["runs"].items():
                k = kinds.setdefault(v["kind"], {"runs": 0, "labels": {m: [] for m in LOOPS}, "settled": {m: [] for m in LOOPS},
                                                  "fixed100_settled": [], "exact_passes": 0})
                k["runs"] += 1
                k["exact_passes"] += t["exact"][r]["passes"]
                for row in t["rows"]:
                    for m in LOOPS:
                        k["labels"][m].append(row[m]["run_labels"][r] / 6)
                        k["settled"][m].append(row[m]["settled"][r])
                    k["fixed100_settled"].append(row["fixed"]["100"]["settled"][r])
        s["by_run_kind"] = {name: {"runs": k["runs"], "exact_passes": k["exact_passes"],
                                   **{f"labels_a_cell ({m})": float(np.mean(k["labels"][m])) for m in LOOPS},
                                   **{f"settled ({m})": float(np.mean(k["settled"][m])) for m in LOOPS},
                                   "settled (fixed 100)": float(np.mean(k["fixed100_settled"]))}
                            for name, k in sorted(kinds.items())}
        out[cls] = s
    return out


def tables_markdown(summary: dict) -> str:
    f = lambda v: "n/a" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))   # noqa: E731
    lines = ["| tables | design | labels a cell (mean) | passes (exact / unsafe) | verdicts settled | shipped choice "
             "settled | coverage: cells / family deltas / balanced deltas |", "|---|---|---|---|---|---|---|"]
    for cls, s in summary.items():
        for design in [f"rounds ({m})" for m in LOOPS] + [f"fixed {n}" for n in FIXED]:
            d = s[design]
            lines.append(f"| {cls} ({s['tables']} tables x {s['replicates'] // s['tables']}) | {design} | "
                         f"{d['mean_labels_per_cell']:.1f} | {d['passes']} ({d['exact_passes_among_them']} / "
                         f"{d['unsafe_passes']}) | {f(d['verdicts_settled'])} | {f(d['ship_settled'])} | "
                         + " / ".join(f(d['coverage'][k]) for k in ("cells", "family_deltas", "balanced_deltas")) + " |")
    lines += [""]
    for cls, s in summary.items():
        for mode in LOOPS:
            m = s[mode]
            lines.append(f"{cls}, rounds labelling for {'the verdicts and the shipped choice' if mode == 'decisions' else 'the verdicts only'}: "
                         f"where the fixed 100-a-cell design settles every such decision ({m['tables']} tables), the "
                         f"rounds spend a median (over tables) {f(m['median_over_tables_labels_ratio'])} of its labels; "
                         f"of the {m['verdicts_fixed100_settles']} verdicts it settles, the rounds leave {m['left_open']} "
                         f"open and settle {m['settled_otherwise']} otherwise; of the {m['ships_fixed100_settles']} "
                         f"shipped choices it settles, {m['ships_left_open']} left open.")
    s = summary.get("all") or next(iter(summary.values()))
    lines += ["", "By the kind of run (its own six cells; all tables):", "",
              "| run kind | runs (exact passes) | labels a cell, rounds (decisions / verdicts) | verdict settled: rounds "
              "(decisions / verdicts) | fixed 100 |", "|---|---|---|---|---|"]
    for name, k in s["by_run_kind"].items():
        lines.append(f"| {name} | {k['runs']} ({k['exact_passes']}) | {k['labels_a_cell (decisions)']:.1f} / "
                     f"{k['labels_a_cell (verdicts)']:.1f} | {k['settled (decisions)']:.3f} / {k['settled (verdicts)']:.3f} | "
                     f"{k['settled (fixed 100)']:.3f} |")
    return "\n".join(lines) + "\n"
