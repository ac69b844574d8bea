#!/usr/bin/env python3
"""Compares two `klab bench --json` runs row by row: did a change keep every kernel's speed?

    tools/bench_compare.py BEFORE.json AFTER.json [--tol 0.03] [--lesson 04] [--quiet]

Rows are matched by lesson, op, impl, candidate, problem (shape, dtype, variant) and graph
mode. For every row measured in both runs it prints the two medians and after/before; a
row whose ratio lies outside [1 - tol, 1 + tol] is listed as SLOWER or FASTER. A row that
passed in one run and not in the other, or that one run has and the other lacks, is listed
too. A row whose timed window saw a power or thermal clock event (telemetry.throttled) in
either run is marked "throttled": its median is not the kernel's speed at full clock, so a
difference there is reported but does not fail the comparison on its own.

A refactor that must not change any kernel ("every bench row within 3%") runs both trees
in one GPU session and expects exit 0; each row listed otherwise is a difference to explain.

Exit codes: 0 every common row within tol and no row lost; 1 a row outside tol, a row lost
or no longer passing; 2 a usage error (a missing or malformed file, a bad --tol).
"""
import argparse
import json
import math
import sys


def usage_error(msg):
    print(f"bench_compare: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except OSError as e:
        usage_error(f"cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        usage_error(f"{path} is not JSON ({e.msg}, line {e.lineno})")
    if not isinstance(j, dict) or not isinstance(j.get("bench"), list):
        usage_error(f"{path} has no 'bench' list: not the output of `klab bench --json`")
    return j


def key(r):
    p = r.get("problem", {})
    return (r.get("lesson", ""), r.get("op", ""), r.get("impl", ""), r.get("candidate", ""),
            "x".join(str(d) for d in p.get("shape", [])), p.get("dtype", ""), p.get("variant", ""),
            bool(r.get("graph", False)))


def label(k):
    lesson, op, impl, cand, shape, dtype, variant, graph = k
    parts = [f"{lesson} {op} {impl}" + (f"[{cand}]" if cand else ""), shape, dtype]
    if variant:
        parts.append(variant)
    if graph:
        parts.append("graph")
    return " ".join(parts)


def measured(r):
    m = r.get("median_ms", 0)
    return r.get("status") == "pass" and isinstance(m, (int, float)) and m > 0 and math.isfinite(m)


def throttled(r):
    return bool((r.get("telemetry") or {}).get("throttled", False))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--tol", type=float, default=0.03, help="allowed relative difference (default 0.03)")
    ap.add_argument("--lesson", action="append", help="only these lessons (repeatable)")
    ap.add_argument("--quiet", action="store_true", help="print only the rows outside tol")
    a = ap.parse_args()
    if not (0 < a.tol < 1):
        usage_error(f"--tol must lie between 0 and 1, not {a.tol}")

    runs = []
    for path in (a.before, a.after):
        rows = {}
        for r in load(path)["bench"]:
            if a.lesson and r.get("lesson") not in a.lesson:
                continue
            rows.setdefault(key(r), r)   # a row repeated in one file: the first one counts
        runs.append(rows)
    before, after = runs

    problems, notes, ok = [], [], 0
    for k in list(before) + [k for k in after if k not in before]:
        b, n = before.get(k), after.get(k)
        if b is None or n is None:
            side = "before" if n is None else "after"
            r = b if b is not None else n
            if r.get("status") != "unsupported":
                problems.append(f"ONLY {side.upper():6} {label(k)} ({r.get('status')})")
            continue
        if measured(b) != measured(n):
            if b.get("status") == "unsupported" and n.get("status") == "unsupported":
                continue
            problems.append(f"STATUS        {label(k)}: {b.get('status')} -> {n.get('status')}")
            continue
        if not measured(b):
            continue   # unsupported (or failed) in both runs: nothing to compare
        ratio = n["median_ms"] / b["median_ms"]
        line = f"{label(k)}: {b['median_ms']:.4g} -> {n['median_ms']:.4g} ms ({ratio:.3f}x time)"
        hot = throttled(b) or throttled(n)
        if abs(ratio - 1) > a.tol:
            word = "SLOWER" if ratio > 1 else "FASTER"
            if hot:
                notes.append(f"{word:6} (throttled) {line}")
            else:
                problems.append(f"{word:13} {line}")
        else:
            ok += 1
            if not a.quiet:
                print(f"ok            {line}" + (" (throttled)" if hot else ""))
    for line in notes + problems:
        print(line)
    print(f"bench_compare: {ok} rows within {a.tol:.0%}, {len(problems)} outside or lost, "
          f"{len(notes)} throttled differences")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
