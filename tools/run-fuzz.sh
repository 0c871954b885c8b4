#!/usr/bin/env bash
# The fuzz tier: the exploratory twins of the fuzz tests (`test_explore_*`, pytest's `fuzz`
# marker, left out of the default run) under hypothesis's "explore" profile (tests/conftest.py):
# fresh random inputs on every pass, ten times the default tier's budget (times
# OFINDEX_FUZZ_SCALE), failures saved in .hypothesis/ and replayed first on the next pass.
#
#   bash tools/run-fuzz.sh                  # one pass (about 4 minutes on 2 idle cores)
#   bash tools/run-fuzz.sh 60               # passes for 60 minutes, up to the first failure
#   bash tools/run-fuzz.sh -k sidecar       # further arguments go to pytest
#
# Every failure it finds becomes an `@example` of the default tier's test (tests/*/test_fuzz_*.py):
# the falsifying input hypothesis prints is the example's argument. Uses the environment
# tools/run-tests.sh makes (.venv; OFINDEX_VENV to use another).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${OFINDEX_VENV:-.venv}/bin/python
MINUTES=0
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then MINUTES=$1; shift; fi
export OFINDEX_FUZZ_SCALE=${OFINDEX_FUZZ_SCALE:-1}
# the per-test timeout grows with the budget (a hang is still caught)
TIMEOUT=$(awk -v s="$OFINDEX_FUZZ_SCALE" 'BEGIN { print int(600 * (s < 1 ? 1 : s)) }')
end=$(( SECONDS + MINUTES * 60 ))
pass=0
while :; do
  pass=$(( pass + 1 ))
  echo "fuzz pass $pass (OFINDEX_FUZZ_SCALE=$OFINDEX_FUZZ_SCALE)"
  "$PY" -m pytest -m fuzz --hypothesis-profile=explore --timeout="$TIMEOUT" -p no:cacheprovider \
    -q "$@"
  (( SECONDS < end )) || break
done
