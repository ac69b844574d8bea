#!/usr/bin/env bash
# One call on the GPU machine: build, then doctor, test, bench, the exercise proofs and
# (when asked) compute-sanitizer, writing everything under $OUT.
#
#   tools/gpu-run.sh [phases] [-- lessons...]
#   phases: build doctor test bench exercises memcheck racecheck initcheck synccheck
#           (default: build doctor test bench exercises)
#   env:    OUT (default ./out), JOBS (default nproc), KLAB_BENCH_ARGS, KLAB_TEST_ARGS,
#           PHASE_TIMEOUT (seconds per phase, default 540), ONLY_LESSONS (build only these)
#
# The GPU machine has no network: CMake finds CLI11, nlohmann-json, fmt and GoogleTest in
# the image, or in .deps/ (Debian packages unpacked there and carried with the call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
JOBS=${JOBS:-$(nproc)}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-540}

phases=(); lessons=()
seen_dashes=0
for a in "$@"; do
  if [ "$a" = "--" ]; then seen_dashes=1; continue; fi
  if [ $seen_dashes -eq 1 ]; then lessons+=("$a"); else phases+=("$a"); fi
done
[ ${#phases[@]} -eq 0 ] && phases=(build doctor test bench exercises)
has() { local p; for p in "${phases[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }

failed=0
summary="$OUT/summary.txt"   # appended to: several calls of this script may share one $OUT
note() { echo "$*" | tee -a "$summary"; }
run_phase() {  # name, log file, command...
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  timeout "${T:-$PHASE_TIMEOUT}" "$@" > "$log" 2>&1
  local rc=$?
  note "phase $name: exit $rc in $((SECONDS - t0)) s (log: $(basename "$log"))"
  [ $rc -eq 0 ] || failed=1
  return $rc
}

if has build; then
  prefix=""
  [ -d .deps/usr ] && prefix="-DCMAKE_PREFIX_PATH=$PWD/.deps/usr"
  py=python3
  [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
  # ONLY_LESSONS="04 05" builds just those lessons (a faster iteration); the unit tests are
  # not built here (CI runs them), klab-solutions only when the exercise proof is asked for.
  only=$(echo "${ONLY_LESSONS:-}" | tr ' ,' ';;')
  targets="--target klab"
  has exercises && targets="--target klab --target klab-solutions"
  run_phase build "$OUT/build.log" bash -c "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKLAB_PYTHON=$py -DKLAB_LESSONS='$only' $prefix && cmake --build build -j $JOBS $targets" \
    || { tail -40 "$OUT/build.log"; exit 1; }
fi

K=./build/klab
if has doctor; then run_phase doctor "$OUT/doctor.txt" $K doctor; fi
# Runs `klab VERB <id>` once per lesson, each under its own time limit; one log, one JSON.
per_lesson() {  # verb, key in the JSON (verify|bench), timeout, extra args...
  local verb=$1 key=$2 limit=$3; shift 3
  local ids=("${lessons[@]}"); [ ${#ids[@]} -eq 0 ] && ids=($($K list | grep -Eo '^[0-9]{2}'))
  for id in "${ids[@]}"; do
    T=$limit run_phase "$verb $id" "$OUT/$verb-$id.part" $K $verb "$id" --json "$OUT/$verb-$id.json" "$@"
    { echo "==== klab $verb $id"; cat "$OUT/$verb-$id.part"; } >> "$OUT/$verb.txt"; rm -f "$OUT/$verb-$id.part"
  done
  python3 - "$OUT" "$verb" "$key" <<'PY' || true
import json, sys, glob, os
out, verb, key = sys.argv[1:4]
path = os.path.join(out, verb + ".json")
merged = json.load(open(path)) if os.path.exists(path) else {key: []}
for f in sorted(glob.glob(os.path.join(out, verb + "-*.json"))):
    j = json.load(open(f)); merged.setdefault("device", j.get("device")); merged[key] += j[key]; os.remove(f)
json.dump(merged, open(path, "w"), indent=1)
PY
}
if has test; then per_lesson test verify "${TEST_TIMEOUT:-$PHASE_TIMEOUT}" ${KLAB_TEST_ARGS:-}; fi
if has bench; then per_lesson bench bench "${BENCH_TIMEOUT:-$PHASE_TIMEOUT}" ${KLAB_BENCH_ARGS:-}; fi
if has exercises; then
  run_phase exercises "$OUT/exercises.txt" ctest --test-dir build -R 'gpu.exercise' --output-on-failure
fi
for tool in memcheck racecheck initcheck synccheck; do
  if has $tool; then
    # Small shapes only: the sanitizer slows kernels down by orders of magnitude.
    run_phase $tool "$OUT/$tool.txt" compute-sanitizer --tool $tool --error-exitcode 9 \
      $K test "${lessons[@]}" --max-elems 1100000 ${KLAB_TEST_ARGS:-}
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$tool.txt" | tail -2 | tee -a "$summary"
  fi
done
echo "---- summary"; cat "$summary"
for f in test.txt bench.txt; do [ -f "$OUT/$f" ] && { echo "---- tail $f"; tail -25 "$OUT/$f"; }; done
exit $failed  # non-zero when any phase failed (the loop above must not decide it)
