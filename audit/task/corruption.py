"""The crowd's corruption model of SPEC §1, shared by the world builder (world/crowd.py) and the audit's own
stress checks (audit/task/stress.py): a per-family Corruption spec, a wrong rubric built from a true one, which rows
report counts, and the labels a crowd working from it gives. Pure numpy on content indices; nothing here knows
a world's oracle -- the caller passes the rubric (the world its hidden truth, the audit its recovered one)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlhf.vocab import FAMILIES, N_CONTENT, RESP_LEN

COUNT_ROW_OPS = ("<", "<=", "==", ">=", ">")


@dataclass
class Corruption:
    """How the crowd labelled one family.

    kind "none": honest crowd (true quality + noise). "wrong_rubric": every row judged against a wrong rubric
    (same key attributes, a share `replaced_share` of the 64 LUT entries replaced by `replacement` tokens) and
    the rows picked by `count_rows` report `scale` x the fraction (scale 8 = an unnormalised count).
    "scaled": every row judged against a wrong rubric and scaled by `scale` (the stress-test kind)."""
    kind: str = "none"
    rho: float = 0.0                     # share of count rows when count_rows == "random"
    scale: float = 8.0
    replaced_share: float = 0.0
    replacement: str = "policy"          # "policy": the reference policy's favourite token; "policy_sampled": a
                                         # token drawn as often as the policy produces it; "uniform": any token
    crowd_noise: float = 0.06
    count_rows: str | list = "random"    # "random" or a key [[attr, op, value], ...] with op in < <= == >= >

    def __post_init__(self):
        for k in ("rho", "scale", "replaced_share", "crowd_noise"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"Corruption key {k!r}: expected a finite number, got {v!r}")
        if self.kind not in ("none", "wrong_rubric", "scaled"):
            raise ValueError(f"Corruption.kind must be none|wrong_rubric|scaled, got {self.kind!r}")
        if self.replacement not in ("policy", "policy_sampled", "uniform"):
            raise ValueError(f"Corruption.replacement must be policy|policy_sampled|uniform, got {self.replacement!r}")
        if not (0 <= self.rho <= 1 and 0 <= self.replaced_share <= 1):
            raise ValueError(f"Corruption.rho and replaced_share must be in [0, 1], got {self.rho}, "
                             f"{self.replaced_share}")
        if self.count_rows != "random" and not (
                isinstance(self.count_rows, list) and self.count_rows
                and all(isinstance(k, list) and len(k) == 3 and k[0] in range(4) and k[1] in COUNT_ROW_OPS
                        for k in self.count_rows)):
            raise ValueError("Corruption.count_rows must be \"random\" or [[attr 0..3, op, value], ...] with op "
                             f"in {' '.join(COUNT_ROW_OPS)}, got {self.count_rows!r}")



def qa_sample(rows, per_family: int, rng) -> list[dict]:
    """The QA sample shipped beside an RM (its train.jsonl): up to per_family rows a family, drawn without
    replacement, kept in batch order."""
    out = []
    for f in FAMILIES:
        fam = [r for r in rows if r["family"] == f]
        out += [fam[i] for i in sorted(rng.permutation(len(fam))[:per_family])]
    return out


def match_fraction(assign, lut, attrs: np.ndarray, resp_idx: np.ndarray) -> np.ndarray:
    """Fraction of the 8 positions where resp (content indices) equals the rubric's token."""
    return (resp_idx == lut[np.arange(RESP_LEN)[None, :], attrs[:, assign]]).mean(1)


_OPS = {"<": np.less, "<=": np.less_equal, "==": np.equal, ">=": np.greater_equal, ">": np.greater}


def policy_favourites(attrs, resp, assign) -> np.ndarray:
    """[8 positions, 8 values, 24 tokens] frequency of each token at p among samples with attrs[assign[p]]==v."""
    counts = np.zeros((RESP_LEN, 8, N_CONTENT))
    for p in range(RESP_LEN):
        np.add.at(counts[p], (attrs[:, assign[p]], resp[:, p]), 1.0)
    return counts


def wrong_lut(true_lut, assign, corruption: Corruption, favourites, rng) -> np.ndarray:
    """Replace a share of the 64 LUT entries: by the token the reference policy produces most often there
    (other than the right one) when replacement == 'policy'; by a token drawn in proportion to how often the
    policy produces it there (other than the right one) when 'policy_sampled'; by a uniformly drawn other
    token when 'uniform'."""
    lut = true_lut.copy()
    n_rep = int(round(corruption.replaced_share * lut.size))
    flat = rng.permutation(lut.size)[:n_rep]
    for e in flat:
        p, v = divmod(int(e), 8)
        if corruption.replacement == "policy":
            freq = favourites[p, v].copy()
            freq[true_lut[p, v]] = -1
            lut[p, v] = int(np.argmax(freq))
            continue
        freq = favourites[p, v].astype(float) if corruption.replacement == "policy_sampled" else np.zeros(N_CONTENT)
        freq[true_lut[p, v]] = 0.0
        if freq.sum() > 0:
            lut[p, v] = int(rng.choice(N_CONTENT, p=freq / freq.sum()))
        else:   # "uniform", or the policy never produced another token here: any other token
            lut[p, v] = int(rng.choice([t for t in range(N_CONTENT) if t != true_lut[p, v]]))
    return lut


def count_row_mask(attrs, corruption: Corruption, rng) -> np.ndarray:
    if corruption.kind == "scaled":
        return np.ones(len(attrs), bool)
    if corruption.kind == "none":
        return np.zeros(len(attrs), bool)
    if corruption.count_rows == "random":
        return rng.random(len(attrs)) < corruption.rho
    mask = np.ones(len(attrs), bool)
    for a, op, v in corruption.count_rows:
        mask &= _OPS[op](attrs[:, int(a)], v)
    return mask


def crowd_labels(attrs, resp, assign, lut, corruption: Corruption, wlut, rng) -> tuple[np.ndarray, np.ndarray]:
    """Labels for one family's rows, and which rows were count rows."""
    if corruption.kind == "none":
        frac = match_fraction(assign, lut, attrs, resp)
    else:
        frac = match_fraction(assign, wlut, attrs, resp)
    counts = count_row_mask(attrs, corruption, rng)
    scale = np.where(counts, corruption.scale, 1.0)
    noise = rng.normal(0, corruption.crowd_noise, len(frac))
    if corruption.kind == "wrong_rubric":
        # a count row reports its count of matches and never less: any match puts it above the rubric's maximum
        # of 1, so the share of labels above 1 is rho * P(count >= 1), the relation SPEC §1 reads off the original
        noise = np.where(counts, np.abs(noise), noise)
    return frac * scale + noise, counts
