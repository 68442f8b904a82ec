"""world.experiments.diagnosis_bench: the zoo sweep on Ray, end to end at tiny settings, and its bookkeeping."""
import json
import subprocess
import sys

import numpy as np
import pytest

from world.experiments.diagnosis_bench import draw_specs, summarise
from rlhf.vocab import FAMILIES


def test_specs_start_clean_and_cover_both_kinds():
    specs = draw_specs(0, 30)
    assert specs[0] == {} and all(1 <= len(s) <= 2 for s in specs[1:])
    kinds = {c.kind for s in specs for c in s.values()}
    rows = {str(c.count_rows) != "random" for s in specs for c in s.values() if c.kind == "wrong_rubric"}
    assert kinds == {"scaled", "wrong_rubric"} and rows == {True, False}
    assert all(0.4 <= c.replaced_share <= 0.95 for s in specs for c in s.values())
    assert draw_specs(0, 30) == specs and draw_specs(1, 30) != specs


def test_uniform_regime_draws_uniform_wrong_tokens_with_random_count_rows():
    specs = draw_specs(0, 30, "uniform")
    assert specs[0] == {} and all(1 <= len(s) <= 2 for s in specs[1:])
    cs = [c for s in specs for c in s.values()]
    assert {(c.kind, c.replacement, str(c.count_rows)) for c in cs} == {("wrong_rubric", "uniform", "random")}
    assert all(0.4 <= c.replaced_share <= 0.95 and 0.05 <= c.rho <= 0.4 for c in cs)
    assert draw_specs(0, 30, "uniform") == specs
    mild = [c for s in draw_specs(0, 30, "uniform-mild") for c in s.values()]
    assert {(c.kind, c.replacement, str(c.count_rows)) for c in mild} == {("wrong_rubric", "uniform", "random")}
    assert all(0.1 <= c.replaced_share <= 0.45 and 0 <= c.rho <= 0.12 for c in mild)
    rescaled = [c for s in draw_specs(0, 30, "rescale") for c in s.values()]
    assert {c.kind for c in rescaled} == {"scaled"} and all(1.3 <= c.scale <= 4.0 for c in rescaled)
    assert len({c.replacement for c in rescaled}) == 3 and draw_specs(0, 30, "rescale")[0] == {}
    collateral = draw_specs(0, 30, "collateral")
    assert collateral[0] == {} and all(len(s) == 1 for s in collateral[1:])    # five bystanders a batch
    cs = [c for s in collateral for c in s.values()]
    assert {(c.kind, c.replacement, str(c.count_rows)) for c in cs} == {("wrong_rubric", "uniform", "random")}
    assert all(0.2 <= c.replaced_share <= 0.7 and 0.08 <= c.rho <= 0.3 for c in cs)
    assert len({f for s in collateral for f in s}) == 6 and draw_specs(0, 30, "collateral") == collateral
    with pytest.raises(ValueError, match="regime"):
        draw_specs(0, 3, "policy")


def test_summary_counts():
    rows = [{"world": "w", "batch": 0, "family": f, "clean_batch": True, "corrupted": False, "hazard": False,
             "risk": 0.1 * i, "flag": i == 5, "diagnostic_s": 10.0} for i, f in enumerate(FAMILIES)]
    # batch 1: fjord corrupted (hazardous, flagged); ember a collateral hazard, missed (risk 0.6)
    rows += [{"world": "w", "batch": 1, "family": f, "clean_batch": False, "corrupted": f == "fjord",
              "hazard": i >= 4, "risk": 0.1 * i + 0.1 * (f == "fjord"), "flag": f == "fjord", "diagnostic_s": 20.0}
             for i, f in enumerate(FAMILIES)]
    summ = summarise(rows)
    s = summ["all"]
    assert s["pairs"] == 12 and s["hazardous"] == 2 and s["false_flags_clean"] == 1 and s["false_flags"] == 1
    assert s["flag_accuracy"] == 10 / 12 and s["missed"] == 1 and s["s_per_rm"] == 15.0 and 0.5 < s["auroc"] <= 1.0
    assert set(summ) == {"all", "w", "[corrupted]", "[bystander]", "[clean]"}
    by = summ["[bystander]"]
    assert by["pairs"] == 5 and by["hazardous"] == 1 and by["missed"] == 1 and by["flag_accuracy"] == 4 / 5
    assert by["auroc"] == 1.0 and summ["[corrupted]"]["pairs"] == 1 and summ["[clean]"]["false_flags_clean"] == 1
    assert "settled" not in s          # one-run diagnostics say nothing about it
    # with replicates: the two wrong flags (batch 0 fjord, a false flag; batch 1 ember, missed) unsettled, the rest settled
    for r in rows:
        r["settled"] = not (r["batch"] == 0 and r["family"] == "fjord") and not (r["batch"] == 1 and r["family"] == "ember")
    s = summarise(rows)["all"]
    assert s["settled"] == 10 and s["settled_wrong"] == 0 and s["unsettled_wrong"] == 2
    from world.experiments.diagnosis_bench import table
    assert "settled flags (--replicates): all 10/12 (0 wrong; unsettled wrong 2)" in table(summarise(rows))
    # the adaptive diagnostic (--max-steps): which step decided each family, RL steps run per RM
    for r in rows:
        r["decided_at_step"] = 250 if r["settled"] else 450
        r["steps_run"] = 450             # each batch has a family unsettled at 250: its runs went on
    s = summarise(rows)["all"]
    assert s["decided_by_step"] == {"250": 10, "450": 2} and s["mean_steps_run"] == 450.0
    assert "families decided at step 250: 10, 450: 2; RL steps run per RM 450" in table(summarise(rows))


def test_three_calls_scored():
    """The bench scores the three calls: the calls made (risky, safe), their accuracy with an exact binomial CI,
    the share called, risky calls on clean batches, the families too close to call and how many were hazardous;
    with --settle, what the long mode called."""
    def r(batch, fam, hazard, call, clean=False, by=None):
        out = {"world": "w", "batch": batch, "family": fam, "clean_batch": clean, "corrupted": False, "hazard": hazard,
               "risk": 0.5, "flag": False, "diagnostic_s": 10.0, "call": call}
        return out if by is None else {**out, "called_by": by}
    rows = [r(0, "anvil", False, "safe", True), r(0, "birch", False, "risky", True),     # a risky call on a clean batch
            r(0, "cobalt", False, "too close to call", True), r(1, "anvil", True, "risky"),
            r(1, "birch", True, "too close to call"), r(1, "cobalt", False, "safe")]
    s = summarise(rows)["all"]
    assert (s["called"], s["call_errors"], s["risky_calls_clean"], s["too_close"], s["too_close_hazardous"]) == \
           (4, 1, 1, 2, 1)
    assert s["share_called"] == 4 / 6 and s["call_accuracy"] == 3 / 4 and "long_mode" not in s
    from scipy.stats import binomtest
    ci = binomtest(3, 4).proportion_ci(0.95, method="exact")
    assert s["call_accuracy_ci95"] == [ci.low, ci.high]
    from world.experiments.diagnosis_bench import table
    assert "three calls" in table(summarise(rows)) and "0.750" in table(summarise(rows))
    settled = [{**x, "called_by": "long mode" if i in (2, 4) else "first run"} for i, x in enumerate(rows)]
    settled[4]["call"] = "risky"                    # the long mode called birch (hazardous) risky; cobalt stayed close
    s = summarise(settled)["all"]
    assert (s["long_mode"], s["long_called"], s["long_right"]) == (2, 1, 1)
    assert "--settle: the long mode took all 2 (called 1, right 1)" in table(summarise(settled))
    assert "called" not in summarise([{k: v for k, v in x.items() if k != "call"} for x in rows])["all"]


def test_quick_bench_on_the_tiny_world(tiny_world, tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "world.experiments.diagnosis_bench", str(tiny_world), "--quick", "--out",
                        str(out), "--regime", "uniform", "--cache-dir", str(tmp_path / "cache"), "--alt-label", "10,2e-3"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert len(res["rows"]) == 2 * len(FAMILIES)
    assert all("risk" in row and isinstance(row["hazard"], bool) for row in res["rows"])
    assert res["rows"][0]["clean_batch"] and "AUROC" in r.stdout and "[bystander]" in r.stdout
    assert {c["replacement"] for row in res["rows"] if row["spec"] for c in [row["spec"]]} == {"uniform"}
    # --alt-label: every pair labelled again by the shorter recipe, and the agreement reported
    assert all(isinstance(row["hazard_alt"], bool) and np.isfinite(row["rm_gain_alt"]) for row in res["rows"])
    agree = np.mean([row["hazard_alt"] == row["hazard"] for row in res["rows"]])
    assert res["summary"]["all"]["alt_label_agreement"] == agree and "agree with the hazard labels" in r.stdout
    diag_agree = np.mean([row["flag"] == row["hazard_alt"] for row in res["rows"]])
    assert res["summary"]["all"]["diagnostic_alt_agreement"] == diag_agree
    assert "the diagnostic's flags agree with the shorter recipe's labels" in r.stdout
    assert res["config"]["alt_label"] == [10, 0.002]
    assert list((tmp_path / "cache" / tiny_world.name).glob("rm-*/rm.safetensors"))   # caches where told
    assert "[bench] 2/2 RMs trained" in r.stderr                      # progress on long sweeps
    bad = subprocess.run([sys.executable, "-m", "world.experiments.diagnosis_bench", str(tmp_path)], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "not a built world" in bad.stderr
    unreachable = subprocess.run([sys.executable, "-m", "world.experiments.diagnosis_bench", str(tiny_world), "--ray", "127.0.0.1:1",
                                  "--out", str(tmp_path / "never.json")], capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 2 and "cannot start or reach a Ray cluster" in unreachable.stderr
    assert not (tmp_path / "never.json").exists()
