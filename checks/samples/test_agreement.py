"""SPEC §3 question 2 on a samples table: per family, does the proxy agree with the gold labels (pooled over runs),
and is it on the same scale as on the other families?"""
import numpy as np
import pytest

from audit.samples.session import inputs

MAX_POINTS = 300       # proxy-vs-gold points kept per family for the scatter figure


def _points(audit, family):
    t = audit.t
    idx = audit.gold_rows[family]
    if len(idx) > MAX_POINTS:
        idx = np.sort(np.random.default_rng(audit.cfg.seed).choice(idx, MAX_POINTS, replace=False))
    return [[round(float(t.proxy[i]), 4), round(float(t.gold[i]), 4), t.runs[t.run_code[i]]] for i in idx]


@pytest.mark.claim("proxy.agrees_with_gold")
def test_proxy_agrees_with_gold(samples_audit, evidence, sample_family):
    a = samples_audit.proxy_agreement[sample_family]
    thr = samples_audit.cfg.agreement_min_pearson_lower
    budget = samples_audit.budget()[sample_family]
    evidence.record(estimate=a["pearson"], ci95=a["ci95"], method=f"pearson, paired bootstrap ({a['method']})",
                    n_resamples=a["n_resamples"], seed=a["seed"], thresholds={"ci95_lower_gt": thr},
                    details={"rm_gold_pearson": a["pearson"], "ci95": a["ci95"], "spearman": a["spearman"],
                             "spearman_ci95": a["spearman_ci95"], "n": a["n"],
                             "per_run_pearson": a["per_run_pearson"], "points": _points(samples_audit, sample_family),
                             "gold_budget": budget},
                    inputs=inputs(samples_audit))
    if a["ci95"] is None:        # no gold row (or too few) has a proxy: nothing to judge, and nothing to trust
        pytest.skip(f"{sample_family}: {a['method']} (the proxy is missing on the others): its agreement with gold "
                    "cannot be evaluated")
    lo, hi = a["ci95"]
    if not lo > thr:
        pytest.fail(f"{sample_family}: proxy-gold Pearson {a['pearson']:.2f}, CI [{lo:.2f}, {hi:.2f}] not above "
                    f"{thr} (pooled over runs; per run: "
                    + ", ".join(f"{r} {v:+.2f}" for r, v in a["per_run_pearson"].items()) + ")", pytrace=False)


@pytest.mark.claim("proxy.on_common_scale")
def test_proxy_on_common_scale(samples_audit, evidence, sample_family):
    s = samples_audit.proxy_agreement[sample_family]["scale"]
    r = samples_audit.cfg.scale_max_ratio
    evidence.record(estimate=s.get("ratio"), ci95=s.get("ci95"), n_resamples=samples_audit.cfg.n_resamples,
                    seed=samples_audit.cfg.seed,
                    method="OLS slope of proxy on gold over the other families' median slope, percentile bootstrap",
                    thresholds={"ratio_ci_reaches_into": [1 / r, r]}, details=s, inputs=inputs(samples_audit))
    if s.get("ci95") is None:      # cannot be evaluated: an error, not a finding about this family
        pytest.skip(f"{sample_family}: no scale to compare with (no other family whose proxy agrees with gold"
                    + ("" if not s.get("compared_with") else f"; their median slope {s['others_median_slope']:.3g}")
                    + ")")
    lo, hi = s["ci95"]
    if lo > r or hi < 1 / r:
        pytest.fail(f"{sample_family}: the proxy rises {s['ratio']:.2f}x as fast per unit of gold as on the other "
                    f"families (CI [{lo:.2f}, {hi:.2f}] outside [{1 / r:.2f}, {r:.2f}]): an optimiser would "
                    "over- or under-weight this family", pytrace=False)
