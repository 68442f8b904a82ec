"""python -m world.experiments.samples_scale [--rows 100000 1000000 10000000]: the samples door at log scale (make
bench). For each size, a seeded synthetic table (world/samples_table.py: 10 runs x 10 families, 60 gold rows a
cell, Parquet; generated once into --tables and reused), then:

  audit      `python -m audit.samples ... --no-figures` end to end: wall seconds and peak RSS (the largest of the
             CLI and its pytest process, from wait4)
  reader     load() alone in a fresh process: the columnar reader, and the row-by-row reader it falls back to on
             bad input (--row-reader-max rows at most: it takes ~100 us and ~1.5 kB a row)
  audit --ray  with --ray ADDRESS ("local" starts a Ray on this machine): the same audit with the table read and
             reduced on Ray (audit/samples/ray_cells.py), and whether its answer.json is byte-identical to the
             local one's (peak RSS: the CLI and its pytest, not Ray's workers)

Prints one JSON line per measurement and a table at the end. Nothing here is asserted: figures, not tests.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rlhf.cli import Parser, first_paragraph, seed_arg

ROOT = Path(__file__).resolve().parents[2]

_READER = """
import sys, time
from pathlib import Path
from audit.samples import rows, table
s, g, how = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
if how == "columns":
    t = table.load(s, g)
else:
    t = table._table(s, g, *rows.load_rows(Path(s), Path(g), {}, None, []))
print(time.perf_counter() - t0, len(t.proxy))
"""


def measured(cmd: list[str], env=None) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in GB of the process tree, return code, its output's last line)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    return wall, ru.ru_maxrss / 2**20, p.returncode, (out.strip().splitlines() or [""])[-1]


def main(argv=None) -> int:
    ap = Parser(prog="python -m world.experiments.samples_scale", description=first_paragraph(__doc__))
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--tables", default=str(ROOT / "out" / "bench-tables"),
                    help="where the generated tables are kept between runs")
    ap.add_argument("--row-reader-max", type=int, default=1_000_000,
                    help="measure the row-by-row reader up to this many rows (default 1,000,000)")
    ap.add_argument("--stress-examples", type=int, default=24)
    ap.add_argument("--seed", type=seed_arg, default=0)
    ap.add_argument("--shards", type=int, default=0, help="tables as K Parquet part files (default one file)")
    ap.add_argument("--ray", default=None, metavar="ADDRESS",
                    help="also run the audit with --ray ADDRESS ('local': a Ray started on this machine)")
    a = ap.parse_args(argv)
    from world.samples_table import TableConfig, generate, samples_path
    results = []
    for n in a.rows:
        cfg = TableConfig(rows=n, seed=a.seed, shards=a.shards)
        d = Path(a.tables) / (f"rows{n}-seed{a.seed}" + (f"-shards{a.shards}" if a.shards else ""))
        if not (d / "truth.json").exists():
            t0 = time.perf_counter()
            print(f"[samples_scale] generating {n:,} rows -> {d}", flush=True)
            generate(cfg, d)
            print(f"[samples_scale] generated in {time.perf_counter() - t0:.0f} s", flush=True)
        s, g = samples_path(d, cfg), d / "gold.parquet"
        out = Path(a.tables) / f"out{n}"
        audit = [sys.executable, "-m", "audit.samples", "--samples", str(s), "--gold", str(g), "--no-figures",
                 "--seed", str(a.seed), "--stress-examples", str(a.stress_examples)]
        wall, rss, rc, last = measured(audit + ["--out", str(out)])
        results.append({"rows": n, "what": "audit", "wall_s": round(wall, 2), "peak_rss_gb": round(rss, 3),
                        "exit": rc, "last_line": last[:160]})
        print(json.dumps(results[-1]), flush=True)
        if a.ray:
            out_ray = Path(a.tables) / f"out{n}-ray"
            wall, rss, rc, last = measured(audit + ["--out", str(out_ray), "--ray", a.ray])
            same = rc == 0 and (out / "answer.json").read_bytes() == (out_ray / "answer.json").read_bytes()
            results.append({"rows": n, "what": f"audit --ray {a.ray}", "wall_s": round(wall, 2),
                            "peak_rss_gb": round(rss, 3), "exit": rc, "same_answer_bytes": same,
                            "last_line": last[:160]})
            print(json.dumps(results[-1]), flush=True)
        for how in ("columns", "rows"):
            if how == "rows" and n > a.row_reader_max:
                continue
            wall, rss, rc, last = measured([sys.executable, "-c", _READER, str(s), str(g), how])
            load_s = float(last.split()[0]) if rc == 0 else None
            results.append({"rows": n, "what": f"reader: {how}", "wall_s": round(wall, 2), "load_s": load_s,
                            "peak_rss_gb": round(rss, 3), "exit": rc})
            print(json.dumps(results[-1]), flush=True)
    print("\n| rows | what | wall s | peak RSS GB |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']:,} | {r['what']} | {r['wall_s']:.1f} | {r['peak_rss_gb']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
