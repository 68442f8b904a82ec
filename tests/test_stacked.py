"""K models stacked on a member dimension (rlhf/stacked.py) compute what each model computes alone, up to float
rounding: logits, log-probs, samples, RM rewards, an RL step's updates and an RM's training. Compared by meaning
(allclose, token agreement), never by bits: a batched kernel sums in another order."""
import tempfile
from pathlib import Path

import pytest
import torch

from rlhf import stacked as S
from rlhf.bench import make_fixture
from rlhf.data import prompts_tensor
from rlhf.model import Policy, draw_uniforms, response_logprobs_grouped, sample
from rlhf.reward_model import RewardModel
from rlhf.train_rl import RLConfig, RLTrainer
from rlhf.train_rl_stacked import StackedRLTrainer, run_stacked
from rlhf.train_rm import RMTrainConfig, train_rm, train_rms
from rlhf.vocab import CONTENT, FAMILIES


def _models(cls, seeds):
    out = []
    for s in seeds:
        torch.manual_seed(s)
        out.append(cls().eval())
    return out


def _prompts(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [{"id": f"p{i}", "family": FAMILIES[i % 6], "attrs": torch.randint(8, (4,), generator=g).tolist()}
            for i in range(n)]


def test_policy_members_are_the_single_models():
    pols = _models(Policy, [1, 2, 3])
    P = S.stack(pols)
    prompts = torch.stack([prompts_tensor(_prompts(5, s)) for s in range(3)])          # [3, 5, 6]
    u = torch.stack([draw_uniforms(5 * 4, torch.Generator().manual_seed(s)) for s in range(3)])
    with torch.no_grad():
        resp = S.sample(P, 4, prompts, 4, 1.0, u)
        lp = S.response_logprobs_grouped(P, 4, prompts, resp, 4)
        seq = torch.cat([prompts.repeat_interleave(4, 1), resp], 2)
        logits = S.policy_forward(P, 4, seq)
        for k, pol in enumerate(pols):
            single = sample(pol, prompts[k], 4, 1.0, uniforms=u[k])
            assert (single == resp[k]).float().mean() >= 0.95     # argmax ties aside, the same tokens
            torch.testing.assert_close(lp[k], response_logprobs_grouped(pol, prompts[k], resp[k], 4),
                                       atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(logits[k], pol(seq[k], content_only=True), atol=1e-5, rtol=1e-4)
    back = S.unstack(P, Policy(), 1)
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), pols[1].state_dict().values()))


def test_rm_members_are_the_single_models():
    rms = _models(RewardModel, [4, 5])
    R = S.stack(rms)
    g = torch.Generator().manual_seed(0)
    seq = torch.stack([torch.cat([prompts_tensor(_prompts(30, s)),
                                  torch.randint(16, 40, (30, 8), generator=g)], 1) for s in range(2)])
    out = S.rm_score(R, 4, seq)
    with torch.no_grad():
        for k, rm in enumerate(rms):
            torch.testing.assert_close(out[k], rm(seq[k]), atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def fixture_dir():
    with tempfile.TemporaryDirectory() as d:
        yield make_fixture(Path(d), 0)


def test_stacked_rl_steps_are_the_separate_runs(fixture_dir):
    """Two runs with different seeds, kl and lr, one against the RM and one against a reward_fn: after a few
    steps each member's figures and weights are the separate run's, up to float rounding."""
    pol, rm, prompts = fixture_dir
    cfgs = [RLConfig(policy_init=pol, policy_ref=pol, reward_model=rm, prompt_file=prompts, batch_prompts=6,
                     samples_per_prompt=4, seed=s, kl_coef=kl, lr=lr, steps=3)
            for s, kl, lr in ((1, 0.02, 1e-3), (2, 0.5, 3e-4))]
    def count_ba(records, prompts_rep, responses):    # a reward_fn: how many "ba" tokens
        return (responses == CONTENT.index("ba") + 16).float().sum(1)
    fns = [None, count_ba]
    singles = [RLTrainer(c, reward_fn=f) for c, f in zip(cfgs, fns)]
    st = StackedRLTrainer(cfgs, fns)
    for _ in range(3):
        a, b = [t.step() for t in singles], st.step()
        for x, y in zip(a, b):
            assert x == pytest.approx(y, rel=1e-3, abs=1e-4)
    for k, t in enumerate(singles):
        mine = st.policy(k).state_dict()
        for name, v in t.policy.state_dict().items():
            torch.testing.assert_close(mine[name], v, atol=1e-4, rtol=1e-3)


def test_members_leave_the_stack_when_done(fixture_dir):
    pol, rm, prompts = fixture_dir
    cfgs = [RLConfig(policy_init=pol, policy_ref=pol, reward_model=rm, prompt_file=prompts, batch_prompts=4,
                     samples_per_prompt=2, seed=s, steps=n) for s, n in ((0, 1), (1, 2))]
    seen = []
    out = run_stacked(cfgs, on_step=lambda k, step, fig, tr, pos: seen.append((k, step)))
    assert seen == [(0, 1), (1, 1), (1, 2)]
    single = RLTrainer(cfgs[1])
    single.step(), single.step()
    for name, v in single.policy.state_dict().items():
        torch.testing.assert_close(out[1].state_dict()[name], v, atol=1e-4, rtol=1e-3)
    with pytest.raises(ValueError, match="share batch_prompts"):
        StackedRLTrainer([cfgs[0], RLConfig(**{**cfgs[1].__dict__, "batch_prompts": 8})])


def test_stacked_rm_training_is_train_rm():
    g = torch.Generator().manual_seed(0)
    data = []
    for s in range(2):
        recs = _prompts(300, 10 + s)
        for r in recs:
            r["response"] = [CONTENT[int(i)] for i in torch.randint(24, (8,), generator=g)]
            r["label"] = float(torch.rand((), generator=g))
        data.append(recs)
    cfgs = [RMTrainConfig(epochs=2, batch=64, seed=s, lr=lr) for s, lr in ((0, 2e-3), (1, 1e-3))]
    both = train_rms(data, cfgs, quiet=True)
    for (rm_k, _, mse_k), recs, c in zip(both, data, cfgs):
        rm, _, mse = train_rm(recs, c, quiet=True)
        assert mse_k == pytest.approx(mse, rel=1e-3)
        for name, v in rm.state_dict().items():
            torch.testing.assert_close(rm_k.state_dict()[name], v, atol=1e-4, rtol=1e-3)
    with pytest.raises(ValueError, match="one size"):
        train_rms([data[0], data[1][:100]], cfgs, quiet=True)
