#!/usr/bin/env bash
# `make leakcheck`: the tour, the four examples of `make examples`, the traced pipeline of
# `make trace` and the stress test
# under valgrind's memcheck. Any memory error (invalid read or write, use of an
# uninitialised value, bad free) and any block definitely or indirectly lost fails the
# run, except the driver noise listed, with the reason for each entry, in
# scripts/valgrind.supp. Built in release with line tables in target/leakcheck/, apart
# from the normal build; each program's valgrind log (with a ready-made suppression after
# every record it reports) and its own output go to target/leakcheck/NAME.{log,out}.
# ONLY="tour stress" runs a subset; OPS sets the stress test's size (default 20,000,
# as in `make test`).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${CARGO_TARGET_DIR:-target}/leakcheck
supp=scripts/valgrind.supp
cargo=${CARGO:-cargo}
start=$SECONDS

if ! command -v valgrind >/dev/null 2>&1; then
  echo "leakcheck: valgrind not found; install it (Debian/Ubuntu: apt-get install valgrind," >&2
  echo "leakcheck: which \`make setup-all\` does)." >&2
  exit 1
fi

# `trace` is `make trace`'s pipeline: the lifetime trace on, its end callbacks included.
examples=(tour release_sync memory_held free_after_async reallocation trace)
stress_test=stress::threads_sharing_queues_under_injected_failures_match_their_models_and_leak_nothing

# --- Build: release code, with file and line in valgrind's stacks ---
export CARGO_TARGET_DIR=$out CARGO_PROFILE_RELEASE_DEBUG=1
mkdir -p "$out"
rm -f "$out"/*.log "$out"/*.out
example_args=()
for name in "${examples[@]}"; do example_args+=(--example "$name"); done
"$cargo" build --release -q -p cl-lifetime "${example_args[@]}"
# The integration test binary's path, from cargo's JSON messages (its name has a hash).
messages=$("$cargo" test --release -q -p cl-lifetime --test integration --no-run --message-format=json)
integration=$(grep -o '"executable":"[^"]*/integration-[0-9a-f]*"' <<<"$messages" |
  tail -1 | sed 's/^"executable":"//; s/"$//' || true)
if [ -z "$integration" ] || [ ! -x "$integration" ]; then
  echo "leakcheck: the integration test binary was not found after building it" >&2
  exit 1
fi

# A leak or an error exits with this code; anything else non-zero is the program's own.
vg_exit=97
vg=(valgrind --tool=memcheck --leak-check=full
  --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect
  --error-exitcode=$vg_exit --num-callers=40 --track-origins=yes
  --suppressions="$supp" --gen-suppressions=all)
export CL_LIFETIME_KERNELS=$PWD/kernels

# A number from the log, e.g. `definitely lost: 1,234 bytes`; 0 where the log has no such
# line (valgrind prints no leak summary when every block was freed).
from_log() {
  local n
  n=$(sed -n "s/.*$1 \([0-9,]*\) .*/\1/p" "$2" | tail -1 | tr -d ,)
  echo "${n:-0}"
}

# name, then the command; runs it under memcheck, prints one line, and on a failure the
# first records valgrind reported.
run() {
  local name=$1
  shift
  if [ -n "${ONLY:-}" ] && ! grep -qw -- "$name" <<<"$ONLY"; then return; fi
  local log=$out/$name.log output=$out/$name.out t0=$SECONDS rc=0
  "${vg[@]}" --log-file="$log" "$@" >"$output" 2>&1 </dev/null || rc=$?
  local definite indirect errors suppressed records memory_errors result
  definite=$(from_log 'definitely lost:' "$log")
  indirect=$(from_log 'indirectly lost:' "$log")
  errors=$(from_log 'ERROR SUMMARY:' "$log")
  suppressed=$(sed -n 's/.*ERROR SUMMARY: .*(suppressed: \([0-9,]*\) from.*/\1/p' "$log" | tail -1 | tr -d ,)
  # Each leak shown is one error of the summary; the rest are memory errors.
  records=$(grep -c 'are \(definitely\|indirectly\) lost in loss record' "$log" || true)
  memory_errors=$((errors - records))
  if ! grep -q 'ERROR SUMMARY:' "$log"; then
    result="FAILED (valgrind did not finish; see $log)"
  elif [ "$errors" -gt 0 ] || [ "$definite" -gt 0 ] || [ "$indirect" -gt 0 ]; then
    result=FAILED
  elif [ $rc -ne 0 ]; then
    result="FAILED (exit $rc; see $output)"
  elif [ "$name" = stress ] && ! grep -q "isolated body finished: $stress_test" "$output"; then
    result="FAILED (the test's body did not run; see $output)"
  else
    result=ok
  fi
  printf '%-17s %-6s definitely lost %s B, indirectly lost %s B, %s memory errors (%s suppressed), %ss\n' \
    "$name" "${result%% *}" "$definite" "$indirect" "$memory_errors" "${suppressed:-0}" $((SECONDS - t0))
  if [ "$result" != ok ]; then
    status=1
    [ "$result" = FAILED ] || echo "  ${result#FAILED }"
    # The first few records, each with its first frames outside Rust's standard library
    # and runtime; all of them, whole, are in the log.
    awk '/^==[0-9]+== [^ ]/ && (/lost in loss record/ || /^==[0-9]+== (Invalid|Conditional|Use of|Syscall|Mismatched|Source and|Argument|Jump)/) {
           if (++n > 4) { more++; show = 0; next }
           show = 8; print "  " substr($0, index($0, " ") + 1); next }
         show > 0 && /^==[0-9]+==    (at|by) / && (/library\/(alloc|core|std)\// || /(call_once|do_call|catch_unwind)</ || /\(rt\.rs:/) { next }
         show > 0 && /^==[0-9]+==    (at|by) / { print "    " substr($0, index($0, " ") + 4); show--; next }
         { show = 0 }
         END { if (more) print "  and " more " more record(s)" }' "$log"
    echo "  full log: $log"
  fi
}

status=0
for name in "${examples[@]}"; do
  run "$name" "$out/release/examples/$name"
done
# The stress test's body runs in a child process of the test binary (tests/integration/
# common/child.rs); run that child directly: one process, one log, and no parent's time
# limit. Two CPU devices of one platform, as `make stress` uses where there are two.
POCL_DEVICES=${POCL_DEVICES:-pthread pthread} CL_LIFETIME_STRESS_OPS=${OPS:-20000} \
  CL_LIFETIME_ISOLATED=$stress_test \
  run stress "$integration" --exact "$stress_test" --nocapture --test-threads=1

if [ $status -eq 0 ]; then
  echo "leakcheck: ok, no leak and no memory error beyond $supp ($((SECONDS - start))s)"
else
  echo "leakcheck: FAILED; logs in $out/" >&2
fi
exit $status
