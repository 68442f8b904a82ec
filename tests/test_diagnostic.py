"""The gold-free diagnostic's contract (CLI, output, determinism) on the tiny world, and its gold-free rubric on
a world it was not fitted to. Its AUROC on re-trained RMs is measured by `python -m world grade` (docs/)."""
import json
import subprocess
import sys

import numpy as np

from audit.diagnostic import DiagnosticConfig, diagnose, proxy_rubric
from audit.hazard import hazardous
from audit.recovery import association_prior
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
    res = json.loads(out.read_text())
    assert set(res["families"]) == set(FAMILIES)
    for f, v in res["families"].items():
        assert isinstance(v["risk"], float) and isinstance(v["flag"], bool)
        # the flag is SPEC §3's rule (audit.hazard) on the two stand-in gains, and risk > 0.8 says the same
        assert v["flag"] == hazardous(v["proxy_gain_rm_run"], v["proxy_gain_rubric_run"]) == (v["risk"] > 0.8)
    bad = subprocess.run(args[:4] + [str(tmp_path / "nope")] + args[5:], capture_output=True, text=True)
    assert bad.returncode != 0 and "not found" in bad.stderr


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
    from audit.diagnostic import gold_hazard_labels, strongest_balanced_run

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
    from audit.diagnostic import diagnose_many
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
