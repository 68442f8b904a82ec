"""world.experiments.samples_coverage: an export the door's random-subset test refuses is reported as refused (the
door writes no interval for it), not counted as covered or missed, and the rest is measured as before."""
import json

import numpy as np

from rlhf.vocab import FAMILIES
from world.experiments.samples_coverage import audit_world, summarise


def _export(d, biased: bool):
    """A hand-made export: two runs x the six families, 300 samples a cell, 40 gold a cell (the lowest-proxy rows
    of one cell when biased, else a random subset), labels = proxy + noise, and its truth."""
    rng = np.random.default_rng(0)
    samples, gold, truth = [], [], {}
    for run in ("reference", "better"):
        for fam in FAMILIES:
            proxy = rng.random(300) * 0.5 + (0.3 if run == "better" else 0.0)
            labels = np.clip(proxy + rng.normal(0, 0.1, 300), 0, 1)
            low = biased and (run, fam) == ("better", FAMILIES[1])
            pick = np.argsort(proxy)[:40] if low else rng.choice(300, 40, replace=False)
            for i in range(300):
                samples.append({"sample_id": f"{run}/{fam}/{i}", "run": run, "family": fam, "prompt_id": f"p{i}",
                                "completion": "a b", "proxy_reward": float(proxy[i])})
            gold += [{"sample_id": f"{run}/{fam}/{i}", "gold": float(labels[i])} for i in pick]
            truth.setdefault(run, {})[fam] = float(np.clip(proxy + 0.0, 0, 1).mean())
    d.mkdir()
    (d / "oracle").mkdir()
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    (d / "gold.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gold))
    (d / "oracle" / "truth.json").write_text(json.dumps({
        "reference": "reference", "world_variant": "hand-made",
        "runs": {r: {"per_family": v, "balanced": float(np.mean(list(v.values())))} for r, v in truth.items()}}))
    return d


def test_an_export_the_door_refuses_is_reported_as_refused(tmp_path):
    honest = audit_world(_export(tmp_path / "honest", biased=False), 40, 0)
    assert "refused" not in honest and len(honest["runs"]) == 2
    biased = audit_world(_export(tmp_path / "biased", biased=True), 40, 0)
    assert biased["runs"] == [] and len(biased["refused"]) == 1
    assert biased["refused"][0].startswith(f"better/{FAMILIES[1]} (KS p")
    s = summarise([honest, biased])
    assert s["refused_exports"] == 1 and s["worlds"] == 2
    assert s["cells"] == 12 and s == {**summarise([honest]), "worlds": 2, "refused_exports": 1}
