"""SamplesWriter: log a run's samples into the samples table of `python -m audit.samples` from any training loop.
Plain Python (no torch, no numpy): `SamplesWriter("samples.jsonl").log(run, family, prompt_id, completion,
proxy_reward)` appends one JSON line (sample_id, run, family, prompt_id, completion, proxy_reward; prompt and step
when given) and flushes it.

Resume-safe: an existing file is never truncated; its sample ids and runs are read when the writer opens it, so a
restarted job appends after them, its ids stay unique, and it can skip a checkpoint it already logged
(`writer.has_run(run)`; audit.integrations.trl's callback does). A last line cut by a kill mid-write is reported
(a warning naming the file and line) and left alone: the audit names it too, and the new rows start on a line of
their own.

Distributed: only the main process writes (global rank 0: torch.distributed's rank when it is initialised, else
accelerate's state when it is, else the RANK then LOCAL_RANK environment variables; `rank=` overrides). Every
process reads the existing file, so all of them agree on what is already logged."""
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


class SamplesWriter:
    """Append rows of the samples table to `path` (JSONL), resume-safe, from the main process only."""

    def __init__(self, path, *, rank: int | None = None):
        self.path = Path(path)
        if self.path.suffix.lower() not in (".jsonl", ".ndjson"):
            raise ValueError(f"{self.path}: expected a .jsonl file (the samples table SamplesWriter appends to)")
        self.enabled = (process_rank() if rank is None else int(rank)) == 0
        self.ids: set[str] = set()
        self._runs: dict[str, None] = {}   # an ordered set: in the order first seen, those already in the file included
        self._needs_newline = False
        self._read_existing()

    def _read_existing(self) -> None:
        if not self.path.is_file():
            return
        with open(self.path, "rb") as fh:
            data = fh.read()
        lines = data.decode("utf-8", errors="replace").split("\n")
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                sid, run = str(row["sample_id"]), str(row["run"])
            except (ValueError, KeyError, TypeError):
                last = i == len(lines) and not data.endswith(b"\n")
                warnings.warn(f"{self.path}:{i}: " + ("an incomplete last line (a kill mid-write?)" if last else
                              "not a samples row") + ": left as it is; the audit will name it", stacklevel=3)
                continue
            self.ids.add(sid)
            self._runs[run] = None
        self._needs_newline = bool(data) and not data.endswith(b"\n")

    @property
    def runs(self) -> list[str]:
        """The runs in the file, in the order first seen (those of earlier attempts included)."""
        return list(self._runs)

    def has_run(self, run: str) -> bool:
        """Whether `run` (a checkpoint, say "step-200") has rows in the file: a resumed job skips it."""
        return str(run) in self._runs

    def row(self, run, family, prompt_id, completion, proxy_reward, *, prompt=None, step=None,
            sample_id=None, **extra) -> dict:
        """The row `log` would write, checked (its sample_id None when `log_many` is to choose it: run/prompt_id,
        then run/prompt_id/2, /3, ... for further samples of the prompt); nothing is written."""
        for name, v in (("run", run), ("family", family), ("prompt_id", prompt_id)):
            if v is None or isinstance(v, bool) or not str(v).strip():
                raise ValueError(f"SamplesWriter.log: {name}: expected a non-empty string or integer, got {v!r}")
        if not isinstance(completion, str):
            raise ValueError(f"SamplesWriter.log: completion: expected a string, got {type(completion).__name__}")
        try:
            reward = float(proxy_reward)
        except (TypeError, ValueError):
            reward = math.nan
        if not math.isfinite(reward) or isinstance(proxy_reward, bool):
            raise ValueError(f"SamplesWriter.log: proxy_reward: expected a finite number, got {proxy_reward!r} "
                             f"(run {run!r}, prompt_id {prompt_id!r})")
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
        return ids
