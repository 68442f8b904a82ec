"""audit.task.stress: the judge's arithmetic, the severity order, the strategy's coverage, and one stress batch end to
end on the tiny world (RM trained, hazard labelled, diagnostic and label-side claims run, cached)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from audit.task.corruption import Corruption
from audit.task.stress import corruption_specs, judge
from audit.task.stress_batch import StressConfig, severity, spec_key
from rlhf.vocab import FAMILIES

ROOT = Path(__file__).resolve().parents[1]


def _result(spec, hazard, flag, risk=None, ci_lo=0.5, above=0.0):
    return {"spec": spec, "severity": 0.0, "hazard": {f: f in hazard for f in FAMILIES},
            "flag": {f: f in flag for f in FAMILIES},
            "risk": risk or {f: (0.9 if f in flag else 0.1) for f in FAMILIES},
            "rm_gold_ci95": {f: [ci_lo if f not in hazard else 0.0, 0.9] for f in FAMILIES},
            "crowd_above_1": {f: (0.3 if f in hazard else above) for f in FAMILIES}}


def test_judge_counts_flags_false_flags_and_label_claim_rates():
    clean = _result({}, [], ["anvil"])                                  # one false flag on the clean batch
    bad = _result({"dune": {"kind": "scaled"}}, ["dune"], ["dune"])
    j = judge([clean, bad], rm_min_pearson_lower=0.2, crowd_max_share_above_1=0.01)
    assert j["pairs"] == 12 and j["hazardous"] == 1 and j["false_flags"] == 1 and j["false_flags_clean_batch"] == 1
    assert j["flag_accuracy"] == 11 / 12 and j["flag_accuracy_ci95"][0] < 11 / 12 < j["flag_accuracy_ci95"][1]
    assert abs(j["auroc"] - 10.5 / 11) < 1e-12          # the false flag's risk ties with dune's
    assert j["missed"] == 0 and j["mildest_missed"] is None
    rm = j["label_claims"]["rm.agrees_with_experts"]
    assert rm["detection_rate"] == 1.0 and rm["false_alarm_rate"] == 0.0 and rm["n_corrupted"] == 1


def test_judge_names_the_mildest_missed_batch_and_has_no_auroc_without_both_classes():
    a = {**_result({"dune": {}}, ["dune"], []), "severity": 0.9}
    b = {**_result({"ember": {}}, ["ember"], []), "severity": 0.4}
    j = judge([a, b], 0.2, 0.01)
    assert j["missed"] == 2 and j["mildest_missed"]["severity"] == 0.4
    assert judge([_result({}, [], [])], 0.2, 0.01)["auroc"] is None


def test_severity_orders_corruptions_and_spec_key_is_stable():
    mild = {"dune": Corruption(kind="scaled", scale=1.3, replaced_share=0.4)}
    strong = {"dune": Corruption(kind="scaled", scale=4.0, replaced_share=1.0)}
    assert 0 < severity(mild) < severity(strong) and severity({}) == 0.0
    assert spec_key(strong) == spec_key(dict(strong)) != spec_key(mild)


@settings(max_examples=30, deadline=None)
@given(spec=corruption_specs())
def test_strategy_draws_one_or_two_families_within_spec(spec):
    assert 1 <= len(spec) <= 2 and set(spec) <= set(FAMILIES)
    for c in spec.values():
        assert c.kind in ("wrong_rubric", "scaled") and 0.4 <= c.replaced_share <= 1.0
        if c.kind == "scaled":
            assert 1.3 <= c.scale <= 4.0


@settings(max_examples=30, deadline=None)
@given(spec=corruption_specs(0.1))
def test_strategy_draws_milder_shares_on_request(spec):
    assert all(0.1 <= c.replaced_share <= 1.0 for c in spec.values())


def test_strategy_refuses_a_share_outside_0_1():
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="min_replaced_share"):
            corruption_specs(bad)


def test_one_stress_round_on_the_tiny_world(tiny_world, tmp_path):
    from audit.task.diagnostic import DiagnosticConfig
    from audit.task.recovery import RecoveryConfig, recover_rubrics
    from audit.task.stress import stress
    from audit.task.task_dir import load_task

    task = load_task(tiny_world / "task")
    rubrics = recover_rubrics(task, task.load_policy(), RecoveryConfig(prior_samples_per_family=300, n_boot=4))
    cfg = StressConfig(examples=1, crowd_per_family=60, qa_per_family=20, rm_epochs=2, hazard_steps=4,
                       hazard_batch_prompts=4, hazard_samples_per_prompt=2, eval_prompts_per_family=20)
    dcfg = DiagnosticConfig(steps=4, batch_prompts=4, samples_per_prompt=2, prior_samples_per_family=100,
                            eval_prompts_per_family=20)
    said = []
    res = stress(task, rubrics, cfg, dcfg, tmp_path / "stress", say=said.append)
    assert len(res["results"]) == 2 and res["results"][0]["spec"] == {} and res["results"][1]["spec"]
    batches = [s for s in said if s.startswith("stress batch")]
    assert len(batches) == 2 and batches[0].startswith("stress batch 1/2")
    stages = [s for s in said if not s.startswith("stress batch")]     # the stacked stage's progress, in order
    assert [s.split(" in ")[0].split(" (")[0] for s in stages] == [
        "stress: 2 batches labelled and their RMs trained", "stress: 3 hazard runs", "stress: 2 diagnostics"]
    for r in res["results"]:
        assert set(r["hazard"]) == set(FAMILIES) and all(np.isfinite(list(r["risk"].values())))
        # stand-in runs shared (the default); with two batches each takes one run whole: exactly its own run
        assert set(r["stand_in_run"]) == set(FAMILIES) and len(set(r["stand_in_run"].values())) == 1
    again = stress(task, rubrics, cfg, dcfg, tmp_path / "stress", say=lambda s: None)   # all from the cache
    assert json.dumps(again["results"]) == json.dumps(res["results"])
    # a kill between the stacked stage's writes: the stage is redone whole and gives the same bytes
    from audit.task.stress_batch import spec_key
    from audit.task.corruption import Corruption
    key = spec_key({f: Corruption(**c) for f, c in res["results"][1]["spec"].items()})
    (tmp_path / "stress" / f"{key}.json").unlink()
    (tmp_path / "stress" / "rubric_gain.json").unlink()
    resumed = stress(task, rubrics, cfg, dcfg, tmp_path / "stress", say=lambda s: None)

    def timeless(results):      # the redone stage's wall time is a measurement, not a result (evidence only)
        return json.dumps([{k: v for k, v in r.items() if k != "diagnostic_s"} for r in results])
    assert timeless(resumed["results"]) == timeless(res["results"])
    # the stacked path (default) is the one-batch-after-another path up to float rounding: same batches, same
    # RMs by meaning, the same gains and stand-in gains within a small tolerance (4 tiny steps: the runs stay close)
    from audit.task.stress import _shares_prefix
    assert _shares_prefix(cfg, dcfg, task)         # the diagnostic's RM run is the hazard run's first steps
    import dataclasses
    serial = stress(task, rubrics, dataclasses.replace(cfg, stacked=False), dcfg, tmp_path / "serial",
                    say=lambda s: None)
    for a, b in zip(res["results"], serial["results"]):
        assert a["spec"] == b["spec"]
        for f in FAMILIES:
            assert abs(a["gain"][f] - b["gain"][f]) < 0.03 and abs(a["rubric_gain"][f] - b["rubric_gain"][f]) < 0.03
    # --ray local: each batch a Ray task on the one-batch path, the task shipped as a tar (no shared filesystem).
    # Same machine and code as `serial`, but the workers run on one thread: the same batches, the same hazard
    # labels and flags, gains equal up to reductions split by another thread count.
    on_ray = stress(task, rubrics, dataclasses.replace(cfg, stacked=False, ray_address="local"), dcfg,
                    tmp_path / "ray", say=said.append)
    assert said[-1] == "stress batch 2/2: " + json.dumps({f: c["kind"] for f, c in serial["results"][1]["spec"].items()})
    assert any("done on Ray (local)" in s for s in said)
    for a, b in zip(serial["results"], on_ray["results"]):
        assert a["spec"] == b["spec"] and b["numeric"]["threads"] == 1
        for f in FAMILIES:
            assert abs(a["gain"][f] - b["gain"][f]) < 1e-4 and abs(a["rubric_gain"][f] - b["rubric_gain"][f]) < 1e-4
            assert a["risk"][f] == pytest.approx(b["risk"][f], abs=1e-3)
    assert sorted(p.name for p in (tmp_path / "ray").iterdir() if p.name.startswith("rm-")) == \
        sorted(p.name for p in (tmp_path / "serial").iterdir() if p.name.startswith("rm-"))


def test_ray_address_errors_name_the_address():
    from audit.task.stress_ray import connect
    with pytest.raises(RuntimeError, match="--ray 127.0.0.1:1: cannot start or reach a Ray cluster"):
        connect("127.0.0.1:1")             # nothing listens on port 1: refused at once, not retried for minutes
    with pytest.raises(RuntimeError, match="--ray nonsense: expected host:port"):
        connect("nonsense")


def test_certify_refuses_an_unreachable_ray_address_before_writing(tmp_path):
    from tests.helpers import run_certify
    r = run_certify(tmp_path / "no-task", tmp_path / "out", "--ray", "127.0.0.1:1")
    assert r.returncode == 2 and "--ray 127.0.0.1:1: cannot start or reach a Ray cluster" in r.stderr
    assert not (tmp_path / "out").exists()


def test_drawn_batches_depend_on_the_seed_alone():
    """The stress batches for a seed are the same in any process, whatever of ours it has imported: hypothesis
    draws now and then a number written in a loaded local module (audit.core.seeded_draws), and without the guard
    a draw made after importing more of the repo differed from one made before (a replaced share 0.999, the Adam
    beta of rlhf/stacked.py). Eight examples (the default count), drawn in fresh processes and twice in one."""
    code = ("import dataclasses, json\n{imports}\nfrom audit.task.stress import StressConfig, draw_specs\n"
            "def draw():\n"
            "    return [{{f: dataclasses.asdict(c) for f, c in s.items()}} for s in draw_specs(StressConfig(examples=8))]\n"
            "first = draw()\n{more}\nprint(json.dumps([first, draw()]))\n")
    many = "import rlhf.stacked, rlhf.train_rl_stacked, audit.render, audit.certify, world.build, world.zoo"

    def run(imports, more):
        r = subprocess.run([sys.executable, "-c", code.format(imports=imports, more=more)], capture_output=True,
                           text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)
    bare = run("", many)
    loaded = run(many, "")
    assert bare[0] == bare[1] == loaded[0] == loaded[1]
    assert len(bare[0]) == 9 and bare[0][0] == {} and all(bare[0][1:])
