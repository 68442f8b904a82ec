"""How well the samples door's claims detect a corrupted proxy: corruptions of the proxy column drawn by hypothesis
(a family rescaled, shuffled, a gamed token rewarded, a slice inverted), each claim re-run on each corrupted table.
The gold labels and the samples are unchanged, so the truth is too: a proxy claim that fails on a corrupted family
is a detection, on another family a false alarm; a run verdict that changes is the estimator reacting to a proxy
that says nothing about the truth (PPI++ should only lose power: fail -> pass flips are the unsafe kind).

Generic: a "token" is a whitespace-separated piece of a completion; nothing here knows this project's vocabulary.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from audit.core.seeded_draws import seed_alone
from . import cells as kept

KINDS = ("rescale", "shuffle", "gamed_token", "invert")
DESTROYING = ("shuffle", "invert")       # corruptions that leave the proxy no (or negative) information on a slice


def stress_table(table, seed: int):
    """(the table the stress re-runs the claims on, what it is): the table itself when no cell has more than
    STRESS_UNLABELLED (audit.samples.cells) unlabelled rows; else a fixed, seeded subsample -- every gold row and them
    unlabelled rows a cell (audit.samples.cells.subsample_ranks; a summarised cell kept exactly those rows). The
    corruptions (a family rescaled, shuffled, a token rewarded, a slice inverted) act on whole rows of text and
    proxy, not on per-cell sufficient statistics, so 24 re-runs on a 10M-row log would otherwise cost 24 passes over
    it; the proxy claims read gold rows only, and the verdicts' flips are judged against the subsample's own
    verdicts."""
    summ = table.summaries
    if summ and table.kept_for_seed != seed:
        raise ValueError(f"the table kept the stress subsample of seed {table.kept_for_seed}, not of seed {seed}")
    cells = list(table.cells.items())
    labelled = [~np.isnan(table.gold[idx]) for _, idx in cells]
    counts = [summ[c]["n_unlabelled"] if c in summ else int((~lab).sum()) for (c, _), lab in zip(cells, labelled)]
    ranks = kept.subsample_ranks(counts, seed)
    if all(r is None for r in ranks):
        return table, {"rows": "all", "n_rows": int(table.n_rows)}
    keep = []
    for (c, idx), lab, rk in zip(cells, labelled, ranks):
        u = idx[~lab]
        keep += [idx[lab], u if rk is None or c in summ else u[rk]]
    rows = np.sort(np.concatenate(keep))
    return table.subset(rows), {"rows": f"seeded subsample: every gold row and {kept.STRESS_UNLABELLED} unlabelled rows a "
                                        f"cell ({len(rows)} of {table.n_rows} rows)", "n_rows": int(len(rows)),
                                "of_rows": int(table.n_rows), "unlabelled_per_cell": kept.STRESS_UNLABELLED}


def tokens_of(table, family: str, texts: dict | None = None) -> list[str]:
    toks = set()
    for text in _texts(table, family, texts):
        toks.update(text.split())
    return sorted(toks)


def _texts(table, family, cache: dict | None) -> list[str]:
    cache = {} if cache is None else cache
    if family not in cache:
        cache[family] = table.texts(table.family_rows(family))
    return cache[family]


def corruption_specs(table, texts: dict | None = None):
    """hypothesis strategy: {family: (kind, params)} for one or two families of the table."""
    from hypothesis import strategies as st
    vocab = {f: tokens_of(table, f, texts) for f in table.families}

    def kind(f):
        opts = [st.tuples(st.just("rescale"), st.one_of(st.floats(3.0, 8.0), st.floats(0.1, 0.3))),
                st.tuples(st.just("shuffle"), st.integers(0, 2**31 - 1)),
                st.tuples(st.just("invert"), st.sampled_from(["all", "half"]))]
        if vocab[f]:
            opts.append(st.tuples(st.just("gamed_token"),
                                  st.tuples(st.sampled_from(vocab[f]), st.floats(1.0, 4.0))))
        return st.one_of(*opts)

    fams = st.lists(st.sampled_from(table.families), min_size=1, max_size=min(2, len(table.families)), unique=True)
    return fams.flatmap(lambda fs: st.fixed_dictionaries({f: kind(f) for f in fs}))


def corrupt(table, spec: dict, texts: dict | None = None) -> np.ndarray:
    """The proxy column with `spec` applied (a new array); `texts` caches each family's completions."""
    proxy = table.proxy.copy()
    for f, (kind, param) in spec.items():
        rows = table.family_rows(f)
        present = ~np.isnan(proxy[rows])     # a missing proxy stays missing (its cell is certified from gold alone)
        rows = rows[present]
        if not len(rows):
            continue
        x = proxy[rows]
        if kind == "rescale":
            x = x.mean() + param * (x - x.mean())
        elif kind == "shuffle":
            x = np.random.default_rng(param).permutation(x)
        elif kind == "invert":
            sel = np.ones(len(rows), bool)
            if param == "half":        # the slice: the first half of the family's prompts, by prompt_id
                pids = table.prompt_code[rows]
                names = sorted((table.prompts[c], c) for c in np.unique(pids))
                half = [c for _, c in names[: max(1, len(names) // 2)]]
                sel = np.isin(pids, half)
            x = x.copy()
            x[sel] = 2 * x[sel].mean() - x[sel]
        elif kind == "gamed_token":
            tok, bonus = param
            counts = np.array([text.split().count(tok) for text in _texts(table, f, texts)], float)[present]
            x = x + bonus * x.std() * counts
        proxy[rows] = x
    return proxy


def _flags(audit, agreement: dict) -> dict:
    thr, r = audit.cfg.agreement_min_pearson_lower, audit.cfg.scale_max_ratio
    out = {}
    for f, a in agreement.items():
        s = a["scale"]["ci95"]
        out[f] = {"proxy.agrees_with_gold": a["ci95"] is None or not a["ci95"][0] > thr,
                  "proxy.on_common_scale": s is not None and (s[0] > r or s[1] < 1 / r)}
        out[f]["flag (either)"] = out[f]["proxy.agrees_with_gold"] or out[f]["proxy.on_common_scale"]
    return out


def _verdicts(audit) -> dict:
    out = {}
    margin = audit.cfg.release_rule.family_ci_lower_gt
    for r in audit.t.runs:
        if r != audit.reference:
            v = audit.verdict(r)
            out[("run.passes_release_rule", r)] = v["passes"]
            for f, ci in v["family_delta_ci95"].items():
                out[("run.non_inferior", f"{r}-{f}")] = ci[0] > margin
    return out


def stress(audit, examples: int, n_resamples: int = 400) -> dict:
    """Draw `examples` corruptions (seeded by the audit's seed), re-run the claims, and return the rates."""
    from hypothesis import HealthCheck, Phase, given, seed, settings

    from .estimates import SamplesAudit
    cfg = dataclasses.replace(audit.cfg, n_resamples=n_resamples)
    table, rows = stress_table(audit.t, audit.cfg.seed)
    # cells of families a corruption leaves alone are the audit's own (or the subsample's), not redrawn
    cache = audit._shared if table is audit.t else {}
    base = SamplesAudit(table, audit.reference, cfg, cell_cache=cache)
    flags0 = _flags(base, base.agreement(spearman=False, ci_method="percentile"))
    verdicts0 = _verdicts(base)
    texts: dict = {}
    results = []

    @seed(audit.cfg.seed)
    @settings(max_examples=examples, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(spec=corruption_specs(table, texts))
    def probe(spec):
        if len(results) >= examples:
            return
        t2 = dataclasses.replace(table, proxy=corrupt(table, spec, texts))
        a2 = SamplesAudit(t2, audit.reference, cfg, cell_cache=cache)
        results.append({"spec": spec, "flags": _flags(a2, a2.agreement(spearman=False, ci_method="percentile")), "verdicts": _verdicts(a2)})

    if examples > 0:
        with seed_alone():      # the same corruptions for the same seed in any process (audit.core.seeded_draws)
            probe()
    return {**judge(results, flags0, verdicts0), "table": rows}


def judge(results: list, flags0: dict, verdicts0: dict) -> dict:
    claims = {}
    for name in ("proxy.agrees_with_gold", "proxy.on_common_scale", "flag (either)"):
        det, fa, by_kind = [], [], {}
        for res in results:
            for f, fl in res["flags"].items():
                if flags0[f][name]:
                    continue                 # already failing on the table as given: nothing to detect
                if f in res["spec"]:
                    det.append(fl[name])
                    by_kind.setdefault(res["spec"][f][0], []).append(fl[name])
                else:
                    fa.append(fl[name])
        claims[name] = {"detection_rate": float(np.mean(det)) if det else None,
                        "false_alarm_rate": float(np.mean(fa)) if fa else None,
                        "detection_by_kind": {k: float(np.mean(v)) for k, v in sorted(by_kind.items())},
                        "fail_to_pass": None, "pass_to_fail": None, "n": len(det) + len(fa)}
    for name in ("run.passes_release_rule", "run.non_inferior"):
        keys = [k for k in verdicts0 if k[0] == name]
        f2p = [res["verdicts"][k] for res in results for k in keys if not verdicts0[k]]
        p2f = [not res["verdicts"][k] for res in results for k in keys if verdicts0[k]]
        claims[name] = {"detection_rate": None, "false_alarm_rate": None, "detection_by_kind": {},
                        "fail_to_pass": float(np.mean(f2p)) if f2p else None,
                        "pass_to_fail": float(np.mean(p2f)) if p2f else None, "n": len(f2p) + len(p2f)}
    kinds = sorted({k for res in results for k, _ in res["spec"].values()})
    destroying = [fl for res in results for f, (k, p) in res["spec"].items()
                  if (k == "shuffle" or (k == "invert" and p == "all")) and not flags0[f]["flag (either)"]
                  for fl in [res["flags"][f]["flag (either)"]]]
    return {"examples": len(results), "kinds": kinds, "claims": claims,
            "destroying_detection_rate": float(np.mean(destroying)) if destroying else None,
            "n_destroying": len(destroying),
            "specs": [{f: [k, p if not isinstance(p, tuple) else list(p)] for f, (k, p) in r["spec"].items()}
                      for r in results]}
