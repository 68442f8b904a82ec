import json
import math

import pytest
import torch
from hypothesis import given, strategies as st

from rlhf.data import (DataError, group_by_family, prompts_tensor, read_jsonl, read_jsonl_lines, responses_tensor,
                       sample_prompt_batch, write_jsonl)
from rlhf.vocab import CONTENT, FAMILIES, decode_prompt, decode_response, encode_prompt, encode_response

GOOD = {"id": "x", "family": "dune", "attrs": [1, 2, 3, 4], "response": ["ba"] * 8, "label": 0.25}


def _write(tmp_path, lines):
    p = tmp_path / "f.jsonl"
    p.write_text("".join(l + "\n" for l in lines))
    return p


def test_round_trip_and_tensors(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [GOOD, {**GOOD, "family": "anvil"}])
    recs = read_jsonl(tmp_path / "a.jsonl", require=("response", "label"))
    assert prompts_tensor(recs).shape == (2, 6) and responses_tensor(recs).shape == (2, 8)
    assert decode_prompt(encode_prompt("dune", [1, 2, 3, 4])) == ("dune", [1, 2, 3, 4])
    assert decode_response(encode_response(["ba"] * 8)) == ["ba"] * 8


BAD = [
    ("not json {", "not valid JSON"),
    (json.dumps({**GOOD, "family": "zinc"}), "field 'family'"),
    (json.dumps({**GOOD, "attrs": [1, 2, 3, 8]}), "field 'attrs'"),
    (json.dumps({**GOOD, "attrs": [1, 2, 3]}), "field 'attrs'"),
    (json.dumps({**GOOD, "response": ["ba"] * 7}), "field 'response'"),
    (json.dumps({**GOOD, "response": ["ba"] * 7 + ["<sep>"]}), r"field 'response\[7\]'"),
    (json.dumps({**GOOD, "label": float("nan")}), "field 'label'"),
    (json.dumps({**GOOD, "label": "high"}), "field 'label'"),
    ('{"id": 1, "attrs": [0,0,0,0]}', "field 'family' is missing"),
]


@pytest.mark.parametrize("line,msg", BAD)
def test_bad_input_names_file_line_field(tmp_path, line, msg):
    p = _write(tmp_path, [json.dumps(GOOD), line])
    with pytest.raises(DataError, match=msg) as e:
        read_jsonl(p)
    assert f"{p}:2" in str(e.value)


def test_missing_file_and_required_field(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_jsonl(tmp_path / "nope.jsonl")
    p = _write(tmp_path, [json.dumps({"id": 1, "family": "dune", "attrs": [0, 0, 0, 0]})])
    with pytest.raises(DataError, match="'label' is missing"):
        read_jsonl(p, require=("label",))


@given(rec=st.fixed_dictionaries({
    "family": st.one_of(st.sampled_from(FAMILIES), st.text(max_size=6)),
    "attrs": st.lists(st.integers(-2, 10), min_size=0, max_size=6),
    "response": st.lists(st.one_of(st.sampled_from(CONTENT), st.text(max_size=3)), min_size=6, max_size=9),
    "label": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3), st.text(max_size=2)),
}))
def test_hypothesis_malformed_records_get_clear_errors(tmp_path_factory, rec):
    p = tmp_path_factory.mktemp("h") / "r.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    ok = (rec["family"] in FAMILIES and len(rec["attrs"]) == 4 and all(0 <= a < 8 for a in rec["attrs"])
          and len(rec["response"]) == 8 and all(t in CONTENT for t in rec["response"])
          and not isinstance(rec["label"], str) and math.isfinite(rec["label"]))
    if ok:
        assert read_jsonl(p)[0]["family"] == rec["family"]
    else:
        with pytest.raises(DataError, match=rf"{p}:1: field '"):
            read_jsonl(p)


def test_sample_prompt_batch_respects_weights():
    recs = [{"id": i, "family": f, "attrs": [0, 0, 0, 0]} for i, f in enumerate(FAMILIES * 10)]
    by = group_by_family(recs)
    g = torch.Generator().manual_seed(0)
    batch = sample_prompt_batch(by, {"anvil": 1.0, "dune": 3.0}, 4000, g)
    fams = [r["family"] for r in batch]
    assert set(fams) == {"anvil", "dune"}
    assert abs(fams.count("dune") / 4000 - 0.75) < 0.03
    with pytest.raises(ValueError, match="unknown"):
        sample_prompt_batch(by, {"zinc": 1.0}, 4, g)
    same = [r["id"] for r in sample_prompt_batch(by, None, 50, torch.Generator().manual_seed(1))]
    assert same == [r["id"] for r in sample_prompt_batch(by, None, 50, torch.Generator().manual_seed(1))]


def test_every_problem_collected_with_line_numbers(tmp_path):
    p = _write(tmp_path, [json.dumps(GOOD), "not json {", "", json.dumps({**GOOD, "label": "x"}),
                          json.dumps({**GOOD, "id": "y"}), json.dumps(GOOD)])
    problems = []
    rows = read_jsonl_lines(p, require=("label",), on_error=problems.append, unique_ids=True)
    assert [n for n, _ in rows] == [1, 5]                       # bad lines skipped, blank line ignored
    assert [m.split(": ", 1)[0] for m in problems] == [f"{p}:2", f"{p}:4", f"{p}:6"]
    assert "repeats the id of line 1" in problems[2]
    with pytest.raises(DataError, match=f"{p}:2: not valid JSON"):   # without on_error: the first one raises
        read_jsonl_lines(p)
    assert read_jsonl(_write(tmp_path, [json.dumps(GOOD)] * 2))      # ids may repeat unless asked (bon samples)


def test_empty_file_is_named(tmp_path):
    p = _write(tmp_path, ["", "  "])
    with pytest.raises(DataError, match=rf"{p}: no records \(the file is empty\)"):
        read_jsonl(p)
