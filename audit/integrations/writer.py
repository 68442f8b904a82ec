"""SamplesWriter: log a run's samples into the samples table of `python -m audit.samples` from any training loop.
Plain Python (no torch, no numpy): `SamplesWriter("samples.jsonl").log(run, family, prompt_id, completion,
proxy_reward)` appends one JSON line (sample_id, run, family, prompt_id, completion, proxy_reward; prompt and step
when given, and any further columns) and flushes it. A proxy_reward of None (or NaN) is written as null: the row
has no proxy (a reward function that failed or did not apply); the audit counts such rows and certifies their
cells from the gold labels alone.

Resume-safe: an existing file is never truncated; its sample ids and runs are read when the writer opens it, so a
restarted job appends after them, its ids stay unique, and it can skip a checkpoint it already logged
(`writer.has_run(run)`; audit.integrations.trl's callback does). A last line cut by a kill mid-write is reported
(a warning naming the file and line) and left alone: the audit names it too, and the new rows start on a line of
their own. A job resumed from an earlier checkpoint calls `supersede_after(step)`: the rows of later steps (the
interrupted attempt's, whose weights the resumed job trains again) are marked `"superseded": true` in place
(the file rewritten atomically, nothing removed), the audit and draw-gold ignore them, and their runs may be
logged again (under new sample ids: a label given to a superseded row stays attached to what was labelled).

Distributed: only the main process writes (`rank=`, else global rank 0: torch.distributed's rank when it is
initialised, else accelerate's state when it is, else the RANK then LOCAL_RANK environment variables). Every
process reads the existing file and keeps the same account of what is in it, so all of them agree on what is
already logged (a process that does not write still calls log_many / supersede_after with the same rows)."""
from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path


def process_rank() -> int:
    """This process's global rank, without importing torch or accelerate (only asked when already imported)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001 - a half-initialised backend: fall back to the environment
        pass
    state = getattr(sys.modules.get("accelerate.state"), "PartialState", None)
    if state is not None and getattr(state, "_shared_state", None):
        return int(state().process_index)
    for var in ("RANK", "LOCAL_RANK"):
        v = os.environ.get(var, "").strip()
        if v:
            try:
                return int(v)
            except ValueError:
                raise ValueError(f"environment variable {var}={v!r}: expected an integer rank") from None
    return 0


def _replace(path: Path, text: str) -> None:
    """Write `text` to a temp file beside `path` and rename it onto `path` (what rlhf.atomic does; not imported:
    importing the rlhf package sets math-library variables, which a user's training process should not get)."""
    import tempfile
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, os.stat(path).st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _after(value, step: float) -> bool:
    """Whether a row's step `value` (a number, or None / anything else: never) is above `step`."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > step


SUPERSEDED = "superseded"      # the column that marks a row of an interrupted attempt (audit.samples ignores it)


class SamplesWriter:
    """Append rows of the samples table to `path` (JSONL), resume-safe, from the main process only."""

    def __init__(self, path, *, rank: int | None = None):
        self.path = Path(path)
        if self.path.suffix.lower() not in (".jsonl", ".ndjson"):
            raise ValueError(f"{self.path}: expected a .jsonl file (the samples table SamplesWriter appends to)")
        self.enabled = (process_rank() if rank is None else int(rank)) == 0
        self.ids: set[str] = set()
        self._runs: dict[str, None] = {}   # an ordered set of the runs with rows in force, in the order first seen
        self._steps: list[tuple] = []      # (run, step) of every row in force: what supersede_after may mark
        self._needs_newline = False
        self._read_existing()

    def _read_existing(self) -> None:
        if not self.path.is_file():
            return
        for i, line, row in self._lines():
            if row is None:
                continue
            self.ids.add(str(row["sample_id"]))
            if not row.get(SUPERSEDED):
                self._runs[str(row["run"])] = None
                self._steps.append((str(row["run"]), row.get("step")))

    def _lines(self, warn: bool = True):
        """[(line number, the line's text, its row or None)] of the file; the text keeps its line end."""
        with open(self.path, "rb") as fh:
            data = fh.read()
        self._needs_newline = bool(data) and not data.endswith(b"\n")
        text = data.decode("utf-8", errors="replace")
        lines = text.splitlines(keepends=True)
        out = []
        for i, line in enumerate(lines, 1):
            row = None
            if line.strip():
                try:
                    row = json.loads(line)
                    str(row["sample_id"]), str(row["run"])
                except (ValueError, KeyError, TypeError):
                    row = None
                    if warn:
                        last = i == len(lines) and not line.endswith("\n")
                        warnings.warn(f"{self.path}:{i}: " + ("an incomplete last line (a kill mid-write?)" if last
                                      else "not a samples row") + ": left as it is; the audit will name it",
                                      stacklevel=4)
            out.append((i, line, row))
        return out

    @property
    def runs(self) -> list[str]:
        """The runs with rows in force in the file, in the order first seen (those of earlier attempts included,
        superseded ones not)."""
        return list(self._runs)

    def has_run(self, run: str) -> bool:
        """Whether `run` (a checkpoint, say "step-200") has rows in force in the file: a resumed job skips it."""
        return str(run) in self._runs

    def supersede_after(self, step, reason: str | None = None) -> list[str]:
        """Mark every row in force whose `step` is above `step` superseded (`"superseded": true` and
        `"superseded_reason"`): a job resumed from checkpoint `step` trains those steps again, so their rows no
        longer describe a checkpoint that exists. The rows stay in the file (rewritten atomically: temp file and
        rename); rows without a step are left alone. Returns the runs superseded (they may be logged again)."""
        step = float(step)
        gone = list(dict.fromkeys(run for run, s in self._steps if _after(s, step)))
        if not gone:
            return []
        why = reason or f"training resumed from step {step:g}: this step was trained again"
        if self.enabled and self.path.is_file():
            parts = []
            for _, line, row in self._lines(warn=False):
                if row is not None and not row.get(SUPERSEDED) and _after(row.get("step"), step):
                    end = "\n" if line.endswith("\n") else ""
                    line = json.dumps({**row, SUPERSEDED: True, "superseded_reason": why}, ensure_ascii=False) + end
                parts.append(line)
            _replace(self.path, "".join(parts))
        self._steps = [(run, s) for run, s in self._steps if not _after(s, step)]
        live = {run for run, _ in self._steps}
        self._runs = {run: None for run in self._runs if run in live}
        return gone

    def row(self, run, family, prompt_id, completion, proxy_reward, *, prompt=None, step=None,
            sample_id=None, **extra) -> dict:
        """The row `log` would write, checked (its sample_id None when `log_many` is to choose it: run/prompt_id,
        then run/prompt_id/2, /3, ... for further samples of the prompt); nothing is written. proxy_reward None or
        NaN: no proxy for this row (written as null)."""
        for name, v in (("run", run), ("family", family), ("prompt_id", prompt_id)):
            if v is None or isinstance(v, bool) or not str(v).strip():
                raise ValueError(f"SamplesWriter.log: {name}: expected a non-empty string or integer, got {v!r}")
        if not isinstance(completion, str):
            raise ValueError(f"SamplesWriter.log: completion: expected a string, got {type(completion).__name__}")
        reward = None
        if proxy_reward is not None:
            try:
                reward = float(proxy_reward)
            except (TypeError, ValueError):
                reward = math.inf
            if isinstance(proxy_reward, bool) or math.isinf(reward):
                raise ValueError(f"SamplesWriter.log: proxy_reward: expected a finite number or None (no proxy), "
                                 f"got {proxy_reward!r} (run {run!r}, prompt_id {prompt_id!r})")
            if math.isnan(reward):
                reward = None
        out = {"sample_id": None if sample_id is None else str(sample_id), "run": str(run), "family": str(family),
               "prompt_id": str(prompt_id), "completion": completion, "proxy_reward": reward}
        if prompt is not None:
            out["prompt"] = str(prompt)
        if step is not None:
            out["step"] = int(step) if float(step) == int(step) else float(step)
        return {**out, **extra}

    def log(self, run, family, prompt_id, completion, proxy_reward, *, prompt=None, step=None, sample_id=None,
            **extra) -> str:
        """Append one sample (flushed before returning); returns its sample_id. On a process that is not the
        main one, nothing is written (the id is still returned)."""
        return self.log_many([self.row(run, family, prompt_id, completion, proxy_reward, prompt=prompt, step=step,
                                       sample_id=sample_id, **extra)])[0]

    def log_many(self, rows: list[dict]) -> list[str]:
        """Append rows built by `row` (one checkpoint's samples, say) in one write, flushed; returns their ids."""
        ids: list[str] = []
        new: set[str] = set()
        taken = lambda x: x in self.ids or x in new   # noqa: E731
        for r in rows:
            sid = r.get("sample_id")
            if sid is None:
                base = sid = f"{r['run']}/{r['prompt_id']}"
                k = 1
                while taken(sid):
                    k += 1
                    sid = f"{base}/{k}"
            elif taken(sid):
                raise ValueError(f"SamplesWriter: sample_id {sid!r} is already in {self.path} (or twice in a batch)")
            new.add(sid)
            ids.append(sid)
        rows = [{**r, "sample_id": sid} for r, sid in zip(rows, ids)]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        if self.enabled and rows:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(("\n" if self._needs_newline else "") + text)
                fh.flush()
                os.fsync(fh.fileno())
            self._needs_newline = False
        self.ids.update(ids)
        self._runs.update((r["run"], None) for r in rows)
        self._steps += [(r["run"], r.get("step")) for r in rows]
        return ids
