"""The hidden truth of a world: per family, an expert rubric (key attribute + LUT per position) and a
distractor rule (another attribute + its own LUT) that the noisy demonstrations mix in; scoring against them;
and the exact true quality of a policy (Monte Carlo on fresh prompts, standard error reported)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from audit.task.corruption import match_fraction  # noqa: F401 (re-exported: world.truth.match_fraction)
from rlhf.data import prompts_tensor, read_json_object
from rlhf.errors import InputError
from rlhf.model import sample
from rlhf.vocab import CONTENT, CONTENT0, FAMILIES, N_CONTENT, RESP_LEN

from .config import DISTRACTORS, load_corruption, load_world_config


ONE_TOKEN_POSITIONS = 3   # of the 8 response positions, per family: how many distractors have a single token


def make_truth(rng: np.random.Generator, distractor: str = "one_two", few: tuple = (3, 4),
               shared: bool = False) -> dict:
    """Per family: assign[p] (key attr), lut[p][v] (content index); distractor attr != key and its LUT.

    `distractor` is the distractor's structure, which SPEC §1 leaves open: "one_two" (the canonical world: one
    or two tokens per position), "one" (a single token per position), "few" (k tokens per position, k drawn
    in `few` = [lo, hi]), "full_lut" (an 8-entry LUT drawn like the rubric's own, so the distractor attribute
    predicts the demonstrations' tokens better than the key does). `shared`: every position's distractor
    attribute is one attribute per family (another one where that is the position's key). The default path
    draws exactly the random numbers it always has, so canonical worlds stay byte-identical."""
    if distractor not in DISTRACTORS:
        raise ValueError(f"distractor must be one of {DISTRACTORS}, got {distractor!r}")
    truth = {}
    for f in FAMILIES:
        assign = rng.integers(0, 4, RESP_LEN)
        if shared:
            common = int(rng.integers(0, 4))
            d_assign = np.array([common if k != common else rng.choice([a for a in range(4) if a != k])
                                 for k in assign])
        else:
            d_assign = np.array([rng.choice([a for a in range(4) if a != k]) for k in assign])
        # a distractor is a *plausible* token: the distractor attribute picks it from one or two tokens per
        # position, so the reference policy favours them whatever the key attribute says (what a wrong crowd
        # rubric built from "tokens the policy likes" latches onto). The policy produces its favourite a third
        # of the time at one-token positions and a fifth at two-token ones (measured), so the number of
        # one-token positions sets the wrong rubric's match rate; drawn at random per family it made the
        # corrupted families' crowd figures swing with the seed by the width of their tolerances. Fixed at
        # ONE_TOKEN_POSITIONS, the match rate sits near the original's (docs/calibration.md).
        if distractor == "full_lut":
            d_lut = rng.integers(0, N_CONTENT, (RESP_LEN, 8))
        else:
            if distractor == "one_two":
                n_tokens = rng.permutation([1] * ONE_TOKEN_POSITIONS + [2] * (RESP_LEN - ONE_TOKEN_POSITIONS))
            elif distractor == "one":
                n_tokens = np.ones(RESP_LEN, int)
            else:
                n_tokens = rng.integers(few[0], few[1] + 1, RESP_LEN)
            d_lut = np.stack([rng.choice(rng.choice(N_CONTENT, int(n), replace=False), 8) for n in n_tokens])
        truth[f] = {"assign": assign, "lut": rng.integers(0, N_CONTENT, (RESP_LEN, 8)),
                    "d_assign": d_assign, "d_lut": d_lut}
    return truth


def truth_to_json(truth: dict, expert_noise: float) -> dict:
    fam = {f: {"assign": t["assign"].tolist(), "lut": [[CONTENT[i] for i in row] for row in t["lut"]],
               "distractor_assign": t["d_assign"].tolist(),
               "distractor_lut": [[CONTENT[i] for i in row] for row in t["d_lut"]]} for f, t in truth.items()}
    return {"families": fam, "expert_noise_sd": expert_noise}



# every built world has these (python -m world build writes world.json last, then renames the dir into place)
ORACLE_JSON = {"truth.json": "the hidden rubric {\"families\": ..., \"expert_noise_sd\": ...}",
               "world.json": "the build record {\"config\": {WorldConfig field: value}, ...}"}


def require_built_world(world) -> Path:
    """WORLD as a Path, or InputError when it is not a built world (a world tool's first check, before any work):
    no such directory, no oracle/truth.json or oracle/world.json, or one of the oracle's JSON files (those two
    and corruption.json) unreadable, truncated or not what the build writes. The message names the file and the
    key, so a tool never fails on them later, after minutes of work or with an output half written."""
    world = Path(world)
    for name in ORACLE_JSON:
        if not (world / "oracle" / name).is_file():
            what = "no such directory" if not world.exists() else f"no oracle/{name}"
            raise InputError(f"{world}: not a built world ({what}; build one with python -m world build --out DIR)")
    load_truth(world)
    load_world_config(world)
    if (world / "oracle" / "corruption.json").exists():
        load_corruption(world)
    return world


def read_truth_json(world) -> dict:
    """WORLD/oracle/truth.json as the build wrote it, checked (InputError naming the file and the key)."""
    path = Path(world) / "oracle" / "truth.json"
    obj = read_json_object(path, ORACLE_JSON["truth.json"])
    check_truth_json(obj, str(path))
    return obj


def load_truth(world) -> dict:
    """A built world's hidden rubric (WORLD/oracle/truth.json)."""
    return truth_from_json(read_truth_json(world))


def expert_noise(world) -> float:
    """The sd of the world's expert labels (WORLD/oracle/truth.json's expert_noise_sd)."""
    return float(read_truth_json(world)["expert_noise_sd"])


def check_truth_json(obj: dict, where: str = "truth.json") -> None:
    """InputError naming the key when `obj` is not a truth.json as truth_to_json writes it: every family with
    an assign and a distractor_assign (8 attributes in 0..3) and a lut and distractor_lut (8 rows of 8 content
    tokens), and a finite expert_noise_sd >= 0."""
    def bad(key: str, want: str, got) -> InputError:
        return InputError(f"{where}: key {key!r}: expected {want}, got {_short(got)}")

    fams = obj.get("families")
    if not isinstance(fams, dict):
        raise bad("families", "an object {family: rubric}", fams)
    if missing := [f for f in FAMILIES if f not in fams]:
        raise InputError(f"{where}: key 'families': no entry for {', '.join(missing)}; expected every family "
                         f"({', '.join(FAMILIES)})")
    if unknown := sorted(set(fams) - set(FAMILIES)):
        raise InputError(f"{where}: key 'families': unknown family {unknown[0]!r}; expected {', '.join(FAMILIES)}")
    content = set(CONTENT)
    for f in FAMILIES:
        t = fams[f]
        if not isinstance(t, dict):
            raise bad(f"families.{f}", "an object with assign, lut, distractor_assign, distractor_lut", t)
        for key in ("assign", "distractor_assign"):
            v = t.get(key)
            if (not isinstance(v, list) or len(v) != RESP_LEN
                    or any(isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < 4 for a in v)):
                raise bad(f"families.{f}.{key}", f"{RESP_LEN} attribute indices in 0..3", v)
        for key in ("lut", "distractor_lut"):
            v = t.get(key)
            if (not isinstance(v, list) or len(v) != RESP_LEN
                    or any(not isinstance(row, list) or len(row) != 8 or any(x not in content for x in row)
                           for row in v)):
                raise bad(f"families.{f}.{key}", f"{RESP_LEN} rows of 8 content tokens", v)
    noise = obj.get("expert_noise_sd")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise < float("inf"):
        raise bad("expert_noise_sd", "a finite number >= 0", noise)


def _short(v, n: int = 60) -> str:
    r = "missing" if v is None else repr(v)
    return r if len(r) <= n else r[:n] + "..."


def truth_from_json(obj: dict) -> dict:
    idx = {t: i for i, t in enumerate(CONTENT)}
    return {f: {"assign": np.array(t["assign"]), "lut": np.array([[idx[x] for x in row] for row in t["lut"]]),
                "d_assign": np.array(t["distractor_assign"]),
                "d_lut": np.array([[idx[x] for x in row] for row in t["distractor_lut"]])}
            for f, t in obj["families"].items()}


def rubric_tokens(assign, lut, attrs: np.ndarray) -> np.ndarray:
    """[N, 8] content indices the rubric wants for prompts with attrs [N, 4]."""
    return lut[np.arange(RESP_LEN)[None, :], attrs[:, assign]]


def demonstrations(truth, family: str, n: int, p_rubric: float, p_distractor: float, rng) -> tuple:
    """Noisy demonstrations: per position the rubric token, a distractor (the token the distractor attribute
    predicts), or a uniform content token. Returns (attrs [n,4], resp content indices [n,8])."""
    t = truth[family]
    attrs = rng.integers(0, 8, (n, 4))
    u = rng.random((n, RESP_LEN))
    resp = rng.integers(0, N_CONTENT, (n, RESP_LEN))
    rub = rubric_tokens(t["assign"], t["lut"], attrs)
    dis = rubric_tokens(t["d_assign"], t["d_lut"], attrs)
    resp = np.where(u < p_rubric, rub, np.where(u < p_rubric + p_distractor, dis, resp))
    return attrs, resp


def random_prompt_records(family: str, n: int, rng, prefix: str) -> list[dict]:
    attrs = rng.integers(0, 8, (n, 4))
    return [{"id": f"{prefix}-{family}-{i}", "family": family, "attrs": a.tolist()} for i, a in enumerate(attrs)]


def policy_samples(policy, records, n_per_prompt: int, temperature: float, seed: int, batch: int = 512):
    """(attrs [N,4], resp content indices [N,8]) of the policy's samples, row i for prompt i // n."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(0, len(records), batch):
        out.append(sample(policy, prompts_tensor(records[i:i + batch]), n_per_prompt, temperature, gen))
    resp = (torch.cat(out) - CONTENT0).numpy()
    attrs = np.repeat(np.array([r["attrs"] for r in records]), n_per_prompt, axis=0)
    return attrs, resp


def true_quality(policy, truth: dict, n_per_family: int, seed: int, temperature: float = 1.0,
                 families=FAMILIES) -> dict:
    """Exact (oracle) true quality: per family mean match fraction of temperature-1 samples on fresh prompts
    with uniform attributes, and its standard error; 'balanced' = equal-weight mean over families."""
    rng = np.random.default_rng(seed)
    per, se = {}, {}
    for k, f in enumerate(families):
        recs = random_prompt_records(f, n_per_family, rng, "q")
        attrs, resp = policy_samples(policy, recs, 1, temperature, seed * 7919 + k)
        q = match_fraction(truth[f]["assign"], truth[f]["lut"], attrs, resp)
        per[f], se[f] = float(q.mean()), float(q.std(ddof=1) / np.sqrt(len(q)))
    bal = float(np.mean([per[f] for f in families]))
    bal_se = float(np.sqrt(sum(s ** 2 for s in se.values())) / len(families))
    return {"per_family": per, "se": se, "balanced": bal, "balanced_se": bal_se, "n_per_family": n_per_family}
