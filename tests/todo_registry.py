#!/usr/bin/env python3
"""Each TODO variant's klab registers its lesson exactly as klab-solutions does.

    todo_registry.py KLAB_SOLUTIONS ID=KLAB_TODO_BINARY...

A variant's klab links its own lesson only (cmake/KlabLesson.cmake), so a proof could go
wrong quietly if that link left out part of the lesson: an impl the exercise is compared
with, or the lesson's other exercise (CUDA or Triton). `klab list ID` must print the same
lines from both binaries. No GPU is needed. Exit 0 with a summary line, 1 with one line per
binary that differs.
"""
import os
import subprocess
import sys
import tempfile


def listing(binary, lesson, env):
    r = subprocess.run([binary, "list", lesson], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}"
    return r.stdout.splitlines(), None


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: todo_registry.py KLAB_SOLUTIONS ID=KLAB_TODO_BINARY...")
    solutions, pairs = sys.argv[1], sys.argv[2:]
    problems, expected = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        # The same (absent) progress file for both: "exercise open" reads identically.
        env = dict(os.environ, KLAB_PROGRESS_FILE=os.path.join(tmp, "progress.json"))
        for pair in pairs:
            lesson, sep, binary = pair.partition("=")
            if not sep:
                sys.exit(f"todo_registry: '{pair}' is not ID=BINARY")
            if lesson not in expected:
                expected[lesson], err = listing(solutions, lesson, env)
                if err:
                    sys.exit(f"todo_registry: klab-solutions list {lesson}: {err}")
            got, err = listing(binary, lesson, env)
            name = os.path.basename(binary)
            if err:
                problems.append(f"{name}: list {lesson}: {err}")
                continue
            if got != expected[lesson]:
                diff = [l for l in expected[lesson] if l not in got][:1] or [l for l in got if l not in expected[lesson]][:1]
                problems.append(f"{name}: list {lesson} differs from klab-solutions' (first: '{diff[0].strip() if diff else 'line order'}')")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"todo_registry: {len(pairs)} variant binaries list their lesson as klab-solutions does")
    return 0


if __name__ == "__main__":
    sys.exit(main())
