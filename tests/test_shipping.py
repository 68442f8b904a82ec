"""AuditSession.shipped: the passing candidate with the highest estimated quality, the own policy included, with
the reason in words; the reference when nothing passes. (Verdicts and estimates are stubbed: the rule and the
estimators have tests of their own.)"""
from types import SimpleNamespace as NS

from audit.task.session import OWN, AuditConfig, AuditSession


def _session(verdicts: dict, estimates: dict):
    s = AuditSession.__new__(AuditSession)
    s.cfg = AuditConfig()
    s.cache = __import__("pathlib").Path("/nonexistent/cache")
    s.task = NS(runs={n: NS(dir=f"/runs/{n}", config={"kl_coef": 0.1}) for n in verdicts if n != OWN},
                policy_dir="/task/policy")
    s.run_verdict = lambda n: {"passes": verdicts[n]}
    s.quality = lambda n: {"estimate": estimates[n]}
    return s


def test_own_policy_shipped_when_it_passes_and_estimates_highest():
    got = _session({OWN: True, "a": True, "b": False}, {OWN: 0.98, "a": 0.37, "b": 0.5}).shipped()
    assert got["source"] == OWN and "beats every passing task run (a)" in got["why"]
    assert got["config"]["source"] == "own" and set(got["config"]["reward"].values()) == {"rubric"}


def test_a_task_run_shipped_when_the_own_policy_fails_or_estimates_lower():
    fails = _session({OWN: False, "a": True}, {OWN: 0.9, "a": 0.37}).shipped()
    assert fails["source"] == "a" and "fails the release rule" in fails["why"]
    lower = _session({OWN: True, "a": True}, {OWN: 0.3, "a": 0.37}).shipped()
    assert lower["source"] == "a" and "estimates lower" in lower["why"]


def test_reference_when_nothing_passes():
    got = _session({OWN: False, "a": False}, {OWN: 0.9, "a": 0.37}).shipped()
    assert got["source"] == "reference" and got["config"] is None and "no candidate" in got["why"]
