#!/usr/bin/env bash
# The learner's way in, walked on a GPU machine as docs/README.md ("Start here") tells it:
# hint, check the stub (it fails), complete the exercise, check it (it passes), see the
# solution, progress, report; then the same for the Triton exercise (hint, solution and
# reset with --triton); then reset. Every
# command and its exit code go to stdout; an exit code other than the one a learner should
# see is a failure (the script's exit is the number of them).
#
#   tools/learner-walk.sh [lesson]     (default 01; run after the build, from the root)
#
# It edits the lesson's exercise files as a learner would (with the completed ones from
# solutions/), so run it in a scratch copy of the tree, never in your own: gpu-run.sh's
# `walk` phase does, on the GPU machine's throw-away copy. The learner is new: a fresh HOME,
# so no progress file and no cached peaks.
set -u
cd "$(dirname "$0")/.."
L=${1:-01}
dir=$(ls -d lessons/"$L"-*/ | head -1); dir=${dir%/}; folder=$(basename "$dir")
export HOME; HOME=$(mktemp -d); unset XDG_DATA_HOME XDG_CACHE_HOME KLAB_PROGRESS_FILE
unset KLAB_NO_REBUILD   # set at all (even to 0), it stops check --triton from rebuilding
bad=0
step() {  # expected exit code, [--says REGEX], command...: the exit code and, when given,
          # a line of its output (stdout and stderr) that the learner must see
  local want=$1; shift
  local says=""; if [ "$1" = "--says" ]; then says=$2; shift 2; fi
  echo; echo "\$ $*"
  local log; log=$(mktemp)
  "$@" > "$log" 2>&1; local rc=$?
  cat "$log"
  if [ "$rc" = "$want" ]; then echo "[exit $rc, as a learner should see]"
  else echo "[exit $rc, expected $want: FINDING]"; bad=$((bad + 1)); fi
  if [ -n "$says" ] && ! grep -Eq -- "$says" "$log"; then
    echo "[no line matching /$says/: FINDING]"; bad=$((bad + 1))
  fi
  rm -f "$log"
}
# `klab reset` restores the stub from git: a throw-away copy without .git gets one commit,
# as a fresh clone would have.
if ! git rev-parse --git-dir > /dev/null 2>&1; then
  git init -q . && git add -A > /dev/null 2>&1 && git -c user.name=walk -c user.email=walk@localhost commit -qm walk
fi
# build/env.sh as `make` writes it (the learner's way to `klab` by name).
make -s env-sh BUILD_DIR=build || { echo "[make env-sh failed: FINDING]"; bad=$((bad + 1)); }
# shellcheck disable=SC1091
source build/env.sh
rebuild() { echo; echo "\$ make   (here: cmake --build build --target klab, as make's build step does)"; cmake --build build --target klab > /dev/null || { echo "[build failed: FINDING]"; bad=$((bad + 1)); }; }

step 0 klab doctor
step 0 --says "^$L " klab list "$L"
step 0 --says "Hint 1 of" klab hint "$L"
step 0 --says "Hint 2 of" klab hint "$L"
step 0 --says "Hint 2 of" klab hint "$L" --all
step 1 klab check "$L"                    # the stub compiles, is graded, and fails
step 1 --says "has not passed yet" klab solution "$L"   # closed before a pass (without --force)
cp "solutions/$folder/exercise.cu" "$dir/exercise.cu"   # the learner completes the TODOs
touch "$dir/exercise.cu"
# Not rebuilt yet: check warns that the binary is older than exercise.cu, and the stub that
# is compiled in still fails.
step 1 --says "newer than this klab binary" klab check "$L"
rebuild
step 0 klab check "$L"                    # passes, recorded in progress
step 0 --says "solutions/$folder/exercise.cu" klab solution "$L"
step 0 klab progress
step 0 klab report --out "$HOME/report.html"
if [ -s "$HOME/report.html" ]; then
  echo "report: $(wc -c < "$HOME/report.html") bytes"; cp "$HOME/report.html" "${OUT:-/tmp}/walk-report.html"
else echo "[no report written: FINDING]"; bad=$((bad + 1)); fi
if [ -f "$dir/exercise_triton.py" ]; then
  step 0 --says "Hint 1 of .*Triton exercise" klab hint "$L" --triton
  step 1 klab check "$L" --triton         # the Triton stub compiles and fails
  step 1 --says "has not passed yet" klab solution "$L" --triton
  cp "solutions/$folder/exercise_triton.py" "$dir/exercise_triton.py"
  touch "$dir/exercise_triton.py"
  step 0 --says "rebuilding" klab check "$L" --triton   # compiles the new file, rebuilds itself
  step 0 --says "[Tt]riton" klab progress
  step 0 --says "solutions/$folder/exercise_triton.py" klab solution "$L" --triton
  step 0 --says "saved your file as" klab reset "$L" --triton --yes
  step 0 git diff --quiet -- "$dir/exercise_triton.py"   # the Triton stub is back
fi
step 0 --says "saved your file as" klab reset "$L" --yes
step 0 git diff --quiet -- "$dir/exercise.cu"   # the stub is back
echo; echo "learner-walk: $bad finding(s)"
exit "$bad"
