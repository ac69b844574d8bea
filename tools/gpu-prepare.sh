#!/usr/bin/env bash
# Prepares, on this machine, what a call on the GPU machine carries with the working tree
# (it has no network and its image lacks some packages):
#   .deps/      CLI11, nlohmann-json, fmt and GoogleTest: Debian packages downloaded here and
#               unpacked (dpkg -x); tools/gpu-run.sh passes .deps/usr to CMake when present
#   .baseline/  with --baseline COMMIT: that commit's source tree (git archive), for
#               tools/gpu-run.sh's compare phase (BASELINE_DIR=$PWD/.baseline); with
#               --patch FILE too, FILE applied to it (git apply): e.g.
#               tools/baselines/351c801-fast-checks.patch gives the pre-refactor kernels
#               the host-side checks of 061e395 (references in RefArray, parallel_for that
#               splits long rows, the bench's re-check inputs made once per case), without
#               which its `klab bench 04` ran past 540 s; no kernel or launcher changes
# Both folders are git-ignored; name them in the device call's carry list.
#
#   tools/gpu-prepare.sh [--baseline COMMIT [--patch FILE]]
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=""
patch=""
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) [ $# -ge 2 ] || { echo "gpu-prepare: --baseline needs a commit"; exit 2; }; baseline=$2; shift 2 ;;
    --patch) [ $# -ge 2 ] || { echo "gpu-prepare: --patch needs a file"; exit 2; }; patch=$(realpath -e "$2" 2>/dev/null) \
               || { echo "gpu-prepare: no such patch file: $2"; exit 2; }; shift 2 ;;
    *) echo "gpu-prepare: unknown argument '$1' (usage: tools/gpu-prepare.sh [--baseline COMMIT [--patch FILE]])"; exit 2 ;;
  esac
done
[ -n "$patch" ] && [ -z "$baseline" ] && { echo "gpu-prepare: --patch applies to a --baseline COMMIT; none given"; exit 2; }

if [ ! -d .deps/usr ]; then
  command -v apt-get >/dev/null || { echo "gpu-prepare: needs apt-get (Debian or Ubuntu) to download the packages"; exit 1; }
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9 libgtest-dev googletest >/dev/null 2>&1) \
    || { echo "gpu-prepare: apt-get download failed (is the package index current? apt-get update)"; rm -rf "$tmp"; exit 1; }
  mkdir -p .deps
  for f in "$tmp"/*.deb; do dpkg -x "$f" .deps; done
  rm -rf "$tmp"
  echo "gpu-prepare: .deps ($(du -sh .deps | cut -f1)) holds CLI11, nlohmann-json, fmt and GoogleTest"
else
  echo "gpu-prepare: .deps already there"
fi

if [ -n "$baseline" ]; then
  git rev-parse --verify -q "$baseline^{commit}" >/dev/null || { echo "gpu-prepare: '$baseline' is not a commit"; exit 2; }
  rm -rf .baseline && mkdir .baseline
  git archive "$baseline" | tar -x -C .baseline
  if [ -n "$patch" ]; then
    git apply --directory=.baseline "$patch" || { echo "gpu-prepare: $patch does not apply to $baseline"; rm -rf .baseline; exit 1; }
    echo "gpu-prepare: applied $(basename "$patch") to the baseline"
  fi
  echo "gpu-prepare: .baseline holds $(git rev-parse --short "$baseline") ($(du -sh .baseline | cut -f1))"
fi
echo "gpu-prepare: carry [\".deps\"${baseline:+, \".baseline\"}] in the device call"
