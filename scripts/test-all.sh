#!/usr/bin/env bash
# `make test-all`: the whole test suite on every OpenCL implementation installed here:
# PoCL with one CPU device and with two, Mesa rusticl (llvmpipe), Oclgrind (with its API,
# bounds and uninitialized-value checks; any error it reports fails the run), Intel's
# OpenCL CPU runtime (from .opencl/intel), and it and PoCL with every driver treated as unknown.
# ONLY="pocl-1 rusticl" runs a subset; ONLY may also name rusticl-unknown and
# oclgrind-unknown, which run only where named.
set -uo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir=$PWD/$target_dir ;; esac
out=$target_dir/test-all
rm -rf "$out"
mkdir -p "$out"
export CL_LIFETIME_REQUIRE_DEVICE=1
cargo test --all-targets --no-run -q 2>&1 | grep -v '^$' || true

# (clinfo's output is captured first: `grep -q` would end the pipe early under pipefail.)
has_platform() {
  local platforms
  platforms=$(clinfo -l 2>/dev/null || true)
  grep -qi "$1" <<<"$platforms"
}

# Whether ONLY names the run `$1` (the runs that go only where they are named).
named() {
  # Whole names only: "rusticl" does not name rusticl-unknown.
  [[ " $(tr -s '[:space:]' ' ' <<<"${ONLY:-}") " == *" $1 "* ]]
}

# name, then env assignments; runs the unit, integration and harness tests.
run() {
  local name=$1
  shift
  if [ -n "${ONLY:-}" ] && ! named "$name"; then return; fi
  echo "=== $name"
  local log=$out/$name.log
  # Each test that cannot run here says so by name and why (tests/integration/common).
  local not_run_log=$out/$name.not-run
  : >"$not_run_log"
  # Two devices are required only where a run asks for them (pocl-2): Oclgrind's vendor
  # list has one device, whatever the caller's environment requires.
  # Through scripts/test.sh: a test binary that a driver's abort kills has its tests run
  # again one process each, so the row still names every failure.
  env -u CL_LIFETIME_REQUIRE_TWO_DEVICES \
    RUST_TEST_THREADS="${THREADS:-2}" CL_LIFETIME_NOT_RUN_LOG="$not_run_log" "$@" \
    TEST_DOC=0 bash scripts/test.sh >"$log" 2>&1
  local rc=$?
  local passed failed not_run
  # Only the harness's own result lines: tests print counts of their own.
  passed=$(grep '^test result' "$log" | grep -o '[0-9]* passed' | awk '{s += $1} END {print s + 0}')
  failed=$(grep '^test result' "$log" | grep -o '[0-9]* failed' | awk '{s += $1} END {print s + 0}')
  not_run=$(sort -u "$not_run_log" | wc -l)
  if [ -n "${CHECK_LOG:-}" ] && [ -s "$CHECK_LOG" ]; then
    echo "  $name: errors reported by the implementation's checks ($CHECK_LOG):"
    head -20 "$CHECK_LOG" | sed 's/^/    /'
    rc=1
  fi
  # Oclgrind's API check reports on stderr; the error tests provoke such errors on purpose
  # (bad kernels, overlapping copies, waits on failed commands): listed, not failed.
  if grep -q "OpenCL runtime error detected" "$log"; then
    echo "  $name: API errors reported (function, error, count), provoked by the error tests:"
    grep -A2 "OpenCL runtime error detected" "$log" | grep -E "Function:|Error:" |
      sed 's/^[[:space:]]*//' | paste - - | sort | uniq -c | sort -rn | sed 's/^/    /'
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$passed" "$failed" "$not_run" \
    "$([ $rc -eq 0 ] && echo ok || echo FAILED)" >>"$out/summary.tsv"
  if [ $rc -ne 0 ]; then
    grep -E '^test .* FAILED|panicked at|^failures:|died of a signal|^--- FAILED' "$log" | head -20 | sed 's/^/  /'
    status=1
  fi
}

status=0
run pocl-1 POCL_DEVICES=pthread CL_LIFETIME_DEVICE=pocl
run pocl-2 POCL_DEVICES="pthread pthread" CL_LIFETIME_DEVICE=pocl CL_LIFETIME_REQUIRE_TWO_DEVICES=1
if RUSTICL_ENABLE=llvmpipe has_platform rusticl; then
  run rusticl RUSTICL_ENABLE=llvmpipe CL_LIFETIME_DEVICE=rusticl
  named rusticl-unknown &&
    run rusticl-unknown RUSTICL_ENABLE=llvmpipe CL_LIFETIME_DEVICE=rusticl CL_LIFETIME_DRIVER=unknown
else
  echo "=== rusticl: not installed (apt-get install mesa-opencl-icd); not run" | tee -a "$out/summary.tsv"
fi
icd=/usr/lib/oclgrind/liboclgrind-rt-icd.so
if [ -e "$icd" ]; then
  vendors=$out/oclgrind-vendors
  mkdir -p "$vendors"
  echo "$icd" >"$vendors/oclgrind.icd"
  CHECK_LOG=$out/oclgrind-checks.log
  : >"$CHECK_LOG"
  # One test at a time: Oclgrind's runtime keeps its queues' state in globals, unlocked.
  THREADS=1 CHECK_LOG=$CHECK_LOG run oclgrind OCL_ICD_VENDORS="$vendors" CL_LIFETIME_DEVICE=oclgrind \
    OCLGRIND_CHECK_API=1 OCLGRIND_UNINITIALIZED=1 OCLGRIND_LOG="$CHECK_LOG"
  # With every device treated as unknown: only where ONLY names it (it takes as long again).
  if named oclgrind-unknown; then
    : >"$CHECK_LOG"
    THREADS=1 CHECK_LOG=$CHECK_LOG run oclgrind-unknown OCL_ICD_VENDORS="$vendors" \
      CL_LIFETIME_DEVICE=oclgrind CL_LIFETIME_DRIVER=unknown \
      OCLGRIND_CHECK_API=1 OCLGRIND_UNINITIALIZED=1 OCLGRIND_LOG="$CHECK_LOG"
  fi
else
  echo "=== oclgrind: not installed (apt-get install oclgrind); not run" | tee -a "$out/summary.tsv"
fi

# Intel's OpenCL CPU runtime, a closed vendor driver, from the folder `make setup-all` fills
# (scripts/setup-intel.sh): registered only for this run, never system-wide.
intel=$PWD/.opencl/intel
if [ -e "$intel/lib/libintelocl.so" ]; then
  run intel OCL_ICD_VENDORS="$intel/vendors" LD_LIBRARY_PATH="$intel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    CL_LIFETIME_DEVICE=intel
  # And with every device treated as unknown: the probe of the workarounds Intel's runtime
  # needs still runs (a driver never seen would be measured so), every other value is careful.
  run intel-unknown OCL_ICD_VENDORS="$intel/vendors" \
    LD_LIBRARY_PATH="$intel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CL_LIFETIME_DEVICE=intel \
    CL_LIFETIME_DRIVER=unknown
else
  echo "=== intel: not installed (make setup-all installs it from PyPI; needs python3 with pip); not run" |
    tee -a "$out/summary.tsv"
fi
# PoCL again, with every device treated as unknown (CL_LIFETIME_DRIVER=unknown): the careful
# path that a driver the library cannot measure gets.
run pocl-unknown POCL_DEVICES="pthread pthread" CL_LIFETIME_DEVICE=pocl CL_LIFETIME_DRIVER=unknown \
  CL_LIFETIME_REQUIRE_TWO_DEVICES=1

# PoCL made to act as drivers that cannot run here, as their own sources say they do
# (scripts/cl-emulate.c, built by `make emulate`; each renames the platform, so the library
# sees a vendor it was never tuned for): current Mesa rusticl (a queue fails every command
# after its first failure), AMD (the out-of-order flag dropped), Intel's GPU runtime (a
# command behind a failed event never runs), Intel's CPU runtime (a command failed by a
# dependency reads CL_COMPLETE), profiling of a failed command that returns zeros, and a
# copy between a sub-buffer and overlapping bytes of its buffer that runs (Intel, NVIDIA).
pocl_icd=$(ls /etc/OpenCL/vendors/*pocl*.icd 2>/dev/null | head -1)
if [ -n "$pocl_icd" ] && make -s emulate >/dev/null; then
  for profile in mesa amd intel-gpu intel-cpu failed-profiling unchecked-overlap; do
    run emulated-$profile OCL_ICD_VENDORS="$pocl_icd" POCL_DEVICES="pthread pthread" \
      CL_EMULATE=$profile LD_LIBRARY_PATH="$target_dir/emulate${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
else
  echo "=== emulated: needs PoCL's ICD and a C compiler (make emulate); not run" | tee -a "$out/summary.tsv"
fi

echo
echo "Tests that did not run, with the reason they give (passed counts them as passed):"
for f in "$out"/*.not-run; do
  [ -s "$f" ] && sort -u "$f" | sed 's/^/  /'
done
echo
echo "implementation	passed	failed	not run	result"
grep -v '^===' "$out/summary.tsv" 2>/dev/null
exit $status
