import dataclasses
import json
import re

import numpy as np
import pytest
import torch

from rlhf.data import read_jsonl
from rlhf.errors import EXIT_FINDING
from rlhf.model import Policy, default_config
from rlhf.vocab import FAMILIES, N_CONTENT
from world.config import Corruption, RUNS
from audit.task.corruption import count_row_mask, crowd_labels, wrong_lut
from world.grade import exact_rule
from world.hazard import hazard_labels
from world.truth import make_truth, match_fraction, rubric_tokens, true_quality, truth_from_json, truth_to_json

TASK_FILES = ["policy/policy.safetensors", "policy/config.json", "reward_model/rm.safetensors",
              "reward_model/config.json", "reward_model/train.jsonl", "reward_model/TRAINING.md",
              "data/prompts_train.jsonl", "data/prompts_dev.jsonl", "data/gold_calib.jsonl", "data/README.md",
              "configs/default.json", "runs/README.md"]
RUN_FILES = ["run_config.json", "log.jsonl", "policy.safetensors", "config.json", "dev_eval.json", "NOTES.md"]


def test_tiny_world_has_every_file(tiny_world):
    task = tiny_world / "task"
    for f in TASK_FILES:
        assert (task / f).is_file(), f
    for name, *_ in RUNS:
        for f in RUN_FILES:
            assert (task / "runs" / name / f).is_file(), (name, f)
        rc = json.loads((task / "runs" / name / "run_config.json").read_text())
        assert rc["policy_init"] == "policy" and rc["reward_model"] == "reward_model"
    for f in ("truth.json", "corruption.json", "crowd_full.jsonl", "world.json"):
        assert (tiny_world / "oracle" / f).is_file()
    gold = read_jsonl(task / "data" / "gold_calib.jsonl", require=("response", "label"))
    assert {r["family"] for r in gold} == set(FAMILIES)
    crowd = read_jsonl(tiny_world / "oracle" / "crowd_full.jsonl")
    assert len(crowd) == 6 * 300
    assert not any(p.name == "oracle" for p in task.rglob("*"))


def test_build_is_deterministic(tmp_path):
    """Byte identity of two builds on one machine, every file, trained weights included: the same kernels, thread
    count and MKL mode (rlhf/__init__.py) give the same bits. What records wall time is compared without it
    (world.json's timings, a run's NOTES.md sentence and log.jsonl's elapsed_s). Across CPUs only the meaning
    is the same: tests/test_zoo.py compares a build with pins made elsewhere that way. Short training keeps
    this cheap: every step of the build runs, each for less long."""
    from world.build import build
    from world.config import preset
    cfg = dataclasses.replace(preset("tiny", 0), demos_per_family=100, sft_epochs=2, rm_epochs=1,
                              run_steps_scale=0.004, workers=1)
    for name in ("a", "b"):
        build(tmp_path / name, cfg, quiet=True)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert {"rm.safetensors", "policy.safetensors", "crowd_full.jsonl"} <= {f.name for f in files}

    def timeless(f):
        text = (tmp_path / f).read_bytes()
        if f.name == "log.jsonl":
            return [{k: v for k, v in json.loads(l).items() if k != "elapsed_s"} for l in text.splitlines()]
        if f.name == "NOTES.md":
            return re.sub(rb"Trained in \d+ s", b"", text)
        if f.name == "world.json":
            return {k: v for k, v in json.loads(text).items() if k != "timings"}
        return text
    for f in files:
        assert timeless("a" / f) == timeless("b" / f), f


def test_oracle_exactness():
    rng = np.random.default_rng(0)
    truth = make_truth(rng)
    t = truth["anvil"]
    attrs = rng.integers(0, 8, (500, 4))
    assert match_fraction(t["assign"], t["lut"], attrs, rubric_tokens(t["assign"], t["lut"], attrs)).min() == 1.0
    # a uniform policy (zero head) scores 1/24
    torch.manual_seed(0)
    pol = Policy(default_config()).eval()
    with torch.no_grad():
        pol.head.weight.zero_()
    q = true_quality(pol, truth, 3000, seed=1)
    assert abs(q["balanced"] - 1 / N_CONTENT) < 4 * q["balanced_se"] + 0.002
    assert truth_from_json(json.loads(json.dumps(truth_to_json(truth, 0.05))))["anvil"]["lut"].tolist() == t["lut"].tolist()


def test_corruption_statistics():
    """Share of crowd labels above 1 is close to rho * P(count >= 1) (SPEC §1): a count row never reports less
    than its count, so a single match already lands above the rubric's maximum, whatever the crowd noise."""
    rng = np.random.default_rng(1)
    truth = make_truth(rng)
    t = truth["dune"]
    n = 20000
    attrs = rng.integers(0, 8, (n, 4))
    resp = np.where(rng.random((n, 8)) < 0.3, rubric_tokens(t["assign"], t["lut"], attrs),
                    rng.integers(0, N_CONTENT, (n, 8)))
    c = Corruption("wrong_rubric", rho=0.3, scale=8.0, replaced_share=0.5, replacement="uniform", crowd_noise=0.06)
    wl = wrong_lut(t["lut"], t["assign"], c, None, rng)
    assert (wl != t["lut"]).sum() == 32
    labels, counts = crowd_labels(attrs, resp, t["assign"], t["lut"], c, wl, rng)
    p_any = (match_fraction(t["assign"], wl, attrs, resp) > 0).mean()
    assert abs((labels > 1).mean() - 0.3 * p_any) < 0.015
    assert (labels[counts] >= 8 * match_fraction(t["assign"], wl, attrs, resp)[counts]).all()
    assert abs(counts.mean() - 0.3) < 0.015
    keyed = Corruption("wrong_rubric", count_rows=[[0, "<", 3]])
    assert np.array_equal(count_row_mask(attrs, keyed, rng), attrs[:, 0] < 3)
    honest_labels, _ = crowd_labels(attrs, resp, t["assign"], t["lut"], Corruption(crowd_noise=0.0), None, rng)
    assert np.allclose(honest_labels, match_fraction(t["assign"], t["lut"], attrs, resp))
    with pytest.raises(ValueError, match="kind"):
        Corruption("bogus")


def test_wrong_lut_replacement_sources():
    """'policy' takes the policy's favourite other token; 'policy_sampled' draws other tokens as often as the
    policy produces them (never the right one, never one it does not produce); every replaced entry differs."""
    rng = np.random.default_rng(3)
    t = make_truth(rng)["dune"]
    fav = np.zeros((8, 8, N_CONTENT))
    fav[:, :, 0], fav[:, :, 1], fav[:, :, 2] = 6.0, 3.0, 1.0      # the policy produces tokens 0, 1, 2 only
    fav[0, 0] = 0.0                                                # an entry where it produced nothing
    lut = t["lut"].copy()
    lut[:, :] = 5                                                  # the right token is never 0..2
    argmax = wrong_lut(lut, t["assign"], Corruption("wrong_rubric", replaced_share=1.0), fav, rng)
    assert (argmax[1:] == 0).all()
    picks = np.concatenate([wrong_lut(lut, t["assign"], Corruption("wrong_rubric", replaced_share=1.0,
                                                                      replacement="policy_sampled"), fav, rng)[1:]
                            for _ in range(60)]).ravel()
    assert set(np.unique(picks)) <= {0, 1, 2}
    share = np.bincount(picks, minlength=3)[:3] / len(picks)
    assert np.allclose(share, [0.6, 0.3, 0.1], atol=0.03)
    some = wrong_lut(lut, t["assign"], Corruption("wrong_rubric", replaced_share=0.95,
                                                  replacement="policy_sampled"), fav, rng)
    assert (some != lut).sum() == 61
    full = wrong_lut(lut, t["assign"], Corruption("wrong_rubric", replaced_share=1.0, replacement="policy_sampled"),
                     fav, rng)
    assert (full != lut).all()                                     # (0, 0) falls back to any other token
    with pytest.raises(ValueError, match="replacement"):
        Corruption("wrong_rubric", replacement="bogus")


def test_exact_release_rule_and_hazard_labels():
    up = {f: 0.1 for f in FAMILIES}
    assert exact_rule(up)
    assert not exact_rule({**up, "dune": -0.05})
    assert not exact_rule({f: 0.02 for f in FAMILIES})
    rub = {f: 0.4 for f in FAMILIES}
    hz = hazard_labels({**{f: 0.3 for f in FAMILIES}, "dune": -0.1, "ember": 0.05}, rub)
    assert hz["dune"] and hz["ember"] and not hz["anvil"]


def test_grader_on_a_hand_made_submission(tiny_world, tmp_path):
    import shutil
    from world.grade import grade
    sub = tmp_path / "sub"
    shutil.copytree(tiny_world / "task" / "runs" / "fourfam-s800", sub / "checkpoint")
    G = grade(tiny_world, sub, seed=1, diagnosis="skip")
    assert "shipped" in G["progress"] and any("answer.json" in m for m in G["missing"])
    assert set(G["decision"]["runs"]) == {r[0] for r in RUNS}
    empty = tmp_path / "empty"
    empty.mkdir()
    G = grade(tiny_world, empty, seed=1, diagnosis="skip")
    assert any("checkpoint" in m for m in G["missing"])


def test_audit_never_reads_the_oracle_or_imports_world():
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    for d in ("audit", "checks"):
        for py in (root / d).rglob("*.py"):
            src = py.read_text()
            tree = ast.parse(src)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    assert not any(a.name.split(".")[0] == "world" for a in node.names), py
                if isinstance(node, ast.ImportFrom):
                    assert (node.module or "").split(".")[0] != "world", py
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    assert "oracle" not in node.value.lower() or "oracle/" not in node.value, py
            assert "oracle/" not in src and '"oracle"' not in src and "'oracle'" not in src, py


def test_fast_rm_fidelity_report(tiny_world):
    from world.experiments.fidelity import fidelity
    rep = fidelity(tiny_world, seed=3, full_epochs=20)      # 2x the fast preset's 10 (the real one: 80)
    for preset in ("fast", "full"):
        row = rep[preset]
        assert row["train_s"] > 0 and -1 <= row["in_sample_fit"] <= 1
        assert all(-1 <= row[f] <= 1 for f in ("anvil", "birch", "cobalt", "dune", "ember", "fjord"))
    # the longer training fits its own batch at least as well as the fast one (2x the epochs, same seed)
    assert rep["full"]["in_sample_fit"] >= rep["fast"]["in_sample_fit"] - 0.02
    assert set(rep["fast_vs_full_score_pearson_on_gold"]) == {"anvil", "birch", "cobalt", "dune", "ember", "fjord"}


def test_calibrate_reports_every_spec_row(tiny_world, capsys):
    """`world calibrate` computes SPEC §2's rows from the artefacts (on the tiny preset most are out of
    tolerance: it checks the contract, not the figures), including the hybrid recipe run for real."""
    from world.calibrate import main, rows

    rc = main(tiny_world, seed=0, markdown=True, json_out=tiny_world.parent / "calib.json")
    out = capsys.readouterr().out
    saved = json.loads((tiny_world.parent / "calib.json").read_text())
    R = saved["rows"]
    assert len(R) == 19 and all(len(r) == 5 and isinstance(r[4], bool) for r in R)
    assert rc == (0 if all(r[4] for r in R) else EXIT_FINDING)      # out of tolerance is a finding, not a failure
    assert any(r[0].startswith("hybrid recipe") for r in R) and "hybrid recipe" in out
    hq = saved["figures"]["quality"]["hybrid"]
    assert 0.0 <= hq["balanced"] <= 1.0 and hq["steps"] == 30
    assert [list(r) for r in rows(saved["figures"])] == R          # rows are a pure function of the figures


def test_replay_redraws_the_crowd_with_other_corruption(tiny_world, tmp_path):
    """`world.replay` keeps the world, redraws the crowd with the given corruption and reports its figures;
    an honest dune has no label above 1, a counted one does; an unknown family is refused by name."""
    from world.replay import replay

    honest = replay(tiny_world, tmp_path / "h", {"dune": {"kind": "none"}}, rl=False, rm_epochs=2)
    assert honest["rm_epochs"] == 2
    counted = replay(tiny_world, tmp_path / "c", {"dune": {"count_rows": "random", "rho": 0.5,
                                                          "replaced_share": 1.0}}, rl=False)
    assert honest["crowd_full"]["dune"]["share_above_1"] < 0.01 < counted["crowd_full"]["dune"]["share_above_1"]
    assert abs(counted["crowd_full"]["dune"]["count_row_share"] - 0.5) < 0.1
    assert counted["corruption"]["dune"]["replaced_share"] == 1.0 and "kl002_change" not in counted
    assert (tmp_path / "c" / "rm" / "rm.safetensors").is_file() and -1 <= counted["rm_gold_all"] <= 1
    with pytest.raises(ValueError, match="unknown family 'dusk'"):
        replay(tiny_world, tmp_path / "x", {"dusk": {}}, rl=False)


def test_pooled_pearson_decomposes_exactly_into_family_terms():
    """world.experiments.decompose's per-family within/between terms sum to the pooled Pearson (an identity, checked on
    data whose families differ in scale and mean, as the RM's dune scores do)."""
    from world.experiments.decompose import pooled_terms

    rng = np.random.default_rng(4)
    fam = np.repeat(np.array(FAMILIES), 50)
    y = rng.normal(0.27, 0.17, len(fam))
    s = 0.4 * y + rng.normal(0, 0.1, len(fam)) + np.where(fam == "dune", 0.8 + rng.normal(0, 0.9, len(fam)), 0.0)
    res = pooled_terms(s, y, fam)
    total = sum(t["within"] + t["between"] for t in res["families"].values())
    assert abs(total - np.corrcoef(s, y)[0, 1]) < 1e-3 and abs(res["pooled"] - np.corrcoef(s, y)[0, 1]) < 1e-9
    assert res["families"]["dune"]["rm_sd"] > 3 * res["families"]["anvil"]["rm_sd"]
    with pytest.raises(ValueError, match="undefined"):
        pooled_terms(np.ones(len(fam)), y, fam)


def test_decompose_on_the_tiny_world(tiny_world):
    """The decomposition runs on a built world: terms sum to its pooled figure, the keyed corrupted family's gold
    rows are split by its key, and a wrong rubric agrees less with the truth the more of its LUT is replaced."""
    from world.experiments.decompose import decompose, render

    res = decompose(tiny_world)
    terms = res["shipped_rm"]
    assert abs(sum(t["within"] + t["between"] for t in terms["families"].values()) - terms["pooled"]) < 1e-3
    split = res["key_split"]["dune"]
    gold = read_jsonl(tiny_world / "task" / "data" / "gold_calib.jsonl")
    assert split["keyed"]["n"] + split["unkeyed"]["n"] == sum(r["family"] == "dune" for r in gold)
    for f, signs in res["wrong_rubric_sign"].items():
        assert signs["0.4"] > signs["1.0"], f
    assert "pooled RM-expert Pearson" in render(res)
