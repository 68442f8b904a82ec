"""The gold-free diagnostic's contract (CLI, output, determinism) on the tiny world, and its gold-free rubric on
a world it was not fitted to. Its AUROC on re-trained RMs is measured by `python -m world grade` (docs/)."""
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from audit.task.diagnostic import (DiagnosticConfig, associated_positions, diagnose, proxy_rubric,
                                   stand_in_gains)
from audit.task.diagnostic_band import RISKY, SAFE, TOO_CLOSE, Band, add_calls, band_for
from audit.core.hazard import hazardous
from audit.task.recovery import association_prior
from rlhf.model import load_policy
from rlhf.vocab import FAMILIES

SMALL = dict(steps=6, batch_prompts=8, samples_per_prompt=4, prior_samples_per_family=300,
             eval_prompts_per_family=60)


def test_cli_contract(tiny_world, tmp_path):
    task = tiny_world / "task"
    out = tmp_path / "diag.json"
    args = [sys.executable, "-m", "audit.diagnostic", "--rm-dir", str(task / "reward_model"), "--policy-dir",
            str(task / "policy"), "--prompts", str(task / "data" / "prompts_train.jsonl"), "--out", str(out)]
    args += sum(([f"--{k.replace('_', '-')}", str(v)] for k, v in SMALL.items()), [])
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "[diagnostic] 6-step run against the RM in" in r.stderr    # progress: each phase and its seconds
    res = json.loads(out.read_text())
    assert set(res["families"]) == set(FAMILIES)
    for f, v in res["families"].items():
        assert isinstance(v["risk"], float) and isinstance(v["flag"], bool)
        # the flag is SPEC §3's rule (audit.core.hazard) on the two stand-in gains, and risk > 0.8 says the same
        assert v["flag"] == hazardous(v["proxy_gain_rm_run"], v["proxy_gain_rubric_run"]) == (v["risk"] > 0.8)
        assert 0 <= v["stand_in_positions"] <= 8          # how many positions the stand-in could read
        # three calls from the band measured for the recipe (at these tiny settings: the default's, said so)
        assert v["call"] == band_for(DiagnosticConfig(**SMALL)).call(v["risk"])
        assert v["call_interval"][0] < v["risk"] < v["call_interval"][1] or v["call_interval"][0] == v["risk"]
    assert res["band"]["measured"] is False and "not measured at this recipe (6 steps" in res["band"]["basis"]
    assert res["band"]["safe_below"] <= 0.8 <= res["band"]["risky_above"]
    for f, v in res["families"].items():      # stdout: each family's call, risk and where SPEC's rule may put it
        assert re.search(rf"^{f}\s+{re.escape(v['call'])}\s+risk {v['risk']:.2f} \(SPEC's rule: ", r.stdout, re.M)
    assert "calls: risky above risk" in r.stdout
    bad = subprocess.run(args[:4] + [str(tmp_path / "nope")] + args[5:], capture_output=True, text=True)
    # bad input: exit 2, one line naming the file (rlhf.errors.run_cli)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"python -m audit.diagnostic: error: {tmp_path / 'nope' / 'rm.safetensors'}: file not found (a checkpoint dir "
        "holds rm.safetensors and config.json)"], bad.stderr


def test_settle_calls_the_too_close_families_again_with_the_long_mode(tiny_world, monkeypatch):
    """--settle: the families too close to call get the long mode (its recipe and replicates from the band file;
    here a tiny one) and its own band; the others keep their call; the first call is kept beside the new one."""
    import audit.task.diagnostic as D
    task = tiny_world / "task"
    wide = Band(below=2.0, above=2.0, level=0.99, measured=True, basis="wide")     # every family too close
    monkeypatch.setattr(D, "settle_recipe", lambda: {"steps": 8, "lr": 6e-4, "replicates": 2})
    seen = []

    def fake_add_calls(result, cfg, band=None):
        seen.append((cfg.steps, cfg.replicates))
        return add_calls(result, cfg, wide if cfg.steps == SMALL["steps"] else Band(0.0, 0.0, 0.99, True, "long"))
    monkeypatch.setattr(D, "add_calls", fake_add_calls)
    cfg = DiagnosticConfig(**SMALL, settle=True)
    res = diagnose(task / "reward_model", task / "policy", task / "data" / "prompts_train.jsonl", cfg)
    assert seen == [(6, 1), (8, 2)]
    close = [f for f, v in res["families"].items() if v["called_by"] == "long mode"]
    assert res["settle"]["families"] == close and res["settle"]["config"]["steps"] == 8
    for f, v in res["families"].items():
        if f in close:       # the long mode's record (two replicates: their t interval), its call, the first call
            assert v["first_call"]["call"] == TOO_CLOSE and "replicates" in v and v["call"] in (RISKY, SAFE)
            assert v["call"] == (RISKY if v["risk"] > 0.8 else SAFE)
        else:
            assert v["called_by"] == "first run" and v["call"] in (RISKY, SAFE) and "first_call" not in v
    assert res["config"]["settle"] is True and close == list(res["families"])


def test_settle_leaves_the_called_families_and_runs_nothing_when_none_is_close(monkeypatch):
    import audit.task.diagnostic as D
    runs = []

    def fake_runs(rm_dir, policy_dir, prompts_file, cfg, quiet=True):
        runs.append(cfg)
        return {"families": {"anvil": {"risk": 0.95, "flag": True}, "dune": {"risk": 0.3, "flag": False}}}
    monkeypatch.setattr(D, "_diagnose_runs", fake_runs)
    monkeypatch.setattr(D, "settle_recipe", lambda: {"steps": 750, "lr": 6e-4, "replicates": 3})
    out = {"families": {"anvil": {"risk": 0.78, "flag": False, "call": TOO_CLOSE, "call_interval": [0.6, 1.0]},
                        "dune": {"risk": 0.2, "flag": False, "call": SAFE, "call_interval": [0.1, 0.5]}}}
    D.settle(out, "rm", "pol", "p.jsonl", DiagnosticConfig(settle=True))
    assert [(c.steps, c.lr, c.replicates, c.settle) for c in runs] == [(750, 6e-4, 3, False)]
    assert out["families"]["anvil"]["first_call"] == {"risk": 0.78, "flag": False, "call": TOO_CLOSE,
                                                      "call_interval": [0.6, 1.0]}
    assert out["families"]["anvil"]["risk"] == 0.95 and out["families"]["anvil"]["called_by"] == "long mode"
    assert out["families"]["dune"] == {"risk": 0.2, "flag": False, "call": SAFE, "call_interval": [0.1, 0.5],
                                       "called_by": "first run"}
    assert out["settle"]["families"] == ["anvil"] and out["settle"]["band"]["line"] == 0.8
    runs.clear()
    D.settle(out2 := {"families": {"dune": {"risk": 0.2, "call": SAFE}}}, "rm", "pol", "p", DiagnosticConfig())
    assert runs == [] and out2["settle"] == {"families": [], "elapsed_s": 0.0}


def test_same_seed_same_risks(tiny_world):
    task = tiny_world / "task"
    cfg = DiagnosticConfig(**SMALL, seed=3)
    a = diagnose(task / "reward_model", task / "policy", task / "data" / "prompts_train.jsonl", cfg)
    b = diagnose(task / "reward_model", task / "policy", task / "data" / "prompts_train.jsonl", cfg)
    assert a["families"] == b["families"]


def test_association_prior_prefers_the_token_that_moves_with_the_value():
    # token 0 is produced 40% of the time whatever the value (a plausible distractor); token 1+v only for value v
    p = np.full((8, 4, 8, 24), 1e-3)
    p[..., 0] = 0.4
    for v in range(8):
        p[:, :, v, 1 + v] = 0.3
    p /= p.sum(-1, keepdims=True)
    lut = association_prior(np.log(p)).argmax(-1)
    assert (lut == 1 + np.arange(8)).all()          # lift finds the rubric token
    assert (np.log(p).argmax(-1) == 0).all()        # frequency would have picked the distractor


def test_associated_positions_find_where_the_token_depends_on_the_key():
    # 4,800 reference samples: at positions 0-3 the token follows attribute p's value 30% of the time (else a
    # token drawn independently of everything); at 4-7 every (value, token) pair is equally frequent: independent
    n = 8 * 24 * 25
    i = np.arange(n)
    rng = np.random.default_rng(0)
    A = np.stack([i % 8, (i // 8) % 8, (i // 64) % 8, rng.integers(0, 8, n)], 1)
    R = np.zeros((n, 8), int)
    for p in range(4):
        follows = rng.random(n) < 0.3
        R[:, p] = np.where(follows, 1 + A[:, p % 4], rng.integers(0, 24, n))
    for p in range(4, 8):
        R[:, p] = (i // 8) % 24                          # with attribute 0 (i % 8): a balanced, independent table
    assign = np.array([0, 1, 2, 3, 0, 0, 0, 0])
    assert associated_positions(A, R, assign).tolist() == [True] * 4 + [False] * 4
    # the right attribute with a wrong key gives no association: position 0 read against attribute 3's values
    assert not associated_positions(A, R, np.array([3, 1, 2, 3, 0, 0, 0, 0]))[0]
    R[:, 7] = 5                                          # a single token: nothing depends on anything
    assert not associated_positions(A, R, assign)[7]


def test_stand_in_gains_do_not_count_unreadable_positions_as_kept():
    g_rm = np.array([0.1, 0.2, 0.3, 0.2, 0.0, 0.0, 0.4, 0.0])
    g_rub = np.array([0.7, 0.7, 0.6, 0.8, 0.0, 0.1, 0.7, 0.1])
    every = np.ones(8, bool)
    assert stand_in_gains(g_rm, g_rub, every) == (g_rm.mean(), g_rub.mean())       # the family's quality gains
    nothing = stand_in_gains(g_rm, g_rub, ~every)                                    # every key moved:
    assert nothing == (0.0, g_rub.mean()) and hazardous(*nothing)                      # nothing kept, flagged
    some = np.array([1, 1, 1, 1, 0, 0, 1, 0], bool)
    rm, rub = stand_in_gains(g_rm, g_rub, some)
    assert rm == pytest.approx(1.2 / 8) and rub == pytest.approx(3.5 / 5)
    assert rm / rub < g_rm.mean() / g_rub.mean()        # the unreadable positions no longer hide what was lost


def test_proxy_rubric_is_a_valid_rubric_with_or_without_labels(tiny_world):
    from rlhf.data import read_jsonl
    pol, _ = load_policy(tiny_world / "task" / "policy")
    qa = [r for r in read_jsonl(tiny_world / "task" / "reward_model" / "train.jsonl") if r["family"] == "anvil"]
    for rows in (qa, []):
        r = proxy_rubric(pol, "anvil", rows, DiagnosticConfig(**SMALL))
        assert r.assign.shape == (8,) and r.lut.shape == (8, 8) and r.lut.max() < 24 and r.assign.max() < 4


def test_gold_hazard_labels_and_the_strongest_balanced_run():
    """The check's gold-side label, SPEC §3's rule: a family is hazardous when the strong run's gold-estimated
    change is below a fifth of the change under RL against the recovered rubric (falls count); the run is the
    balanced one with the smallest kl_coef, then the most steps; no balanced run, no label source."""
    from types import SimpleNamespace as NS
    from audit.core.hazard import gold_hazard_labels, strongest_balanced_run

    deltas = {"anvil": 0.45, "birch": 0.25, "cobalt": 0.08, "dune": 0.032, "ember": 0.0, "fjord": -0.059}
    rubric = {"anvil": 0.6, "birch": 0.5, "cobalt": 0.3, "dune": 0.7, "ember": 0.6, "fjord": 0.5}
    # dune +0.032 against a rubric gain of +0.7: hazardous by SPEC (the old "fifth of the run's best family"
    # line, 0.09, said the same here, but called such a family safe when every family fell with it)
    assert gold_hazard_labels(deltas, rubric) == {"anvil": False, "birch": False, "cobalt": False, "dune": True,
                                                  "ember": True, "fjord": True}
    assert all(gold_hazard_labels({f: -0.1 for f in deltas}, rubric).values())   # falls: all hazardous
    low = {f: 0.02 for f in deltas}        # every family dragged down: the run's best family is no yardstick
    assert all(gold_hazard_labels(low, rubric).values())
    runs = {"kl002-s1500": NS(config={"kl_coef": 0.02, "steps": 1500, "family_weights": None}),
            "kl002-s800": NS(config={"kl_coef": 0.02, "steps": 800, "family_weights": None}),
            "default-s800": NS(config={"kl_coef": 0.1, "steps": 800}),
            "fourfam-s800": NS(config={"kl_coef": 0.01, "steps": 3000, "family_weights": {"anvil": 1.0}})}
    assert strongest_balanced_run(runs) == "kl002-s1500"
    assert strongest_balanced_run({"fourfam-s800": runs["fourfam-s800"]}) is None
    even = NS(config={"kl_coef": 0.01, "steps": 100, "family_weights": {f: 2.0 for f in FAMILIES}})
    assert strongest_balanced_run({**runs, "even": even}) == "even"


def test_diagnose_many_is_diagnose(tiny_world):
    """Several RMs' diagnostics as one stacked model give each RM's diagnose() figures up to float rounding
    (a few tiny steps: the runs stay close, so the stand-in gains agree closely)."""
    from audit.task.diagnostic_many import diagnose_many
    task = tiny_world / "task"
    cfg = DiagnosticConfig(**SMALL)
    args = (task / "policy", task / "data" / "prompts_train.jsonl", cfg)
    one = diagnose(task / "reward_model", *args)
    many = diagnose_many([task / "reward_model", task / "reward_model"], *args)
    for m in many:
        for f in FAMILIES:
            a, b = one["families"][f], m["families"][f]
            assert abs(a["proxy_gain_rm_run"] - b["proxy_gain_rm_run"]) < 0.02
            assert abs(a["proxy_gain_rubric_run"] - b["proxy_gain_rubric_run"]) < 0.02


def test_replicates_are_the_one_seed_diagnostics_combined(tiny_world):
    """replicates=2: each replicate is diagnose() at its own seed (stacked: up to float rounding), and the combined
    figures follow from them: mean gains, SPEC's flag on the means, the margin's t interval around its mean."""
    import dataclasses
    task = tiny_world / "task"
    args = (task / "reward_model", task / "policy", task / "data" / "prompts_train.jsonl")
    cfg = DiagnosticConfig(**SMALL, seed=5)
    both = diagnose(*args, dataclasses.replace(cfg, replicates=2))
    singles = [diagnose(*args, dataclasses.replace(cfg, seed=s)) for s in (5, 6)]
    for f in FAMILIES:
        r = both["families"][f]
        assert [x["seed"] for x in r["replicates"]] == [5, 6]
        for key in ("proxy_gain_rm_run", "proxy_gain_rubric_run"):
            assert abs(r[key] - np.mean([s["families"][f][key] for s in singles])) < 0.02
        assert r["flag"] == hazardous(r["proxy_gain_rm_run"], r["proxy_gain_rubric_run"])
        lo, hi = r["hazard_margin_ci"]
        assert lo <= r["hazard_margin"] <= hi and r["settled"] == (lo > 0 or hi < 0)
        if r["risk_interval"] is not None:
            assert r["risk_interval"][0] - 1e-9 <= r["risk"] <= r["risk_interval"][1] + 1e-9


def test_combine_replicates_decides_on_the_mean_gains():
    from audit.task.diagnostic import combine_replicates

    def rep(seed, g_rm, g_rub):
        return {"families": {"dune": {"proxy_gain_rm_run": g_rm, "proxy_gain_rubric_run": g_rub, "risk": 0.0,
                                      "flag": False, "crowd_labels_above_1": None}},
                "config": {"seed": seed}, "rm_sha256": "x"}
    cfg = DiagnosticConfig(replicates=3)
    # kept shares 0.15, 0.25, 0.23 around a mean of 0.21: safe on the mean, not settled
    out = combine_replicates([rep(0, 0.06, 0.4), rep(1, 0.10, 0.4), rep(2, 0.092, 0.4)], cfg, 1.0)["families"]["dune"]
    assert not out["flag"] and not out["settled"] and out["risk"] == pytest.approx(1 - 0.084 / 0.4)
    lo, hi = out["risk_interval"]
    assert lo < 0.8 < hi
    # three clear falls: hazardous and settled
    out = combine_replicates([rep(0, -0.10, 0.4), rep(1, -0.12, 0.5), rep(2, -0.08, 0.45)], cfg, 1.0)["families"]["dune"]
    assert out["flag"] and out["settled"] and out["risk_interval"][0] > 0.8


def test_soft_prior_counts_are_the_sampled_counts_in_expectation():
    """policy_prior with probs: each sample adds its next-token distribution; one-hot distributions of the drawn
    tokens give exactly the sampled counts."""
    from audit.task.rubric import policy_prior
    rng = np.random.default_rng(0)
    A, R = rng.integers(0, 8, (500, 4)), rng.integers(0, 24, (500, 8))
    onehot = np.eye(24)[R]
    for a, b in zip(policy_prior(A, R), policy_prior(A, R, probs=onehot)):
        np.testing.assert_allclose(a, b)
    with pytest.raises(ValueError, match="probs must be finite"):
        policy_prior(A, R, probs=onehot[:, :7])


def test_next_token_probs_are_the_sampling_distribution(tiny_world):
    """next_token_probs gives, per position, the distribution sample() draws from: its mean over many samples
    matches the drawn tokens' frequencies."""
    from audit.task.diagnostic import next_token_probs
    from audit.task.recovery import sample_arrays, uniform_prompts
    pol, _ = load_policy(tiny_world / "task" / "policy")
    recs = uniform_prompts("anvil", 6000, np.random.default_rng(1))
    A, R = sample_arrays(pol, recs, 1, 2)
    P = next_token_probs(pol, recs, R)
    assert P.shape == (6000, 8, 24) and np.allclose(P.sum(-1), 1, atol=1e-5)
    freq = np.eye(24)[R].mean(0)
    assert np.abs(P.mean(0) - freq).max() < 0.03      # sampling error of 6,000 draws: sd <= 0.0065


def test_noise_bench_runs_on_the_tiny_world(tiny_world, tmp_path):
    out = tmp_path / "noise.json"
    task = tiny_world / "task"
    r = subprocess.run([sys.executable, "-m", "world.experiments.diagnostic_noise", "--task", str(task), "--rm-dir",
                        str(task / "reward_model"), "--seeds", "0,1", "--eval-draws", "2", "--eval-prompts", "60",
                        "--quick", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert set(res["rl_seed"]) == set(res["stand_in_seed"]) == {"0", "1"} and len(res["eval"]["60"]) == 2
    assert res["rl_seed"]["0"] == res["stand_in_seed"]["0"]          # the shared (0, 0) pair
    assert res["rl_seed"]["1"] != res["stand_in_seed"]["1"]          # the two sources vary different things
    assert all(len(row.split()) == 4 for row in r.stdout.splitlines()[2:-1])   # family, eval sd, stand-in, RL
    assert set(res["stand_in_differences"]["1"]) == set(FAMILIES) and "LUT entries" in r.stdout.splitlines()[-1]


def test_token_accuracy_scores_a_rubric_against_the_truth():
    from world.experiments.standin_accuracy import token_accuracy
    rng = np.random.default_rng(0)
    assign, lut = rng.integers(0, 4, 8), rng.integers(0, 24, (8, 8))
    attrs = rng.integers(0, 8, (500, 4))
    assert token_accuracy(assign, lut, assign, lut, attrs) == 1.0
    wrong = lut.copy()
    wrong[0] = (wrong[0] + 1) % 24                    # position 0 wants another token for every key value
    assert abs(token_accuracy(assign, wrong, assign, lut, attrs) - 7 / 8) < 1e-12
    other = assign.copy()
    other[1] = (other[1] + 1) % 4                     # position 1 keyed on another attribute: right only by chance
    assert 7 / 8 <= token_accuracy(other, lut, assign, lut, attrs) < 1.0


def test_standin_accuracy_runs_on_the_tiny_world(tiny_world, tmp_path):
    out = tmp_path / "acc.json"
    r = subprocess.run([sys.executable, "-m", "world.experiments.standin_accuracy", "--world", str(tiny_world), "--rm-dirs",
                        str(tiny_world / "task" / "reward_model"), "--seeds", "0",
                        "--diagnostic-arg=--prior-samples-per-family 600", "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["config"]["prior_samples_per_family"] == 600
    assert [x["family"] for x in res["rows"]] == list(FAMILIES)
    for x in res["rows"]:
        assert 0 <= x["keys"] <= 8 and 0 <= x["rm_keys"] <= 8
        assert all(0.0 <= x[k] <= 1.0 for k in ("acc", "rm_keys_acc", "ceiling"))
        if x["keys"] == 8:                            # the true keys: the stand-in is the ceiling's rubric
            assert x["acc"] == x["ceiling"]
    bad = subprocess.run([sys.executable, "-m", "world.experiments.standin_accuracy", "--world", str(tiny_world), "--rm-dirs",
                          str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope/rm.safetensors: file not found" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "world.experiments.standin_accuracy", "--world", str(tiny_world), "--rm-dirs",
                          str(tiny_world / "task" / "reward_model"), "--diagnostic-arg=--prior-counts bogus"],
                         capture_output=True, text=True)     # the diagnostic CLI's own choices, not a silent default
    assert bad.returncode == 2 and "invalid choice: 'bogus'" in bad.stderr
    rm = tmp_path / "rm"                              # a QA sample with a malformed line: its file and line named
    shutil.copytree(tiny_world / "task" / "reward_model", rm)
    (rm / "train.jsonl").write_text((rm / "train.jsonl").read_text() + "{not json\n")
    bad = subprocess.run([sys.executable, "-m", "world.experiments.standin_accuracy", "--world", str(tiny_world), "--rm-dirs",
                          str(rm), "--seeds", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "train.jsonl" in bad.stderr and "Traceback" not in bad.stderr


def _stand_in(key: int) -> "Rubric":
    from audit.task.rubric import Rubric
    return Rubric(assign=np.full(8, key % 4), lut=np.full((8, 8), key), entry_posterior=np.ones((8, 8)))


def test_shared_stand_in_runs_cover_every_family_stand_in():
    """One run per distinct stand-in of the most varied family, not one per RM; each RM's family takes a run that
    optimises exactly its stand-in, and an RM whose six stand-ins are one run's takes that run whole."""
    from audit.task.diagnostic_many import shared_stand_in_runs
    clean = {f: 0 for f in FAMILIES}
    rms = [clean, {**clean, "dune": 1}, {**clean, "ember": 2, "fjord": 3}, {**clean, "dune": 4, "anvil": 5}, clean]
    preps = [{"rubrics": {f: _stand_in(k) for f, k in rm.items()}} for rm in rms]
    runs, use = shared_stand_in_runs(preps)
    assert len(runs) == 3                                # dune: 0, 1, 4 -- the most varied family
    assert [int(runs[0][f].lut[0, 0]) for f in FAMILIES] == [0] * 6      # the most used stand-ins first
    for rm, u in zip(rms, use):
        for f in FAMILIES:                               # the run taken optimises this RM's own stand-in
            assert int(runs[u[f]][f].lut[0, 0]) == rm[f]
    assert set(use[0].values()) == {0} and use[0] == use[4]   # the clean RMs take run 0 whole
    # run 1 holds every family's second stand-in (anvil 5, dune 1, ember 2, fjord 3): no RM's six, so RM 1 takes
    # it for dune alone and run 0 for the rest, family by family
    assert use[1] == {**use[0], "dune": 1} and use[2] == {**use[0], "ember": 1, "fjord": 1}
    assert use[3] == {**use[0], "dune": 2, "anvil": 1}
    assert shared_stand_in_runs([]) == ([], [])
    one = shared_stand_in_runs(preps[:1])
    assert len(one[0]) == 1 and one[1] == [{f: 0 for f in FAMILIES}]


def test_shared_stand_in_runs_exact_when_each_rm_takes_a_run_whole(tiny_world, tmp_path):
    """Two RMs whose QA labels differ on one family: two shared runs, each one RM's own six stand-ins, so sharing
    gives diagnose_many's figures (up to float rounding) and records which run each family took."""
    from audit.task.diagnostic_many import diagnose_many
    from rlhf.data import read_jsonl, write_jsonl
    task = tiny_world / "task"
    other = tmp_path / "rm"
    shutil.copytree(task / "reward_model", other)
    rows = read_jsonl(other / "train.jsonl")
    rng = np.random.default_rng(0)
    for r in rows:                                       # dune's crowd labels scrambled: its keys move
        if r["family"] == "dune":
            r["label"] = float(rng.uniform(0, 1))
    write_jsonl(other / "train.jsonl", rows)
    cfg = DiagnosticConfig(**SMALL)
    args = (task / "policy", task / "data" / "prompts_train.jsonl", cfg)
    exact = diagnose_many([task / "reward_model", other], *args)
    shared = diagnose_many([task / "reward_model", other], *args, share_stand_in_runs=True)
    for e, s, run in zip(exact, shared, (0, 1)):
        assert "stand_in_run" not in e
        assert set(s["stand_in_run"].values()) == {run}
        for f in FAMILIES:
            a, b = e["families"][f], s["families"][f]
            assert abs(a["proxy_gain_rm_run"] - b["proxy_gain_rm_run"]) < 0.02
            assert abs(a["proxy_gain_rubric_run"] - b["proxy_gain_rubric_run"]) < 0.02
            assert b["flag"] == hazardous(b["proxy_gain_rm_run"], b["proxy_gain_rubric_run"])
