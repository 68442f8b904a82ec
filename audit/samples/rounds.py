"""The samples door's rounds design: label in rounds until every decision is settled (docs/samples.md, "Labelling in
rounds"; the intervals: audit.core.sequential, docs/intervals.md).

    draw-gold --rounds --per-cell N --out labels/round-1.csv       declares the design at the first draw
    (label)  ->  python -m audit.samples --gold labels/ ...         says per decision "settled" or "open: about ..."
    draw-gold --next --from-answer OUT/answer.json --out labels/round-2.csv   draws where a label can still decide

The design must be declared at the first draw: a look at a fixed-n interval spends its 5% and cannot be taken back,
so a fixed draw cannot be continued in rounds (draw-gold --next refuses it). Every round continues each cell's seeded
random order (audit.samples.draw_order.cell_seed): round r labels positions counts_{r-1}+1 .. counts_r of the cells it
draws in. Each round's record (NAME.draw.json beside its file) holds the seed, the samples file's sha256, the
cumulative labels a cell, this round's ids, and the previous round's record by name and sha256 -- a chain the audit
walks back and checks: every round's rows are those positions, and the gold rows are exactly every round's rows.

The intervals here are confidence sequences over positions (audit.core.sequential): valid at every number of
labels at once, so the rounds may stop or continue on what the audit said, and may go to any cells. A cell's pool --
its rows beyond the cap (max_per_cell), never labelled -- lets the proxy in (prediction-powered), as the fixed door's
unlabelled rows do.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from audit.core import sequential
from .draw_order import RECORD_KIND, positions, rows_between

DESIGN = "rounds"
LOOKS_METHOD = "declared looks (the fixed-n bounded-mean interval at confidence 1 - alpha/K at each of K looks)"
DEFAULT_CAP = 200
MIN_ROUND = 10


def default_looks(cap: int) -> list[int]:
    """Six looks at 10, 20, 30, 50, 75 and 100% of the cap (20, 40, 60, 100, 150, 200 at the default cap 200: the
    schedule measured in docs/intervals.md); repeated counts of a small cap merged."""
    return sorted({max(1, round(cap * p)) for p in (0.1, 0.2, 0.3, 0.5, 0.75, 1.0)})


def snap(n: int, looks) -> int:
    """The smallest look at or above n (the last look beyond it): a round ends on a look, where the labels count."""
    return next((int(v) for v in looks if v >= n), int(looks[-1]))


def parse_looks(text: str) -> list[int] | None:
    """--looks: 'anytime' (confidence sequences: None) or ascending positive label counts a cell, comma-separated."""
    if text.strip().lower() == "anytime":
        return None
    try:
        looks = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--looks {text!r}: expected ascending label counts a cell, e.g. 20,40,60,100,150,200, "
                         "or 'anytime'") from None
    if not looks or looks[0] < 1 or any(b <= a for a, b in zip(looks, looks[1:])):
        raise ValueError(f"--looks {text!r}: expected ascending positive label counts a cell, e.g. "
                         "20,40,60,100,150,200, or 'anytime'")
    return looks


def is_rounds(rec: dict) -> bool:
    return isinstance(rec, dict) and rec.get("design") == DESIGN


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def counts_of(rec: dict) -> dict:
    return {(r, f): int(n) for r, f, n in rec.get("counts", [])}


def counts_list(counts: dict) -> list:
    return [[r, f, int(n)] for (r, f), n in sorted(counts.items())]


# ------------------------------------------------------------------------------------------- the record chain
def chain(latest: Path) -> tuple[list, list[str]]:
    """([(path, record, text), ...] oldest first, problems) walking back from the latest record by "previous"."""
    out, problems, path, seen = [], [], Path(latest), set()
    while True:
        try:
            text = path.read_text()
            rec = json.loads(text)
        except FileNotFoundError:
            problems.append(f"{path}: file not found (a round's record of the rounds design)")
            break
        except (OSError, ValueError) as e:
            problems.append(f"{path}: not a record of python -m audit.samples draw-gold ({type(e).__name__}: {e})")
            break
        out.append((path, rec, text))
        prev = rec.get("previous")
        if not prev:
            break
        nxt = (path.parent / str(prev.get("record", ""))).resolve()
        if nxt in seen:
            problems.append(f"{path}: its chain of previous records loops at {nxt}")
            break
        seen.add(nxt)
        if nxt.is_file() and text_sha256(nxt.read_text()) != prev.get("sha256"):
            problems.append(f"{path}: previous record {nxt}: sha256 differs from the one recorded (edited after "
                            "the next round was drawn?)")
            break
        path = nxt
    return out[::-1], problems


def latest_record(settings: dict) -> Path | None:
    """The record of the gold rows: --draw-record, GOLD's sibling NAME.draw.json, or -- GOLD a directory -- the one
    record inside it no other record there names as its previous (the last round); None without one."""
    given = settings.get("draw_record")
    if given:
        return Path(given)
    gold = Path(settings["gold"])
    if not gold.is_dir():
        p = gold.with_name(gold.stem + ".draw.json")
        return p if p.is_file() else None
    recs = sorted(gold.glob("*.draw.json"))
    if not recs:
        return None
    named = set()
    for p in recs:
        try:
            prev = json.loads(p.read_text()).get("previous") or {}
            if prev.get("record"):
                named.add((p.parent / prev["record"]).resolve())
        except (OSError, ValueError, AttributeError):
            pass
    last = [p for p in recs if p.resolve() not in named]
    return last[0] if len(last) == 1 else recs[-1]


def verify(settings: dict, table, latest: Path, problems: list[str]) -> dict | None:
    """Check a rounds design's chain of records against the samples and gold tables (problems appended, naming the
    file) and return the design {seed, cap, round, counts, record, record_path, record_sha256}; set the table's
    positions and design. None when the chain does not hold."""
    recs, bad = chain(latest)
    problems += bad
    if bad or not recs:
        return None
    first = recs[0][1]
    for i, (path, rec, _) in enumerate(recs, 1):
        if not is_rounds(rec) or rec.get("kind") != RECORD_KIND:
            problems.append(f"{path}: not a round of a rounds design (expected \"design\": \"rounds\"): a fixed "
                            "draw cannot be continued in rounds")
            return None
        if rec.get("round") != i:
            problems.append(f"{path}: round {rec.get('round')!r}, expected {i} (the chain from round 1 has {len(recs)})")
            return None
        for k in ("seed", "samples_sha256", "max_per_cell", "column_mapping", "looks"):
            if rec.get(k) != first.get(k):
                problems.append(f"{path}: {k} {rec.get(k)!r} differs from round 1's {first.get(k)!r}")
                return None
    if table is None:
        return None
    from .columns import table_sha256
    samples = Path(settings["samples"])
    got = table_sha256(samples)
    if got != first.get("samples_sha256"):
        problems.append(f"{samples}: sha256 {got[:12]}... is not the samples file the rounds were drawn from "
                        f"({recs[0][0]}: sha256 {str(first.get('samples_sha256'))[:12]}...)")
        return None
    seed, cap = int(first["seed"]), int(first["max_per_cell"])
    pos = positions(table, seed)
    ids = np.asarray(table.sample_id.to_pylist(), dtype=object)
    before: dict = {}
    drawn = set()
    for path, rec, _ in recs:
        after = counts_of(rec)
        if any(after.get(c, 0) < n for c, n in before.items()) or any(n > cap for n in after.values()):
            problems.append(f"{path}: labels a cell fall back or exceed the cap {cap}: not a continuation")
            return None
        want = set(ids[rows_between(table, pos, before, after)].tolist())
        if want != set(map(str, rec.get("sample_ids", []))):
            problems.append(f"{path}: its sample_ids are not positions {{previous count + 1 .. count}} of each cell's "
                            f"seeded order (seed {seed}): draw again with python -m audit.samples draw-gold")
            return None
        drawn |= want
        before = after
    labelled = set(ids[~np.isnan(table.gold)].tolist())
    missing, extra = sorted(drawn - labelled), sorted(labelled - drawn)
    for s in extra[:10]:
        problems.append(f"{settings['gold']}: sample_id {s!r} is not one of the {len(drawn)} rows drawn in rounds "
                        f"1..{len(recs)} ({latest}): gold rows must come from the rounds' draws")
    for s in missing[:10]:
        problems.append(f"{settings['gold']}: sample_id {s!r}, drawn in rounds 1..{len(recs)} ({latest}), has no "
                        "label: every drawn row needs its label (the intervals follow each cell's order)")
    if len(extra) + len(missing) > 20:
        problems.append(f"{settings['gold']}: ... and {len(extra) + len(missing) - 20} more rows off the rounds' draws")
    if extra or missing:
        return None
    path, rec, text = recs[-1]
    looks = first.get("looks")
    if looks is not None:
        try:
            looks = parse_looks(",".join(map(str, looks)))
        except (TypeError, ValueError):
            looks = None
        if not looks or looks[-1] != cap:
            problems.append(f"{recs[0][0]}: looks {first.get('looks')!r}: expected ascending label counts a cell "
                            f"ending at max_per_cell {cap}")
            return None
        full = {c: len(table.cells.get(c, [])) for c in before}
        off = [f"{r}/{f} at {n}" for (r, f), n in sorted(before.items()) if n not in looks and n != full[(r, f)]]
        if off:
            problems.append(f"{path}: labels a cell off the declared looks {looks}: {', '.join(off[:5])} (a round "
                            "ends on a look; draw with python -m audit.samples draw-gold)")
            return None
    design = {"seed": seed, "cap": cap, "round": len(recs), "counts": before, "record": rec, "looks": looks,
              "record_path": str(Path(path).resolve()), "record_sha256": text_sha256(text)}
    table.position, table.rounds = pos.astype(np.int32), design
    return design


# ------------------------------------------------------------------------------------------- draw-gold
def draw_round(a, out: Path, fmt, mapping: dict, problems: list[str]) -> int:
    """draw-gold --rounds (round 1, declaring the design) or --next (the round an audit's answer plans)."""
    import os

    from audit.core import claims_runner
    from rlhf.atomic import atomic_write_text
    from rlhf.errors import EXIT_OK
    from .columns import table_sha256
    from .draw_order import record_path, rows_text
    from .table import load_samples
    if a.next and a.rounds:
        problems.append("--rounds starts a rounds design and --next continues one: give one of them")
    if a.max_per_cell is not None and not a.rounds:
        problems.append("--max-per-cell: only with --rounds (the first draw declares the cap; later rounds keep it)")
    if a.next and a.from_answer is None:
        problems.append("--next: give --from-answer OUT/answer.json, the audit of the rounds so far")
    if a.rounds and a.from_answer is not None:
        problems.append("--rounds with --from-answer: a rounds design starts afresh; continue one with --next")
    if a.looks is not None and not a.rounds:
        problems.append("--looks: only with --rounds (the first draw declares them; later rounds keep them)")
    looks = None
    try:
        looks = parse_looks(a.looks) if a.looks is not None else None
    except ValueError as e:
        problems.append(str(e))
    if looks and a.max_per_cell is not None and a.max_per_cell != looks[-1]:
        problems.append(f"--max-per-cell {a.max_per_cell}: the last of --looks is the cap ({looks[-1]}); give one")
    cap = looks[-1] if looks else a.max_per_cell or DEFAULT_CAP
    if a.rounds and a.looks is None:
        looks = default_looks(cap)                  # declared looks unless --looks anytime
    per_cell = a.per_cell
    if a.rounds and per_cell is None and looks:
        per_cell = looks[0]                         # the first round: the first look
    if a.rounds and per_cell is None:
        problems.append("--per-cell: not given (the first round's labels a cell)")
    if a.rounds and per_cell and per_cell > cap:
        problems.append(f"--per-cell {per_cell}: above the cap --max-per-cell {cap}")
    if a.rounds and looks and per_cell and per_cell not in looks:
        problems.append(f"--per-cell {per_cell}: not one of the declared looks {','.join(map(str, looks))} (a round "
                        "ends on a look: labels between looks wait for the next one)")
    plan = prev = prev_path = prev_text = None
    if a.next and a.from_answer is not None:
        plan, prev_path, prev_text, bad = _planned(Path(a.from_answer))
        problems += bad
        prev = json.loads(prev_text) if prev_text else None
    loaded = load_samples(a.samples, (prev or {}).get("column_mapping") or mapping) if not problems else None
    if loaded is None and not problems:
        problems.append(f"--samples {a.samples}: a rounds draw reads the table with the columnar reader, which did "
                        "not take this file plainly; the audit (python -m audit.samples) names the file, line and "
                        "column it trips on")
    if prev is not None and (prev.get("column_mapping") or {}) != mapping and a.column:
        problems.append(f"--column: {mapping} differs from the rounds' {prev.get('column_mapping')} (round 1 fixed it)")
    if prev is not None and loaded is not None:
        got = table_sha256(a.samples)
        if got != prev.get("samples_sha256"):
            problems.append(f"{a.samples}: sha256 {got[:12]}... is not the samples file the rounds were drawn from "
                            f"({prev_path}: {str(prev.get('samples_sha256'))[:12]}...)")
    if problems:
        return claims_runner.refuse("draw-gold", problems, out)
    table, prompts = loaded
    if prev is not None:
        seed, cap, round_ = int(prev["seed"]), int(prev["max_per_cell"]), int(prev["round"]) + 1
        looks = prev.get("looks")
        mapping = prev.get("column_mapping") or {}
        before = counts_of(prev)
        after = dict(before)
        for c in plan:
            key = (c["run"], c["family"])
            target = c["target"] if not a.per_cell else before.get(key, 0) + a.per_cell
            target = snap(target, looks) if looks else target
            after[key] = int(min(cap, len(table.cells.get(key, [])), max(before.get(key, 0), target)))
        if after == before:
            print("[draw-gold] nothing to draw: the audit's answer plans no further round (every decision settled, or "
                  f"the open ones' cells at the cap {cap}); nothing written", flush=True)
            return EXIT_OK
    else:
        seed, round_, before = a.seed, 1, {}
        after = {c: min(per_cell, len(rows)) for c, rows in table.cells.items() if len(rows)}
    pos = positions(table, seed)
    picked = rows_between(table, pos, before, after)
    ids = table.sample_id.take(picked).to_pylist()
    cols = {"sample_id": ids, "run": [table.runs[c] for c in table.run_code[picked]],
            "family": [table.families[c] for c in table.family_code[picked]],
            "prompt_id": [table.prompts[c] for c in table.prompt_code[picked]],
            "prompt": prompts.take(picked) if prompts is not None else [""] * len(picked),
            "completion": table.texts(picked)}
    order = np.random.default_rng([seed, 1, round_]).permutation(len(ids))
    col = lambda c: mapping.get(c, c)   # noqa: E731
    rows = [{col("sample_id"): cols["sample_id"][i], "run": cols["run"][i], "family": cols["family"][i],
             "prompt_id": cols["prompt_id"][i], "prompt": cols["prompt"][i], "completion": cols["completion"][i],
             col("gold"): None} for i in order]
    rec = record_path(out)
    record = {"kind": RECORD_KIND, "design": DESIGN, "round": round_, "max_per_cell": cap,
              "looks": looks, "method": LOOKS_METHOD if looks else sequential.METHOD,
              "samples": str(Path(a.samples).resolve()), "samples_sha256": table_sha256(a.samples), "seed": seed,
              "per_cell": per_cell if round_ == 1 else None,
              "column_mapping": mapping, "n_samples": int(table.n_rows),
              "n_cells": sum(len(r) > 0 for r in table.cells.values()), "n_drawn": len(rows), "to_label": out.name,
              "counts": counts_list(after), "sample_ids": sorted(map(str, ids)),
              "previous": None if prev is None else {"record": os.path.relpath(prev_path, out.parent.resolve()),
                                                     "sha256": text_sha256(prev_text)}}
    atomic_write_text(rec, json.dumps(record, indent=1) + "\n")       # the record first: data without one is plain
    if rows:
        atomic_write_text(out, rows_text(rows, fmt))
    else:
        atomic_write_text(out, "" if fmt == "jsonl" else ",".join([col("sample_id"), "run", "family", "prompt_id",
                                                                    "prompt", "completion", col("gold")]) + "\n")
    where = "" if out.parent == Path(".") else f" (audit them with the earlier rounds' files: --gold {out.parent}/)"
    how = f"looks {','.join(map(str, looks))} labels a cell" if looks else f"at most {cap} labels a cell, anytime"
    print(f"[draw-gold] round {round_} of a rounds design ({how}; seed {seed}): {len(rows)} rows "
          f"to label in {sum(after.get(c, 0) > before.get(c, 0) for c in after)} cells -> {out}; record -> {rec}"
          f"{where}. Fill in '{col('gold')}' for every row, then audit: python -m audit.samples --samples "
          f"{a.samples} --gold {out.parent if round_ > 1 else out} --out DIR", flush=True)
    return EXIT_OK


def _planned(answer: Path):
    """(the next round's cells, the last record's path and text, problems) from an audit's answer.json."""
    try:
        ans = json.loads(answer.read_text())
    except FileNotFoundError:
        return None, None, None, [f"--from-answer {answer}: file not found"]
    except (OSError, ValueError) as e:
        return None, None, None, [f"--from-answer {answer}: not an answer.json of python -m audit.samples "
                                  f"({type(e).__name__}: {e})"]
    block = ans.get("rounds") if isinstance(ans, dict) else None
    if not isinstance(block, dict):
        return None, None, None, [f"--from-answer {answer}: the audit of a fixed design (no 'rounds' block): its "
                                  "intervals spent their 5% at that look, so it cannot be continued in rounds; a "
                                  "rounds design is declared at the first draw (draw-gold --rounds)"]
    try:
        path, sha, cells = Path(block["record_path"]), block["record_sha256"], block["next_round"]["cells"]
        cells = [{"run": c["run"], "family": c["family"], "target": int(c["target"])} for c in cells]
    except (KeyError, TypeError, ValueError) as e:
        return None, None, None, [f"--from-answer {answer}: its 'rounds' block lacks {e} (expected record_path, "
                                  "record_sha256 and next_round.cells)"]
    try:
        text = path.read_text()
    except OSError:
        return None, None, None, [f"--from-answer {answer}: the last round's record {path} is not there (moved? "
                                  "draw-gold --next needs it beside its labels)"]
    if text_sha256(text) != sha:
        return None, None, None, [f"{path}: sha256 differs from the one {answer} audited (edited since?): audit again"]
    return cells, path.resolve(), text, []
