#!/usr/bin/env bash
# cli_fuzz.sh TABLE ROW KLAB — runs row ROW of the malformed-input table TABLE (cli_fuzz.table
# says how a row is written) against the binary KLAB. Passes when KLAB rejects the input as
# a usage error must be rejected: exit 2, and exactly one line of output (stdout and stderr
# together) that starts "klab: error: " and matches the row's regex. A crash, a stack trace,
# "terminate called", CLI11's help text, a second line or any other exit code fails.
set -u
table=$1 row=$2 klab=$3

# Each row runs in a scratch directory of its own, with the fixtures rows may name:
# $SCRATCH/corrupt.json (not JSON), $SCRATCH/empty.json, $SCRATCH/dir/ (a directory).
SCRATCH=$(mktemp -d) || exit 1
trap 'rm -rf "$SCRATCH"' EXIT
printf '{"format": "klab-progress", "exercises": {' >"$SCRATCH/corrupt.json"
: >"$SCRATCH/empty.json"
mkdir "$SCRATCH/dir"

line=$(grep -E "^${row}[[:space:]]" "$table")
if [ "$(printf '%s\n' "$line" | grep -c .)" -ne 1 ]; then echo "cli_fuzz.sh: no single row '$row' in $table"; exit 1; fi
# A row is shell words (quoted as in a shell; $SCRATCH expands): the name, the regex, then
# VAR=value settings and klab's arguments.
eval "words=( $line )" || { echo "cli_fuzz.sh: row '$row' is not shell words"; exit 1; }
regex=${words[1]}
envs=(KLAB_PROGRESS_FILE="$SCRATCH/progress.json")  # never the user's own progress file
i=2
while [ "$i" -lt "${#words[@]}" ] && [[ ${words[$i]} =~ ^[A-Z_][A-Z0-9_]*= ]]; do envs+=("${words[$i]}"); i=$((i + 1)); done
args=("${words[@]:$i}")

out=$(cd "$SCRATCH" && env "${envs[@]}" "$klab" "${args[@]}" 2>&1); rc=$?
printf '%s\n' "$out"
fail() { echo "cli_fuzz.sh: row '$row': $1"; exit 1; }
[ "$rc" -eq 2 ] || fail "wanted exit 2, got $rc"
[ -n "$out" ] || fail "no output"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "wanted one line of output"
[[ $out == "klab: error: "* ]] || fail "the line does not start with 'klab: error: '"
printf '%s\n' "$out" | grep -Eq -- "$regex" || fail "the line does not match /$regex/"
exit 0
