"""The audit's expensive shared work (rubric recovery, sampling and scoring every policy, the diagnostic),
computed once per task and cached on disk keyed by the task's input hashes, the audit config and the code, so that a
re-run after a crash resumes instead of starting over. Checks read from here; nothing here asserts."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlhf.atomic import atomic_write_bytes
from rlhf.common import file_sha256, numeric_fingerprint, setup_torch
from rlhf.model import load_policy
from rlhf.vocab import FAMILIES

from .agreement import crowd_scale, rm_vs_labels
from .diagnostic import DiagnosticConfig, diagnose
from .quality import QualityConfig, QualityEstimator
from .recovery import RecoveryConfig, recover_rubrics
from audit.core.release import ReleaseRule
from .stress import StressConfig, stress as run_stress
from .task_dir import load_task
from .train import OwnTrainConfig, train_own

# the policy the audit trains itself (audit/task/train.py), next to the task's runs; "@" keeps it apart from any run
# directory name (answer.json's recipe.source says "own", as SPEC §3 asks)
OWN = "@own"


@dataclass
class AuditConfig:
    seed: int = 0
    n_resamples: int = 2000
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    diagnostic: DiagnosticConfig = field(default_factory=DiagnosticConfig)
    release_rule: ReleaseRule = field(default_factory=ReleaseRule)
    own: OwnTrainConfig = field(default_factory=OwnTrainConfig)
    stress: StressConfig = field(default_factory=StressConfig)
    # thresholds of the per-family claims
    rm_min_pearson_lower: float = 0.2       # RM agrees with experts: Pearson CI lower bound above this
    crowd_max_share_above_1: float = 0.01   # crowd labels on the rubric's scale: at most this share above 1
    rubric_min_cv_pearson: float = 0.5      # recovered rubric predicts held-out gold at least this well

    @classmethod
    def small(cls, seed: int = 0) -> "AuditConfig":
        """A preset for tiny worlds and tests: fewer samples and refits."""
        return cls(seed=seed, n_resamples=500,
                   recovery=RecoveryConfig(prior_samples_per_family=600, n_boot=20, seed=seed),
                   quality=QualityConfig(prompts_per_family=200, samples_per_prompt=2, seed=seed),
                   diagnostic=DiagnosticConfig(steps=20, batch_prompts=8, samples_per_prompt=4,
                                               prior_samples_per_family=600, eval_prompts_per_family=100, seed=seed),
                   own=OwnTrainConfig(steps=60, batch_prompts=8, samples_per_prompt=4, curve_every=20,
                                      curve_prompts_per_family=30, resume_every=20, seed=seed),
                   stress=StressConfig(examples=1, crowd_per_family=100, qa_per_family=40, hazard_steps=20,
                                       hazard_batch_prompts=8, hazard_samples_per_prompt=4,
                                       eval_prompts_per_family=60, seed=seed))

    def with_seed(self, seed: int) -> "AuditConfig":
        return dataclasses.replace(self, seed=seed, recovery=dataclasses.replace(self.recovery, seed=seed),
                                   quality=dataclasses.replace(self.quality, seed=seed),
                                   diagnostic=dataclasses.replace(self.diagnostic, seed=seed),
                                   own=dataclasses.replace(self.own, seed=seed),
                                   stress=dataclasses.replace(self.stress, seed=seed))


def code_hash() -> str:
    """Hash of the audit's and the pipeline's sources, their subpackages included (each file by its path from the
    repository root): a change to how anything is computed must not be served a result cached by the old code."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for pkg in ("audit", "rlhf"):
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def progress(msg: str):
    print(f"[audit] {msg}", file=sys.__stderr__, flush=True)   # past pytest's capture: progress per stage


class AuditSession:
    def __init__(self, task_dir, cfg: AuditConfig, cache_root, input_hashes: dict, staging=None):
        """staging: where temp files go before their atomic rename (default: beside their target)."""
        setup_torch()
        self.task = load_task(task_dir)
        self.cfg = cfg
        # the numeric fingerprint (threads, CPU kernels, MKL mode) is part of the key: a re-run under other
        # numerics starts a fresh cache instead of mixing two runs' bits into one answer
        key = hashlib.sha256(json.dumps({"inputs": input_hashes, "config": dataclasses.asdict(cfg),
                                         "code": code_hash(), "numeric": numeric_fingerprint()},
                                        sort_keys=True, default=str).encode()).hexdigest()[:16]
        self.cache = Path(cache_root) / key
        self.cache.mkdir(parents=True, exist_ok=True)
        self._mem = {}
        self.staging = Path(staging) if staging is not None else None

    def _cached(self, name: str, compute):
        """Memory, then disk (pickle, written atomically), then compute."""
        if name in self._mem:
            return self._mem[name]
        path = self.cache / f"{name}.pkl"
        if path.exists():
            value = pickle.loads(path.read_bytes())
        else:
            t = time.time()
            value = compute()
            atomic_write_bytes(path, pickle.dumps(value), self.staging)   # a kill never leaves half a pickle
            progress(f"{name}: {time.time() - t:.1f}s")
        self._mem[name] = value
        return value

    # ---------------------------------------------------------------------------------------------- stages
    def agreement(self) -> dict:
        return self._cached("agreement", lambda: {
            "rm_gold": rm_vs_labels(self.task.load_rm(), self.task.gold, n_resamples=self.cfg.n_resamples,
                                    seed=self.cfg.seed),
            "rm_qa": rm_vs_labels(self.task.load_rm(), self.task.qa, n_resamples=self.cfg.n_resamples,
                                  seed=self.cfg.seed),
            "crowd_scale": crowd_scale(self.task.qa)})

    def rubrics(self) -> dict:
        return self._cached("rubrics", lambda: recover_rubrics(self.task, self.task.load_policy(), self.cfg.recovery))

    def estimator(self) -> QualityEstimator:
        if "estimator" not in self._mem:
            est = QualityEstimator(self.rubrics(), self.cfg.quality)
            # the model's level against the reference's gold labels: widens every interval after it (quality.py)
            est.check_level({f: [r["label"] for r in self.task.gold if r["family"] == f] for f in est.rubrics},
                            ("reference", self.task.load_policy()), self.cfg.quality.method)
            self._mem["estimator"] = est
        return self._mem["estimator"]

    def load_policy(self, name: str):
        """'reference', a run's name, or OWN (trained on first use)."""
        if name == OWN:
            self.own()
            return load_policy(self.own_dir)[0]
        return self.task.load_policy(name)

    def quality(self, name: str) -> dict:
        """Estimated true quality of 'reference', a run or OWN, with paired deltas against the reference."""
        def compute():
            est = self.estimator()
            ref = ("reference", self.task.load_policy())
            method = self.cfg.quality.method
            if name == "reference":
                return est.estimate(*ref, method=method)
            return est.estimate(name, self.load_policy(name), reference=ref, method=method)
        return self._cached(f"quality-{name}", compute)

    # ------------------------------------------------------------------------------- the audit's own policy
    @property
    def own_dir(self) -> Path:
        return self.cache / "own"

    def own(self) -> dict:
        """Train (once; resumed after a crash) the policy the audit ships: RL against the posterior-expected
        rubric reward (audit/task/train.py). Returns its training log with the gold-vs-proxy curve."""
        def compute():
            posteriors = {f: fr.posterior for f, fr in self.rubrics().items()}
            progress(f"own policy: training {self.cfg.own.steps} RL steps against the recovered rubric")
            return train_own(self.task.root, posteriors, self.cfg.own, self.own_dir, rm=self.task.load_rm(),
                             progress_file=sys.__stderr__, staging=self.staging, say=progress)
        return self._cached("own-train", compute)

    def own_recipe(self) -> dict:
        c = self.cfg.own
        return {"source": "own", "kl_coef": c.kl_coef, "steps": c.steps, "family_weights": c.family_weights,
                "reward": {f: "rubric" for f in FAMILIES}, "seed": c.seed, "lr": c.lr,
                "batch_prompts": c.batch_prompts, "samples_per_prompt": c.samples_per_prompt,
                "temperature": c.temperature,
                "description": "trained by the audit: KL-regularised REINFORCE from the reference policy against "
                               "the posterior-expected score of the expert rubric recovered from the gold set "
                               "(every family; the reward model is not optimised)"}

    def run_verdict(self, name: str) -> dict:
        q = self.quality(name)
        v = self.cfg.release_rule.evaluate(q["delta"], q["delta_ci95"],
                                           {f: q["per_family"][f]["delta_ci95"] for f in FAMILIES})
        return {**v, "quality": q}

    def shipped(self) -> dict:
        """The candidate (the audit's own policy or a task run) that passes the release rule with the highest
        estimated true quality, else the reference. "why" says how it was chosen."""
        candidates = [OWN] + list(self.task.runs)
        passing = [n for n in candidates if self.run_verdict(n)["passes"]]
        if not passing:
            return {"source": "reference", "dir": self.task.policy_dir, "config": None,
                    "why": "no candidate (own policy or task run) passes the release rule"}
        best = max(passing, key=lambda n: (self.quality(n)["estimate"], n == OWN))
        if best == OWN:
            why = "the audit's own policy passes the release rule" + (
                f" and its estimated true quality beats every passing task run ({', '.join(passing[1:])})"
                if len(passing) > 1 else "; no task run does")
            return {"source": OWN, "dir": self.own_dir, "config": self.own_recipe(), "why": why}
        why = (f"task run {best} passes the release rule with the highest estimated true quality"
               + ("; the audit's own policy " + ("estimates lower" if OWN in passing else "fails the release rule")))
        return {"source": best, "dir": self.task.runs[best].dir, "config": self.task.runs[best].config, "why": why}

    def diagnostic(self) -> dict:
        return self._cached("diagnostic", lambda: diagnose(self.task.rm_dir, self.task.policy_dir,
                                                           self.task.root / "data" / "prompts_train.jsonl",
                                                           self.cfg.diagnostic))

    def stress(self) -> dict:
        """Batches with injected corruption, RMs re-trained on them, their hazard, and what the diagnostic and
        the label-side claims say (audit/task/stress.py)."""
        return self._cached("stress", lambda: run_stress(self.task, self.rubrics(), self.cfg.stress, self.cfg.diagnostic,
                                                     self.cache / "stress", say=progress))

    def ship_checkpoint(self, out_dir) -> Path:
        """Copy the shipped policy to OUT/checkpoint. Unchanged files are left alone (a re-run rewrites nothing);
        otherwise the copy is made in the staging dir and swapped in by renames, so a crash never leaves
        OUT/checkpoint half-copied."""
        src, dst = Path(self.shipped()["dir"]), Path(out_dir) / "checkpoint"
        files = ("policy.safetensors", "config.json")
        if all((dst / f).is_file() and file_sha256(dst / f) == file_sha256(src / f) for f in files):
            return dst
        staging = self.staging or Path(out_dir) / ".staging"
        tmp, old = staging / "checkpoint.new", staging / "checkpoint.old"
        for d in (tmp, old):
            shutil.rmtree(d, ignore_errors=True)
        tmp.mkdir(parents=True)
        for f in files:
            shutil.copyfile(src / f, tmp / f)
        if dst.exists():
            dst.rename(old)
        tmp.rename(dst)
        shutil.rmtree(old, ignore_errors=True)
        return dst
