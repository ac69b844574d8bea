#!/usr/bin/env python3
"""Runs the cheat fixtures beside real impls and checks that the harness fails every cheat.

    check_cheats.py BUILD/klab-cheats WORKDIR

klab-cheats is klab with the fixtures of tests/cheats/ registered as impls named cheat_*
of vector_add, sum, argmax and matmul. This script finds them in `klab-cheats list
--json` (a fixture added later is covered with no change here), runs `test` and a few
`bench` runs with the real impls they wrap beside them, and asserts from the JSON:

  - every fixture has a FAIL or ERROR record in `test`, and one in `bench` (its re-check
    of the last timed output, or of a launch on fresh inputs, failed);
  - the fixtures whose failure must come from one harness feature failed for that reason
    (EXPECTED_REASON below), so a fixture cannot pass this check by failing for another;
  - cheat_autotuned fails only on its wrong candidate: its own choice, the fastest, is
    right, so only verifying every candidate catches it;
  - every real impl of the same runs has no FAIL or ERROR and passed at least once.

Exit 0 when all hold, 1 with one line per problem otherwise, 77 when klab-cheats finds no
GPU (CTest's skip).
"""
import json
import re
import subprocess
import sys
from pathlib import Path

OPS = {"01": ["vector_add"], "03": ["sum", "argmax"], "05": ["matmul"]}
# The impls the fixtures wrap (so their failures are the cheating, not the kernel), and
# beside them a real autotuned impl (every candidate verified), a real Triton impl and the
# vendor baselines.
REALS = {
    "vector_add": ["v3_vec16", "triton"],
    "sum": ["v2_warp_shuffle", "cub"],
    "argmax": ["v2_vec_last_block"],
    "matmul": ["v7_warptiling", "v11_mma_pipelined", "v13_mma_autotuned", "cublas"],
}
# Test shapes up to 2^26 elements: every cheat shows on small shapes, and the ones past
# 2^31 (minutes and ~40 GB of host memory each) are gpu.test.<lesson>'s job.
MAX_ELEMS = str(1 << 26)
TIME_CAP = "0.05"
# (fixture, run kind) -> a pattern one of its failing records' messages must match.
EXPECTED_REASON = {
    ("cheat_write_inputs", "test"): r"wrote its input|checksum",
    ("cheat_write_inputs", "bench"): r"wrote its input|checksum",
    ("cheat_replay_first", "bench"): r"fresh",
    ("cheat_replay_by_output", "bench"): r"fresh",
    ("cheat_replay_by_shape", "bench"): r"fresh",
    ("cheat_nondeterministic", "test"): r"not deterministic",
    ("cheat_nondeterministic", "bench"): r"not deterministic",
}
AUTOTUNED = ("matmul", "cheat_autotuned")
AUTOTUNED_WRONG = "wrong_slow"
BAD = ("FAIL", "ERROR")


class Skip(Exception):
    pass


def run(klab, args, json_path, log):
    """Runs klab-cheats with --json; returns its records. Exit 0 or 1 (some check failed,
    as the fixtures must) is a result; 77 is no GPU; anything else is an error."""
    cmd = [str(klab)] + args + ["--json", str(json_path)]
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(p.stdout)
    if p.returncode == 77:
        raise Skip(p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "no GPU")
    if p.returncode not in (0, 1):
        tail = "\n".join(p.stdout.strip().splitlines()[-5:])
        sys.exit(f"check_cheats: `{' '.join(args)}` exited {p.returncode}:\n{tail}")
    data = json.loads(json_path.read_text())
    return data.get("verify", []) + data.get("bench", [])


def fixtures(klab, work):
    """(op, name) of every cheat_* impl of the ops above, from `klab-cheats list --json`."""
    path = work / "list.json"
    p = subprocess.run([str(klab), "list", "--json", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        sys.exit(f"check_cheats: `klab-cheats list` exited {p.returncode}: {p.stdout.strip()[-300:]}")
    found = []
    for lesson in json.loads(path.read_text())["lessons"]:
        for op in lesson["ops"]:
            if lesson["id"] in OPS and op["name"] in OPS[lesson["id"]]:
                found += [(op["name"], im["name"]) for im in op["impls"] if im["name"].startswith("cheat_")]
    return found


def impl_arg(names):
    return ",".join(sorted(set(names)))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    klab, work = Path(sys.argv[1]), Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    cheats = fixtures(klab, work)
    if not cheats:
        sys.exit("check_cheats: klab-cheats lists no cheat_* impl")
    ops = sorted(REALS)

    def of(wanted):
        """The fixtures and real impls of the ops in `wanted`, for --impl."""
        return [n for op, n in cheats if op in wanted] + [n for op in wanted for n in REALS[op]]

    records = {}   # run kind ("test", "bench") -> records
    try:
        records["test"] = run(klab, ["test", "01", "03", "05", "--op", ",".join(ops), "--impl", impl_arg(of(ops)),
                                     "--max-elems", MAX_ELEMS], work / "test.json", work / "test.log")
        bench = []
        # One shape per run (--shape is one shape for every selected op): an odd length for
        # the 1-D ops; n = 0 for argmax, where the answer (-1) is the 0xFF pattern; for
        # matmul, the shape whose cuBLAS bf16 split-K once failed our tolerance.
        common = ["--time-cap", TIME_CAP]
        bench += run(klab, ["bench", "01", "03", "--op", "vector_add,sum", "--impl", impl_arg(of(["vector_add", "sum"])),
                            "--shape", "1000003"] + common, work / "bench-1d.json", work / "bench-1d.log")
        bench += run(klab, ["bench", "03", "--op", "argmax", "--impl", impl_arg(of(["argmax"])), "--shape", "0"] + common,
                     work / "bench-argmax.json", work / "bench-argmax.log")
        bench += run(klab, ["bench", "05", "--op", "matmul", "--impl", impl_arg(of(["matmul"])),
                            "--shape", "1000x1001x999"] + common, work / "bench-matmul.json", work / "bench-matmul.log")
        # bench times the impl's own choice, which is right; the wrong candidate, selected
        # by name, must fail the re-check of its last timed output.
        bench += run(klab, ["bench", "05", "--op", "matmul", "--impl", AUTOTUNED[1], "--candidate", AUTOTUNED_WRONG,
                            "--shape", "1000x1001x999"] + common, work / "bench-candidate.json",
                     work / "bench-candidate.log")
        records["bench"] = bench
    except Skip as e:
        print(f"check_cheats: skipped: {e}")
        return 77

    problems = []
    cheat_set = set(cheats)
    for kind, recs in records.items():
        for op, name in cheats:
            mine = [r for r in recs if r["op"] == op and r["impl"] == name]
            failed = [r for r in mine if r["status"] in BAD]
            if mine and all(r["status"] == "unsupported" for r in mine):
                print(f"  {kind:5} {op}/{name}: not exercised here (unsupported: {mine[0]['message']})")
                continue
            if not failed:
                problems.append(f"{kind}: {op}/{name} passed every check ({len(mine)} records): the harness let it through")
                continue
            want = EXPECTED_REASON.get((name, kind))
            if want and not any(re.search(want, r["message"]) for r in failed):
                problems.append(f"{kind}: {op}/{name} failed, but never for the expected reason /{want}/: "
                                f"{failed[0]['message']}")
            print(f"  {kind:5} {op}/{name}: {len(failed)} of {len(mine)} records failed, e.g. {failed[0]['message'][:120]}")
        for r in recs:
            if (r["op"], r["impl"]) not in cheat_set and r["status"] in BAD:
                problems.append(f"{kind}: real impl {r['op']}/{r['impl']} {r['status']} on {r['problem']}: {r['message']}")

    for op in ops:
        for name in REALS[op]:
            mine = [r for r in records["test"] if r["op"] == op and r["impl"] == name]
            if not mine or (not any(r["status"] == "pass" for r in mine) and
                            not all(r["status"] == "unsupported" for r in mine)):
                problems.append(f"test: real impl {op}/{name} never passed ({len(mine)} records)")

    if AUTOTUNED in cheat_set:
        mine = [r for r in records["test"] if (r["op"], r["impl"]) == AUTOTUNED]
        if mine and "candidate" not in mine[0]:
            problems.append("test: the verify records have no 'candidate' field, so no record says which candidate failed")
        else:
            for r in mine:
                wrong = r.get("candidate") == AUTOTUNED_WRONG
                # The wrong candidate is right where nothing is written (M·N = 0).
                if r["status"] in BAD and not wrong:
                    problems.append(f"test: {AUTOTUNED[1]} failed as candidate '{r.get('candidate')}' "
                                    f"(only {AUTOTUNED_WRONG} is wrong): {r['message']}")
            if not any(r.get("candidate") == AUTOTUNED_WRONG and r["status"] in BAD for r in mine):
                problems.append(f"test: {AUTOTUNED[1]}'s candidate {AUTOTUNED_WRONG} was never verified, or passed")

    for p in problems:
        print("check_cheats: " + p)
    print(f"check_cheats: {len(cheats)} fixtures, {'all caught' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
