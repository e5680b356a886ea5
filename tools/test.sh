#!/usr/bin/env bash
# test.sh — set up, build, and run every test: the unit and op tests, then
# the same tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
# This is README's second command and what CI runs (.ci/run).
#
# Ends with one line "tests: N passed, N failed, N skipped" counted over the
# GoogleTest cases of both passes (skipped = GPU tests on a machine without
# a GPU, tests for a job size this one is not, each with its reason in the
# test log). A skip for a reason tools/expected_skips does not list fails
# the run (tools/check_skips.sh).
set -uo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh || exit 1

status=0
passed=0 failed=0 skipped=0

count_cases() {
  # Sums GoogleTest's XML reports of the tests that just ran.
  local xml
  while IFS= read -r xml; do
    local t f s
    t=$(grep -o '<testsuites [^>]*' "$xml" | grep -o ' tests="[0-9]*"' | grep -o '[0-9]*' | head -1)
    f=$(grep -o '<testsuites [^>]*' "$xml" | grep -o ' failures="[0-9]*"' | grep -o '[0-9]*' | head -1)
    s=$(grep -c 'result="skipped"' "$xml")
    passed=$((passed + ${t:-0} - ${f:-0} - s))
    failed=$((failed + ${f:-0}))
    skipped=$((skipped + s))
  done < <(find -L bazel-testlogs/ -name test.xml -newer "$marker" 2>/dev/null)
}

run_pass() {
  local name=$1
  shift
  echo "== $name: bazel test $*" >&2
  marker=$(mktemp)
  local out
  out=$(mktemp)
  bazel test "$@" 2>&1 | tee "$out"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  count_cases
  # a skip whose reason tools/expected_skips does not list is a failure
  local xmls
  mapfile -t xmls < <(find -L bazel-testlogs/ -name test.xml -newer "$marker" 2>/dev/null)
  if [ ${#xmls[@]} -gt 0 ] && ! bash tools/check_skips.sh "$machine" "${xmls[@]}"; then
    status=1
  fi
  # A target can fail with every GoogleTest case passing (a sanitizer report
  # at exit, a crash, a build error): count each such target as a failure.
  local t
  while IFS= read -r t; do
    local xml="bazel-testlogs/${t#//}/test.xml"
    xml=${xml/://}
    local f=0
    [ -f "$xml" ] && [ "$xml" -nt "$marker" ] &&
      f=$(grep -o '<testsuites [^>]*' "$xml" | grep -o ' failures="[0-9]*"' | grep -o '[0-9]*' | head -1)
    [ "${f:-0}" -eq 0 ] && failed=$((failed + 1))
  done < <(grep -E '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE)' "$out" | awk '{print $1}')
  rm -f "$out"
  rm -f "$marker"
}

# which skips are expected (tools/expected_skips): a GPU's or not
machine=nogpu
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then machine=gpu; fi

# --cache_test_results=no: every test runs, so the counts below are this run's.
run_pass "tests" --cache_test_results=no //...
# The sanitizers' pass leaves out the targets tagged no_sanitizer: reruns
# of a suite that pass already covers (the equality suite on emulated GPUs,
# whose code emul_test and the group suite run under the sanitizers; its
# 8-rank job, whose meshes run the code of the 2- and 4-rank ones).
run_pass "tests under ASan/UBSan" --config=asan --cache_test_results=no \
  --test_tag_filters=-no_sanitizer //tests/...

echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] || status=1
exit $status
