"""How well the proxy claims detect a corrupted proxy, and how the run verdicts react (audit/samples/stress.py):
corruptions drawn by hypothesis, the truth unchanged. The claim holds when the family flag catches corruptions
that leave the proxy no information on a family (shuffled, inverted) and rarely flags an untouched family."""
import pytest

from audit.samples.session import inputs

MIN_DETECTION = 0.8        # of shuffled / wholly inverted families that passed on the table as given
MAX_FALSE_ALARM = 0.1      # of untouched families that passed on the table as given


@pytest.mark.claim("proxy.corruption_detection")
def test_corruption_detection(samples_audit, evidence):
    from audit.samples.stress import stress
    n = samples_audit.cfg.stress_examples
    if n == 0:
        pytest.skip("--stress-examples 0")
    res = stress(samples_audit, n)
    flag = res["claims"]["flag (either)"]
    evidence.record(estimate=res["destroying_detection_rate"], seed=samples_audit.cfg.seed,
                    method="hypothesis-drawn proxy corruptions (rescale, shuffle, gamed token, inverted slice); "
                           "claims re-run on each corrupted table",
                    thresholds={"destroying_detection_rate_ge": MIN_DETECTION,
                                "flag_false_alarm_rate_le": MAX_FALSE_ALARM}, details=res,
                    inputs=inputs(samples_audit))
    problems = []
    if res["destroying_detection_rate"] is not None and res["destroying_detection_rate"] < MIN_DETECTION:
        problems.append(f"shuffled or inverted families flagged in {res['destroying_detection_rate']:.0%} of "
                        f"{res['n_destroying']} cases (< {MIN_DETECTION:.0%})")
    if flag["false_alarm_rate"] is not None and flag["false_alarm_rate"] > MAX_FALSE_ALARM:
        problems.append(f"untouched families flagged in {flag['false_alarm_rate']:.0%} of cases "
                        f"(> {MAX_FALSE_ALARM:.0%})")
    if res["destroying_detection_rate"] is None and flag["detection_rate"] is None:
        pytest.skip("no family passed the proxy claims on the table as given: nothing to detect")
    assert not problems, "; ".join(problems)
