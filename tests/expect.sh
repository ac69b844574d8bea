#!/usr/bin/env bash
# expect.sh RC REGEX COMMAND [ARGS...]
# Passes (exit 0) when COMMAND exits with RC and its output (stdout + stderr) matches the
# extended regex REGEX. A COMMAND that exits 77 (no GPU) makes this exit 77 too, so CTest
# reports a skip, unless 77 is what was expected.
set -u
want=$1; regex=$2; shift 2
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 77 ] && [ "$want" -ne 77 ]; then echo "skipped: no GPU"; exit 77; fi
if [ "$rc" -ne "$want" ]; then echo "expect.sh: wanted exit $want, got $rc"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then echo "expect.sh: output does not match /$regex/"; exit 1; fi
exit 0
