#!/usr/bin/env bash
# check_skips.sh nogpu|gpu XML... — fails (exit 1), naming each one, on a
# skipped GoogleTest case whose reason tools/expected_skips does not list
# for this kind of machine; prints how many skips it checked.
set -uo pipefail
here=$(dirname "$0")
where=$1
shift
case "$where" in nogpu | gpu) ;; *)
  echo "check_skips: $where: expected nogpu or gpu" >&2
  exit 2
  ;;
esac
gawk -v where="$where" '
  FNR == 1 && FILENAME ~ /expected_skips$/ { listing = 1 }
  FNR == 1 && FILENAME !~ /expected_skips$/ { listing = 0 }
  listing {
    if ($0 ~ /^#/ || NF < 2) next
    if ($1 == where || $1 == "any") { r = $0; sub(/^[a-z]+ +/, "", r); ok[++n] = r }
    next
  }
  /<testcase / { match($0, /name="[^"]*"/); name = substr($0, RSTART + 6, RLENGTH - 7)
                 match($0, /classname="[^"]*"/); cls = substr($0, RSTART + 11, RLENGTH - 12) }
  /<skipped message="/ {
    match($0, /message="[^"]*"/)
    msg = substr($0, RSTART + 9, RLENGTH - 10)
    sub(/^[^&]*&#x0A;/, "", msg) # the file:line it was skipped at
    gsub(/&#x0A;/, " ", msg); gsub(/&quot;/, "\"", msg); gsub(/&apos;/, "\x27", msg)
    gsub(/&lt;/, "<", msg); gsub(/&gt;/, ">", msg); gsub(/&amp;/, "\\&", msg)
    checked++
    good = 0
    for (i = 1; i <= n; i++) if (index(msg, ok[i]) == 1) { good = 1; break }
    if (!good) { bad++; printf "unexpected skip: %s.%s (%s): %s\n", cls, name, FILENAME, msg }
  }
  END {
    printf "check_skips: %d skip(s) checked on a %s machine, %d unexpected\n", checked, where, bad
    exit bad > 0
  }
' "$here/expected_skips" "$@"
