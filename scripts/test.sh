#!/usr/bin/env bash
# `make test`: every test target, then the doc tests. A driver's abort or a hang in one
# test never loses the others: a test binary that dies of a signal (SIGABRT from a driver,
# SIGSEGV), or that is still running after CL_LIFETIME_BINARY_LIMIT seconds
# (scripts/test-runner.sh stops it), has each of its tests run again, one process each
# with a time limit, and the ones that die, hang or fail are named. Exits non-zero if
# anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
one=$(mktemp)
rerun=$(mktemp)
trap 'rm -f "$one" "$rerun"' EXIT

# Each test binary runs under scripts/test-runner.sh, which stops one that hangs and names
# one that hung or died in $rerun. Only here: run through a runner, the merged doc tests
# would all share one process.
host=$(rustc -vV | sed -n 's/^host: //p')
runner_var=CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$host")_RUNNER

env "$runner_var=$PWD/scripts/test-runner.sh" CL_LIFETIME_RERUN_LOG="$rerun" \
  $cargo test --all-targets --no-fail-fast
status=$?

# The runner lists every binary that hung or died (cargo sees the runner's exit status,
# never the binary's signal).
for bin in $(sort -u "$rerun"); do
  echo "=== ${bin##*/} died of a signal or hung: its tests again, one process each" >&2
  failed=0
  while read -r name; do
    [ -n "$name" ] || continue
    if ! timeout --kill-after=15 "${CL_LIFETIME_TEST_LIMIT:-300}" "$bin" --exact "$name" --test-threads=1 >"$one" 2>&1; then
      failed=$((failed + 1))
      echo "--- FAILED (exit $?): $name" >&2
      tail -n 30 "$one" >&2
    fi
  done < <("$bin" --list --format terse 2>/dev/null | sed -n 's/: test$//p')
  echo "=== ${bin##*/}: $failed test(s) failed or died when run alone" >&2
done

# The optional features (tests/features.rs): a bytemuck-derived struct and half::f16.
$cargo test --features bytemuck,half --test features || status=1

# TEST_DOC=0 leaves the doc tests out (make test-all runs them once, not per implementation).
if [ "${TEST_DOC:-1}" != 0 ]; then
  $cargo test --doc || status=1
fi
exit "$status"
