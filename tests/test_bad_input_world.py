"""Bad input to the world/ tools: exit status 2, one line naming the file (and the key, or the flag) and what was
expected, nothing created or overwritten. Every case fails before any work, on a fake world made here (an oracle/
of a few KB from world.truth and world.config; no task/, no built world), so the file runs in seconds.

Before: a truncated oracle/truth.json gave a JSONDecodeError traceback (exit 1) in grade, calibrate,
export-samples, decompose, diagnosis_bench, fidelity, replay (after creating its OUT), samples_coverage,
standin_accuracy; zoo-check's message did not name the file; reward_ablation started training on it;
export-samples --samples 0 / --gold -1 exited 1 and --gold 50 --samples 30 quietly labelled every sample;
world build printed 11 lines of usage before its one-line error; seeds were any int."""
import dataclasses
import hashlib
import importlib
import json

import numpy as np
import pytest
import torch

from rlhf.errors import EXIT_BAD_INPUT, run_cli


@pytest.fixture(autouse=True)
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def truth_text(seed: int = 0) -> str:
    from world.truth import make_truth, truth_to_json
    return json.dumps(truth_to_json(make_truth(np.random.default_rng(seed)), 0.08), indent=2) + "\n"


def world_json_text(**config) -> str:
    from world.config import preset
    return json.dumps({"config": {**dataclasses.asdict(preset("tiny")), **config}, "seed": 0}, indent=2) + "\n"


def corruption_text() -> str:
    from world.config import preset
    cfg = preset("tiny")
    return json.dumps({f: {**cfg.corruption_for(f).__dict__, "stats": {}, "wrong_lut": None}
                       for f in ("anvil", "dune")}, indent=2) + "\n"


def fake_world(root, truth=None, world=None, corruption=None):
    """root/oracle with truth.json, world.json and corruption.json as the build writes them, unless given."""
    (root / "oracle").mkdir(parents=True)
    (root / "oracle" / "truth.json").write_text(truth_text() if truth is None else truth)
    (root / "oracle" / "world.json").write_text(world_json_text() if world is None else world)
    (root / "oracle" / "corruption.json").write_text(corruption_text() if corruption is None else corruption)
    return root


def snapshot(root) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def run(module: str, argv, capsys):
    """(exit status, non-empty stderr lines) of module's main under run_cli, in-process."""
    main = importlib.import_module(module).main
    try:
        rc = run_cli(main, f"python -m {module}", [str(a) for a in argv])
    except SystemExit as e:      # argparse (rlhf.cli.Parser) exits itself, with status 2
        rc = e.code
    return rc, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


def tool_cases(w, tmp):
    """(module, argv) of every world tool that reads a world's oracle; each would write under tmp/out*."""
    return [("world.__main__", ["grade", "--world", w, "--submission", tmp, "--out", tmp / "out.json"]),
            ("world.__main__", ["calibrate", w, "--json", tmp / "out.json"]),
            ("world.__main__", ["zoo-check", w, "--json", tmp / "out.json"]),
            ("world.__main__", ["export-samples", w, "--out", tmp / "out"]),
            ("world.experiments.decompose", [w, "--json", tmp / "out.json"]),
            ("world.experiments.diagnosis_bench", [w, "--quick", "--out", tmp / "out.json", "--cache-dir", tmp / "out"]),
            ("world.experiments.fidelity", [w]),
            ("world.replay", [w, tmp / "out"]),
            ("world.experiments.samples_coverage", [w, "--out", tmp / "out.json", "--cache", tmp / "out"]),
            ("world.experiments.standin_accuracy", ["--world", w, "--rm-dirs", tmp / "rm", "--out", tmp / "out.json"]),
            ("world.experiments.reward_ablation", [w, "--out", tmp / "out.json"]),
            ("world.experiments.stress_labels", ["--world", w, "--stress-dir", tmp / "stress", "--out", tmp / "out.json"])]


def test_a_fake_world_made_here_passes_the_built_world_check(tmp_path):
    from world.config import load_corruption, load_world_config
    from world.truth import load_truth, require_built_world
    w = fake_world(tmp_path / "w")
    assert require_built_world(w) == w
    assert set(load_truth(w)) == {"anvil", "birch", "cobalt", "dune", "ember", "fjord"}
    assert load_world_config(w).preset == "tiny" and load_corruption(w)["dune"]["kind"] == "wrong_rubric"


def test_a_truncated_truth_json_is_refused_by_every_tool_naming_the_file(tmp_path, capsys):
    text = truth_text()
    w = fake_world(tmp_path / "w", truth=text[:300])          # a write cut short
    (tmp_path / "out.json").write_text('{"a good earlier output": true}\n')
    before = snapshot(tmp_path)
    for module, argv in tool_cases(w, tmp_path):
        rc, err = run(module, argv, capsys)
        assert rc == EXIT_BAD_INPUT, (module, argv, err)
        assert len(err) == 1, (module, argv, err)
        assert f"{w}/oracle/truth.json: not valid JSON" in err[0] and "line 24" in err[0], (module, err)
        assert snapshot(tmp_path) == before, (module, argv)      # no OUT created, the good output kept


@pytest.mark.parametrize("what, truth, world, corruption, names", [
    ("empty truth.json", "", None, None, "oracle/truth.json: the file is empty"),
    ("truth.json a list", "[1, 2]\n", None, None, "oracle/truth.json: expected"),
    ("a family missing", "drop-dune", None, None, "oracle/truth.json: key 'families': no entry for dune"),
    ("a LUT token wrong", "bad-lut", None, None, "oracle/truth.json: key 'families.anvil.lut'"),
    ("noise NaN", "nan-noise", None, None, "oracle/truth.json: key 'expert_noise_sd'"),
    ("truncated world.json", None, "cut", None, "oracle/world.json: not valid JSON"),
    ("world.json without config", None, '{"seed": 0}\n', None, "oracle/world.json: key 'config'"),
    ("unknown config key", None, world_json_text(bogus_knob=1), None, "unknown config keys ['bogus_knob']"),
    ("a zero count in config", None, world_json_text(grade_samples_per_family=0), None,
     "oracle/world.json: key 'config': world config: key 'grade_samples_per_family': expected an integer >= 1"),
    ("truncated corruption.json", None, None, "cut", "oracle/corruption.json: not valid JSON"),
    ("corruption.json bad kind", None, None, '{"dune": {"kind": "worse"}}', "oracle/corruption.json: key 'dune': Corruption.kind must be"),
])
def test_other_broken_oracle_files_are_named_with_their_key(tmp_path, capsys, what, truth, world, corruption, names):
    obj = json.loads(truth_text())
    if truth == "drop-dune":
        del obj["families"]["dune"]
    elif truth == "bad-lut":
        obj["families"]["anvil"]["lut"][3][5] = "zz"
    elif truth == "nan-noise":
        obj["expert_noise_sd"] = float("nan")
    if truth in ("drop-dune", "bad-lut", "nan-noise"):
        truth = json.dumps(obj)
    if world == "cut":
        world = world_json_text()[:200]
    if corruption == "cut":
        corruption = corruption_text()[:100]
    w = fake_world(tmp_path / "w", truth=truth, world=world, corruption=corruption)
    before = snapshot(tmp_path)
    for module, argv in [("world.__main__", ["zoo-check", w, "--json", tmp_path / "out.json"]),
                         ("world.__main__", ["export-samples", w, "--out", tmp_path / "out"]),
                         ("world.experiments.reward_ablation", [w, "--out", tmp_path / "out.json"])]:
        rc, err = run(module, argv, capsys)
        assert rc == EXIT_BAD_INPUT and len(err) == 1 and names in err[0], (what, module, err)
        assert str(w) in err[0], (what, err)
    assert snapshot(tmp_path) == before


def test_export_samples_counts_and_gold_beyond_samples(tmp_path, capsys):
    from world.export_samples import check_export
    w = fake_world(tmp_path / "w")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not an export\n")
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    for args, names in [(["--samples", "0"], "argument --samples: expected an integer >= 1, got 0"),
                        (["--gold", "-1"], "argument --gold: expected an integer >= 1, got -1"),
                        (["--truth-samples", "0"], "argument --truth-samples: expected an integer >= 1"),
                        (["--seed", "-1"], "argument --seed: a seed is an integer in [0, 4294967295]"),
                        (["--gold", "50", "--samples", "30"], "--gold 50 exceeds --samples 30"),
                        (["--out", tmp_path / "mine"], "exists and is not an export")]:
        argv = ["export-samples", w, "--out", out, *args]
        rc, err = run("world.__main__", argv, capsys)
        assert rc == EXIT_BAD_INPUT and len(err) == 1 and names in err[0], (args, err)
    assert snapshot(tmp_path) == before
    check_export(w, out, samples=30, gold=30, truth_samples=10)       # every sample labelled: allowed


def test_world_build_refuses_bad_values_in_one_line(tmp_path, capsys):
    """Before: argparse's 11-line usage block, then the error."""
    out = tmp_path / "w"
    for args, names in [(["--gold-per-family", "-1"], "gold_per_family must be an integer >= 2"),
                        (["--p-rubric", "nan"], "p_rubric (nan)"),
                        (["--seed", "-1"], "argument --seed: a seed is an integer"),
                        (["--seed", str(2**64)], "argument --seed: a seed is an integer"),
                        (["--workers", "0"], "argument --workers: expected an integer >= 1"),
                        (["--corruption", '{"dune": {"rho": "x"}}'], "corruption['dune']: Corruption key 'rho'"),
                        (["--corruption", '{"dune": {"scale": NaN}}'], "corruption['dune']: Corruption key 'scale'"),
                        ([], "the following arguments are required: --out")]:
        argv = ["build", *(["--out", out, "--preset", "tiny"] if args else ["--preset", "tiny"]), *args]
        rc, err = run("world.__main__", argv, capsys)
        assert rc == EXIT_BAD_INPUT and len(err) == 1, (args, err)
        assert err[0].startswith("python -m world build: error: ") and names in err[0], (args, err)
    (tmp_path / "afile").write_text("keep\n")
    rc, err = run("world.__main__", ["build", "--out", tmp_path / "afile", "--preset", "tiny"], capsys)
    assert rc == EXIT_BAD_INPUT and len(err) == 1 and "afile: exists and is not a directory" in err[0]
    assert not out.exists() and (tmp_path / "afile").read_text() == "keep\n"


@pytest.mark.parametrize("bad", ["-1", str(2**32), "1.5", "x"])
def test_every_seed_flag_is_a_seed(tmp_path, capsys, bad):
    w = fake_world(tmp_path / "w")
    before = snapshot(tmp_path)
    cases = [("world.__main__", ["calibrate", w, "--seed", bad]),
             ("world.__main__", ["zoo-check", w, "--seed", bad]),
             ("world.__main__", ["grade", "--world", w, "--submission", tmp_path, "--seed", bad]),
             ("world.__main__", ["export-samples", w, "--out", tmp_path / "o", "--seed", bad]),
             ("world.experiments.fidelity", [w, "--seed", bad]),
             ("world.replay", [w, tmp_path / "o", "--seed", bad]),
             ("world.experiments.reward_ablation", [w, "--seed", bad]),
             ("world.experiments.stress_labels", ["--world", w, "--stress-dir", tmp_path, "--seed", bad]),
             ("world.experiments.diagnosis_bench", [w, "--seed", bad]),
             ("world.experiments.decompose", [w, "--rm-seeds", f"0,{bad}"]),
             ("world.experiments.samples_coverage", [w, "--seeds", f"0,{bad}"]),
             ("world.experiments.standin_accuracy", ["--world", w, "--rm-dirs", tmp_path, "--seeds", f"1,{bad}"]),
             ("world.experiments.diagnostic_noise", ["--task", tmp_path, "--rm-dir", tmp_path, "--seeds", f"0,{bad}"]),
             ("world.__main__", ["build", "--out", tmp_path / "b", "--preset", "tiny", "--seed", bad])]
    for module, argv in cases:
        rc, err = run(module, argv, capsys)
        assert rc == EXIT_BAD_INPUT and len(err) == 1 and "seed" in err[0] and bad in err[0], (module, err)
    assert snapshot(tmp_path) == before


def test_counts_that_cannot_be_zero(tmp_path, capsys):
    w = fake_world(tmp_path / "w")
    before = snapshot(tmp_path)
    cases = [("world.replay", [w, tmp_path / "o", "--rm-epochs", "0"], "--rm-epochs"),
             ("world.experiments.reward_ablation", [w, "--n-eval", "0"], "--n-eval"),
             ("world.experiments.stress_labels", ["--world", w, "--stress-dir", tmp_path, "--jobs", "0"], "--jobs"),
             ("world.experiments.stress_labels", ["--world", w, "--stress-dir", tmp_path, "--steps", "-5"], "--steps"),
             ("world.experiments.diagnosis_bench", [w, "--rms", "0"], "--rms"),
             ("world.experiments.diagnosis_bench", [w, "--alt-label", "0,1e-3"], "--alt-label"),
             ("world.experiments.samples_coverage", [w, "--samples", "0"], "--samples"),
             ("world.experiments.samples_coverage", [w, "--gold", "100,0"], "--gold"),
             ("world.experiments.samples_coverage", [w, "--gold", "100", "--samples", "50", "--cache", tmp_path / "c"],
              "--gold 100 exceeds --samples 50"),
             ("world.experiments.diagnostic_noise", ["--task", tmp_path, "--rm-dir", tmp_path, "--eval-draws", "0"],
              "--eval-draws"),
             ("world.experiments.diagnostic_noise", ["--task", tmp_path, "--rm-dir", tmp_path, "--eval-prompts", "600,-1"],
              "--eval-prompts")]
    for module, argv, names in cases:
        rc, err = run(module, argv, capsys)
        assert rc == EXIT_BAD_INPUT and len(err) == 1 and names in err[0], (module, argv, err)
    assert snapshot(tmp_path) == before


def test_replay_checks_its_corruption_before_creating_out(tmp_path, capsys):
    w = fake_world(tmp_path / "w")
    out = tmp_path / "out"
    for corruption, names in [('{"zinc": {}}', "unknown family 'zinc'"),
                              ('{"dune": {"sclae": 2}}', "unknown config keys ['sclae']"),
                              ('{"dune": {"replaced_share": "most"}}', "key 'replaced_share'"),
                              ('{"dune": 3}', "key 'dune': expected an object"),
                              ("[1]", "expected a JSON object"),
                              ("{bad", "--corruption: not valid JSON")]:
        rc, err = run("world.replay", [w, out, "--corruption", corruption], capsys)
        assert rc == EXIT_BAD_INPUT and len(err) == 1 and names in err[0], (corruption, err)
        assert not out.exists()
