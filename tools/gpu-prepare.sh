#!/usr/bin/env bash
# Prepares, on this machine, what a call on the GPU machine carries with the working tree
# (it has no network and its image lacks some packages):
#   .deps/      CLI11, nlohmann-json, fmt and GoogleTest: Debian packages downloaded here and
#               unpacked (dpkg -x); tools/gpu-run.sh passes .deps/usr to CMake when present
#   .baseline/  with --baseline COMMIT: that commit's source tree (git archive), for
#               tools/gpu-run.sh's compare phase (BASELINE_DIR=$PWD/.baseline)
# Both folders are git-ignored; name them in the device call's carry list.
#
#   tools/gpu-prepare.sh [--baseline COMMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=""
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) [ $# -ge 2 ] || { echo "gpu-prepare: --baseline needs a commit"; exit 2; }; baseline=$2; shift 2 ;;
    *) echo "gpu-prepare: unknown argument '$1' (usage: tools/gpu-prepare.sh [--baseline COMMIT])"; exit 2 ;;
  esac
done

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
  echo "gpu-prepare: .baseline holds $(git rev-parse --short "$baseline") ($(du -sh .baseline | cut -f1))"
fi
echo "gpu-prepare: carry [\".deps\"${baseline:+, \".baseline\"}] in the device call"
