#!/usr/bin/env bash
# todo_sanitizer.sh SANITIZER TOOL WANT KLAB LESSON MAX_ELEMS
# Runs `KLAB test LESSON --impl exercise --max-elems MAX_ELEMS` under compute-sanitizer's
# TOOL (racecheck or synccheck) and judges the tool's summary line (its error count), so
# that klab's own verdict on the variant, pass or fail, does not blur the sanitizer's.
#   WANT=report  passes when the tool reports at least one error (a TODO variant whose
#                missing barrier races without changing the output)
#   WANT=clean   passes when it reports none and every check passes (the solution: the
#                proof above is void if the solution or the harness races too)
# Exits 77 (a skip) without compute-sanitizer or without a GPU.
set -u
san=$1; tool=$2; want=$3; klab=$4; lesson=$5; max_elems=$6
if ! [ -x "$san" ]; then
  san=$(command -v compute-sanitizer) || { echo "skipped: no compute-sanitizer (CUDA toolkit bin/)"; exit 77; }
fi
# No GPU: klab exits 77 before it runs a kernel.
"$klab" test "$lesson" --impl exercise --max-elems 1 > /dev/null 2>&1
[ $? -eq 77 ] && { echo "skipped: no GPU"; exit 77; }

out=$("$san" --tool "$tool" "$klab" test "$lesson" --impl exercise --max-elems "$max_elems" 2>&1); rc=$?
printf '%s\n' "$out" | tail -40
case $tool in
  racecheck) summary=$(printf '%s\n' "$out" | grep -Eo 'RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?' | tail -1) ;;
  *)         summary=$(printf '%s\n' "$out" | grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' | tail -1) ;;
esac
[ -n "$summary" ] || { echo "todo_sanitizer.sh: no $tool summary in the output (exit $rc)"; exit 1; }
errors=$(printf '%s\n' "$summary" | grep -Eo '[0-9]+ errors?' | grep -Eo '[0-9]+')
if [ "$want" = report ]; then
  [ "$errors" -gt 0 ] && { echo "todo_sanitizer.sh: $tool reported $errors error(s), as it must"; exit 0; }
  echo "todo_sanitizer.sh: $tool reported no error: this variant's missing barrier goes unnoticed"; exit 1
fi
[ "$errors" -eq 0 ] && [ $rc -eq 0 ] && { echo "todo_sanitizer.sh: clean"; exit 0; }
echo "todo_sanitizer.sh: wanted no $tool error and exit 0, got $errors error(s) and exit $rc"; exit 1
