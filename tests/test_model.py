import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import rlhf.model as M
from rlhf.model import (Policy, default_config, load_policy, response_logprobs, response_logprobs_grouped, sample,
                        sample_naive, save_policy)
from rlhf.reward_model import RewardModel, load_rm, save_rm, score
from rlhf.reward_model import default_config as rm_default_config
from rlhf.vocab import CONTENT0, VOCAB_SIZE
from tests.helpers import random_prompts
from rlhf.data import prompts_tensor


def _prompts(n=12, seed=0):
    return prompts_tensor(random_prompts(n, seed))


def test_fast_sampling_matches_naive_logits_and_tokens():
    """The two paths compute the same logits by other float operations, so they draw the same token wherever the
    Gumbel-perturbed argmax is not a tie within float rounding: rows whose top-two margin is clear (> 1e-3,
    far above the paths' 1e-5 logit differences) must agree on every CPU; a row with a near-tie may not."""
    torch.manual_seed(1)
    pol = Policy().eval()
    prompts = _prompts()
    fast = sample(pol, prompts, 4, 1.0, torch.Generator().manual_seed(3))
    naive = sample_naive(pol, prompts, 4, 1.0, torch.Generator().manual_seed(3))
    uniforms = M.draw_uniforms(len(naive), torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = pol(torch.cat([prompts.repeat_interleave(4, 0), naive], 1))[:, 5:13]     # logits that drew naive
    perturbed = (full + M.gumbel(uniforms).transpose(0, 1)).topk(2, -1).values
    clear = ((perturbed[..., 0] - perturbed[..., 1]) > 1e-3).all(1)
    assert clear.float().mean() > 0.9                      # the check is not vacuous
    assert torch.equal(fast[clear], naive[clear])
    # the cached incremental logits equal a full recompute at every position
    seq = torch.cat([prompts.repeat_interleave(4, 0), fast], 1)
    full = pol(seq)
    logits, cache = pol(seq[:, :6], return_cache=True)
    for t in range(6, 14):
        step, cache = pol(seq[:, t:t + 1], past=cache, start=t, return_cache=True)
        torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-4, rtol=1e-4)


def test_manual_attention_equals_sdpa():
    q, k, v = (torch.randn(3, 4, 14, 16) for _ in range(3))
    for causal in (True, False):
        torch.testing.assert_close(M.attention(q, k, v, causal), F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                   atol=1e-5, rtol=1e-5)
    # a cached block of queries (positions 6..13 attending to 0..13)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, 6:]
    torch.testing.assert_close(M.attention(q[:, :, 6:], k, v, True), ref, atol=1e-5, rtol=1e-5)


def test_grouped_logprobs_equal_full_pass_and_gradients():
    torch.manual_seed(2)
    pol = Policy()
    prompts = _prompts(5)
    resp = sample(pol, prompts, 3, 1.0, torch.Generator().manual_seed(0))
    a = response_logprobs(pol, prompts.repeat_interleave(3, 0), resp)
    b = response_logprobs_grouped(pol, prompts, resp, 3)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    ga = torch.autograd.grad(a.sum(), pol.tok.weight)[0]
    gb = torch.autograd.grad(b.sum(), pol.tok.weight)[0]
    torch.testing.assert_close(ga, gb, atol=1e-4, rtol=1e-4)


def test_only_content_tokens_are_sampled_and_logprobs_match_frequencies():
    torch.manual_seed(0)
    pol = Policy().eval()
    prompts = _prompts(1)
    resp = sample(pol, prompts, 20000, 1.0, torch.Generator().manual_seed(5))
    assert resp.min() >= CONTENT0 and resp.max() < VOCAB_SIZE
    # first token: empirical frequencies agree with the model's distribution
    probs = torch.softmax(pol(prompts)[0, -1], -1)
    freq = torch.bincount(resp[:, 0], minlength=VOCAB_SIZE).float() / len(resp)
    assert (freq - probs).abs().max() < 0.015
    # log-probs of sampled responses are the model's: their mean NLL approximates the entropy
    lp, ent = response_logprobs(pol, prompts.repeat_interleave(len(resp), 0), resp, with_entropy=True)
    assert abs(float(-lp.detach().mean()) - float(ent.detach().mean())) < 0.03


def test_temperature_sharpens():
    torch.manual_seed(0)
    pol = Policy().eval()
    with torch.no_grad():
        pol.head.weight.mul_(20)
    prompts = _prompts(4)
    def ent_of(temp):           # empirical entropy of the first response token (measured 0.42 at 0.3, 0.69 at 1.5)
        r = sample(pol, prompts, 500, temp, torch.Generator().manual_seed(0))
        p = torch.unique(r[:, 0], return_counts=True)[1].double() / len(r)
        return float(-(p * p.log()).sum())
    assert ent_of(0.3) < ent_of(1.5) - 0.1


def test_save_load_round_trip_exact_and_state_dict_names(tmp_path):
    torch.manual_seed(0)
    pol = Policy()
    save_policy(pol, default_config(), tmp_path / "p")
    pol2, cfg = load_policy(tmp_path / "p")
    x = torch.cat([_prompts(3), torch.full((3, 8), CONTENT0)], 1)
    assert torch.equal(pol.eval()(x), pol2(x))
    names = set(load_file(str(tmp_path / "p" / "policy.safetensors")))
    expected = {"tok.weight", "pos.weight", "ln.weight", "ln.bias", "head.weight"}
    for i in range(2):
        for part in ("ln1", "ln2", "attn.qkv", "attn.out", "ff.0", "ff.2"):
            expected |= {f"blocks.{i}.{part}.weight", f"blocks.{i}.{part}.bias"}
    assert names == expected
    assert json.loads((tmp_path / "p" / "config.json").read_text()) == default_config()
    rm = RewardModel()
    save_rm(rm, rm_default_config(), tmp_path / "r")
    rm2, _ = load_rm(tmp_path / "r")
    assert torch.equal(rm.eval()(x), rm2(x))
    rnames = set(load_file(str(tmp_path / "r" / "rm.safetensors")))
    assert {"head.0.weight", "head.0.bias", "head.2.weight", "head.2.bias"} <= rnames and "head.weight" not in rnames
    assert set(json.loads((tmp_path / "r" / "config.json").read_text())) == set(rm_default_config())


def test_reference_formulas_interoperate(tmp_path):
    """A checkpoint written here gives the logits an independent from-the-spec implementation computes."""
    torch.manual_seed(4)
    pol = Policy().eval()
    save_policy(pol, default_config(), tmp_path / "p")
    sd = load_file(str(tmp_path / "p" / "policy.safetensors"))
    x = torch.cat([_prompts(2), torch.full((2, 8), CONTENT0 + 3)], 1)
    h = sd["tok.weight"][x] + sd["pos.weight"][:14]
    def ln(z, n):
        return F.layer_norm(z, (64,), sd[f"{n}.weight"], sd[f"{n}.bias"])
    def lin(z, n):
        return z @ sd[f"{n}.weight"].T + sd[f"{n}.bias"]
    for i in range(2):
        q, k, v = lin(ln(h, f"blocks.{i}.ln1"), f"blocks.{i}.attn.qkv").split(64, -1)
        q, k, v = (t.view(2, 14, 4, 16).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 14, 64)
        h = h + lin(a, f"blocks.{i}.attn.out")
        h = h + lin(F.gelu(lin(ln(h, f"blocks.{i}.ln2"), f"blocks.{i}.ff.0")), f"blocks.{i}.ff.2")
    logits = ln(h, "ln") @ sd["head.weight"].T
    ours = pol(x)
    torch.testing.assert_close(ours[..., CONTENT0:], logits[..., CONTENT0:], atol=1e-4, rtol=1e-4)
    assert (ours[..., :CONTENT0] < -1e8).all()


def test_wrong_shape_and_vocab_refused(tmp_path):
    torch.manual_seed(0)
    save_policy(Policy(), default_config(), tmp_path / "p")
    cfg = json.loads((tmp_path / "p" / "config.json").read_text())
    (tmp_path / "p" / "config.json").write_text(json.dumps({**cfg, "vocab_size": 41}))
    with pytest.raises(ValueError, match="vocab_size"):
        load_policy(tmp_path / "p")
    (tmp_path / "p" / "config.json").write_text(json.dumps({**cfg, "d_model": 32}))
    with pytest.raises(ValueError, match="shape"):
        load_policy(tmp_path / "p")
    (tmp_path / "p" / "config.json").write_text(json.dumps(cfg))
    sd = load_file(str(tmp_path / "p" / "policy.safetensors"))
    sd.pop("head.weight")
    save_file(sd, str(tmp_path / "p" / "policy.safetensors"))
    with pytest.raises(ValueError, match="head.weight"):
        load_policy(tmp_path / "p")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_policy(tmp_path / "nowhere")
    # a policy checkpoint presented as a reward model is refused, naming the mismatch
    save_policy(Policy(), default_config(), tmp_path / "p2")
    (tmp_path / "p2" / "policy.safetensors").rename(tmp_path / "p2" / "rm.safetensors")
    (tmp_path / "p2" / "config.json").write_text(json.dumps(rm_default_config()))
    with pytest.raises(ValueError, match="state-dict keys|shape"):
        load_rm(tmp_path / "p2")


def test_rm_score_batches_consistently():
    torch.manual_seed(0)
    rm = RewardModel().eval()
    p = _prompts(10)
    r = torch.randint(CONTENT0, VOCAB_SIZE, (10, 8))
    torch.testing.assert_close(score(rm, p, r, batch=3), score(rm, p, r), atol=1e-5, rtol=1e-5)


def test_softmax_short_equals_softmax_values_and_gradients():
    torch.manual_seed(4)
    for shape in [(3, 4, 14, 14), (5, 4, 1, 9), (2, 4, 7, 13)]:
        x = torch.randn(*shape, requires_grad=True)
        w = torch.randn(*shape)
        a, b = M.softmax_short(x), x.softmax(-1)
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
        ga = torch.autograd.grad((a * w).sum(), x)[0]
        gb = torch.autograd.grad((b * w).sum(), x)[0]
        torch.testing.assert_close(ga, gb, atol=1e-6, rtol=1e-5)
    # masked (-inf) keys get exactly zero weight
    mask = torch.zeros(5, dtype=torch.bool)
    mask[3:] = True
    x = torch.randn(2, 3, 5).masked_fill(mask, float("-inf"))
    assert torch.all(M.softmax_short(x)[..., 3:] == 0)
    # a row far below the global max would underflow to 0/0 with the shared shift: the fallback keeps it exact
    x = torch.tensor([[0.0, 1.0, 2.0], [-300.0, -301.0, -299.0]])
    out = M.softmax_short(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, x.softmax(-1))
    # a row ~90 below the global max has a denormal sum, not zero: e / s loses precision and its backward
    # overflows (1/s > float32 max). Measured in an RM's training on a zoo world: every gradient non-finite at
    # epoch 57 of 80 (a row 89.7 below the global max, row sum 1.2e-39). Values and gradients must stay exact
    for gap in (70.0, 89.7, 95.0, 101.0):
        x = torch.tensor([[0.0, 1.0, 2.0], [-gap, -gap - 1.0, -gap + 0.5]], requires_grad=True)
        w = torch.tensor([[0.3, -0.2, 0.5], [1.0, -2.0, 0.7]])
        out = M.softmax_short(x)
        torch.testing.assert_close(out, x.softmax(-1), atol=1e-6, rtol=1e-5)
        g = torch.autograd.grad((out * w).sum(), x)[0]
        assert torch.isfinite(g).all(), gap
        torch.testing.assert_close(g, torch.autograd.grad((x.softmax(-1) * w).sum(), x)[0], atol=1e-6, rtol=1e-5)


def test_first_block_table_gives_the_same_logits_scores_and_gradients():
    torch.manual_seed(5)
    pol, rm = Policy(), RewardModel().eval()
    prompts = _prompts(128)
    resp = torch.randint(CONTENT0, VOCAB_SIZE, (128, 8))
    seq = torch.cat([prompts, resp], 1)
    assert M.use_table(seq, pol.cfg)          # 1,792 tokens: the table path is the one taken
    with_table = pol(seq)
    M.FIRST_BLOCK_TABLE = False
    try:
        assert not M.use_table(seq, pol.cfg)
        without = pol(seq)
        rm_without = rm(seq)
        g_without = torch.autograd.grad(without.log_softmax(-1)[..., CONTENT0:].sum(), pol.blocks[0].attn.qkv.weight)[0]
    finally:
        M.FIRST_BLOCK_TABLE = True
    torch.testing.assert_close(with_table, without, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rm(seq), rm_without, atol=1e-5, rtol=1e-5)
    g_with = torch.autograd.grad(with_table.log_softmax(-1)[..., CONTENT0:].sum(), pol.blocks[0].attn.qkv.weight)[0]
    torch.testing.assert_close(g_with, g_without, atol=1e-4, rtol=1e-4)


def test_decode_step_equals_full_pass_content_logits():
    torch.manual_seed(6)
    pol = Policy().eval()
    prompts = _prompts(6)
    resp = sample(pol, prompts, 2, 1.0, torch.Generator().manual_seed(1))
    seq = torch.cat([prompts.repeat_interleave(2, 0), resp], 1)
    full = pol(seq)[..., CONTENT0:]
    with torch.no_grad():
        table = M.first_block_table(pol)
        _, pc = pol(seq[:, :6], return_cache=True)
        caches = []
        for k, v in pc:
            K = k.new_zeros(len(seq), k.shape[1], 13, k.shape[3])
            V = torch.zeros_like(K)
            K[:, :, :6], V[:, :, :6] = k, v
            caches.append((K, V))
        for t in range(6, 13):
            step = M._decode_step(pol, seq[:, t], t, caches, table if t % 2 else None)
            torch.testing.assert_close(step, full[:, t], atol=1e-4, rtol=1e-4)


def test_keep_freed_memory_on_glibc():
    import platform
    from rlhf.common import keep_freed_memory
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    assert keep_freed_memory() is True
