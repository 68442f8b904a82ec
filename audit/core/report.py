"""What both doors' reports are rendered with (audit.task.render, audit.samples.render): the claims of an evidence
document by name, the jinja2 environment over templates/ and its filters, the rounding of measured numbers, the
answer's schema validation, and atomic figure writes. Reads evidence only."""
from __future__ import annotations

import json
from pathlib import Path

import jinja2
import jsonschema

from rlhf.atomic import atomic_target

from audit.core.evidence import split_claim_id, to_jsonable
from audit.core.resources import templates_dir

TEMPLATES = templates_dir()      # the installed audit.templates (the repository's templates/)
STAGING = ".staging"   # temp files under out_dir (same filesystem as the outputs: the renames stay atomic)


class AnswerSchemaError(ValueError):
    """The answer rendered from this evidence does not satisfy its door's schema (templates/*answer.schema.json)."""


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_ci(v) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_is_num(b) for b in v)


def _first(*values):
    for v in values:
        if v is not None:
            return v
    return None


def _oneline(text) -> str:
    return " ".join(str(text or "").split())


def _dumps(v) -> str:
    return json.dumps(to_jsonable(v), allow_nan=False, ensure_ascii=False)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             autoescape=False, keep_trailing_newline=True)
    env.filters["tojson"] = _dumps                     # plain JSON (no HTML escaping); NaN is refused
    env.filters["fmt"] = lambda v, nd=3: f"{v:.{nd}f}" if _is_num(v) else "n/a"
    env.filters["ci"] = lambda v, nd=3: f"[{v[0]:.{nd}f}, {v[1]:.{nd}f}]" if _is_ci(v) else "n/a"
    env.filters["oneline"] = lambda v: _oneline(v).replace("|", "\\|")
    env.filters["value"] = _table_value
    return env


def _table_value(v) -> str:
    """A result in a summary table cell: integers as integers, other numbers at the answer's precision, yes/no
    for booleans, anything else as compact JSON (pipes escaped)."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.{MEASURED_DECIMALS}f}"
    if v is None:
        return "n/a"
    return _oneline(v if isinstance(v, str) else _dumps(v)).replace("|", "\\|")


class Claims:
    """Claims of one evidence document by id and by name (evidence order kept; a repeated id: the last wins)."""

    def __init__(self, doc: dict):
        self.by_id: dict[str, dict] = {}
        for c in doc.get("claims", []):
            c = dict(c)
            c.setdefault("details", {})
            c["details"] = c["details"] if isinstance(c["details"], dict) else {}
            c.setdefault("message", "")
            if "name" not in c or "param" not in c:
                c["name"], c["param"] = split_claim_id(c["id"])
            self.by_id[c["id"]] = c

    def named(self, name: str) -> list[dict]:
        return [c for c in self.by_id.values() if c.get("name") == name]

    def one(self, name: str) -> dict | None:
        found = self.named(name)
        return found[-1] if found else None

    def all(self) -> list[dict]:
        return list(self.by_id.values())


# Measured numbers in answer.json carry MEASURED_DECIMALS decimals (templates/answer.schema.json says so): the
# estimates' own uncertainty (CI half-widths of 0.005-0.05) sits in the 2nd-3rd decimal, and what another CPU's
# float kernels change sits in the 6th-7th. More digits would state a precision no result holds, and make two
# machines' reports differ in digits that mean nothing. Configs (the recipe) are inputs, written exactly.
MEASURED_DECIMALS = 4


def measured(x, nd: int = MEASURED_DECIMALS):
    """x with every float rounded to nd decimals (ints, bools, strings and None as they are)."""
    if isinstance(x, float):
        return round(x, nd) + 0.0            # + 0.0: no "-0.0"
    if isinstance(x, dict):
        return {k: measured(v, nd) for k, v in x.items()}
    if isinstance(x, list):
        return [measured(v, nd) for v in x]
    return x


def load_schema(schema_path: Path) -> dict:
    return json.loads(schema_path.read_text())


def validate_answer(answer: dict, schema_path: Path) -> None:
    validator = jsonschema.Draft202012Validator(load_schema(schema_path))
    errors = sorted(validator.iter_errors(answer), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  {'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in errors[:20]]
        raise AnswerSchemaError(f"answer.json would not satisfy templates/{schema_path.name}:\n" + "\n".join(lines))


def render_answer_text(answer: dict, template: str, schema_path: Path) -> str:
    """jinja2-render answer.json, parse it back and validate it; returns the rendered text (validated)."""
    text = _env().get_template(template).render(a=answer)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise AnswerSchemaError(f"templates/{template} rendered invalid JSON: {e}") from None
    if parsed != answer:
        raise AnswerSchemaError(f"templates/{template} lost or changed fields of the answer")
    validate_answer(parsed, schema_path)
    return text if text.endswith("\n") else text + "\n"


def _save(fig, path: Path, tmp_dir: Path) -> None:
    with atomic_target(path, tmp_dir) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")


def by_role(claims: list, roles: dict) -> dict:
    """Claims by role: 'decision', 'health' (checks of the audit's own validity) and 'finding' (every other claim:
    about the runs, the reward model, the data; one that does not hold is what the audit is for, not its fault).
    `roles` maps a claim's name to its role; a door's module says which of its claims are which."""
    out = {"decision": [], "health": [], "finding": []}
    for c in claims:
        out[roles.get(c.get("name") or split_claim_id(c["id"])[0], "finding")].append(c)
    return out
