"""The samples door's settings (one JSON dict, written by audit.samples and read by checks/samples/) turned into a
validated table and a SamplesAudit; input hashes for the evidence."""
from __future__ import annotations

from pathlib import Path

from audit.core.release import ReleaseRule
from .estimates import SamplesAudit, SamplesConfig, gold_range
from .columns import table_sha256
from .table import DesignConfig, load, read_saved


def design_config(settings: dict) -> DesignConfig:
    d = dict(settings.get("design") or {})
    if d.get("gold_range") is not None:
        d["gold_range"] = tuple(d["gold_range"])
    return DesignConfig(**d)


def load_table(settings: dict, saved=None, reduced: bool = True, records: bool = True):
    """(table, reference run); raises audit.samples.table.TableError listing every problem. `saved`: the file the
    CLI saved its validated table to (audit.samples.table.save), read instead of the inputs. `reduced`: the table
    the claims read (audit.samples.cells.reduce), else the whole table. With settings["ray"] the table is read and
    reduced on that Ray cluster (audit.samples.ray_cells; always reduced). `records`: check the gold rows' draw
    record (audit.samples.draw.check_record), which for a rounds design sets the rows' draw positions."""
    if saved:
        t = read_saved(saved)
        return t, t.reference
    if settings.get("ray"):
        from .ray_cells import load_on_ray
        t = load_on_ray(settings, design_config(settings))
        return t, t.reference
    t = load(settings["samples"], settings["gold"], mapping=settings.get("mapping"),
             reference=settings.get("reference"), design=design_config(settings))
    if records:          # the draw record (audit.samples.certify checks it itself): a rounds design's sets positions
        from .draw import check_record
        from .rows import TableError
        problems = check_record(settings, t)
        if problems:
            raise TableError(problems)
    return (reduce_table(t, settings) if reduced else t), t.reference


def reduce_table(t, settings: dict):
    """The table the claims read of a whole table (audit.samples.cells.reduce), for the settings' seed and range."""
    from .cells import reduce
    lo, hi = gold_range(t.gold, design_config(settings).gold_range)["range"]
    return reduce(t, int(settings.get("seed", 0)), lo, hi)


def samples_config(settings: dict) -> SamplesConfig:
    return SamplesConfig(seed=int(settings.get("seed", 0)),
                         release_rule=ReleaseRule(**(settings.get("release_rule") or {})),
                         design=design_config(settings),
                         agreement_min_pearson_lower=float(settings.get("agreement_min_pearson_lower", 0.2)),
                         scale_max_ratio=float(settings.get("scale_max_ratio", 2.0)),
                         stress_examples=int(settings.get("stress_examples", 24)))


def open_audit(settings: dict, saved=None) -> SamplesAudit:
    """The audit of the settings' table: a rounds design's (audit.samples.looks_audit, rounds_audit) when its record
    says so."""
    from .looks_audit import audit_for
    table, reference = load_table(settings, saved)
    return audit_for(table, reference, samples_config(settings))


def input_hashes(settings: dict) -> dict:
    return {Path(settings[k]).name: table_sha256(settings[k]) for k in ("samples", "gold")}


def inputs(audit: SamplesAudit) -> list:
    """The input files a samples claim read (their names: the evidence records them per claim)."""
    return [Path(audit.t.samples_path).name, Path(audit.t.gold_path).name]
