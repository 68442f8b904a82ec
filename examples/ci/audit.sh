#!/usr/bin/env bash
# Gate a release on the audit, in any CI (GitHub Actions: audit.yml beside this file; GitLab, Jenkins: call it).
# Exits with the audit's own code, unchanged: 0 certified (a run passes the release rule: the one to ship),
# 3 the audit ran and nothing is certified, 2 bad input or usage (nothing written), 1 internal failure.
#
#   SAMPLES=samples.parquet GOLD=gold.csv REFERENCE=step-0 examples/ci/audit.sh
#
# Writes $OUT (default audit-out/: summary.md, answer.json, evidence.json, figures/) and $OUT.claims.xml (pytest's
# JUnit XML: one test case per claim, for the CI's test report). PYTHON picks the interpreter (default python).
set -uo pipefail
: "${SAMPLES:?set SAMPLES to the samples table}" "${GOLD:?set GOLD to the gold labels}"
: "${REFERENCE:?set REFERENCE to the run every other run is compared with}"
OUT="${OUT:-audit-out}"
PYTHON="${PYTHON:-python}"

"$PYTHON" -m audit.samples --samples "$SAMPLES" --gold "$GOLD" --reference "$REFERENCE" --out "$OUT" \
    --seed "${SEED:-0}" --junitxml "$OUT.claims.xml" --fail-if-not-certified
rc=$?
case $rc in
  0|3) sed -n '1,/^## The audit/p' "$OUT/summary.md" | sed '$d'    # the decision and how sure, in the job's log
       [ $rc = 0 ] && echo "audit: CERTIFIED" || echo "audit: NOT certified (exit 3)" ;;
  2)   echo "audit: bad input or usage (exit 2): see the error lines above; nothing was written" ;;
  *)   echo "audit: internal failure (exit $rc)" ;;
esac
exit $rc
