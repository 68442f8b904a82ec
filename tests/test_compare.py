"""audit.compare: two answers agree when their decisions do and every estimate moved less than its CI half-width."""
import copy
import json

from audit.task import render as R
from audit.core.compare import compare, main
from tests.test_render import full_evidence


def test_same_answer_agrees_and_a_flipped_verdict_or_a_far_estimate_does_not(tmp_path, capsys):
    a = R.build_answer(full_evidence())
    same = compare(a, copy.deepcopy(a))
    assert same["decisions_same"] and same["all_inside"] and same["max_abs_diff"] == 0
    b = copy.deepcopy(a)
    b["certification"]["estimated_true_quality"] += 0.01            # CI [0.68, 0.74]: half-width 0.03
    b["runs"]["fourfam-s800"]["per_family"]["anvil"]["estimate"] += 0.5
    b["runs"]["kl002-s1500"]["passes_release_rule"] = True
    res = compare(a, b)
    assert not res["decisions_same"]
    assert [r["decision"] for r in res["decisions"] if not r["same"]] == ["run kl002-s1500: passes"]
    rows = {r["estimate"]: r for r in res["estimates"]}
    assert rows["certified"]["inside"] is True and rows["certified"]["abs_diff"] == 0.01
    assert rows["run fourfam-s800 anvil"]["inside"] is None       # no CI there: reported, not judged
    b["certification"]["estimated_true_quality"] += 0.05
    assert compare(a, b)["all_inside"] is False
    for name, doc in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    assert main([str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == 0
    assert main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json", str(tmp_path / "c.json")]) == 3
    assert "DIFFERENT  run kl002-s1500: passes: False vs True" in capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text())["decisions_same"] is False
    (tmp_path / "bad.json").write_text("{}")
    assert main([str(tmp_path / "a.json"), str(tmp_path / "bad.json")]) == 2
    assert "bad.json: not a readable answer.json" in capsys.readouterr().err
