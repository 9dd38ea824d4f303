#!/usr/bin/env bash
# Cargo's runner for the test binaries that scripts/test.sh runs. A binary still running
# after CL_LIFETIME_BINARY_LIMIT seconds (default 1200; a whole row of the suite takes
# under 600 on two cores) has hung: it is stopped. One that hung or died of a signal (a
# driver's abort) is named in CL_LIFETIME_RERUN_LOG, and scripts/test.sh runs its tests
# again, one process each, so that the test that hung or crashed is named and the others
# still report.
limit=${CL_LIFETIME_BINARY_LIMIT:-1200}
timeout --kill-after=15 "$limit" "$@"
rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "=== ${1##*/} was still running after $limit s: stopped as hung" >&2
fi
# 124: timed out; above 128: died of signal rc - 128 (timeout passes it on).
if [ "$rc" -eq 124 ] || [ "$rc" -gt 128 ]; then
  if [ -n "${CL_LIFETIME_RERUN_LOG:-}" ]; then echo "$1" >>"$CL_LIFETIME_RERUN_LOG"; fi
fi
exit "$rc"
