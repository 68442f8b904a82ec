"""The design the intervals assume: within each run x family cell, the gold rows are a random subset of its rows."""
import pytest

from checks.samples.conftest import inputs


@pytest.mark.claim("gold.random_subset")
def test_gold_random_subset(samples_audit, evidence, sample_cell):
    r, f = sample_cell
    d = samples_audit.t.design[(r, f)]
    evidence.record(estimate=d["p_value"], method=d["test"],
                    thresholds={"p_value_ge": d["level"], "family_wise_alpha": samples_audit.cfg.design.alpha},
                    details={"run": r, "family": f, **d}, inputs=inputs(samples_audit))
    if not d["random"]:
        pytest.fail(f"{r} {f}: the gold rows' proxy is not distributed like the cell's other rows (KS p = "
                    f"{d['p_value']:.2g} < {d['level']:.2g}): not a random subset; its interval is the worst case",
                    pytrace=False)
