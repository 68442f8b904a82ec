"""audit.task.train: the reward the audit's own policy is trained on, resuming after a crash, and -- the issue's proof
of honesty -- certifying a policy trained against a rubric with deliberately wrong entries on a tiny world."""
import dataclasses

import numpy as np
import pytest
import torch

from audit.task.posterior import RubricPosterior
from audit.task.quality import QualityConfig, QualityEstimator
from audit.task.recovery import RecoveryConfig, recover_rubrics
from audit.task.task_dir import load_task
from audit.task.train import OwnTrainConfig, reward_tables, table_reward, train_own
from rlhf.model import load_policy
from rlhf.vocab import CONTENT0, FAMILIES
from audit.task.corruption import policy_favourites
from world.truth import load_truth, policy_samples, true_quality

TINY = OwnTrainConfig(steps=12, batch_prompts=8, samples_per_prompt=4, curve_every=4, resume_every=4,
                      curve_prompts_per_family=10)


def _point_posterior(assign, lut) -> RubricPosterior:
    """A 'posterior' certain of one rubric (two identical draws: interval code needs at least two)."""
    return RubricPosterior(assign=np.stack([assign] * 2), lut=np.stack([lut] * 2), sigma=np.array([0.05, 0.05]))


def test_table_reward_is_the_posterior_expected_score():
    rng = np.random.default_rng(0)
    posts = {f: RubricPosterior(assign=rng.integers(0, 4, (5, 8)), lut=rng.integers(0, 24, (5, 8, 8)),
                                sigma=np.full(5, 0.05)) for f in FAMILIES}
    fn = table_reward(reward_tables(posts))
    A = rng.integers(0, 8, (60, 4))
    R = rng.integers(0, 24, (60, 8))
    fams = [FAMILIES[i % 6] for i in range(60)]
    got = fn([{"family": f, "attrs": a.tolist()} for f, a in zip(fams, A)], None, torch.from_numpy(R) + CONTENT0)
    want = [posts[f].expected_score(A[i:i + 1], R[i:i + 1])[0] for i, f in enumerate(fams)]
    assert np.allclose(got.numpy(), want, atol=1e-6)


def test_config_is_validated():
    with pytest.raises(ValueError):
        OwnTrainConfig(steps=0)
    with pytest.raises(ValueError):
        OwnTrainConfig(lr=0)


@pytest.fixture(scope="module")
def tiny_rubrics(tiny_world):
    task = load_task(tiny_world / "task")
    return task, recover_rubrics(task, task.load_policy(), RecoveryConfig(prior_samples_per_family=300, n_boot=4))


def test_resume_after_a_crash_gives_the_uninterrupted_result(tiny_world, tiny_rubrics, tmp_path, monkeypatch):
    task, rub = tiny_rubrics
    posts = {f: r.posterior for f, r in rub.items()}
    whole = train_own(task.root, posts, TINY, tmp_path / "whole", quiet=True)

    from rlhf import train_rl
    real_step, calls = train_rl.RLTrainer.step, {"n": 0}

    def crashing_step(self):
        calls["n"] += 1
        if calls["n"] == 7:               # after the step-4 snapshot, before the end
            raise KeyboardInterrupt("simulated crash")
        return real_step(self)
    monkeypatch.setattr(train_rl.RLTrainer, "step", crashing_step)
    with pytest.raises(KeyboardInterrupt):
        train_own(task.root, posts, TINY, tmp_path / "resumed", quiet=True)
    assert (tmp_path / "resumed" / "resume.pt").exists() and not (tmp_path / "resumed" / "train_log.json").exists()
    monkeypatch.setattr(train_rl.RLTrainer, "step", real_step)
    import random
    torch.manual_seed(123), np.random.seed(5), random.seed(7)   # a resuming process has another history
    resumed = train_own(task.root, posts, TINY, tmp_path / "resumed", quiet=True)
    a, _ = load_policy(tmp_path / "whole")
    b, _ = load_policy(tmp_path / "resumed")
    for (n, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(p, q), n       # one machine, one numeric fingerprint: bit for bit by construction
    assert resumed["curve"] == whole["curve"] and resumed["rows"] == whole["rows"]
    assert not (tmp_path / "resumed" / "resume.pt").exists()


def test_a_snapshot_from_other_numerics_or_config_is_not_continued(tiny_world, tiny_rubrics, tmp_path, monkeypatch):
    """A snapshot taken under another numeric fingerprint (threads, CPU kernels, MKL mode) or another config
    would splice two runs' bits into one policy: the run starts over instead, and says so."""
    import audit.task.train as T
    task, rub = tiny_rubrics
    posts = {f: r.posterior for f, r in rub.items()}
    cfg = dataclasses.replace(TINY, steps=8)
    work = tmp_path / "w"
    snap = T._snapshot(T.RLTrainer(T.rl_config(task.root, cfg), reward_fn=lambda *a: None), cfg,
                       {"step": 4, "rows": [], "curve": [], "acc": [], "elapsed_s": 0.0})
    said = []
    for what, tweak in (("numeric", {"numeric": {**snap["numeric"], "threads": snap["numeric"]["threads"] + 1}}),
                        ("config", {"config": {**snap["config"], "lr": 0.5}})):
        work.mkdir(exist_ok=True)
        torch.save({**snap, **tweak}, work / "resume.pt")
        assert T._load_snapshot(work / "resume.pt", cfg, said.append) is None
        assert f"taken under another {what}" in said[-1]
    log = train_own(task.root, posts, cfg, work, quiet=True, say=said.append)
    assert [r["step"] for r in log["rows"]] == [4, 8] and log["curve"][0]["step"] == 0     # started at step 0
    assert T._load_snapshot(work / "resume.pt", cfg) is None                                # and finished


def test_certification_is_honest_when_the_reward_rubric_has_wrong_entries(tiny_world, tmp_path):
    """Train against the true rubric with a quarter of every family's LUT entries deliberately wrong -- replaced
    by the token the reference policy itself produces most there, the error a rubric recovered with the policy's
    help would make and the one RL picks up fastest; the audit certifies from its own posterior (the task's
    gold). Its estimate must not exceed the exact quality beyond its CI -- whereas scoring with the (wrong)
    rubric the policy was trained on overstates it far beyond that."""
    task = load_task(tiny_world / "task")
    truth = load_truth(tiny_world)
    ref = task.load_policy()
    rng = np.random.default_rng(0)
    wrong = {}
    for k, f in enumerate(FAMILIES):
        recs = [{"id": str(i), "family": f, "attrs": a.tolist()} for i, a in enumerate(rng.integers(0, 8, (3000, 4)))]
        A, R = policy_samples(ref, recs, 1, 1.0, seed=k)
        fav = policy_favourites(A, R, truth[f]["assign"])                    # [8 positions, 8 values, 24 tokens]
        lut = truth[f]["lut"].copy()
        fav[np.arange(8)[:, None], np.arange(8)[None, :], lut] = -1          # never the right token
        flip = rng.random(lut.shape) < 0.25
        lut[flip] = fav.argmax(-1)[flip]
        wrong[f] = (truth[f]["assign"], lut)
    tables = reward_tables({f: _point_posterior(*wrong[f]) for f in FAMILIES})
    cfg = dataclasses.replace(TINY, steps=150, batch_prompts=16, curve_every=50, resume_every=50)
    train_own(task.root, {}, cfg, tmp_path / "own", tables=tables, quiet=True)
    pol, _ = load_policy(tmp_path / "own")

    rub = recover_rubrics(task, task.load_policy(), RecoveryConfig(prior_samples_per_family=300, n_boot=4))
    est = QualityEstimator(rub, QualityConfig(prompts_per_family=300, samples_per_prompt=2))
    q = est.estimate("own", pol, method="posterior")
    exact = true_quality(pol, truth, 2000, seed=5)["balanced"]
    naive = QualityEstimator({f: dataclasses.replace(rub[f], posterior=_point_posterior(*wrong[f])) for f in rub},
                             QualityConfig(prompts_per_family=300, samples_per_prompt=2)).estimate(
        "own", pol, method="posterior")
    assert q["ci95"][0] <= exact + 0.01, (q["estimate"], q["ci95"], exact)
    assert naive["ci95"][0] > exact + 0.05, (naive["estimate"], exact)      # the failure mode, shown
