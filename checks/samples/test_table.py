"""The design the intervals assume: within each run x family cell, the gold rows are a random subset of its rows."""
import pytest

from audit.samples.session import inputs


@pytest.mark.claim("gold.random_subset")
def test_gold_random_subset(samples_audit, evidence, sample_cell):
    r, f = sample_cell
    d = samples_audit.t.design[(r, f)]
    evidence.record(estimate=d["p_value"], method=d["test"],
                    thresholds={"p_value_ge": d["level"], "family_wise_alpha": samples_audit.cfg.design.alpha},
                    details={"run": r, "family": f, **d}, inputs=inputs(samples_audit))
    if not d["random"]:
        alpha = samples_audit.cfg.design.alpha
        pytest.fail(f"{r} {f}: the gold rows' proxy is distributed unlike the cell's other rows (KS p = "
                    f"{d['p_value']:.2g} < {d['level']:.2g}); this test refuses {alpha:.0%} of tables whose gold rows "
                    f"are a random subset (its family-wise level), so it is evidence, not proof, of a selection; "
                    "this cell's interval is the worst case", pytrace=False)
