#!/usr/bin/env python3
"""Self-test of tools/bench_compare.py: it must pass identical and near runs and fail every
kind of difference it exists to catch.

    bench_compare_selftest.py TOOLS/bench_compare.py FIXTURE.json
"""
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

tool, fixture = sys.argv[1], sys.argv[2]
base = json.loads(Path(fixture).read_text())
measured = [i for i, r in enumerate(base["bench"]) if r["status"] == "pass" and r["median_ms"] > 0]
assert len(measured) >= 2, "the fixture needs two measured rows"
work = Path(tempfile.mkdtemp(prefix="bench-compare-"))
(work / "before.json").write_text(json.dumps(base))


def case(name, mutate, want_rc, want_text=""):
    j = copy.deepcopy(base)
    mutate(j)
    after = work / f"{name}.json"
    after.write_text(json.dumps(j) if isinstance(j, dict) else j)
    p = subprocess.run([sys.executable, tool, str(work / "before.json"), str(after)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    good = p.returncode == want_rc and want_text in p.stdout
    print(f"{'ok  ' if good else 'FAIL'} {name}: exit {p.returncode} (want {want_rc})")
    if not good:
        print(p.stdout)
    return good


def scale(f, i=measured[0]):
    def m(j):
        j["bench"][i]["median_ms"] *= f
    return m


def drop(j):
    del j["bench"][measured[0]]


def fail(j):
    j["bench"][measured[0]]["status"] = "fail"


def throttle(j):
    r = j["bench"][measured[1]]
    r["median_ms"] *= 1.10
    r.setdefault("telemetry", {})["throttled"] = True


results = [
    case("identical", lambda j: None, 0),
    case("within_tol", scale(1.02), 0),
    case("slower", scale(1.05), 1, "SLOWER"),
    case("faster", scale(0.90), 1, "FASTER"),
    case("row_lost", drop, 1, "ONLY BEFORE"),
    case("no_longer_passes", fail, 1, "STATUS"),
    case("throttled_difference", throttle, 0, "throttled"),
]
bad = work / "bad.json"
bad.write_text("{not json")
p = subprocess.run([sys.executable, tool, str(work / "before.json"), str(bad)],
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
results.append(p.returncode == 2)
print(f"{'ok  ' if p.returncode == 2 else 'FAIL'} malformed: exit {p.returncode} (want 2)")
sys.exit(0 if all(results) else 1)
