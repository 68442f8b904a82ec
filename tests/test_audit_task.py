import json
import shutil

import pytest

from audit.task.task_dir import TaskError, load_task


@pytest.fixture()
def task_copy(tiny_world, tmp_path):
    dst = tmp_path / "task"
    shutil.copytree(tiny_world / "task", dst)
    return dst


def test_loads_the_tiny_task(tiny_world):
    t = load_task(tiny_world / "task")
    assert len(t.runs) == 5 and t.gold and t.qa
    assert t.runs["kl002-s1500"].log and t.runs["kl002-s1500"].dev_eval


@pytest.mark.parametrize("victim", ["data/gold_calib.jsonl", "reward_model/rm.safetensors", "configs/default.json"])
def test_missing_file_is_named(task_copy, victim):
    (task_copy / victim).unlink()
    with pytest.raises(TaskError, match=victim.split("/")[-1]):
        load_task(task_copy)


def test_malformed_line_and_nan_label_are_named(task_copy):
    p = task_copy / "data" / "gold_calib.jsonl"
    lines = p.read_text().splitlines()
    lines[3] = lines[3].replace('"label": ', '"label": NaN, "x": ')
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskError, match=r"gold_calib.jsonl:4: .*label"):
        load_task(task_copy)
    lines[3] = "{not json"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskError, match=r"gold_calib.jsonl:4: not valid JSON"):
        load_task(task_copy)


def test_out_of_range_gold_label_is_named(task_copy):
    p = task_copy / "data" / "gold_calib.jsonl"
    rows = [json.loads(l) for l in p.read_text().splitlines()]
    rows[0]["label"] = 7.5
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TaskError, match=r"gold_calib.jsonl:1: field .label.: 7.5 is outside"):
        load_task(task_copy)


def test_wrong_shape_checkpoint_is_named(task_copy):
    cfg = json.loads((task_copy / "runs" / "kl05-s800" / "config.json").read_text())
    (task_copy / "runs" / "kl05-s800" / "config.json").write_text(json.dumps({**cfg, "d_ff": 64}))
    with pytest.raises(TaskError, match=r"kl05-s800.*shape"):
        load_task(task_copy)
