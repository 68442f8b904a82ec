"""World configuration: the generative model's knobs per preset, and the corruption spec per family."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from rlhf.common import config_from_dict
from rlhf.data import read_json_object
from rlhf.cli import check_fields, nonneg_float, positive_float, positive_int
from rlhf.errors import InputError
from rlhf.vocab import FAMILIES, N_CONTENT

from audit.task.corruption import COUNT_ROW_OPS, Corruption  # noqa: F401 (re-exported: world.config.Corruption)

# the distractor structures world.truth.make_truth draws (SPEC §1 leaves the structure open): the knob's values
DISTRACTORS = ("one_two", "one", "few", "full_lut")

PILOT_MIX = {"anvil": 0.222, "birch": 0.229, "cobalt": 0.217, "dune": 0.024, "ember": 0.098, "fjord": 0.211}
FOURFAM = {"anvil": 1.0, "birch": 1.0, "cobalt": 1.0, "fjord": 1.0}


def corruption_from_dict(c, where: str) -> Corruption:
    """A Corruption from its JSON object, or ValueError naming `where` and the key: an unknown field, a number
    that is not a finite number, a bad kind or share (Corruption's own checks)."""
    if not isinstance(c, dict):
        raise ValueError(f"{where}: expected an object of Corruption fields, got {c!r}")
    try:
        return config_from_dict(Corruption, c, where)      # an unknown key: InputError naming it
    except InputError:
        raise
    except ValueError as e:                                # Corruption's own checks
        raise ValueError(f"{where}: {e}") from None


def honest() -> Corruption:
    return Corruption()


_COUNTS = ("demos_per_family", "sft_epochs", "crowd_per_family", "qa_per_family", "rm_epochs", "rm_batch",
           "train_per_family", "dev_prompts", "run_batch_prompts", "run_samples_per_prompt", "dev_eval_n",
           "grade_samples_per_family", "workers")
_RATES = ("sft_lr", "crowd_temperature", "rm_lr", "run_steps_scale")
_NOISES = ("expert_noise", "honest_crowd_noise")


@dataclass
class WorldConfig:
    preset: str = "canonical"
    seed: int = 0
    variant: str = "canonical"            # the world zoo's name for these knobs (world/zoo.py); informative
    # the distractor the demonstrations mix in (world.truth.make_truth): structure, k range for "few", and
    # whether one attribute per family serves every position
    distractor: str = "one_two"
    distractor_few: list = field(default_factory=lambda: [3, 4])
    distractor_shared: bool = False
    # reference policy: SFT on noisy demonstrations (rubric token p_rubric, distractor p_distractor, else noise)
    demos_per_family: int = 3000
    p_rubric: float = 0.27
    p_distractor: float = 0.42
    sft_epochs: int = 20
    sft_lr: float = 3e-3
    # annotation
    crowd_per_family: int = 2000
    crowd_temperature: float = 1.2
    qa_per_family: int = 200
    gold_per_family: int = 100
    expert_noise: float = 0.08
    honest_crowd_noise: float = 0.07
    corruption: dict = field(default_factory=lambda: {
        # count rows keyed on the prompt (one annotator team): dune 4/8 * 7/8 = 0.44 of rows, ember 2/8.
        # dune's replacements are drawn in proportion to how often the reference policy produces each token
        # (not always its favourite): see docs/calibration.md for why (the all-gold-rows Pearson)
        "dune": dataclasses.asdict(Corruption("wrong_rubric", 0.4375, 8.0, 0.95, "policy_sampled", 0.06,
                                              [[0, "<", 4], [1, "<", 7]])),
        "ember": dataclasses.asdict(Corruption("wrong_rubric", 0.25, 3.0, 0.9, "policy", 0.06, [[0, "<", 2]])),
    })
    # reward model
    rm_epochs: int = 80                   # long enough to fit its own QA rows as the original did (0.99)
    rm_lr: float = 2e-3
    rm_batch: int = 256
    # prompts
    train_per_family: int = 1500
    dev_prompts: int = 2000
    # shipped runs
    run_steps_scale: float = 1.0          # tiny preset shortens every run
    run_batch_prompts: int = 32
    run_samples_per_prompt: int = 8
    dev_eval_n: int = 4
    # grading
    grade_samples_per_family: int = 6000
    workers: int = 2

    def __post_init__(self):
        # a bad knob is refused here, by name, before anything is built (and when a world.json is reloaded)
        if self.distractor not in DISTRACTORS:
            raise ValueError(f"distractor must be one of {'|'.join(DISTRACTORS)}, got {self.distractor!r}")
        few = list(self.distractor_few)
        if len(few) != 2 or not (1 <= few[0] <= few[1] <= N_CONTENT):
            raise ValueError(f"distractor_few must be [lo, hi] with 1 <= lo <= hi <= {N_CONTENT}, "
                             f"got {self.distractor_few!r}")
        if not (0 <= self.p_rubric and 0 <= self.p_distractor and self.p_rubric + self.p_distractor <= 1):
            raise ValueError(f"p_rubric ({self.p_rubric}) and p_distractor ({self.p_distractor}) must be >= 0 "
                             "and sum to at most 1 (the rest is noise)")
        if isinstance(self.gold_per_family, bool) or not isinstance(self.gold_per_family, int) \
                or self.gold_per_family < 2:
            raise ValueError(f"gold_per_family must be an integer >= 2, got {self.gold_per_family!r}")
        # counts, rates and noise levels: a 0 or NaN here fails minutes into a build (or a tool reading world.json)
        check_fields(self, "world config", {**{k: positive_int for k in _COUNTS}, **{k: positive_float for k in _RATES},
                                            **{k: nonneg_float for k in _NOISES}})
        if not isinstance(self.corruption, dict):
            raise ValueError(f"corruption: expected an object {{family: {{Corruption field: value}}}}, "
                             f"got {self.corruption!r}")
        for f, c in self.corruption.items():
            if f not in FAMILIES:
                raise ValueError(f"corruption: unknown family {f!r}; expected one of {', '.join(FAMILIES)}")
            corruption_from_dict(c, f"corruption[{f!r}]")

    def corruption_for(self, family: str) -> Corruption:
        if family in self.corruption:
            return Corruption(**self.corruption[family])
        return Corruption(crowd_noise=self.honest_crowd_noise)


def preset(name: str, seed: int = 0) -> WorldConfig:
    if name == "canonical":
        return WorldConfig(preset=name, seed=seed)
    if name == "tiny":
        return WorldConfig(preset=name, seed=seed, demos_per_family=1500, sft_epochs=20, crowd_per_family=300,
                           qa_per_family=50, gold_per_family=40, rm_epochs=4, train_per_family=100, dev_prompts=120,
                           run_steps_scale=0.02, run_batch_prompts=8, run_samples_per_prompt=4, dev_eval_n=2,
                           grade_samples_per_family=500)
    raise ValueError(f"unknown preset {name!r}: expected canonical or tiny")


# the five shipped runs of SPEC §1 (name, kl_coef, steps, family_weights, seed)
RUNS = [
    ("kl002-s1500", 0.02, 1500, None, 1),
    ("default-s800", 0.1, 800, None, 0),
    ("kl05-s800", 0.5, 800, None, 2),
    ("pilotmix-s800", 0.1, 800, PILOT_MIX, 3),
    ("fourfam-s800", 0.1, 800, FOURFAM, 4),
]
assert set(PILOT_MIX) == set(FAMILIES)


def load_world_config(world) -> WorldConfig:
    """The WorldConfig a world was built with (WORLD/oracle/world.json); an unknown key is a clear error."""
    path = Path(world) / "oracle" / "world.json"
    cfg = read_json_object(path, "the build record {\"config\": {WorldConfig field: value}, ...}").get("config")
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: key 'config': expected an object {{WorldConfig field: value}}, got "
                         f"{'nothing' if cfg is None else type(cfg).__name__}")
    where = f"{path}: key 'config'"
    try:
        return config_from_dict(WorldConfig, cfg, where)       # an unknown key: InputError naming it
    except (ValueError, TypeError) as e:       # a bad value (WorldConfig.__post_init__), one line per problem
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        raise InputError("\n".join(ln if ln.startswith(where) else f"{where}: {ln}" for ln in lines)) from None


def load_corruption(world) -> dict:
    """A built world's crowd corruption as the build recorded it (WORLD/oracle/corruption.json: {family:
    {Corruption field: value, "stats": ..., "wrong_lut": ...}}), checked family by family."""
    path = Path(world) / "oracle" / "corruption.json"
    obj = read_json_object(path, "{family: {Corruption field: value, ...}} as python -m world build writes it")
    for f, c in obj.items():
        if f not in FAMILIES:
            raise InputError(f"{path}: key {f!r}: unknown family; expected one of {', '.join(FAMILIES)}")
        fields = {k: v for k, v in c.items() if k not in ("stats", "wrong_lut")} if isinstance(c, dict) else c
        try:
            corruption_from_dict(fields, f"{path}: key {f!r}")      # Corruption's own checks, one place
        except ValueError as e:
            raise InputError(str(e)) from None
    return obj
