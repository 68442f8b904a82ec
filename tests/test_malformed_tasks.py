"""Bad input: `audit.certify` on every case of the generated corpus (tests/malformed.py) exits 2, prints one line per
problem naming the file (and line / key) on stderr, and writes nothing: OUT is not created, an existing OUT is
left exactly as it was. In-process (validation fails before anything imports torch's heavy paths or starts
pytest); a few cases again as the real command."""
import os
import re
import subprocess

import pytest

from audit.task import certify
from audit.task.task_dir import TaskError, load_task, validate
from tests.helpers import certify_cmd
from tests.malformed import CASES, Case, delete, edit_line, make_case

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def snapshot(directory):
    """Every entry under a directory: relpath -> (kind, bytes, mtime_ns); a change of any is a write."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            data = open(p, "rb").read() if os.path.isfile(p) else None
            out[os.path.relpath(p, directory)] = (os.path.isdir(p), data, st.st_mtime_ns)
    return out


def previous_outputs(out):
    """An OUT holding a previous run's outputs."""
    (out / ".cache" / "k").mkdir(parents=True)
    (out / ".cache" / "k" / "rubrics.pkl").write_bytes(b"cached")
    (out / "answer.json").write_text('{"previous": true}\n')
    (out / "summary.md").write_text("# previous\n")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def assert_refused(case, task, rc, stdout, stderr):
    assert rc == 2, stderr
    assert "Traceback" not in stderr and stdout == ""
    lines = error_lines(stderr)
    assert len(lines) == case.n, lines                       # one line per problem: no cascade, no dump
    named = [line for line in lines if line.startswith(f"error: {task}/") and re.search(case.expected, line)]
    assert named, f"expected a line matching {case.expected!r} naming a file under {task}; got {lines}"
    assert "nothing was written" in stderr.splitlines()[-1]


def test_the_corpus_is_large_and_each_case_distinct():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES) and len({c.expected for c in CASES}) == len(CASES)


def test_the_source_task_is_well_formed(tiny_world):
    assert validate(tiny_world / "task") == []     # so every problem found below is the mutation's


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_malformed_task_is_refused_and_nothing_written(case, tiny_world, tmp_path, capsys):
    task = make_case(tiny_world / "task", tmp_path / "tasks", case)
    # half the cases with no OUT yet (it must not be created), half with a previous run's OUT (left untouched)
    fresh = CASES.index(case) % 2 == 0
    out = tmp_path / "new" / "out" if fresh else tmp_path / "out"
    if not fresh:
        previous_outputs(out)
    before = None if fresh else snapshot(out)
    rc = certify.main(["--task", str(task), "--out", str(out), "--preset", "small"])
    captured = capsys.readouterr()
    assert_refused(case, task, rc, captured.out, captured.err)
    if fresh:
        assert not (tmp_path / "new").exists()
    else:
        assert snapshot(out) == before
    with pytest.raises(TaskError) as e:                  # the library entry point refuses it the same way
        load_task(task)
    assert e.value.problems == [line[len("error: "):] for line in error_lines(captured.err)]


def test_every_problem_is_listed_not_only_the_first(tiny_world, tmp_path, capsys):
    both = Case("two-problems", lambda t: (CASES[0].mutate(t), delete("runs/kl05-s800/policy.safetensors")(t),
                                          edit_line("data/prompts_dev.jsonl", 2, lambda s: "{")(t)),
                r"gold_calib\.jsonl:4: not valid JSON", n=3)
    task = make_case(tiny_world / "task", tmp_path, both)
    rc = certify.main(["--task", str(task), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and not (tmp_path / "out").exists()
    lines = error_lines(err)
    assert len(lines) == 3
    assert [bool(re.search(p, line)) for p, line in zip(
        [r"gold_calib\.jsonl:4: not valid JSON", r"prompts_dev\.jsonl:2: not valid JSON",
         r"runs/kl05-s800/policy\.safetensors: file not found"], lines)] == [True, True, True]


def test_a_broken_file_is_summarised_after_ten_lines(tiny_world, tmp_path):
    def break_many(t):
        p = t / "data" / "prompts_train.jsonl"
        lines = p.read_text().splitlines()
        p.write_text("".join(("{" if i < 25 else line) + "\n" for i, line in enumerate(lines)))
    task = make_case(tiny_world / "task", tmp_path, Case("many", break_many, ""))
    problems = validate(task)
    assert len(problems) == 11 and problems[-1].endswith("... and 15 more problems in this file")


@pytest.mark.parametrize("case_id", ["rm-truncated", "gold-nan-label", "run-without-policy"])
def test_refused_by_the_real_command(case_id, tiny_world, tmp_path):
    case = next(c for c in CASES if c.id == case_id)
    task = make_case(tiny_world / "task", tmp_path, case)
    r = subprocess.run(certify_cmd(task, tmp_path / "out"), capture_output=True, text=True, cwd=ROOT)
    assert_refused(case, task, r.returncode, r.stdout, r.stderr)
    assert not (tmp_path / "out").exists()


def test_usage_errors_exit_2_and_write_nothing(tmp_path, capsys, tiny_world):
    assert certify.main(["--task", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "nope: task directory not found" in capsys.readouterr().err and not (tmp_path / "o").exists()
    (tmp_path / "file").write_text("x")
    assert certify.main(["--task", str(tiny_world / "task"), "--out", str(tmp_path / "file")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err and (tmp_path / "file").read_text() == "x"
    with pytest.raises(SystemExit) as e:              # argparse: a missing required option
        certify.main(["--out", str(tmp_path / "o")])
    assert e.value.code == 2 and not (tmp_path / "o").exists()
    neg = ["--task", str(tiny_world / "task"), "--out", str(tmp_path / "o"), "--stress-examples", "-1"]
    assert certify.main(neg) == 2
    assert "--stress-examples -1: expected an integer >= 0" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_make_certify_passes_the_gating_flag():
    r = subprocess.run(["make", "-n", "certify", "TASK=some/task", "OUT=o", "STRICT=1"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0 and "--fail-if-not-certified" in r.stdout
    r = subprocess.run(["make", "-n", "certify", "TASK=some/task", "OUT=o"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "--fail-if-not-certified" not in r.stdout and "--stress-examples" not in r.stdout
    r = subprocess.run(["make", "-n", "certify", "TASK=t", "OUT=o", "STRESS=3"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "--stress-examples 3" in r.stdout
