"""Claim 1: the task is well-formed (files, shapes, vocabulary, label ranges)."""
import pytest

from audit.task.task_dir import load_task


@pytest.mark.claim("task.well_formed")
def test_task_well_formed(task_dir, evidence):
    task = load_task(task_dir)   # raises TaskError naming the file / line / key on any problem
    evidence.record(details={"n_gold": len(task.gold), "n_qa": len(task.qa), "n_prompts_train": len(task.prompts_train),
                             "n_prompts_dev": len(task.prompts_dev), "runs": sorted(task.runs)},
                    inputs=["data/", "reward_model/", "policy/", "configs/", "runs/"])
    assert task.gold and task.qa and task.prompts_train
