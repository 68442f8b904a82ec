"""python -m audit.samples draw-gold --samples FILE --per-cell N --out TO_LABEL.csv|.jsonl [--seed S]: the rows to
give the experts, drawn as the audit's intervals need them (docs/samples.md, "The sampling design").

Within every run x family cell of the samples table, a seeded simple random subset of N rows (the whole cell when
it has fewer): the cell's rows are put in a random order (numpy's generator seeded by --seed and the cell's name)
and the first N kept. So a larger N with the same seed keeps every row of a smaller draw (labels already paid for
stay valid), and the same file, seed and N always draw the same rows. The rows are written in a shuffled order
(run and family are columns, so a labeller need not see them grouped) with the columns a labeller needs:
sample_id, run, family, prompt_id, prompt, completion and an empty `gold` to fill in.

Beside it, TO_LABEL.draw.json records the draw: the samples file's sha256, the seed, N and the ids drawn. The audit
(`--gold TO_LABEL.csv`) finds that record next to the gold file (or at --draw-record) and refuses, naming the file
and line, gold rows that are not of that draw or a samples file that is not the one drawn from.

With --from-answer PREVIOUS/answer.json it prints the previous audit's gold budget per family (the labels for
every run's interval to be half as wide) and, when --per-cell is not given, draws that many per cell.

Rounds (audit.samples.rounds; docs/samples.md, "Labelling in rounds"): --rounds declares at the first draw that the
labels will come in rounds, read at declared looks (--looks, default 20,40,60,100,150,200 labels a cell; the audit
takes the fixed design's interval at 1 - alpha/K at each) or, with --looks anytime, by confidence sequences; --next
--from-answer OUT/answer.json draws the next round where that audit says a label can still change a decision,
continuing each cell's order to a look, its record chained to the previous round's.

Exit status: 0 written; 2 bad input or usage (one line per problem, nothing written); 1 internal failure."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from rlhf.atomic import atomic_write_text
from rlhf.cli import Parser, positive_int, seed_arg
from rlhf.errors import EXIT_OK

from audit.core import claims_runner
from .columns import FORMATS, FORMATS_HELP, Unusual, table_sha256
from .draw_order import RECORD_KIND, cell_seed, record_path, rows_text as _rows_text
from .rows import TableError, column_mapping, read_rows, read_samples, text_id, unknown_columns
from .table import load_samples

COLUMNS = ("sample_id", "run", "family", "prompt_id", "prompt", "completion", "gold")


def draw(sm: dict, per_cell: int, seed: int) -> list[int]:
    """Row indices of the draw: per run x family cell (in the order of the file), the first `per_cell` of a seeded
    random order of the cell's rows."""
    cells: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(sm["run"], sm["family"])):
        cells.setdefault(key, []).append(i)
    picked = []
    for (run, fam), rows in cells.items():
        order = np.random.default_rng(cell_seed(seed, run, fam)).permutation(len(rows))
        picked += [rows[k] for k in order[:per_cell]]
    return picked


def draw_table(table, per_cell: int, seed: int) -> np.ndarray:
    """draw() on a loaded Table (run and family codes): the same rows in the same order, without Python lists of
    a log's rows."""
    nf = max(1, len(table.families))
    cell = table.run_code.astype(np.int64) * nf + table.family_code
    cells, first = np.unique(cell, return_index=True)
    picked = []
    for c in cells[np.argsort(first)]:                  # cells in order of first appearance, as draw()
        run, fam = table.runs[c // nf], table.families[c % nf]
        rows = table.cell(run, fam)                      # ascending
        order = np.random.default_rng(cell_seed(seed, run, fam)).permutation(len(rows))
        picked.append(rows[order[:per_cell]])
    return np.concatenate(picked) if picked else np.zeros(0, np.int64)


def _drawn_rows(sm: dict, per_cell: int, seed: int) -> tuple[dict, int, int]:
    """(the drawn rows' columns, in draw order; rows in the table; cells) from the row-by-row reader's dict."""
    picked = draw(sm, per_cell, seed)
    cols = {k: [sm[k][i] for i in picked] for k in ("sample_id", "run", "family", "prompt_id", "prompt", "completion")}
    return cols, len(sm["sample_id"]), len(set(zip(sm["run"], sm["family"])))


def _drawn_columns(table, prompts, per_cell: int, seed: int) -> tuple[dict, int, int]:
    """The same from the columnar reader's Table: only the drawn rows' texts are read."""
    picked = draw_table(table, per_cell, seed)
    cols = {"sample_id": table.sample_id.take(picked).to_pylist(),
            "run": [table.runs[c] for c in table.run_code[picked]],
            "family": [table.families[c] for c in table.family_code[picked]],
            "prompt_id": [table.prompts[c] for c in table.prompt_code[picked]],
            "prompt": prompts.take(picked) if prompts is not None else [""] * len(picked),
            "completion": table.texts(picked)}
    return cols, int(table.n_rows), sum(len(rows) > 0 for rows in table.cells.values())


def budget_advice(answer_path: Path) -> tuple[int | None, list[str]]:
    """(the labels per cell the previous audit's gold budget asks for, or None; the lines to print); raises
    TableError naming the file when it is no answer.json of the samples door."""
    try:
        ans = json.loads(answer_path.read_text())
        budget, runs = ans["gold_budget"], ans["runs"]
        assert isinstance(budget, dict) and isinstance(runs, dict) and runs
    except FileNotFoundError:
        raise TableError([f"--from-answer {answer_path}: file not found"]) from None
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
        raise TableError([f"--from-answer {answer_path}: not an answer.json of python -m audit.samples (expected "
                          f"keys 'gold_budget' and 'runs'; {type(e).__name__}: {e})"]) from None
    lines = [f"budget from {answer_path}:"] + [f"  {b.get('line')}" for b in budget.values() if isinstance(b, dict)]
    need = [b.get("labels_to_halve") for b in budget.values() if isinstance(b, dict)]
    need = [n for n in need if isinstance(n, int) and n > 0]
    if not need:
        lines.append("  no family's budget is a number (see the lines above): give --per-cell")
        return None, lines
    per_cell = math.ceil(max(need) / len(runs))
    lines.append(f"  advice: --per-cell {per_cell} (the largest family's labels to halve every run's interval, "
                 f"over {len(runs)} runs); with the same --seed a larger draw keeps every row of a smaller one")
    return per_cell, lines


def parser() -> Parser:
    ap = Parser(prog="python -m audit.samples draw-gold",
                description="Draw the rows to give the experts: in every run x family cell of the samples table, a "
                            "seeded simple random subset of N rows (the whole cell when it has fewer), as the audit's "
                            "intervals need them (docs/samples.md, 'The sampling design'). Writes TO_LABEL with an "
                            "empty gold column to fill in, and beside it TO_LABEL.draw.json, the record of the draw "
                            "that the audit checks the gold rows against.",
                epilog="exit status: 0 written; 2 bad input or usage (nothing written); 1 internal failure")
    ap.add_argument("--samples", required=True, metavar="PATH",
                    help="the samples table: " + FORMATS_HELP)
    ap.add_argument("--per-cell", type=positive_int, default=None, metavar="N",
                    help="rows to label per run x family cell (all of a cell that has fewer); required unless "
                         "--from-answer gives the advice")
    ap.add_argument("--out", required=True, metavar="TO_LABEL",
                    help="the rows to label: .csv or .jsonl (refused when it exists); the record of the draw "
                         "goes beside it as TO_LABEL.draw.json")
    ap.add_argument("--seed", type=seed_arg, default=0, help="seed of the draw (an integer in [0, 2**32 - 1])")
    ap.add_argument("--from-answer", default=None, metavar="ANSWER",
                    help="a previous audit's answer.json: print its gold budget per family and, without "
                         "--per-cell, draw what it advises")
    ap.add_argument("--column", action="append", default=[], metavar="NAME=COLUMN",
                    help="read column NAME of the schema from COLUMN (repeatable), as the audit does; sample_id "
                         "and gold are written under their mapped names")
    r = ap.add_argument_group("rounds (label until decided: docs/samples.md)")
    r.add_argument("--rounds", action="store_true",
                   help="declare at this first draw that labels come in rounds, read at declared looks (--looks); "
                        "draw-gold --next then draws the next round where a decision is open")
    r.add_argument("--looks", default=None, metavar="N1,N2,...|anytime",
                   help="with --rounds: the label counts a cell is read at, ascending; the last is the cap (default "
                        "six looks at 10, 20, 30, 50, 75, 100%% of --max-per-cell: 20,40,60,100,150,200); each look's "
                        "interval is the fixed design's at confidence 1 - alpha/K. 'anytime': confidence sequences "
                        "instead, readable at any count (wider: docs/intervals.md)")
    r.add_argument("--max-per-cell", type=positive_int, default=None, metavar="CAP",
                   help="with --rounds: at most CAP labels a cell over all rounds (default 200; with --looks, "
                        "its last); with --looks anytime a cell's rows beyond "
                        "the cap are its pool, which lets the proxy in")
    r.add_argument("--next", action="store_true",
                   help="draw the next round of a rounds design where the audit --from-answer says a label can "
                        "still change a decision (--per-cell N: N more in each such cell instead of the audit's "
                        "sizing)")
    return ap


def main(argv) -> int:
    a = parser().parse_args(list(argv))
    out = Path(a.out)
    mapping, problems = column_mapping(a.column)
    problems += unknown_columns(mapping)
    fmt = FORMATS.get(out.suffix.lower())
    if fmt not in ("csv", "jsonl"):
        problems.append(f"--out {out}: expected a .csv or .jsonl file (what the experts fill in)")
    rec = record_path(out)
    there = [str(p) for p in (out, rec) if p.exists()]
    if there:
        problems.append(f"--out {out}: {' and '.join(there)} exist{'s' * (len(there) == 1)} (labels filled in there "
                        "would be lost): remove or choose another name")
    if a.next or a.rounds or a.max_per_cell is not None or a.looks is not None:
        from .rounds import draw_round
        return draw_round(a, out, fmt, mapping, problems)
    per_cell, advice, sm = a.per_cell, [], None
    if a.from_answer is not None:
        try:
            advised, advice = budget_advice(Path(a.from_answer))
            per_cell = per_cell or advised
        except TableError as e:
            problems += e.problems
    if per_cell is None:
        problems.append("--per-cell: not given" + (" and the previous answer advises no number" if advice
                                                    else " (or give --from-answer PREVIOUS/answer.json)"))
    # the columnar reader (a 10M-row log in seconds); the row-by-row reader where it would not take the file
    # plainly, which names any problem -- both draw the same rows (tests/test_samples_workflow.py)
    loaded, sm = load_samples(a.samples, mapping), None
    if loaded is None:
        try:
            sm = read_samples(a.samples, mapping)
        except TableError as e:
            problems += e.problems
    if problems:
        return claims_runner.refuse("draw-gold", problems, out)
    drawn = None
    if loaded is not None:
        try:
            drawn = _drawn_columns(*loaded, per_cell, a.seed)
        except Unusual:         # a prompt column the columnar reader would not take: the row reader's turn
            pass
    if drawn is None:
        try:
            drawn = _drawn_rows(sm or read_samples(a.samples, mapping), per_cell, a.seed)
        except TableError as e:
            return claims_runner.refuse("draw-gold", e.problems, out)
    for line in advice:
        print(f"[draw-gold] {line}", flush=True)

    cols, n_samples, n_cells = drawn
    order = np.random.default_rng([a.seed, 1]).permutation(len(cols["sample_id"]))
    col = lambda c: mapping.get(c, c)   # noqa: E731
    rows = [{col("sample_id"): cols["sample_id"][i], "run": cols["run"][i], "family": cols["family"][i],
             "prompt_id": cols["prompt_id"][i], "prompt": cols["prompt"][i], "completion": cols["completion"][i],
             col("gold"): None} for i in order]
    record = {"kind": RECORD_KIND, "samples": str(Path(a.samples).resolve()), "samples_sha256": table_sha256(a.samples),
              "seed": a.seed, "per_cell": per_cell, "column_mapping": mapping, "n_samples": n_samples,
              "n_cells": n_cells, "n_drawn": len(rows), "to_label": out.name,
              "sample_ids": sorted(cols["sample_id"])}
    atomic_write_text(rec, json.dumps(record, indent=1) + "\n")       # the record first: data without one is plain
    atomic_write_text(out, _rows_text(rows, fmt))
    print(f"[draw-gold] {len(rows)} rows to label ({n_cells} run x family cells, {per_cell} per cell or all of a "
          f"smaller one; seed {a.seed}) -> {out}; record of the draw -> {rec}. Fill in '{col('gold')}' for every "
          f"row, then: python -m audit.samples --samples {a.samples} --gold {out} --out DIR", flush=True)
    return EXIT_OK


def check_record(settings: dict, table=None) -> list[str]:
    """Problems with the gold file against the record of its draw (none when there is no record): the samples
    file must be the one drawn from, the record must be that draw, and every gold row one of its rows. `table` is
    the audit's loaded table (None when it did not load: its reader names its problems)."""
    from . import rounds
    gold, given = Path(settings["gold"]), settings.get("draw_record")
    path = rounds.latest_record(settings)        # --draw-record, GOLD's sibling, or the last round in a GOLD dir
    if path is None or not path.is_file():
        return [f"--draw-record {path}: file not found"] if given else []
    try:
        rec = json.loads(path.read_text())
        if rounds.is_rounds(rec):
            if settings.get("ray"):
                return [f"--ray: {path} records a rounds design, which is audited without --ray (its intervals "
                        "follow each cell's draw order, read on this machine)"]
            problems: list[str] = []
            rounds.verify(settings, table, path, problems)
            return problems
        ids, want = set(rec["sample_ids"]), rec["samples_sha256"]
        seed, per_cell = int(rec["seed"]), int(rec["per_cell"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{path}: not a record of python -m audit.samples draw-gold (expected JSON with sample_ids, seed, "
                f"per_cell, samples_sha256; {type(e).__name__}: {e})"]
    samples = Path(settings["samples"])
    if not samples.exists():
        return []                                   # the table reader names it
    got = table_sha256(samples)
    if got != want:
        return [f"{samples}: sha256 {got[:12]}... is not the samples file {gold} was drawn from ({path}: "
                f"{rec.get('samples')}, sha256 {want[:12]}...): audit the labels with that file, or draw again"]
    if table is None:    # the table did not load (its gold file, say), or was read on Ray: the samples alone,
        loaded = load_samples(samples, rec.get("column_mapping") or {})      # by the columnar reader if it can
        table = None if loaded is None else loaded[0]
    if table is not None:
        drawn = set(table.sample_id.take(draw_table(table, per_cell, seed)).to_pylist())
    else:
        try:
            sm = read_samples(samples, rec.get("column_mapping") or {})
            drawn = {sm["sample_id"][i] for i in draw(sm, per_cell, seed)}
        except TableError:
            return []                               # the table reader names its problems
    if drawn != ids:
        return [f"{path}: its sample_ids are not the draw of seed {seed}, {per_cell} per cell from {samples} "
                "(edited by hand?): draw again with python -m audit.samples draw-gold"]
    problems: list[str] = []
    rows = read_rows(gold, problems)
    if rows is None:
        return []                                   # the table reader names it
    key = (settings.get("mapping") or {}).get("sample_id", "sample_id")
    bad = [(loc, s) for loc, r in rows if (s := text_id(r.get(key))) is not None and s not in ids]
    out = [f"{loc}: column '{key}': {s!r} is not one of the {len(ids)} rows drawn by draw-gold ({path}: seed {seed}, "
           f"{per_cell} per cell): gold rows must come from that draw" for loc, s in bad[:10]]
    if len(bad) > 10:
        out.append(f"{gold}: ... and {len(bad) - 10} more rows not of the draw")
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
