#!/usr/bin/env bash
# `make test`: every test target, then the doc tests. A driver's abort in one test never
# loses the others: a test binary that dies of a signal (SIGABRT from a driver, SIGSEGV)
# has each of its tests run again, one process each, and the ones that die or fail are
# named. Exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
log=$(mktemp)
one=$(mktemp)
trap 'rm -f "$log" "$one"' EXIT

$cargo test --all-targets --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# "process didn't exit successfully: `BINARY` (signal: 6, SIGABRT: ...)"
died=$(sed -n "s/.*process didn't exit successfully: \`\([^\` ]*\)[^\`]*\` (signal.*/\1/p" "$log" | sort -u)
for bin in $died; do
  echo "=== ${bin##*/} died of a signal: its tests again, one process each" >&2
  failed=0
  while read -r name; do
    [ -n "$name" ] || continue
    if ! timeout 600 "$bin" --exact "$name" --test-threads=1 >"$one" 2>&1; then
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
