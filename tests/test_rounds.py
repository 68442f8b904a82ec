"""Issue 48: the samples door's rounds design -- confidence sequences (audit.core.sequential), the decisions' settled /
open layer (audit.samples.decisions), and the loop draw-gold --rounds -> label -> audit -> draw-gold --next."""
import csv
import json
import math

import numpy as np
import pytest

from audit.core import sequential as seq
from audit.samples import decisions
from audit.samples.certify import main as samples_main
from audit.samples.rounds import LOOKS_METHOD, default_looks, snap

ALPHA = 0.025


# ------------------------------------------------------------------------------------ the confidence sequence
def _capital_by_definition(x, m, lo=0.0, hi=1.0, alpha=ALPHA, cap=200):
    """The lower side's capital path written out from Waudby-Smith & Ramdas's definitions, one label at a time (an
    independent implementation of what sequential.lower_bounds inverts)."""
    L = math.log(1 / alpha)
    hz = seq.horizons(cap)
    mu, var = (lo + hi) / 2, ((hi - lo) / 2) ** 2
    s_sum, dev_sum = 0.0, 0.0
    caps = [1.0] * len(hz)
    path = []
    for i, xi in enumerate(x, 1):
        s2_prev = var if i == 1 else (((hi - lo) / 2) ** 2 + dev_sum) / i
        for k, H in enumerate(hz):
            bet = math.sqrt(2 * L / (H * s2_prev))
            if m > lo:
                bet = min(bet, seq.TRUNCATION / (m - lo))
            caps[k] *= 1 + bet * (xi - m)
        path.append(sum(caps) / len(caps))
        s_sum += xi
        mu = ((lo + hi) / 2 + s_sum) / (i + 1)
        dev_sum += (xi - mu) ** 2
    return np.array(path)


@pytest.mark.parametrize("kind", ["binary", "continuous"])
def test_the_lower_bound_is_where_the_capital_crosses_one_over_alpha(kind):
    rng = np.random.default_rng(1)
    x = (rng.random(80) < 0.3).astype(float) if kind == "binary" else rng.random(80) ** 2
    t = seq.track(x[None], x[None] * 0, None, 0.0, 1.0, 200)
    s = seq.prepare([(1.0, t)], gold_only=True)
    lo = float(s.bounds((80,))["ci95"][0][0, 0])
    assert 0 < lo < x.mean()
    assert _capital_by_definition(x, lo - 1e-4).max() >= 1 / ALPHA           # below the bound: rejected
    assert _capital_by_definition(x, lo + 1e-4).max() < 1 / ALPHA            # above it: not (yet)
    # rejected() reads the same capital without inverting it
    below, above = s.rejected(lo - 1e-4, (80,)), s.rejected(lo + 1e-4, (80,))
    assert below[0][0, 0] and not above[0][0, 0]


def test_a_look_depends_on_the_labels_up_to_it_only():
    """Positions, not rounds: the interval after 30 labels is the same whether 30 or 60 have been drawn since (to the
    bisection's tolerance: the two searches start from different brackets)."""
    rng = np.random.default_rng(2)
    y = (rng.random((3, 60)) < 0.6).astype(float)
    f = y + rng.normal(0, 0.5, y.shape)
    pool = rng.normal(0.6, 0.7, (3, 500))
    whole = seq.sequence([(1.0, seq.track(y, f, pool, 0, 1, 100))], (30, 60))
    first = seq.sequence([(1.0, seq.track(y[:, :30], f[:, :30], pool, 0, 1, 100))])
    for k in (0, 1):
        np.testing.assert_allclose(whole["ci95"][k][:, 0], first["ci95"][k][:, 0], rtol=0, atol=2 * seq.TOLERANCE)


def test_all_equal_labels_give_an_interval_inside_the_range_and_not_of_zero_width():
    t = seq.track(np.ones((1, 40)), np.zeros((1, 40)), None, 0.0, 1.0, 200)
    b = seq.sequence([(1.0, t)])
    lo, hi = b["ci95"][0][0, 0], b["ci95"][1][0, 0]
    assert 0.5 < lo < 1.0 and hi == 1.0


def test_time_uniform_coverage_small_monte_carlo():
    """Every look from 10 to 150 at once covers at least 95% (two Monte-Carlo standard errors of slack), for a cell,
    a delta and a balanced sum of four cells with the proxy."""
    rng = np.random.default_rng(3)
    B, n, looks = 600, 150, tuple(range(10, 151, 10))
    means = [0.1, 0.3, 0.5, 0.8]
    tracks = []
    for mu in means:
        y = (rng.random((B, n + 300)) < mu).astype(float)
        f = y + rng.normal(0, 0.6, y.shape)
        tracks.append(seq.track(y[:, :n], f[:, :n], f[:, n:], 0.0, 1.0, n))
    target = 0.95 - 2 * math.sqrt(0.95 * 0.05 / B)
    for terms, truth in (([(1.0, tracks[0])], means[0]), ([(1.0, tracks[1]), (-1.0, tracks[2])], means[1] - means[2]),
                         ([(0.5, tracks[0]), (0.5, tracks[3]), (-0.5, tracks[1]), (-0.5, tracks[2])],
                          0.5 * (means[0] + means[3] - means[1] - means[2]))):
        for gold_only in (False, True):
            above, below = seq.prepare(terms, gold_only=gold_only).rejected(truth, looks)
            covered = ~(above | below).any(1)
            assert covered.mean() >= target, (terms, gold_only, covered.mean())


def test_the_proxy_narrows_a_cell_where_it_predicts_the_labels_and_is_left_out_where_it_does_not():
    rng = np.random.default_rng(4)
    y = rng.random((200, 5200)) ** 1.5
    good = y + rng.normal(0, 0.1, y.shape)
    noise = rng.normal(0, 1, y.shape)
    for proxy, narrower in ((good, True), (noise, False)):
        t = seq.track(y[:, :200], proxy[:, :200], proxy[:, 200:], 0.0, 1.0, 200)
        w = lambda b: np.median(b["ci95"][1] - b["ci95"][0])    # noqa: E731
        with_proxy, gold = w(seq.sequence([(1.0, t)])), w(seq.sequence([(1.0, t)], gold_only=True))
        lam = seq.prepare([(1.0, t)]).lam
        if narrower:
            assert with_proxy < 0.8 * gold and lam[:, -1].mean() > 0.5
        else:
            # a line fitted on 20 noisy labels sometimes looks useful (the first block): the split alpha and those
            # blocks cost a few percent, never validity
            assert with_proxy <= 1.05 * gold and (lam == 0).mean() > 0.8


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="outside"):
        seq.track(np.array([[0.5, 1.2]]), np.zeros((1, 2)), None, 0.0, 1.0, 200)
    with pytest.raises(ValueError, match="NaN"):
        seq.track(np.array([[0.5, np.nan]]), np.zeros((1, 2)), None, 0.0, 1.0, 200)
    t = seq.track(np.ones((1, 5)), np.zeros((1, 5)), None, 0.0, 1.0, 200)
    with pytest.raises(ValueError, match="looks"):
        seq.sequence([(1.0, t)], (10,))


# ------------------------------------------------------------------------------------ decisions
def _ev(est, lo, hi, thr):
    return decisions.Evidence.from_interval(np.array([est]), np.array([lo]), np.array([hi]), thr)


def test_a_verdict_is_settled_by_one_failed_condition_or_by_all_holding():
    fail = decisions.verdict({"a": _ev(-0.2, -0.3, -0.1, -0.03), "b": _ev(0.1, -0.1, 0.3, -0.03)},
                             _ev(0.1, -0.05, 0.2, 0.0), _ev(0.1, -0.05, 0.2, 0.05), 0.05)
    assert fail["settled"][0] and not fail["passes"][0]
    ok = decisions.verdict({"a": _ev(0.2, 0.1, 0.3, -0.03)}, _ev(0.2, 0.1, 0.3, 0.0), _ev(0.2, 0.1, 0.3, 0.05), 0.05)
    assert ok["settled"][0] and ok["passes"][0]
    leaning = decisions.verdict({"a": _ev(0.2, 0.1, 0.3, -0.03), "b": _ev(-0.05, -0.1, 0.01, -0.03)},
                                _ev(0.2, 0.1, 0.3, 0.0), _ev(0.2, 0.04, 0.3, 0.05), 0.05)
    assert not leaning["settled"][0] and not leaning["passes"][0]
    cells = decisions.cells_to_label(leaning["conditions"], leaning["settled"],
                                     lambda k: [k] if k[0] == "family" else [("balanced",)])
    assert cells[0] == {("family", "b")}          # only the condition leaning towards failing is worth labelling


def test_the_shipped_choice_waits_for_separation():
    passes = {"a": np.array([True, True]), "b": np.array([True, False])}
    quality = {"a": np.array([0.8, 0.8]), "b": np.array([0.7, 0.9])}
    sh = decisions.ship(passes, quality, lambda x, y: np.array([False, False]))
    assert sh["run"] == ["a", "a"] and list(sh["settled"]) == [False, True] and sh["open_runs"] == [["b"], []]


# ------------------------------------------------------------------------------------ the loop
def _table(tmp_path, n=300):
    rng = np.random.default_rng(7)
    truth = {"reference": [0.4, 0.4], "good": [0.6, 0.6], "bad": [0.6, 0.2]}
    rows, labels = [], {}
    for r, qs in truth.items():
        for k, q in enumerate(qs):
            y = (rng.random(n) < q).astype(float)
            proxy = y + rng.normal(0, 0.8, n)
            for i in range(n):
                sid = f"{r}/f{k}/{i}"
                rows.append({"sample_id": sid, "run": r, "family": f"f{k}", "prompt_id": f"p{i}",
                             "completion": "a b", "proxy_reward": round(float(proxy[i]), 5)})
                labels[sid] = float(y[i])
    s = tmp_path / "s.jsonl"
    s.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return s, labels


def _fill(path, labels, drop=None):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["gold"] = labels[r["sample_id"]]
    if drop is not None:
        rows = [r for r in rows if r["sample_id"] != drop]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


def _audit(s, gold, out, *extra):
    return samples_main(["--samples", str(s), "--gold", str(gold), "--out", str(out), "--stress-examples", "0",
                         "--no-figures", *extra])


@pytest.mark.parametrize("design", ["looks", "anytime"])
def test_rounds_draw_audit_next_and_the_record_chain(tmp_path, capsys, design):
    s, labels = _table(tmp_path)
    lab = tmp_path / "labels"
    lab.mkdir()
    how = ["--looks", "anytime"] if design == "anytime" else []
    assert samples_main(["draw-gold", "--samples", str(s), "--rounds", "--per-cell", "20", "--max-per-cell", "100",
                         *how, "--out", str(lab / "round-1.csv")]) == 0
    rec1 = json.loads((lab / "round-1.draw.json").read_text())
    assert rec1["design"] == "rounds" and rec1["round"] == 1 and rec1["max_per_cell"] == 100
    looks = [10, 20, 30, 50, 75, 100] if design == "looks" else None          # the default: 10..100% of the cap
    assert rec1["looks"] == looks
    assert sorted(n for _, _, n in rec1["counts"]) == [20] * 6 and rec1["previous"] is None
    _fill(lab / "round-1.csv", labels)
    assert _audit(s, lab, tmp_path / "o1") == 0
    ans = json.loads((tmp_path / "o1" / "answer.json").read_text())
    rb = ans["rounds"]
    assert rb["round"] == 1 and rb["labels"] == 120 and rb["max_per_cell"] == 100
    states = {d["decision"]: d["state"] for d in rb["decisions"]}
    assert set(states) == {"release verdict of good", "release verdict of bad", "the shipped choice"}
    assert "Labelling in rounds" in (tmp_path / "o1" / "summary.md").read_text()
    assert ans["intervals"]["method"] == (seq.METHOD if design == "anytime" else LOOKS_METHOD)
    assert rb["looks"] == looks
    nxt = rb["next_round"]["cells"]
    if design == "anytime":
        assert nxt and all(20 < c["target"] <= 40 for c in nxt)       # towards the estimate, at most doubling
    else:                                                              # to the next look, as measured
        assert nxt and all(c["target"] == 30 for c in nxt)
        assert ans["intervals"]["looks"] == looks and ans["intervals"]["look_confidence"] == pytest.approx(1 - .05 / 6, abs=1e-4)
    # round 2 where the audit says a label can still decide; its record names round 1's
    assert samples_main(["draw-gold", "--next", "--from-answer", str(tmp_path / "o1" / "answer.json"),
                         "--samples", str(s), "--out", str(lab / "round-2.csv")]) == 0
    rec2 = json.loads((lab / "round-2.draw.json").read_text())
    assert rec2["round"] == 2 and rec2["previous"]["record"] == "round-1.draw.json"
    assert len(rec2["sample_ids"]) == sum(c["target"] - c["labelled"] for c in nxt)
    assert not set(rec2["sample_ids"]) & set(rec1["sample_ids"])
    # an unlabelled row of round 2 is refused, naming it; then the audit of both rounds runs
    drop = rec2["sample_ids"][0]
    as_drawn = (lab / "round-2.csv").read_text()
    _fill(lab / "round-2.csv", labels, drop=drop)
    assert _audit(s, lab, tmp_path / "bad") == 2
    err = capsys.readouterr().err
    assert f"sample_id {drop!r}, drawn in rounds 1..2" in err and "has no label" in err
    (lab / "round-2.csv").write_text(as_drawn)
    _fill(lab / "round-2.csv", labels)
    assert _audit(s, lab, tmp_path / "o2") == 0
    ans2 = json.loads((tmp_path / "o2" / "answer.json").read_text())
    rb2 = ans2["rounds"]
    assert rb2["round"] == 2 and rb2["labels"] == 120 + len(rec2["sample_ids"])
    # a look's interval lies inside the ones before it (both designs intersect): a side once shown stays shown
    for run, v in ans2["runs"].items():
        for f, pf in v["per_family"].items():
            lo1, hi1 = ans["runs"][run]["per_family"][f]["delta_ci95"]
            assert lo1 <= pf["delta_ci95"][0] <= pf["delta_ci95"][1] <= hi1
    # a record edited after the next round was drawn breaks the chain
    (lab / "round-1.draw.json").write_text((lab / "round-1.draw.json").read_text().replace('"round": 1', '"round":1'))
    assert _audit(s, lab, tmp_path / "o3") == 2
    assert "sha256 differs from the one recorded" in capsys.readouterr().err


def test_a_fixed_design_is_not_continued_in_rounds(tmp_path, capsys):
    s, labels = _table(tmp_path, n=120)
    assert samples_main(["draw-gold", "--samples", str(s), "--per-cell", "20", "--out", str(tmp_path / "g.csv")]) == 0
    _fill(tmp_path / "g.csv", labels)
    assert _audit(s, tmp_path / "g.csv", tmp_path / "o") == 0
    ans = json.loads((tmp_path / "o" / "answer.json").read_text())
    assert "rounds" not in ans and ans["intervals"]["method"] != seq.METHOD      # today's intervals, as before
    assert samples_main(["draw-gold", "--next", "--from-answer", str(tmp_path / "o" / "answer.json"), "--samples",
                         str(s), "--out", str(tmp_path / "n.csv")]) == 2
    err = capsys.readouterr().err
    assert "the audit of a fixed design (no 'rounds' block)" in err and not (tmp_path / "n.csv").exists()
    assert samples_main(["draw-gold", "--samples", str(s), "--max-per-cell", "50", "--per-cell", "10",
                         "--out", str(tmp_path / "m.csv")]) == 2
    assert "--max-per-cell: only with --rounds" in capsys.readouterr().err


def test_declared_looks_spend_alpha_once_and_one_look_is_the_fixed_design():
    """world.experiments.rounds_looks (docs/intervals.md, "Declared looks"): the valid designs split 0.05 over
    the looks; with a single look at 100 the design is the fixed 100-a-cell design, verdict for verdict."""
    from world.experiments.rounds_looks import DOOR, designs, run_table
    from world.experiments.rounds_tables import table_spec
    d = designs((20, 40, 100))
    assert sum(d["looks, equal alpha"]) == pytest.approx(0.05) and sum(d["looks, alpha by n"]) == pytest.approx(0.05)
    assert d["looks, alpha by n"][0] < d["looks, alpha by n"][-1]
    res = run_table(table_spec(0, 0), 3, 0, (100,), 500)
    for row in res["rows"]:
        one, fixed = row["looks, equal alpha"], row["fixed 100"]
        assert row[DOOR] == one                           # one look: nothing to intersect
        assert one["labels"] == fixed["labels"] == 100 * 30
        assert one["settled"] == fixed["settled"] and one["passes"] == fixed["passes"]


def test_one_declared_look_is_the_fixed_design(tmp_path):
    """--looks 20: the audit reads the 20 labels a cell once, at 95% -- the fixed design's intervals, number for number."""
    s, labels = _table(tmp_path, n=120)
    lab = tmp_path / "labels"
    lab.mkdir()
    assert samples_main(["draw-gold", "--samples", str(s), "--rounds", "--looks", "20",
                         "--out", str(lab / "round-1.csv")]) == 0
    rows = _fill(lab / "round-1.csv", labels)
    fixed = tmp_path / "fixed.csv"                     # the same labels without the rounds record: a fixed design
    fixed.write_text((lab / "round-1.csv").read_text())
    assert len(rows) == 120
    assert _audit(s, lab, tmp_path / "o_looks") == 0 and _audit(s, fixed, tmp_path / "o_fixed") == 0
    a, b = (json.loads((tmp_path / o / "answer.json").read_text()) for o in ("o_looks", "o_fixed"))
    assert a["intervals"]["method"] == LOOKS_METHOD and "rounds" in a and "rounds" not in b
    for run, va in a["runs"].items():
        vb = b["runs"][run]
        assert va["ci95"] == vb["ci95"] and va["delta_ci95"] == vb["delta_ci95"]
        for f, pa in va["per_family"].items():
            assert pa["ci95"] == vb["per_family"][f]["ci95"] and pa["delta_ci95"] == vb["per_family"][f]["delta_ci95"]
        assert va["passes_release_rule"] == vb["passes_release_rule"]
    assert a["certification"] == b["certification"]


def test_looks_are_declared_once_and_rounds_end_on_them(tmp_path, capsys):
    assert default_looks(200) == [20, 40, 60, 100, 150, 200] and default_looks(5) == [1, 2, 4, 5]
    assert snap(21, [20, 40, 60]) == 40 and snap(40, [20, 40, 60]) == 40 and snap(99, [20, 40, 60]) == 60
    s, _ = _table(tmp_path, n=60)
    out = lambda name: ["--out", str(tmp_path / name)]                # noqa: E731
    bad = [(["--looks", "40,20"], "--looks '40,20': expected ascending positive label counts"),
           (["--looks", "a,b"], "--looks 'a,b': expected ascending label counts"),
           (["--looks", "20,40", "--per-cell", "30"], "--per-cell 30: not one of the declared looks 20,40"),
           (["--looks", "20,40", "--max-per-cell", "50"], "--max-per-cell 50: the last of --looks is the cap (40)")]
    for i, (extra, msg) in enumerate(bad):
        assert samples_main(["draw-gold", "--samples", str(s), "--rounds", *extra, *out(f"b{i}.csv")]) == 2
        assert msg in capsys.readouterr().err and not (tmp_path / f"b{i}.csv").exists()
    assert samples_main(["draw-gold", "--samples", str(s), "--looks", "20,40", *out("c.csv")]) == 2
    assert "--looks: only with --rounds" in capsys.readouterr().err


def test_a_summarised_cell_is_read_through_its_rows_beyond_the_cap(tmp_path, monkeypatch):
    """A cell too large to keep whole (audit.samples.cells) keeps a subsample of its unlabelled rows; in a rounds
    design only its never-labelled rows beyond the cap stand for the unlabelled (their make-up does not follow the
    rounds). Shrunk here so a small table is summarised."""
    from audit.samples import cells
    monkeypatch.setattr(cells, "KEEP_UNLABELLED", 100)
    monkeypatch.setattr(cells, "STRESS_UNLABELLED", 80)
    s, labels = _table(tmp_path, n=300)
    lab = tmp_path / "labels"
    lab.mkdir()
    assert samples_main(["draw-gold", "--samples", str(s), "--rounds", "--looks", "20,40",
                         "--out", str(lab / "round-1.csv")]) == 0
    _fill(lab / "round-1.csv", labels)
    assert _audit(s, lab, tmp_path / "o") == 0
    ans = json.loads((tmp_path / "o" / "answer.json").read_text())
    assert ans["rounds"]["looks"] == [20, 40]
    for v in ans["runs"].values():
        for pf in v["per_family"].values():
            lo, hi = pf["ci95"]
            assert 0 <= lo < hi <= 1 and pf["n_gold"] == 20
    from audit.samples.looks_audit import LooksAudit
    from audit.samples.session import open_audit
    audit = open_audit({"samples": str(s), "gold": str(lab)})       # the audit the CLI ran, in this process
    assert isinstance(audit, LooksAudit) and len(audit.t.summaries) == 6          # every cell summarised
    beyond = {c: int((audit.t.position[audit.t.cell(*c)] > 40).sum()) for c in audit.t.summaries}
    assert all(0 < n <= 80 for n in beyond.values())                 # the kept rows beyond the cap stand in
    assert audit.runs["good"]["delta_ci95"] == ans["runs"]["good"]["delta_ci95"] or \
        audit.runs["good"]["delta_ci95"] == pytest.approx(ans["runs"]["good"]["delta_ci95"], abs=1e-4)


def test_a_record_whose_counts_are_off_its_looks_is_refused(tmp_path, capsys):
    s, labels = _table(tmp_path, n=60)
    lab = tmp_path / "labels"
    lab.mkdir()
    assert samples_main(["draw-gold", "--samples", str(s), "--rounds", "--looks", "anytime", "--per-cell", "25",
                         "--max-per-cell", "40", "--out", str(lab / "round-1.csv")]) == 0
    _fill(lab / "round-1.csv", labels)
    rec = json.loads((lab / "round-1.draw.json").read_text())
    rec["looks"] = [20, 40]                        # declared afterwards: 25 a cell is no look of it
    (lab / "round-1.draw.json").write_text(json.dumps(rec))
    assert _audit(s, lab, tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "round-1.draw.json: labels a cell off the declared looks [20, 40]" in err and "at 25" in err
    assert not (tmp_path / "o" / "answer.json").exists()
    rec["looks"] = [20, 30]                        # not ending at the cap
    (lab / "round-1.draw.json").write_text(json.dumps(rec))
    assert _audit(s, lab, tmp_path / "o") == 2
    assert "expected ascending label counts a cell ending at max_per_cell 40" in capsys.readouterr().err
