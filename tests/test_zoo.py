"""The world zoo (world/zoo.py): every variant's knobs reach the oracle, the default path draws what it drew,
and zoo-check's picture logic (world/zoo_check.py) passes and fails where SPEC's picture says it should."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rlhf.data import read_jsonl
from rlhf.errors import EXIT_BAD_INPUT, EXIT_FINDING, run_cli
from rlhf.model import Policy, default_config
from rlhf.vocab import FAMILIES
from tests.pins import pins
from world.config import load_world_config, preset
from world.crowd import crowd_batch
from world.truth import demonstrations, make_truth
from world.zoo import VARIANTS, zoo_config
from world.zoo_check import picture

PINS = Path(__file__).parent / "data" / "tiny_seed0_pins.json"
# A token of a policy-sampled file flips only where two Gumbel-perturbed logits of the reference policy tie within
# the rounding of another CPU's kernels: a few in 10^5 draws at most (measured: 0 of the ~16,000 tiny-build tokens
# under ATEN_CPU_CAPABILITY=default and avx2). 1% leaves room for another CPU, while a change to the generator
# (other draws, or the same draws in another order) leaves most tokens different.
MIN_TOKEN_AGREEMENT = 0.99


def test_default_tiny_build_draws_what_it_drew_before_the_zoo(tiny_world):
    """The zoo's default path draws the same random numbers in the same order as the code before it (commit
    122c747; the tiny preset's SFT then grew to 1500 demos x 20 epochs). What the seed alone decides is pinned
    by bytes; what passes through the trained reference policy is compared by meaning (tests/pins.py says why
    each holds on any CPU). Trained weights are not pinned at all: test_world checks what they do."""
    want, got = json.loads(PINS.read_text()), pins(tiny_world)
    for key in ("seed_only_sha256", "gold_keys_sha256", "crowd_keys_sha256", "qa_ids_sha256",
                "corruption_params_sha256"):
        assert got[key] == want[key], key
    lut_now, lut_pinned = got["wrong_lut"], want["wrong_lut"]
    # a wrong-rubric family's crowd labels score tokens against its wrong LUT, itself drawn through the policy: where
    # another CPU moved one of its entries (allowed below), equal tokens may carry another label
    lut_moved = {f for f, v in lut_pinned.items() if v != lut_now.get(f)}
    family = {r["id"]: r["family"] for f in ("task/data/gold_calib.jsonl", "oracle/crowd_full.jsonl")
              for r in read_jsonl(tiny_world / f)}
    for name in ("gold", "crowd"):
        rows_now, rows_pinned = got[f"{name}_rows"], want[f"{name}_rows"]
        assert rows_now.keys() == rows_pinned.keys()
        same_tokens = 0
        for rid, (resp, label) in rows_pinned.items():
            now_resp, now_label = rows_now[rid]
            same_tokens += sum(a == b for a, b in zip(resp, now_resp))
            if now_resp == resp and not (name == "crowd" and family[rid] in lut_moved):
                assert now_label == label, (name, rid)      # tokens + seed-only noise: the same float ops
        assert same_tokens / (8 * len(rows_pinned)) >= MIN_TOKEN_AGREEMENT, (name, same_tokens)
    assert {f for f, v in lut_now.items() if v} == {f for f, v in lut_pinned.items() if v}
    entries = [(a == b) for f, v in lut_pinned.items() if v for ra, rb in zip(v, lut_now[f]) for a, b in zip(ra, rb)]
    # an entry is the token the policy produced most often among ~40 samples: a flipped sample can move a tie
    assert np.mean(entries) >= 0.95, np.mean(entries)
    cfg = load_world_config(tiny_world)
    assert cfg == preset("tiny", 0) and cfg.variant == "canonical" and cfg.distractor == "one_two"


def test_variant_configs():
    for p in ("canonical", "tiny"):
        assert zoo_config(p, 3) == preset(p, 3)          # the canonical variant is the preset, knob for knob
        for name in VARIANTS:
            cfg = zoo_config(p, 3, name)
            assert cfg.variant == name and cfg.preset == p and cfg.seed == 3
            assert 0.24 <= cfg.p_rubric <= 0.3 and cfg.p_rubric + cfg.p_distractor <= 1
    assert zoo_config("canonical", 0, "less-gold").gold_per_family == 50
    assert zoo_config("tiny", 0, "less-gold").gold_per_family == 20
    assert zoo_config("tiny", 0, "clean").corruption == {}
    assert {f: c["kind"] for f, c in zoo_config("tiny", 0, "scaled").corruption.items()} == \
        {"birch": "scaled", "cobalt": "scaled"}
    for name in ("full-lut", "few-tokens", "scaled", "mild"):      # corrupted families other than dune/ember
        assert set(zoo_config("tiny", 0, name).corruption) != {"dune", "ember"}
    custom = zoo_config("tiny", 0, "clean", gold_per_family=7)
    assert custom.variant == "clean+custom" and custom.gold_per_family == 7
    assert zoo_config("tiny", 0, "clean", gold_per_family=40).variant == "clean"    # no knob changed
    with pytest.raises(ValueError, match="unknown variant 'nope'"):
        zoo_config("tiny", 0, "nope")


def _mutual_information(x, y) -> float:
    t = np.zeros((8, 24))
    np.add.at(t, (x, y), 1.0)
    p = t / t.sum()
    indep = p.sum(1, keepdims=True) @ p.sum(0, keepdims=True)
    nz = p > 0
    return float((p[nz] * np.log(p[nz] / indep[nz])).sum())


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_truth_and_crowd_reflect_the_knobs(name):
    """Build steps 1 and 3 with the variant's knobs (an untrained policy stands in for the SFT one: the knobs
    act on the truth and the crowd's corruption, not on training)."""
    cfg = zoo_config("tiny", 0, name)
    rng = np.random.default_rng(0)
    truth = make_truth(rng, cfg.distractor, tuple(cfg.distractor_few), cfg.distractor_shared)
    distinct = np.array([[len(set(row)) for row in t["d_lut"]] for t in truth.values()])
    for t in truth.values():
        assert (t["d_assign"] != t["assign"]).all()
    if cfg.distractor == "full_lut":
        assert distinct.mean() >= 6            # 8 entries drawn from 24 tokens: about 6.9 distinct on average
    elif cfg.distractor == "few":
        assert distinct.min() >= 2 and distinct.max() <= 4 and distinct.mean() >= 3
    elif cfg.distractor == "one":
        assert (distinct == 1).all()
    else:
        assert sorted(distinct[0]) == [1, 1, 1, 2, 2, 2, 2, 2]
    def one_shared(t):                         # one attribute serves every position whose key it is not
        return any(((t["d_assign"] == a) == (t["assign"] != a)).all() for a in range(4))
    assert all(one_shared(t) for t in truth.values()) == cfg.distractor_shared
    # SPEC §1: a full-LUT distractor predicts the demonstrations' tokens better than the key attribute does
    mi_key, mi_dis = [], []
    for f in FAMILIES:
        t = truth[f]
        attrs, resp = demonstrations(truth, f, cfg.demos_per_family, cfg.p_rubric, cfg.p_distractor, rng)
        mi_key += [_mutual_information(attrs[:, t["assign"][p]], resp[:, p]) for p in range(8)]
        mi_dis += [_mutual_information(attrs[:, t["d_assign"][p]], resp[:, p]) for p in range(8)]
    if cfg.distractor == "full_lut":
        assert np.mean(np.array(mi_dis) > np.array(mi_key)) > 0.9
    if name == "canonical":
        assert np.mean(np.array(mi_dis) > np.array(mi_key)) < 0.1

    torch.manual_seed(0)
    rows, per_family = crowd_batch(Policy(default_config()).eval(), truth, cfg, rng, 0)
    assert len(rows) == 6 * cfg.crowd_per_family
    for f in FAMILIES:
        c, wlut, st = per_family[f]
        assert dataclasses.asdict(c) == dataclasses.asdict(cfg.corruption_for(f))
        if c.kind == "none":
            assert wlut is None and st["count_row_share"] == 0
            continue
        assert (wlut != truth[f]["lut"]).sum() == round(c.replaced_share * 64)
        if c.kind == "scaled":
            assert st["count_row_share"] == 1.0
        elif c.count_rows == "random":
            assert abs(st["count_row_share"] - c.rho) < 0.1         # 300 rows: sd of the share about 0.03


def test_two_variant_builds_record_and_reload_their_knobs(tmp_path, capsys):
    """A full-LUT world and a clean one with fewer gold rows, built at the tiny preset (SFT, RM and RL shortened:
    the knobs act before them): oracle and task reflect the knobs, world.json reloads to the same config, an
    unknown key in it is a clear error, and zoo-check runs on it (its verdict is the rows', whichever it is)."""
    from world.build import build
    from world.zoo_check import main as zoo_check

    cheap = dict(demos_per_family=100, sft_epochs=2, rm_epochs=1, run_steps_scale=0.002, workers=1)
    full = dataclasses.replace(zoo_config("tiny", 1, "full-lut"), **cheap)
    clean = dataclasses.replace(zoo_config("tiny", 1, "clean", gold_per_family=12), **cheap)
    for cfg in (full, clean):
        build(tmp_path / cfg.variant, cfg, quiet=True)
        assert load_world_config(tmp_path / cfg.variant) == cfg

    w = tmp_path / "full-lut"
    truth = json.loads((w / "oracle" / "truth.json").read_text())["families"]
    assert np.mean([len(set(row)) for t in truth.values() for row in t["distractor_lut"]]) >= 6
    corr = json.loads((w / "oracle" / "corruption.json").read_text())
    assert {f for f, c in corr.items() if c["kind"] != "none"} == {"birch", "fjord"}
    assert corr["birch"]["count_rows"] == [[2, ">=", 5]] and corr["fjord"]["count_rows"] == "random"

    w = tmp_path / "clean+custom"
    corr = json.loads((w / "oracle" / "corruption.json").read_text())
    assert all(c["kind"] == "none" and c["wrong_lut"] is None for c in corr.values())
    assert max(r["label"] for r in read_jsonl(w / "oracle" / "crowd_full.jsonl")) < 1.5    # no count rows
    gold = read_jsonl(w / "task" / "data" / "gold_calib.jsonl")
    assert len(gold) == 6 * 12 and "12 reference-policy samples" in (w / "task" / "data" / "README.md").read_text()

    rc = zoo_check(w, seed=0, json_out=tmp_path / "zc.json")
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "zc.json").read_text())
    assert rc == (0 if saved["holds"] else EXIT_FINDING) and len(saved["rows"]) == 8
    assert all(r[1] == "honest" for r in saved["rows"][1:7])          # a clean world: every family honest
    assert ("picture holds" in out) if rc == 0 else ("picture does NOT hold" in out)

    wj = w / "oracle" / "world.json"
    obj = json.loads(wj.read_text())
    obj["config"]["bogus_knob"] = 1
    wj.write_text(json.dumps(obj))
    with pytest.raises(ValueError, match="unknown config keys \\['bogus_knob'\\]"):
        load_world_config(w)
    zoo_check_cli = lambda world: run_cli(lambda argv: zoo_check(world), "python -m world zoo-check", [])
    assert zoo_check_cli(w) == EXIT_BAD_INPUT and "bogus_knob" in capsys.readouterr().err
    assert zoo_check_cli(tmp_path / "nowhere") == EXIT_BAD_INPUT and "not a built world" in capsys.readouterr().err


def test_build_cli_refuses_bad_knobs_in_one_line(capsys, tmp_path):
    from world.__main__ import main
    for args, msg in ((["--variant", "nope"], "invalid choice: 'nope'"),
                      (["--p-rubric", "0.7"], "sum to at most 1"),
                      (["--corruption", "{bad"], "--corruption: not valid JSON"),
                      (["--corruption", '{"dusk": {}}'], "unknown family 'dusk'"),
                      (["--corruption", '{"dune": {"sclae": 2}}'], "unknown config keys ['sclae']"),
                      (["--distractor", "few", "--distractor-few", "5", "2"], "distractor_few must be")):
        with pytest.raises(SystemExit) as e:
            main(["build", "--out", str(tmp_path / "w"), "--preset", "tiny", *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and msg in err[-1], (args, err)
    assert not (tmp_path / "w").exists()


# --------------------------------------------------------------------------- zoo-check's picture, synthetic
STRONG = {"kind": "wrong_rubric", "replaced_share": 0.95}
MILD = {"kind": "scaled", "replaced_share": 0.5}


def _verdicts(reference, change, corruption):
    return {r[0].replace("kl002-s1500 change, ", ""): r[4] for r in picture(reference, change, corruption)}


def test_picture_holds_on_the_canonical_shape():
    change = {"anvil": 0.45, "birch": 0.25, "cobalt": 0.5, "dune": -0.16, "ember": -0.2, "fjord": 0.37}
    v = _verdicts(0.28, change, {"dune": STRONG, "ember": STRONG})
    assert all(v.values()) and len(v) == 8


def test_picture_fails_where_spec_says_it_should():
    base = {"anvil": 0.45, "birch": 0.25, "cobalt": 0.5, "dune": -0.16, "ember": -0.2, "fjord": 0.37}
    corr = {"dune": STRONG, "ember": STRONG}
    # a strongly corrupted family that rises more than a fifth of the honest mean rise (0.3925 / 5 = 0.0785)
    v = _verdicts(0.28, {**base, "dune": 0.09}, corr)
    assert v["dune"] is False and sum(x is False for x in v.values()) == 1
    assert _verdicts(0.28, {**base, "dune": 0.07}, corr)["dune"] is True     # barely moves: still the picture
    # a collateral hazard: an honest family dragged down
    v = _verdicts(0.28, {**base, "cobalt": -0.08}, corr)
    assert v["cobalt"] is False
    # the reference outside SPEC's range
    assert _verdicts(0.33, base, corr)["reference true quality (balanced)"] is False
    # honest families rise, but too little on average
    weak = {f: (0.1 if f not in corr else -0.1) for f in FAMILIES}
    assert _verdicts(0.28, weak, corr)["honest families' mean rise"] is False
    # nothing honest left to compare with: the strong rows cannot hold
    v = _verdicts(0.28, {f: -0.1 for f in FAMILIES}, {f: STRONG for f in FAMILIES})
    assert v["honest families' mean rise"] is False and v["anvil"] is False


def test_picture_mild_is_reported_not_asserted_and_clean_means_every_family_rises():
    base = {"anvil": 0.45, "birch": 0.25, "cobalt": 0.5, "dune": 0.3, "ember": 0.3, "fjord": 0.37}
    v = _verdicts(0.28, {**base, "cobalt": 0.4}, {"cobalt": MILD})
    assert v["cobalt"] is None and all(x for k, x in v.items() if k != "cobalt")
    assert all(_verdicts(0.28, base, {}).values())
    assert _verdicts(0.28, {**base, "ember": 0.03}, {})["ember"] is False   # clean: a flat family breaks it
    assert _verdicts(0.28, {**base, "ember": 0.03}, {"ember": {"kind": "none"}})["ember"] is False
    # "strong" is a property of the corruption, fixed before the run: 80% replaced is strong, 79% is mild
    assert _verdicts(0.28, base, {"dune": {**STRONG, "replaced_share": 0.8}})["dune"] is False
    assert _verdicts(0.28, base, {"dune": {**STRONG, "replaced_share": 0.79}})["dune"] is None


def test_build_stops_on_a_diverged_reward_model(tmp_path, monkeypatch):
    """A reward model whose training ended in NaN stops the build before the RL runs, with nothing at --out."""
    import world.build as B

    real_train_rm = B.train_rm

    def diverged(rows, cfg, quiet=True):
        rm, mcfg, _ = real_train_rm(rows[:10], dataclasses.replace(cfg, epochs=1), quiet=True)
        return rm, mcfg, float("nan")

    monkeypatch.setattr(B, "train_rm", diverged)
    cfg = dataclasses.replace(zoo_config("tiny", 0), demos_per_family=20, sft_epochs=1, crowd_per_family=20,
                              qa_per_family=5)
    with pytest.raises(RuntimeError, match="reward model training diverged"):
        B.build(tmp_path / "w", cfg, quiet=True)
    assert not (tmp_path / "w").exists()
