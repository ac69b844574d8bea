#!/usr/bin/env bash
# One call on the GPU machine: build, then doctor, test, bench, the exercise proofs and
# (when asked) compute-sanitizer, writing everything under $OUT.
#
#   tools/gpu-run.sh [phases] [-- lessons...]
#   phases: build doctor tour test bench exercises gpuctest compare memcheck racecheck initcheck
#           synccheck (default: build doctor test bench exercises)
#     exercises  the exercise proofs (ctest gpu.exercise*)
#     gpuctest   every GPU ctest but gpu.test.* (which `test` covers): exercise and TODO
#                proofs, the cheat fixtures, the CLI's GPU checks, the cuBLAS bf16 check
#                (GPUCTEST_REGEX: only those whose name matches)
#     tour       the tour ctests (gpu.tour.NN: `klab run NN` within 30 s), not in a lane
#     walk       tools/learner-walk.sh: the learner's path through lesson 01 (hint, check,
#                solution, progress, report, the Triton check, reset); it edits the tree
#     compare    benches the tree in $BASELINE_DIR (built into build-baseline) and this one,
#                lesson by lesson in the same session, and runs tools/bench_compare.py on
#                each pair (BENCH_TOL, default 0.03): for a refactor that must keep speed;
#                COMPARE_LESSONS="04 05" compares only those (two device calls can share it)
#     (BENCH_LESSONS="01 02" likewise benches only those, while test covers the `--` lessons)
#   env:    OUT (default ./out), JOBS (default nproc), KLAB_BENCH_ARGS, KLAB_TEST_ARGS,
#           PHASE_TIMEOUT (seconds per phase, default 540), ONLY_LESSONS (build only these),
#           GPUCTEST_JOBS (ctest -j for gpuctest, default 1),
#           BASELINE_DIR (for compare: a source tree, e.g. `git archive <commit>` unpacked
#           into an ignored folder that the device call carries)
#
#   Longer than one device call allows (10 minutes)? Detach, then wait in later calls:
#   tools/gpu-run.sh --detach [phases] [-- lessons...]   starts the run in the background
#                                                        (its own session: it outlives the call)
#   tools/gpu-run.sh --wait SECONDS                      waits for it at most SECONDS, then
#                                                        copies what it wrote so far to $OUT
#   The machine must stay warm between calls (its idle limit is short): call again at once.
#
#   Lanes: `//` between phases runs what follows it concurrently with the other lanes, after
#   the first lane (normally `build doctor`) has finished; lane N writes under $OUT/lane-N.
#   For correctness phases only (test, exercises, gpuctest, the sanitizers): they share the
#   GPU and its memory but measure nothing, so a device call's minutes go further. A lane
#   that benches is refused: a timing must never share the GPU.
#     tools/gpu-run.sh --detach build doctor // test // gpuctest memcheck
#
# The GPU machine has no network: CMake finds CLI11, nlohmann-json, fmt and GoogleTest in
# the image, or in .deps/ (Debian packages unpacked there and carried with the call).
set -uo pipefail
cd "$(dirname "$0")/.."
DETACHED=/tmp/klab-gpu-run   # a detached run's results, on the GPU machine's disk
if [ "${1:-}" = "--detach" ]; then
  shift
  rm -rf "$DETACHED"; mkdir -p "$DETACHED"
  OUT="$DETACHED" setsid nohup "$0" "$@" > "$DETACHED/run.log" 2>&1 < /dev/null &
  echo "gpu-run: detached (pid $!); results collect in $DETACHED; call: tools/gpu-run.sh --wait SECONDS"
  exit 0
fi
if [ "${1:-}" = "--wait" ]; then
  [ -d "$DETACHED" ] || { echo "gpu-run: no detached run on this machine"; exit 2; }
  end=$((SECONDS + ${2:-540}))
  while [ $SECONDS -lt "$end" ] && [ ! -f "$DETACHED/finished" ]; do sleep 5; done
  cat "$DETACHED/summary.txt" 2>/dev/null
  [ -f "$DETACHED/finished" ] || for f in "$DETACHED"/lane-*/summary.txt; do [ -f "$f" ] && sed "s|^|$(basename "$(dirname "$f")"): |" "$f"; done
  if [ -f "$DETACHED/finished" ]; then echo "gpu-run: finished, exit $(cat "$DETACHED/finished")"
  else echo "gpu-run: still running (tail of its log below); call --wait again at once"; tail -5 "$DETACHED/run.log"; fi
  [ -n "${OUT:-}" ] && tar czf "$OUT/gpu-run.tgz" -C "$DETACHED" . && echo "gpu-run: results in \$OUT/gpu-run.tgz"
  exit 0
fi
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
# Every klab call logs a line per case (the case, the seconds since it started): a phase that
# runs long shows where it is (a bench of lesson 09's backward once ran 1000 s and showed nothing).
export KLAB_PROGRESS_LINES=1
if [[ " $* " == *" // "* ]]; then
  lanes=(); cur=""; tail_args=""; seen=0
  for a in "$@"; do
    if [ $seen -eq 1 ]; then tail_args+=" $(printf %q "$a")"; continue; fi
    case "$a" in
      --) seen=1; tail_args=" --" ;;
      //) lanes+=("$cur"); cur="" ;;
      *) cur+=" $a" ;;
    esac
  done
  lanes+=("$cur")
  for ((i = 1; i < ${#lanes[@]}; i++)); do
    for ph in ${lanes[$i]}; do
      case "$ph" in bench|compare|build|tour|walk) echo "gpu-run: '$ph' cannot run in a concurrent lane (benches and the timed tour must have the GPU to themselves; build goes first)"; echo 2 > "$OUT/finished"; exit 2 ;; esac
    done
  done
  rc=0
  export KLAB_ALL_PHASES="${lanes[*]}"
  if [ -n "${lanes[0]// /}" ]; then ( export KLAB_IN_LANE=1; eval "\"\$0\" ${lanes[0]} $tail_args" ) || rc=1; fi
  if [ $rc -eq 0 ] || [ -x build/klab ]; then
    pids=()
    for ((i = 1; i < ${#lanes[@]}; i++)); do
      lane_out="$OUT/lane-$i"; mkdir -p "$lane_out"
      ( export OUT="$lane_out" KLAB_IN_LANE=1; eval "\"\$0\" ${lanes[$i]} $tail_args" > "$lane_out/run.log" 2>&1 ) &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    for ((i = 1; i < ${#lanes[@]}; i++)); do sed "s/^/lane $i: /" "$OUT/lane-$i/summary.txt" >> "$OUT/summary.txt" 2>/dev/null; done
  fi
  echo "---- summary"; cat "$OUT/summary.txt"
  echo "$rc" > "$OUT/finished"
  exit $rc
fi
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
# What every lane of this run will need (the build in lane 0 builds for the others).
needs() { has "$1" || [[ " ${KLAB_ALL_PHASES:-} " == *" $1 "* ]]; }

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

# What the build phases need: the C++ packages in .deps/ if the image lacks them, the Python
# that has Triton, the lessons to build.
prefix=""
[ -d .deps/usr ] && prefix="-DCMAKE_PREFIX_PATH=$PWD/.deps/usr"
py=python3
[ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
only=$(echo "${ONLY_LESSONS:-}" | tr ' ,' ';;')

# compare's baseline tree builds in the background beside this tree's build (the two share
# the CPUs: nvcc's long files leave cores idle), and compare waits for it.
base_pid=""
baseline_build="cmake -S '${BASELINE_DIR:-}' -B build-baseline -G Ninja -DCMAKE_BUILD_TYPE=Release -DKLAB_PYTHON=$py -DKLAB_LESSONS='$only' -DKLAB_BUILD_TESTS=OFF -DKLAB_BUILD_SOLUTIONS=OFF $prefix && cmake --build build-baseline -j $JOBS --target klab"
if has compare && has build && [ -d "${BASELINE_DIR:-}" ]; then
  bash -c "$baseline_build" > "$OUT/baseline-build.log" 2>&1 &
  base_pid=$!; base_t0=$SECONDS
fi
if has build; then
  # ONLY_LESSONS="04 05" builds just those lessons (a faster iteration); the unit tests are
  # not built here (CI runs them), klab-solutions only when the exercise proof is asked for.
  targets="--target klab"
  needs exercises && targets="--target klab --target klab-solutions"
  needs gpuctest && targets=""   # everything: the TODO variants, klab-cheats, the unit tests
  run_phase build "$OUT/build.log" bash -c "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKLAB_PYTHON=$py -DKLAB_LESSONS='$only' $prefix && cmake --build build -j $JOBS $targets" \
    || { tail -40 "$OUT/build.log"; [ -n "${KLAB_IN_LANE:-}" ] || echo 1 > "$OUT/finished"; exit 1; }
fi

K=./build/klab
if has doctor; then run_phase doctor "$OUT/doctor.txt" $K doctor; fi
# Runs `klab VERB <id>` once per lesson, each under its own time limit; one log, one JSON.
per_lesson() {  # verb, key in the JSON (verify|bench), timeout, extra args...
  local verb=$1 key=$2 limit=$3; shift 3
  local ids=("${lessons[@]}"); [ ${#ids[@]} -eq 0 ] && ids=($($K list | grep -Eo '^[0-9]{2}'))
  [ "$verb" = bench ] && [ -n "${BENCH_LESSONS:-}" ] && read -ra ids <<< "$BENCH_LESSONS"
  for id in "${ids[@]}"; do
    T=$limit run_phase "$verb $id" "$OUT/$verb-$id.part" $K $verb "$id" --json "$OUT/$verb-$id.json" "$@"
    { echo "==== klab $verb $id"; cat "$OUT/$verb-$id.part"; } >> "$OUT/$verb.txt"; rm -f "$OUT/$verb-$id.part"
  done
  python3 - "$OUT" "$verb" "$key" <<'PY' || true
import json, sys, glob, os
out, verb, key = sys.argv[1:4]
path = os.path.join(out, verb + ".json")
merged = {key: []}   # made afresh from the per-lesson files: a second call must not add them twice
# Each lesson's own file stays (its date and run seed are the ones a lesson's bench JSON keeps);
# the merged one is for reading a whole run at once.
for f in sorted(glob.glob(os.path.join(out, verb + "-[0-9][0-9].json"))):
    j = json.load(open(f)); merged.setdefault("device", j.get("device")); merged[key] += j[key]
json.dump(merged, open(path, "w"), indent=1)
PY
}
if has test; then per_lesson test verify "${TEST_TIMEOUT:-$PHASE_TIMEOUT}" ${KLAB_TEST_ARGS:-}; fi
if has bench; then per_lesson bench bench "${BENCH_TIMEOUT:-$PHASE_TIMEOUT}" ${KLAB_BENCH_ARGS:-}; fi
if has exercises; then
  run_phase exercises "$OUT/exercises.txt" ctest --test-dir build -R 'gpu.exercise' --output-on-failure
fi
if has tour; then   # the tour of each lesson (`klab run NN`, a GPU ctest with a 30 s limit), alone on the GPU
  run_phase tour "$OUT/tour.txt" ctest --test-dir build -R '^gpu[.]tour[.]' --output-on-failure
fi
if has gpuctest; then
  T=${GPUCTEST_TIMEOUT:-1800} run_phase gpuctest "$OUT/gpuctest.txt" \
    ctest --test-dir build -L gpu -E '^gpu[.]test[.]' -R "${GPUCTEST_REGEX:-.}" --output-on-failure -j "${GPUCTEST_JOBS:-1}"
fi
if has walk; then
  run_phase walk "$OUT/walk.txt" env OUT="$OUT" tools/learner-walk.sh
fi
if has compare; then
  if [ ! -d "${BASELINE_DIR:-}" ]; then note "phase compare: BASELINE_DIR is not a directory"; failed=1
  else
  if [ -n "$base_pid" ]; then
    wait "$base_pid"; rc=$?
    note "phase compare build: exit $rc, $((SECONDS - base_t0)) s after it started beside the build (log: baseline-build.log)"
    [ $rc -eq 0 ] || failed=1
  else
    run_phase "compare build" "$OUT/baseline-build.log" bash -c "$baseline_build"
  fi
  ids=("${lessons[@]}"); [ ${#ids[@]} -eq 0 ] && ids=($($K list | grep -Eo '^[0-9]{2}'))
  [ -n "${COMPARE_LESSONS:-}" ] && read -ra ids <<< "$COMPARE_LESSONS"
  for id in "${ids[@]}"; do
    # The same lesson back to back, baseline first: both see the same clocks and temperature.
    T=${BENCH_TIMEOUT:-$PHASE_TIMEOUT} run_phase "compare $id before" "$OUT/compare-$id-before.txt" \
      ./build-baseline/klab bench "$id" --json "$OUT/compare-$id-before.json" ${KLAB_BENCH_ARGS:-}
    T=${BENCH_TIMEOUT:-$PHASE_TIMEOUT} run_phase "compare $id after" "$OUT/compare-$id-after.txt" \
      $K bench "$id" --json "$OUT/compare-$id-after.json" ${KLAB_BENCH_ARGS:-}
    run_phase "compare $id" "$OUT/compare-$id.txt" python3 tools/bench_compare.py --quiet \
      --tol "${BENCH_TOL:-0.03}" "$OUT/compare-$id-before.json" "$OUT/compare-$id-after.json"
    tail -1 "$OUT/compare-$id.txt" | tee -a "$summary"
  done
  fi
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
[ -n "${KLAB_IN_LANE:-}" ] || echo "$failed" > "$OUT/finished"   # what a detached run's --wait looks for
exit $failed  # non-zero when any phase failed (the loop above must not decide it)
