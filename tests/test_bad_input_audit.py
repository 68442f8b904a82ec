"""Bad input to the audit/ CLIs (the session-30 probe): exit 2 with one clear line naming the flag, file or key,
before any work, and nothing written -- an existing good output stays byte-identical. In-process, on tiny
synthetic inputs (no world, no training): seeds out of range, NaN and non-positive settings, an RM dir without
its QA sample, text that is no number in the samples tables, evidence cut short or of the other door, answers
that compare cannot read (NaN, a CI that is not [lo, hi]), a run dir without its recipe."""
import copy
import json

import pytest

from rlhf.errors import EXIT_BAD_INPUT, InputError, run_cli
from tests.samples_synth import make_table, write_jsonl
from tests.test_render import full_evidence

GOOD = b'{"good": "answer"}\n'


@pytest.fixture
def good_out(tmp_path):
    """An output dir holding a good answer.json and summary.md: a refused run must leave both as they were."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "answer.json").write_bytes(GOOD)
    (out / "summary.md").write_bytes(b"# good\n")
    return out


def _snapshot(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()} \
        if path.exists() else None


def _usage_error(capsys, main, argv, flag):
    """An argparse refusal: exit 2, and its one error line names the flag."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == EXIT_BAD_INPUT
    err = [ln for ln in capsys.readouterr().err.splitlines() if ": error: " in ln]
    assert len(err) == 1 and f"argument {flag}" in err[0], err
    return err[0]


# --------------------------------------------------------------------------------------------------- seeds
@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_seeds_out_of_range_are_usage_errors_before_any_work(tmp_path, good_out, capsys, seed):
    """Before: certify --seed -1 worked ~8 s and then failed rendering (exit 1); seeds above 64 bits overflowed
    (exit 1) in the diagnostic; samples --seed -1 created OUT/.staging and failed rendering."""
    from audit.samples import certify as samples
    from audit.task import bench_stress, certify, diagnostic
    before = _snapshot(good_out)
    fresh = tmp_path / "fresh"
    for main, argv in ((certify.main, ["--task", str(tmp_path / "t"), "--out", str(fresh)]),
                       (certify.main, ["--task", str(tmp_path / "t"), "--out", str(good_out)]),
                       (samples.main, ["--samples", "s.jsonl", "--gold", "g.jsonl", "--out", str(fresh)]),
                       (diagnostic.main, ["--rm-dir", "r", "--policy-dir", "p", "--prompts", "q", "--out",
                                          str(good_out / "answer.json")]),
                       (bench_stress.main, ["--task", str(tmp_path / "t")])):
        line = _usage_error(capsys, main, [*argv, "--seed", seed], "--seed")
        assert "[0, 4294967295]" in line and seed in line
    assert _snapshot(good_out) == before and not fresh.exists()


# --------------------------------------------------------------------------------------------- diagnostic
@pytest.mark.parametrize("flag,value", [("--steps", "-1"), ("--steps", "0"), ("--lr", "nan"), ("--lr", "inf"),
                                        ("--batch-prompts", "0"), ("--kl-coef", "-0.1"), ("--replicates", "0"),
                                        ("--samples-per-prompt", "x")])
def test_diagnostic_flags_are_checked_before_anything_runs(good_out, capsys, flag, value):
    """Before: --steps -1 exited 0 and overwrote a good --out with risk 1.0 everywhere; --lr nan and
    --batch-prompts 0 exited 1 with a traceback."""
    from audit.task import diagnostic
    before = _snapshot(good_out)
    _usage_error(capsys, diagnostic.main, ["--rm-dir", "r", "--policy-dir", "p", "--prompts", "q", "--out",
                                           str(good_out / "answer.json"), flag, value], flag)
    assert _snapshot(good_out) == before


def test_diagnostic_config_is_checked_for_programmatic_callers_too():
    import dataclasses
    from audit.task.diagnostic import DiagnosticConfig
    with pytest.raises(InputError) as e:
        DiagnosticConfig(steps=-1, lr=float("nan"), seed=2**40, prior_counts="bogus")
    lines = str(e.value).splitlines()
    assert [ln.split("'")[1] for ln in lines] == ["steps", "lr", "seed"], lines
    assert all(ln.startswith("DiagnosticConfig: key ") for ln in lines)
    with pytest.raises(InputError, match="key 'batch_prompts': expected an integer >= 1, got 0"):
        dataclasses.replace(DiagnosticConfig(), batch_prompts=0)
    with pytest.raises(InputError, match="key 'steps': expected an integer, got '250'"):
        DiagnosticConfig(steps="250")
    with pytest.raises(InputError, match="key 'prior_counts': expected one of sampled, soft"):
        DiagnosticConfig(prior_counts="bogus")
    assert DiagnosticConfig(steps=6, lr=1, kl_coef=0).lr == 1


def _rm_dir(path):
    """A real (untrained) RM checkpoint without its QA sample train.jsonl."""
    from rlhf.reward_model import RewardModel, default_config, save_rm
    cfg = default_config()
    save_rm(RewardModel(cfg), cfg, path)
    assert not (path / "train.jsonl").exists()
    return path


def test_diagnostic_refuses_an_rm_dir_without_its_qa_sample(tmp_path, good_out, capsys):
    """Before: the whole diagnostic ran (23 s) label-free and overwrote --out; docs/task-format.md lists
    train.jsonl as part of the RM dir."""
    from audit.task import diagnostic
    from audit.task.diagnostic import DiagnosticConfig, diagnose
    rm = _rm_dir(tmp_path / "rm")
    before = _snapshot(good_out)
    prog = "python -m audit.diagnostic"
    rc = run_cli(diagnostic.main, prog, ["--rm-dir", str(rm), "--policy-dir", str(tmp_path / "no_policy"),
                                         "--prompts", str(tmp_path / "no_prompts.jsonl"),
                                         "--out", str(good_out / "answer.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == EXIT_BAD_INPUT and len(err) == 1, err
    assert err[0].startswith(f"{prog}: error: {rm / 'train.jsonl'}: file not found"), err
    assert _snapshot(good_out) == before
    with pytest.raises(InputError, match="train.jsonl: file not found"):      # the function, before any load
        diagnose(rm, tmp_path / "no_policy", tmp_path / "no_prompts.jsonl", DiagnosticConfig(steps=1))
    rc = run_cli(diagnostic.main, prog, ["--rm-dir", str(rm), "--policy-dir", "p", "--prompts", "q",
                                         "--out", str(good_out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == EXIT_BAD_INPUT and err == [f"{prog}: error: --out {good_out}: is a directory; expected the path "
                                            "of a JSON file"]


# ------------------------------------------------------------------------------------------------ samples
@pytest.fixture
def tables(tmp_path):
    rows, gold, _ = make_table(n=24, n_gold=10)
    return rows, gold, write_jsonl(tmp_path / "s.jsonl", rows), write_jsonl(tmp_path / "g.jsonl", gold)


@pytest.mark.parametrize("extra,named", [
    (["--min-gain", "nan"], "error: --min-gain nan: expected a finite number"),
    (["--gain-ci-lower", "inf"], "error: --gain-ci-lower inf: expected a finite number"),
    (["--family-ci-lower=-inf"], "error: --family-ci-lower -inf: expected a finite number"),
    (["--scale-max-ratio", "0.5"], "error: --scale-max-ratio 0.5: expected a finite number >= 1"),
    (["--agreement-min-pearson", "nan"], "error: --agreement-min-pearson nan: expected a number in [-1, 1)"),
    (["--gold-range", "0", "inf"], "error: --gold-range 0 inf: expected finite numbers LO < HI"),
])
def test_samples_rule_settings_must_be_finite(tables, good_out, capsys, extra, named):
    """Before: --min-gain nan was accepted (rule text "at least nan", min_balanced_gain null) and the good
    answer.json overwritten."""
    from audit.samples.certify import main
    _, _, s, g = tables
    before = _snapshot(good_out)
    assert main(["--samples", str(s), "--gold", str(g), "--out", str(good_out), *extra]) == EXIT_BAD_INPUT
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    assert err == [named] or (len(err) == 1 and err[0].startswith(named)), err
    assert _snapshot(good_out) == before


@pytest.mark.parametrize("flag,value", [("--scale-max-ratio", "-3"), ("--scale-max-ratio", "nan"),
                                        ("--min-samples", "0")])
def test_samples_non_positive_settings_are_usage_errors(tables, tmp_path, capsys, flag, value):
    from audit.samples.certify import main
    _, _, s, g = tables
    _usage_error(capsys, main, ["--samples", str(s), "--gold", str(g), "--out", str(tmp_path / "o"), flag, value],
                 flag)
    assert not (tmp_path / "o").exists()


def test_samples_numbers_stored_as_text_are_read_as_numbers(tables, tmp_path):
    """A number written as text ("0.5") is read as that number in JSONL and Parquet, as in CSV: other tools write
    tables that way, and nothing is gained by refusing them; text that is no number is refused, naming the line."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from audit.samples.table import TableError, load
    rows, gold, s, g = tables
    texty = [dict(r, proxy_reward=str(r["proxy_reward"])) for r in rows]
    assert load(write_jsonl(tmp_path / "st.jsonl", texty), g).proxy[4] == rows[4]["proxy_reward"]
    pq.write_table(pa.Table.from_pylist(texty), tmp_path / "s.parquet")
    assert load(tmp_path / "s.parquet", g).proxy[4] == rows[4]["proxy_reward"]
    bad = write_jsonl(tmp_path / "bad.jsonl", [dict(r, proxy_reward="high") if i == 4 else r for i, r in enumerate(rows)])
    with pytest.raises(TableError) as e:
        load(bad, g)
    assert e.value.problems == [f"{bad}:5: column 'proxy_reward': expected a finite number (or null: no proxy for this "
                                f"row), got 'high'"]


# ------------------------------------------------------------------------------------------------- render
def _rendered(tmp_path):
    from audit.task import render as R
    ev = tmp_path / "ev.json"
    ev.write_text(json.dumps(full_evidence()))
    out = tmp_path / "rendered"
    assert R.main(["--evidence", str(ev), "--out", str(out), "--no-figures"]) == 0
    return out


def _render_refused(capsys, out, doc, path):
    from audit.task import render as R
    path.write_text(json.dumps(doc))
    before = _snapshot(out)
    assert R.main(["--evidence", str(path), "--out", str(out), "--no-figures"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err and all(ln.startswith(f"python -m audit.render: error: {path}: ") for ln in err), err
    assert _snapshot(out) == before
    return err


def test_render_refuses_evidence_cut_short_and_keeps_the_good_answer(tmp_path, capsys):
    """Before: evidence with half its claims removed rendered (exit 0) over a good answer.json and summary.md."""
    out = _rendered(tmp_path)
    capsys.readouterr()
    half = full_evidence()
    half["claims"] = [c for c in half["claims"] if c["name"] not in ("shipped.improves_over_reference",
                                                                     "diagnostic.flags_families")]
    err = _render_refused(capsys, out, half, tmp_path / "half.json")
    assert len(err) == 2 and "claim 'shipped.improves_over_reference' is missing" in err[0] \
        and "claim 'diagnostic.flags_families' is missing" in err[1], err
    some = full_evidence()
    some["claims"] = [c for c in some["claims"] if c["id"] != "crowd.on_rubric_scale[dune]"]
    some["meta"]["input_hashes"]["runs/pilotmix-s800/run_config.json"] = "cd" * 32      # a run without its claim
    err = _render_refused(capsys, out, some, tmp_path / "some.json")
    assert len(err) == 2 and "'crowd.on_rubric_scale' is missing for families dune" in err[0] \
        and "'run.passes_release_rule' is missing for runs pilotmix-s800" in err[1], err


def test_render_refuses_the_samples_doors_evidence(tmp_path, capsys):
    """Before: samples-door evidence rendered as a task answer with checkpoint_dir and recipe null."""
    from audit.task import render as R
    out = _rendered(tmp_path)
    capsys.readouterr()
    doc = {"schema_version": 1, "meta": {"task_dir": None, "samples": "/x/s.jsonl", "gold": "/x/g.jsonl"},
           "claims": [{"id": "proxy.agrees_with_gold[f1]", "status": "pass"},
                      {"id": "run.passes_release_rule[good]", "status": "pass"}]}
    err = _render_refused(capsys, out, doc, tmp_path / "samples_ev.json")
    assert len(err) == 1 and "evidence of the samples door (claims proxy.agrees_with_gold" in err[0], err
    with pytest.raises(InputError, match="samples door"):           # the function as well: nothing written
        R.render(tmp_path / "samples_ev.json", tmp_path / "elsewhere", figures=False)
    assert not (tmp_path / "elsewhere").exists()


def test_render_bad_evidence_uses_the_common_prefix(tmp_path, capsys):
    """Before: "audit.render: ..." where every other CLI says "python -m audit.X: error: ..."."""
    from audit.task import render as R
    assert R.main(["--evidence", str(tmp_path / "none.json"), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == f"python -m audit.render: error: {tmp_path / 'none.json'}: evidence file not " \
                                      "found\n"
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------------ compare
def _samples_answer():
    """A samples-door answer.json (templates/samples_answer.schema.json's shape, the keys compare reads)."""
    fam = {"estimate": 0.5, "ci95": [0.45, 0.55], "reference": 0.3, "delta_ci95": [0.1, 0.3]}
    run = lambda est, ref: {"passes_release_rule": not ref, "is_reference": ref, "estimated_true_quality": est,  # noqa
                            "ci95": [est - 0.03, est + 0.03], "ci95_gold_only": None, "delta": est - 0.3,
                            "delta_ci95": [est - 0.35, est - 0.25], "delta_ci95_gold_only": None, "proxy_mean": 0.4,
                            "per_family": {f: dict(fam, estimate=est) for f in ("f1", "f2")}, "reasons": []}
    return {"inputs": {"samples": "s.jsonl", "gold": "g.jsonl", "fingerprint": None, "seed": 0},
            "reference_run": "reference",
            "certification": {"run": "good", "improved_over_reference": True, "estimated_true_quality": 0.5,
                              "ci95": [0.47, 0.53], "ci95_gold_only": None, "reference_run": "reference",
                              "reference_true_quality": 0.3, "delta": 0.2, "delta_ci95": [0.15, 0.25],
                              "families_improved": ["f1", "f2"], "families_not_improved": [],
                              "per_family": {"f1": fam, "f2": fam}, "basis": "passed"},
            "runs": {"reference": run(0.3, True), "good": run(0.5, False)},
            "reward_model": {f: {"rm_gold_pearson": 0.8, "ci95": [0.7, 0.9], "flag": False} for f in ("f1", "f2")},
            "checks": {"passed": 10, "failed": 0, "evidence": "evidence.json"}}


def _compare(capsys, *argv):
    from audit.core.compare import main
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err.strip().splitlines()


def test_compare_reads_samples_door_answers_and_refuses_mixing_doors(tmp_path, capsys):
    """Before: a valid samples-door answer, even against itself, was "not a readable answer.json (KeyError:
    'diagnostic')"."""
    from audit.task import render as R
    s = tmp_path / "s.json"
    s.write_text(json.dumps(_samples_answer()))
    rc, err = _compare(capsys, s, s)
    assert rc == 0 and err == []
    other = _samples_answer()
    other["certification"]["run"] = None
    other["runs"]["good"]["passes_release_rule"] = False
    (tmp_path / "s2.json").write_text(json.dumps(other))
    assert _compare(capsys, s, tmp_path / "s2.json")[0] == 3          # decisions differ: a finding
    t = tmp_path / "t.json"
    t.write_text(json.dumps(R.build_answer(full_evidence())))
    rc, err = _compare(capsys, t, s, "--json", tmp_path / "c.json")
    assert rc == EXIT_BAD_INPUT and err == [
        f"python -m audit.compare: error: {t} is the answer of a task audit (python -m audit.certify), {s} of a "
        "samples audit (python -m audit.samples): expected two answers of one door"]
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("door", ["task", "samples"])
@pytest.mark.parametrize("break_it,key", [
    (lambda a: a["runs"][next(iter(a["runs"]))].update(ci95="wide"), "ci95"),
    (lambda a: a["certification"].update(ci95=[0.1]), "certification/ci95"),
    (lambda a: a["certification"].update(ci95=[0.9, 0.1]), "certification/ci95"),
    (lambda a: a["certification"].update(estimated_true_quality=float("nan")), "certification/estimated_true_quality"),
    (lambda a: a["runs"][next(iter(a["runs"]))].update(estimated_true_quality="0.3"), "estimated_true_quality"),
    (lambda a: a["certification"].pop("ci95"), "certification/ci95' is missing"),
])
def test_compare_refuses_unreadable_values_naming_the_key(tmp_path, capsys, door, break_it, key):
    """Before: a CI "wide" or of one element exited 1 with a traceback; a NaN estimate counted as a difference
    (exit 3) and NaN went into the --json file."""
    from audit.task import render as R
    good = R.build_answer(full_evidence()) if door == "task" else _samples_answer()
    bad = copy.deepcopy(good)
    break_it(bad)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(good))
    b.write_text(json.dumps(bad))                               # NaN written as JSON's non-standard NaN token
    res = tmp_path / "res.json"
    res.write_bytes(b"previous\n")
    rc, err = _compare(capsys, a, b, "--json", res)
    assert rc == EXIT_BAD_INPUT and len(err) == 1, err
    assert err[0].startswith(f"python -m audit.compare: error: {b}: ") and key in err[0], err
    assert res.read_bytes() == b"previous\n"


def test_compare_json_must_be_a_file_path(tmp_path, capsys):
    """Before: --json pointing at a directory exited 1 after printing the comparison."""
    s = tmp_path / "s.json"
    s.write_text(json.dumps(_samples_answer()))
    rc, err = _compare(capsys, s, s, "--json", tmp_path)
    assert rc == EXIT_BAD_INPUT and err == [f"python -m audit.compare: error: --json {tmp_path}: is a directory; "
                                            "expected the path of a file"]
    rc, err = _compare(capsys, s, tmp_path)
    assert rc == EXIT_BAD_INPUT and err == [f"python -m audit.compare: error: {tmp_path}: is a directory; expected "
                                            "an answer.json file"]


# --------------------------------------------------------------------------------------------------- task
def test_a_run_dir_without_its_log_is_audited_and_one_without_its_config_is_refused(tmp_path):
    """A run's log.jsonl (its training curve) is read when present: a task whose runs lack it is audited, not
    refused; a run without run_config.json (its recipe, which the release rule reports) is bad input."""
    from audit.task.task_dir import validate
    run = tmp_path / "task" / "runs" / "r1"
    run.mkdir(parents=True)
    for f in ("policy.safetensors", "config.json", "run_config.json"):
        (run / f).write_text("{}")
    assert not any("log.jsonl" in p for p in validate(tmp_path / "task", check_models=False))
    (run / "run_config.json").unlink()
    assert f"{run / 'run_config.json'}: file not found (a run dir holds policy.safetensors, config.json, " \
           "run_config.json)" in validate(tmp_path / "task", check_models=False)


def test_hidden_dirs_under_runs_are_not_runs_and_a_foreign_log_draws_no_curve(tmp_path):
    """What a killed train_rl leaves (.NAME.XXXX.partial), or an editor's hidden dir, is neither validated nor
    audited as a run (audit.task.task_dir.run_dirs, which checks/task/conftest.py parametrizes the run claims by); a log.jsonl
    whose rows name their fields otherwise is drawn as no curve, not an error."""
    from audit.task.task_dir import proxy_curve, run_dirs, validate
    runs = tmp_path / "task" / "runs"
    (runs / ".r1.abc.partial").mkdir(parents=True)
    (runs / ".ipynb_checkpoints").mkdir()
    (runs / "r1").mkdir()
    assert [p.name for p in run_dirs(tmp_path / "task")] == ["r1"]
    assert not any(".partial" in p or "ipynb" in p for p in validate(tmp_path / "task", check_models=False))
    assert proxy_curve([{"step": 1, "proxy_reward": 0.5}, {"iteration": 2, "reward": 0.6}, [3], {"step": True,
                   "proxy_reward": 0.7}]) == [{"step": 1, "proxy": 0.5}]
