#!/usr/bin/env bash
# env_sh.sh MAKE SOURCE_DIR KLAB_DIR
# `klab` by name after the build: runs the Makefile's env-sh target (what `make` runs after
# building) with BUILD_DIR=KLAB_DIR, then, in a clean shell (no profile, a bare PATH), sources
# KLAB_DIR/env.sh and requires `klab` to resolve to KLAB_DIR/klab and `klab list` to run.
set -u
make=$1 src=$2 dir=$3
"$make" -s --no-print-directory -C "$src" env-sh BUILD_DIR="$dir" || { echo "env_sh: make env-sh failed"; exit 1; }
[ -f "$dir/env.sh" ] || { echo "env_sh: $dir/env.sh was not written"; exit 1; }
[ "$(wc -l < "$dir/env.sh")" -eq 1 ] || { echo "env_sh: $dir/env.sh is not one line"; exit 1; }
exec env -i HOME="${HOME:-/tmp}" PATH=/usr/bin:/bin KLAB_PROGRESS_FILE="$dir/env-sh-progress.json" \
  bash --noprofile --norc -c '
    . "$1/env.sh" || exit 1
    found=$(command -v klab) || { echo "env_sh: klab is not on PATH after sourcing $1/env.sh"; exit 1; }
    [ "$found" = "$1/klab" ] || { echo "env_sh: klab on PATH is $found, not $1/klab"; exit 1; }
    klab list' env_sh "$dir"
