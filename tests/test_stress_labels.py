"""world.experiments.stress_labels: the stress claim's labels set beside SPEC §3's, from the oracle (a world tool)."""
import json

from audit.core.hazard import hazard_labels
from rlhf.errors import EXIT_BAD_INPUT, run_cli
from rlhf.vocab import FAMILIES
from world.experiments.stress_labels import compare_labels, main


def test_compare_labels_counts_each_disagreement():
    rubric = {f: 0.5 for f in FAMILIES}                      # the line: a fifth of 0.5 = 0.1
    oracle = {"b1": {**{f: 0.3 for f in FAMILIES}, "anvil": 0.05}, "b2": {f: 0.3 for f in FAMILIES}}
    results = {
        "b1": {"spec": {"anvil": {}}, "hazard": {**{f: False for f in FAMILIES}, "anvil": True},
               "flag": {**{f: False for f in FAMILIES}, "anvil": True}},
        # the claim calls birch hazardous where the oracle run kept 0.3 of 0.5; the diagnostic flags it too
        "b2": {"spec": {}, "hazard": {**{f: False for f in FAMILIES}, "birch": True},
               "flag": {**{f: False for f in FAMILIES}, "birch": True}},
    }
    for r in results.values():
        r.update(risk={f: 0.5 for f in FAMILIES}, gain={f: 0.0 for f in FAMILIES}, rubric_gain=rubric)
    res = compare_labels(results, oracle, rubric)
    assert res["pairs"] == 12 and res["hazardous_spec"] == 1 and res["hazardous_claim"] == 2
    assert res["labels_agree"] == 11
    assert res["flags_right_by_claim_labels"] == 12 and res["flags_right_by_spec_labels"] == 11
    row = next(r for r in res["rows"] if r["batch"] == "b1" and r["family"] == "anvil")
    assert row["corrupted"] and row["spec_label"] and row["oracle_gain"] == 0.05


def test_runs_on_the_tiny_worlds_certify(certified_tiny, tiny_world, tmp_path, capsys):
    out, _ = certified_tiny
    stress_dir = next((out / ".cache").glob("*/stress"))
    res_file = tmp_path / "labels.json"
    args = ["--world", str(tiny_world), "--stress-dir", str(stress_dir), "--steps", "3", "--batch-prompts", "4",
            "--samples-per-prompt", "2", "--n-eval", "40", "--jobs", "1", "--cache-dir", str(tmp_path / "cache"),
            "--out", str(res_file)]
    assert run_cli(main, "python -m world.experiments.stress_labels", args) == 0
    res = json.loads(res_file.read_text())
    stored = {p.stem: json.loads(p.read_text()) for p in stress_dir.glob("*.json") if p.name != "rubric_gain.json"}
    assert res["pairs"] == 6 * len(stored) and len(list((tmp_path / "cache").glob("gain-*.json"))) == len(stored) + 1
    by_batch = {}
    for r in res["rows"]:
        assert r["claim_label"] == stored[r["batch"]]["hazard"][r["family"]]
        assert r["flag"] == stored[r["batch"]]["flag"][r["family"]]
        by_batch.setdefault(r["batch"], {})[r["family"]] = r
    for key, rows in by_batch.items():          # SPEC's labels are the one rule on the oracle gains
        labels = hazard_labels({f: rows[f]["oracle_gain"] for f in FAMILIES},
                               {f: rows[f]["oracle_rubric_gain"] for f in FAMILIES})
        assert labels == {f: rows[f]["spec_label"] for f in FAMILIES}
    assert res["labels_agree"] == sum(r["claim_label"] == r["spec_label"] for r in res["rows"])
    assert f"{res['pairs']} pairs: the claim's labels agree with SPEC's on" in capsys.readouterr().out
    assert res["config"]["recipe"]["seed"] == 0
    # another --seed is another set of SPEC runs (the rule's own seed-to-seed noise), cached beside the first
    assert run_cli(main, "python -m world.experiments.stress_labels", args + ["--seed", "1"]) == 0
    assert json.loads(res_file.read_text())["config"]["recipe"]["seed"] == 1
    assert len(list((tmp_path / "cache").glob("gain-*.json"))) == 2 * (len(stored) + 1)
    capsys.readouterr()
    bad = ["--world", str(tiny_world), "--stress-dir", str(tmp_path / "nope")]
    assert run_cli(main, "python -m world.experiments.stress_labels", bad) == EXIT_BAD_INPUT
    assert "nope: not a directory" in capsys.readouterr().err
