"""Evidence: what each audit check measured and whether it held, as one plain JSON file (SPEC §3).

Deepchecks / Great Expectations style: a *check* is a name plus its thresholds; its *result* is a plain dict that
repeats the configuration that produced it; pass, fail and error are distinct outcomes. The renderer
(`audit.render`) reads only this file, never the checks.

Evidence file (``evidence.json``)::

    {"schema_version": 1,
     "meta": {"task_dir": str | null,             # --task given to pytest
              "seed": int,                         # --seed given to pytest (default 0)
              "input_hashes": {relpath: sha256},   # every file under task_dir, hashed before the checks ran
              "started_at": ISO-8601 UTC, "finished_at": ISO-8601 UTC,
              "config": {...}},                    # pytest args + anything the checks put in recorder.config
     "claims": [claim, ...]}                       # in the order the checks finished

    claim = {"id": "rm.agrees_with_experts[dune]",   # name, plus "[param]" when the check is parametrised
             "name": "rm.agrees_with_experts",
             "param": "dune" | null,
             "status": "pass" | "fail" | "error",
             "estimate": float | null,               # the headline number the check measured
             "ci95": [lo, hi] | null,                # its 95% confidence interval
             "method": str | null,                   # how the CI was obtained (e.g. "bca bootstrap")
             "n_resamples": int | null, "seed": int | null,
             "thresholds": {...},                    # the configuration the claim was judged against
             "input_hashes": {relpath: sha256},      # the inputs this claim declared (subset of meta's)
             "details": {...},                       # anything else; the renderer's contract lives here
             "message": str}                         # "" on pass; the assertion / error / skip text otherwise

Status: "pass" = the check ran and its assertions held; "fail" = an assertion did not hold (AssertionError or
pytest.fail); "error" = the check could not be evaluated (any other exception, a setup/teardown error, or a
skip — see checks/evidence_plugin.py). A claim that recorded numbers and then failed keeps its numbers, so a
reader sees how far it missed.

All values are converted to JSON-safe plain types when recorded (numpy scalars and arrays, tuples, Paths;
NaN and +-inf become null), so ``json.dumps(..., allow_nan=False)`` of the evidence never fails.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from pathlib import Path

SCHEMA_VERSION = 1
STATUSES = ("pass", "fail", "error")
_CHUNK = 1 << 20


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def to_jsonable(x):
    """Recursively convert x into plain JSON types: dict (str keys), list, str, int, float (finite), bool, None."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=repr) if isinstance(x, (set, frozenset)) else x
        return [to_jsonable(v) for v in items]
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    # numpy / torch scalars and arrays, without importing either
    if hasattr(x, "dtype") and hasattr(x, "tolist"):
        return to_jsonable(x.tolist())
    if hasattr(x, "item") and callable(x.item):
        try:
            return to_jsonable(x.item())
        except (TypeError, ValueError):
            pass
    if isinstance(x, (int, float)):          # other numeric subclasses
        return to_jsonable(float(x)) if isinstance(x, float) else int(x)
    return str(x)


def make_claim_id(name: str, param: str | None = None) -> str:
    return name if param is None else f"{name}[{param}]"


def split_claim_id(claim_id: str) -> tuple[str, str | None]:
    """'rm.agrees_with_experts[dune]' -> ('rm.agrees_with_experts', 'dune'); 'a.b' -> ('a.b', None)."""
    if claim_id.endswith("]") and "[" in claim_id:
        i = claim_id.index("[")
        return claim_id[:i], claim_id[i + 1:-1]
    return claim_id, None


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def hash_inputs(task_dir) -> dict[str, str]:
    """sha256 of every regular file under task_dir (read in 1 MiB chunks), keyed by posix relpath, sorted.

    Returns {} when task_dir is None; raises FileNotFoundError when it is not a directory."""
    if task_dir is None:
        return {}
    root = Path(task_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: task directory not found")
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_file():
                out[p.relative_to(root).as_posix()] = sha256_file(p)
    return dict(sorted(out.items()))


def inputs_fingerprint(input_hashes) -> str | None:
    """One short, path-free name for a task's content: sha256 of its sorted {relpath: sha256} (first 16 hex)."""
    if not input_hashes:
        return None
    return hashlib.sha256(json.dumps(dict(sorted(input_hashes.items()))).encode()).hexdigest()[:16]


def code_hash(packages=("audit", "audit.checks", "rlhf", "audit.templates")) -> str:
    """sha256 of the sources that compute and render the audit (file names and bytes, sorted), for provenance.
    Each package is hashed where it is installed (a wheel's audit holds checks/ and templates/, a clone keeps them
    beside it: hashed once either way), names relative to the package, so that a wheel and a clone of the same
    commit give the same hash."""
    from audit.core.resources import package_dir
    dirs = {pkg: package_dir(pkg) for pkg in packages}
    h = hashlib.sha256()
    for pkg, root in dirs.items():
        inner = [d for p, d in dirs.items() if p.startswith(pkg + ".")]   # hashed as their own package
        for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                        and p.suffix not in (".pyc", ".pyo") and not any(d in p.parents for d in inner)):
            h.update(f"{pkg}/{f.relative_to(root).as_posix()}".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def package_versions(dist: str = "rlhf-audit") -> dict[str, str | None]:
    """Installed versions of python and of this project's declared dependencies, for provenance."""
    import platform
    import re
    from importlib import metadata
    out = {"python": platform.python_version()}
    try:
        out[dist] = metadata.version(dist)
        names = [re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] for r in metadata.requires(dist) or []]
    except metadata.PackageNotFoundError:
        names = []
    for name in sorted(names, key=str.lower):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _empty_claim(claim_id: str) -> dict:
    name, param = split_claim_id(claim_id)
    return {"id": claim_id, "name": name, "param": param, "status": None, "estimate": None, "ci95": None,
            "method": None, "n_resamples": None, "seed": None, "thresholds": {}, "input_hashes": {},
            "details": {}, "message": "", "_inputs": None}


def _as_float(v, field):
    v = to_jsonable(v)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{field}: expected a number, got {v!r}")
    return float(v)


def _as_ci(v):
    v = to_jsonable(v)
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != 2:
        raise TypeError(f"ci95: expected [lo, hi], got {v!r}")
    lo, hi = (_as_float(b, "ci95") for b in v)
    return [lo, hi]


class EvidenceRecorder:
    """Collects claims during a pytest session (or any other driver) and writes evidence.json.

    A check calls ``record(claim_id, ...)`` with what it measured *before* asserting, so a failing check keeps
    its numbers; the driver then calls ``finish(claim_id, status, message)``. ``record`` may be called several
    times for one claim: scalar fields given (not None) overwrite, ``thresholds`` and ``details`` are merged.
    """

    def __init__(self):
        self._claims: dict[str, dict] = {}
        self.config: dict = {}
        self.meta: dict = {}
        self.started_at = utc_now()

    def _claim(self, claim_id: str) -> dict:
        if claim_id not in self._claims:
            self._claims[claim_id] = _empty_claim(claim_id)
        return self._claims[claim_id]

    def record(self, claim_id: str, *, estimate=None, ci95=None, method=None, n_resamples=None, seed=None,
               thresholds=None, details=None, inputs=None) -> dict:
        """Store what a check measured. `inputs`: relpaths (or directory prefixes) under the task dir that the
        claim read, or a ready {relpath: sha256} dict; resolved against meta["input_hashes"] when written."""
        c = self._claim(claim_id)
        if estimate is not None:
            c["estimate"] = _as_float(estimate, "estimate")
        if ci95 is not None:
            c["ci95"] = _as_ci(ci95)
        if method is not None:
            c["method"] = str(method)
        if n_resamples is not None:
            c["n_resamples"] = int(to_jsonable(n_resamples))
        if seed is not None:
            c["seed"] = int(to_jsonable(seed))
        if thresholds is not None:
            c["thresholds"].update(to_jsonable(dict(thresholds)))
        if details is not None:
            c["details"].update(to_jsonable(dict(details)))
        if inputs is not None:
            if isinstance(inputs, dict):
                c["input_hashes"].update(to_jsonable(inputs))
            else:
                c["_inputs"] = (c["_inputs"] or []) + [Path(p).as_posix() for p in inputs]
        return c

    def record_result(self, claim_id: str, result: dict, **kwargs) -> dict:
        """Record an `audit.core.stats`-shaped result {"estimate", "ci95", "method", "n_resamples", "seed", ...};
        keys other than those five go into details (plus any `details=` given)."""
        result = dict(result)
        fields = {k: result.pop(k) for k in ("estimate", "ci95", "method", "n_resamples", "seed") if k in result}
        details = {**result, **(kwargs.pop("details", None) or {})}
        return self.record(claim_id, **fields, details=details, **kwargs)

    def finish(self, claim_id: str, status: str, message: str = "") -> dict:
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        c = self._claim(claim_id)
        c["status"] = status
        c["message"] = str(message or "")
        return c

    def status(self, claim_id: str) -> str | None:
        c = self._claims.get(claim_id)
        return None if c is None else c["status"]

    def claim_ids(self) -> list[str]:
        return list(self._claims)

    def to_dict(self, meta: dict | None = None) -> dict:
        """The evidence document. Claims recorded but never finished are reported as errors."""
        meta = dict(self.meta if meta is None else meta)
        meta.setdefault("task_dir", None)
        meta.setdefault("seed", 0)
        meta.setdefault("input_hashes", {})
        meta.setdefault("started_at", self.started_at)
        meta.setdefault("finished_at", utc_now())
        meta["config"] = {**self.config, **(meta.get("config") or {})}
        hashes = meta["input_hashes"] or {}
        claims = []
        for c in self._claims.values():
            c = dict(c)
            inputs = c.pop("_inputs")
            ih = dict(c["input_hashes"])
            for p in inputs or ():
                p = p.rstrip("/")
                hits = {k: v for k, v in hashes.items() if k == p or k.startswith(p + "/")}
                ih.update(hits or {p: None})        # declared but not found under the task dir: null
            c["input_hashes"] = dict(sorted(ih.items()))
            if c["status"] is None:
                c["status"] = "error"
                c["message"] = c["message"] or "check recorded evidence but never finished"
            claims.append(c)
        return to_jsonable({"schema_version": SCHEMA_VERSION, "meta": meta, "claims": claims})

    def write(self, path, meta: dict | None = None) -> dict:
        """Write evidence.json atomically (temp file + rename); returns the document written."""
        from rlhf.atomic import atomic_write_text
        doc = self.to_dict(meta)
        atomic_write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")
        return doc


class BoundEvidence:
    """The `evidence` fixture: an EvidenceRecorder bound to one claim id."""

    def __init__(self, recorder: EvidenceRecorder, claim_id: str):
        self.recorder = recorder
        self.claim_id = claim_id

    def record(self, **kwargs) -> dict:
        return self.recorder.record(self.claim_id, **kwargs)

    def record_result(self, result: dict, **kwargs) -> dict:
        return self.recorder.record_result(self.claim_id, result, **kwargs)

    @property
    def claim(self) -> dict:
        return self.recorder._claim(self.claim_id)

    def __repr__(self):
        return f"<evidence {self.claim_id}>"


def load_evidence(path) -> dict:
    """Read evidence.json and check its outer shape (schema_version 1, meta dict, claims list of dicts with
    id and status). Raises ValueError with the file name on anything else."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: evidence file not found") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: expected an evidence document with schema_version {SCHEMA_VERSION}")
    if not isinstance(doc.get("meta", {}), dict) or not isinstance(doc.get("claims"), list):
        raise ValueError(f"{path}: 'meta' must be an object and 'claims' a list")
    for i, c in enumerate(doc["claims"]):
        if not isinstance(c, dict) or not isinstance(c.get("id"), str):
            raise ValueError(f"{path}: claims[{i}] must be an object with a string 'id'")
        if c.get("status") not in STATUSES:
            raise ValueError(f"{path}: claims[{i}] ({c['id']}): status must be one of {STATUSES}, "
                             f"got {c.get('status')!r}")
    return doc
