"""K tiny models of one architecture run as one: every parameter stacked on a leading member dimension [K, ...]
and every op batched over the members (one bmm instead of K matmuls), so K policies, K reward models or K RL
runs cost one pass of ops over K times the rows. At these sizes (d_model 64-96, 14 positions) a single model's
op is too small to keep two cores busy; batched over members the same arithmetic runs several times faster
(`make bench` measures it).

The math is the single model's (rlhf/model.py, rlhf/reward_model.py), written with batched weights:
member k of a stack computes what the module it was stacked from computes, up to float rounding (a batched
kernel sums in another order). Members never mix: each has its own weights, its own samples and its own
optimiser state; softmax shifts and clipping are per member.

    P = stack([policy_a, policy_b])                      # {name: [2, ...]}
    logits = policy_forward(P, n_heads, idx)             # idx [2, B, T] -> [2, B, T, 24] (content logits)
    R = stack([rm_a, rm_b]); rm_forward(R, n_heads, seq) # seq [2, N, 14] -> [2, N]
    unstack(P, Policy(cfg))                              # member k back into a module, to save it
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .model import RESP_LEN, CONTENT0, _logprobs, gumbel


# ------------------------------------------------------------------------------------------- stacking
def stack(modules) -> dict[str, torch.Tensor]:
    """{state-dict name: tensor [K, ...]} of K modules with the same architecture (a copy, detached)."""
    states = [m.state_dict() for m in modules]
    return {k: torch.stack([s[k].detach().float() for s in states]).contiguous() for k in states[0]}


def unstack(P: dict, module, k: int):
    """Load member k of a stack into `module` (same architecture) and return it."""
    module.load_state_dict({name: t[k].detach().clone() for name, t in P.items()})
    return module


def select(P: dict, members) -> dict:
    """The stack of the given members (indices), in that order."""
    idx = torch.as_tensor(list(members), dtype=torch.long)
    return {k: v.index_select(0, idx).contiguous() for k, v in P.items()}


# --------------------------------------------------------------------------------------- batched layers
def linear(x, W, b=None):
    """x [K, ..., in] @ W[k]^T (+ b[k]) for W [K, out, in], b [K, out]: one batched matmul."""
    K, shape = W.shape[0], x.shape
    x2 = x.reshape(K, -1, shape[-1])
    y = torch.bmm(x2, W.transpose(1, 2)) if b is None else torch.baddbmm(b[:, None, :], x2, W.transpose(1, 2))
    return y.view(*shape[:-1], W.shape[1])


def layer_norm(x, w, b):
    shape = (w.shape[0],) + (1,) * (x.dim() - 2) + (w.shape[-1],)
    return torch.addcmul(b.view(shape), F.layer_norm(x, (x.shape[-1],)), w.view(shape))


def embed(ids, W):
    """W[k][ids[k]] for ids [K, ...] and W [K, V, C], as one embedding lookup (its backward is deterministic;
    advanced indexing's accumulates in a thread-dependent order)."""
    K, V, C = W.shape
    off = (torch.arange(K) * V).view((K,) + (1,) * (ids.dim() - 1))
    return F.embedding(ids + off, W.reshape(K * V, C))


def softmax_members(x):
    """Softmax over the last dim with a shift per member (rlhf.model.softmax_short's trick, see there): a
    member's result never depends on another member's values. A member with a row sum below 1e-30 gets torch's
    softmax instead."""
    K = x.shape[0]
    m = x.detach().reshape(K, -1).max(1).values.view((K,) + (1,) * (x.dim() - 1))
    e = (x - m).exp()
    s = e.sum(-1, keepdim=True)
    ok = (s > 1e-30).reshape(K, -1).all(1)
    if bool(ok.all()):
        return e / s
    keep = ok.view((K,) + (1,) * (x.dim() - 1))
    return torch.where(keep, e / s.clamp_min(1e-30), x.softmax(-1))


def _attend(q, k, v, causal: bool):
    """q [K, B, H, T, D], k/v [K, B, H, S, D] -> [K, B, H, T, D] (rlhf.model.attention, per member)."""
    T, S = q.shape[-2], k.shape[-2]
    att = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal and T > 1:
        mask = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)
        att = att.masked_fill(mask, float("-inf"))
    return softmax_members(att) @ v


def _block(P, i: int, x, n_heads: int, causal: bool, past=None, qkv=None):
    """One pre-LayerNorm block on x [K, B, T, C]; returns (x, (k, v)) with k/v [K, B, H, S, D]."""
    K, B, T, C = x.shape
    p = f"blocks.{i}."
    if qkv is None:
        qkv = linear(layer_norm(x, P[p + "ln1.weight"], P[p + "ln1.bias"]), P[p + "attn.qkv.weight"],
                     P[p + "attn.qkv.bias"])
    q, k, v = qkv.view(K, B, T, 3, n_heads, C // n_heads).permute(3, 0, 1, 4, 2, 5).contiguous().unbind(0)
    if past is not None:
        k, v = torch.cat([past[0], k], 3), torch.cat([past[1], v], 3)
    y = _attend(q, k, v, causal).transpose(2, 3).reshape(K, B, T, C)
    x = x + linear(y, P[p + "attn.out.weight"], P[p + "attn.out.bias"])
    h = linear(layer_norm(x, P[p + "ln2.weight"], P[p + "ln2.bias"]), P[p + "ff.0.weight"], P[p + "ff.0.bias"])
    return x + linear(F.gelu(h), P[p + "ff.2.weight"], P[p + "ff.2.bias"]), (k, v)


def n_layers(P) -> int:
    return 1 + max(int(k.split(".")[1]) for k in P if k.startswith("blocks."))


def first_block_table(P):
    """[K, seq_len, vocab, 3d]: each member's first-block qkv of LayerNorm(tok + pos) for every (position,
    token) pair (rlhf.model.first_block_table)."""
    emb = P["pos.weight"][:, :, None, :] + P["tok.weight"][:, None, :, :]
    ln = layer_norm(emb, P["blocks.0.ln1.weight"], P["blocks.0.ln1.bias"])
    return linear(ln, P["blocks.0.attn.qkv.weight"], P["blocks.0.attn.qkv.bias"])


def gather_table(table, positions, idx):
    """table[k, positions, idx[k]] for idx [K, B, T]: [K, B, T, 3d]."""
    K, S, V, D = table.shape
    off = (torch.arange(K) * (S * V)).view(K, 1, 1)
    return F.embedding(off + positions * V + idx, table.reshape(K * S * V, D))


# ------------------------------------------------------------------------------------------------ policy
def content_logits(P, x):
    return linear(layer_norm(x, P["ln.weight"], P["ln.bias"]), P["head.weight"][:, CONTENT0:])


def policy_forward(P, n_heads: int, idx, past=None, start: int = 0, table=None, return_cache: bool = False):
    """Content logits [K, B, T, 24] for idx [K, B, T] at positions start..start+T-1 (rlhf.model.Policy.forward
    with content_only=True), attending also to `past` (per-block caches of positions 0..start-1)."""
    T = idx.shape[2]
    positions = torch.arange(start, start + T)
    x = embed(idx, P["tok.weight"]) + P["pos.weight"][:, start:start + T][:, None]
    table = first_block_table(P) if table is None else table
    qkv0 = gather_table(table, positions, idx)
    cache = []
    for i in range(n_layers(P)):
        x, kv = _block(P, i, x, n_heads, True, None if past is None else past[i], qkv0 if i == 0 else None)
        cache.append(kv)
    logits = content_logits(P, x)
    return (logits, cache) if return_cache else logits


def _decode_step(P, n_heads: int, tok, pos: int, caches, table):
    """Content logits [K, N, 24] for one new token per row (rlhf.model._decode_step, per member)."""
    K, N = tok.shape
    x = embed(tok, P["tok.weight"]) + P["pos.weight"][:, pos][:, None]
    C = x.shape[-1]
    H, D = n_heads, C // n_heads
    for i in range(len(caches)):
        p, (Kc, Vc) = f"blocks.{i}.", caches[i]
        if i == 0:
            qkv = embed(tok, table[:, pos])
        else:
            qkv = linear(layer_norm(x, P[p + "ln1.weight"], P[p + "ln1.bias"]), P[p + "attn.qkv.weight"],
                         P[p + "attn.qkv.bias"])
        q, k, v = qkv.view(K, N, 3, H, D).unbind(2)
        Kc[:, :, :, pos] = k
        Vc[:, :, :, pos] = v
        att = softmax_members((Kc[:, :, :, :pos + 1] @ q[..., None]).squeeze(-1) * D ** -0.5)   # [K, N, H, S]
        y = (att[..., None] * Vc[:, :, :, :pos + 1]).sum(3)                                      # [K, N, H, D]
        x = x + linear(y.reshape(K, N, C), P[p + "attn.out.weight"], P[p + "attn.out.bias"])
        h = linear(layer_norm(x, P[p + "ln2.weight"], P[p + "ln2.bias"]), P[p + "ff.0.weight"], P[p + "ff.0.bias"])
        x = x + linear(F.gelu(h), P[p + "ff.2.weight"], P[p + "ff.2.bias"])
    return content_logits(P, x)


@torch.no_grad()
def sample(P, n_heads: int, prompts, n_per_prompt: int, temperature: float, uniforms):
    """Responses [K, B*n, 8] for prompts [K, B, 6] (rlhf.model.sample per member); uniforms [K, 8, B*n, V]
    are each member's draw_uniforms."""
    K, B, Pl = prompts.shape
    rows = B * n_per_prompt
    noise = gumbel(uniforms[..., CONTENT0:])
    table = first_block_table(P)
    logits, prompt_cache = policy_forward(P, n_heads, prompts, table=table, return_cache=True)
    logits = logits[:, :, -1].repeat_interleave(n_per_prompt, 1)
    caches = []
    for k, v in prompt_cache:   # [K, B, H, P, D] -> preallocated [K, B*n, H, P+7, D]
        Kc = k.new_empty(K, rows, k.shape[2], Pl + RESP_LEN - 1, k.shape[4])
        Vc = torch.empty_like(Kc)
        Kc[:, :, :, :Pl] = k.repeat_interleave(n_per_prompt, 1)
        Vc[:, :, :, :Pl] = v.repeat_interleave(n_per_prompt, 1)
        caches.append((Kc, Vc))
    out = []
    for t in range(RESP_LEN):
        tok = torch.argmax(logits / temperature + noise[:, t], dim=-1) + CONTENT0
        out.append(tok)
        if t + 1 < RESP_LEN:
            logits = _decode_step(P, n_heads, tok, Pl + t, caches, table)
    return torch.stack(out, 2)


def response_logprobs_grouped(P, n_heads: int, prompts, responses, n_per_prompt: int, with_entropy: bool = False,
                              temperature: float = 1.0):
    """Per-token log-probs [K, B*n, 8] of responses [K, B*n, 8] to prompts [K, B, 6], each prompt prefix run
    once for its n samples (rlhf.model.response_logprobs_grouped per member). Differentiable."""
    Pl = prompts.shape[2]
    table = first_block_table(P)
    first, cache = policy_forward(P, n_heads, prompts, table=table, return_cache=True)
    first = first[:, :, -1:].repeat_interleave(n_per_prompt, 1)
    past = [(k.repeat_interleave(n_per_prompt, 1), v.repeat_interleave(n_per_prompt, 1)) for k, v in cache]
    rest = policy_forward(P, n_heads, responses[:, :, :-1], past=past, start=Pl, table=table)
    return _logprobs(torch.cat([first, rest], 2), responses, with_entropy, temperature)


# ------------------------------------------------------------------------------------------ reward model
def rm_forward(R, n_heads: int, seq):
    """Rewards [K, N] of sequences seq [K, N, 14] (rlhf.reward_model.RewardModel.forward per member)."""
    positions = torch.arange(seq.shape[2])
    x = embed(seq, R["tok.weight"]) + R["pos.weight"][:, None]
    qkv0 = gather_table(first_block_table(R), positions, seq)
    for i in range(n_layers(R)):
        x, _ = _block(R, i, x, n_heads, False, qkv=qkv0 if i == 0 else None)
    h = layer_norm(x, R["ln.weight"], R["ln.bias"]).mean(2)
    h = F.gelu(linear(h, R["head.0.weight"], R["head.0.bias"]))
    return linear(h, R["head.2.weight"], R["head.2.bias"]).squeeze(-1)


@torch.inference_mode()
def rm_score(R, n_heads: int, seq, batch: int = 4096):
    """rm_forward in row chunks (inference)."""
    return torch.cat([rm_forward(R, n_heads, seq[:, i:i + batch]) for i in range(0, seq.shape[1], batch)], 1)


# --------------------------------------------------------------------------------------------- optimiser
class StackedAdam:
    """torch.optim.Adam's update (default betas, eps, no weight decay) for stacked parameters, with a learning
    rate per member and gradient-norm clipping per member (torch.nn.utils.clip_grad_norm_'s rule)."""

    def __init__(self, params: dict, lr, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params = params
        K = next(iter(params.values())).shape[0]
        self.lr = torch.as_tensor(lr, dtype=torch.float32).expand(K).clone()
        self.betas, self.eps, self.t = betas, eps, 0
        self.m = {k: torch.zeros_like(v) for k, v in params.items()}
        self.v = {k: torch.zeros_like(v) for k, v in params.items()}

    def _per_member(self, x, like):
        return x.view((-1,) + (1,) * (like.dim() - 1))

    @torch.no_grad()
    def clip(self, max_norm):
        """Scale each member's gradients so that their total norm is at most max_norm [K] (0 = no clipping)."""
        max_norm = torch.as_tensor(max_norm, dtype=torch.float32)
        K = next(iter(self.params.values())).shape[0]
        sq = torch.zeros(K)
        for p in self.params.values():
            sq += p.grad.reshape(K, -1).pow(2).sum(1)
        coef = torch.where(max_norm > 0, (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0), torch.ones(K))
        for p in self.params.values():
            p.grad.mul_(self._per_member(coef, p))
        return sq.sqrt()

    @torch.no_grad()
    def step(self, lr=None):
        """One update; `lr` [K] overrides the learning rates (a schedule)."""
        self.t += 1
        b1, b2 = self.betas
        bc1, bc2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        lr = self.lr if lr is None else torch.as_tensor(lr, dtype=torch.float32)
        for k, p in self.params.items():
            g, m, v = p.grad, self.m[k], self.v[k]
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(self.eps)
            p.sub_(m / denom * self._per_member(lr / bc1, p))

    def zero_grad(self):
        for p in self.params.values():
            p.grad = None

    def select(self, members):
        """Keep only the given members (their parameters are selected by the caller)."""
        idx = torch.as_tensor(list(members), dtype=torch.long)
        self.m = {k: v.index_select(0, idx) for k, v in self.m.items()}
        self.v = {k: v.index_select(0, idx) for k, v in self.v.items()}
        self.lr = self.lr.index_select(0, idx)
