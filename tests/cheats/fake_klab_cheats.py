#!/usr/bin/env python3
"""A stand-in for klab-cheats, so that check_cheats.py can be tested without a GPU.

    FAKE_CHEATS_MODE=<mode> fake_klab_cheats.py list|test|bench ... --json FILE

It answers `list --json` with the fixtures klab-cheats registers, and `test`/`bench` with
one record per selected (op, impl) (and per candidate of cheat_autotuned in `test`), as
the harness writes them. In mode `control` the records are what a correct harness gives:
every fixture failed, for the reason the checker expects, and every real impl passed.
Each other mode breaks one thing, and check_cheats.py must then exit 1 (the selftest
rows in tests/CMakeLists.txt).
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from check_cheats import AUTOTUNED, AUTOTUNED_WRONG, REALS  # noqa: E402

WRAPPERS = ["cheat_write_nothing", "cheat_half", "cheat_skip_tail", "cheat_write_inputs", "cheat_replay_first",
            "cheat_replay_by_output", "cheat_replay_by_shape", "cheat_first_calls"]
FIXTURES = {
    "vector_add": WRAPPERS + ["cheat_triton_tail"],
    "sum": WRAPPERS,
    "argmax": ["cheat_poison_sniffer"],
    "matmul": [AUTOTUNED[1]],
}
LESSON = {"vector_add": "01", "sum": "03", "argmax": "03", "matmul": "05"}
MODES = ["control", "cheat_passes_test", "cheat_passes_bench", "wrong_reason", "real_fails", "real_never_passes",
         "right_candidate_fails", "no_candidate_field", "usage_error"]


def option(args, name, default=""):
    return args[args.index(name) + 1] if name in args else default


def failure(impl, verb):
    """The message a correct harness gives a fixture."""
    if impl == "cheat_write_inputs":
        return "the impl wrote its input 'x' (inputs are read-only; its checksum changed)"
    if verb == "bench" and impl.startswith("cheat_replay"):
        return "wrong on fresh inputs after timing (seed 7; a cached or replayed result?): output z: 9 of 9 off"
    return "output z: 3 of 7 elements off"


def record(op, impl, status, message="", candidate=None):
    r = {"lesson": LESSON[op], "op": op, "impl": impl, "kind": "cuda",
         "problem": {"shape": [7], "dtype": "f32", "variant": ""}, "status": status, "message": message}
    if candidate is not None:
        r["candidate"] = candidate
    return r


def records(mode, verb, args):
    ops = option(args, "--op").split(",")
    impls = option(args, "--impl").split(",")
    forced = option(args, "--candidate")
    out = []
    for op in ops:
        for impl in impls:
            if impl in REALS[op]:
                if mode == "real_never_passes" and impl == "v2_warp_shuffle":
                    continue
                failed = mode == "real_fails" and impl == "v3_vec16"
                out += [record(op, impl, "pass", candidate=""),
                        record(op, impl, "FAIL" if failed else "pass", "output z: 1 of 7 off" if failed else "",
                               candidate="")]
            elif impl in FIXTURES[op]:
                out += fixture_records(mode, verb, op, impl, forced)
    if mode == "no_candidate_field":
        for r in out:
            r.pop("candidate", None)
    return out


def fixture_records(mode, verb, op, impl, forced):
    if (op, impl) == AUTOTUNED:
        if verb == "bench":
            wrong = forced == AUTOTUNED_WRONG
            return [record(op, impl, "FAIL" if wrong else "pass", "last timed output wrong: output C: 1 of 1002001 off"
                           if wrong else "", candidate=forced)]
        bad = "exact_fast" if mode == "right_candidate_fails" else AUTOTUNED_WRONG
        return [record(op, impl, "FAIL" if c == bad else "pass", "output C: 1 of 56 off" if c == bad else "", candidate=c)
                for c in ("", "exact_fast", AUTOTUNED_WRONG)]
    passes = (mode == "cheat_passes_test" and verb == "test" and impl == "cheat_half") or \
             (mode == "cheat_passes_bench" and verb == "bench" and impl == "cheat_replay_first")
    message = failure(impl, verb)
    if mode == "wrong_reason" and impl == "cheat_write_inputs":
        message = "output z: 3 of 7 elements off"
    return [record(op, impl, "pass", candidate=""),
            record(op, impl, "pass" if passes else "FAIL", "" if passes else message, candidate="")]


def main():
    mode = os.environ.get("FAKE_CHEATS_MODE", "control")
    if mode not in MODES:
        sys.exit(f"fake_klab_cheats: unknown FAKE_CHEATS_MODE {mode}")
    args = sys.argv[1:]
    verb = args[0]
    path = Path(option(args, "--json"))
    if verb == "list":
        lessons = {}
        for op, fixtures in FIXTURES.items():
            impls = [{"name": n, "kind": "cuda", "summary": ""} for n in REALS[op] + fixtures]
            lessons.setdefault(LESSON[op], []).append({"name": op, "impls": impls})
        path.write_text(json.dumps({"klab": 1, "lessons": [{"id": k, "ops": v} for k, v in lessons.items()]}))
        return 0
    if mode == "usage_error":
        print("klab: error: unknown option --candidate")
        return 2
    recs = records(mode, verb, args)
    path.write_text(json.dumps({"klab": 1, "verify" if verb == "test" else "bench": recs}))
    return 1 if any(r["status"] in ("FAIL", "ERROR") for r in recs) else 0


if __name__ == "__main__":
    sys.exit(main())
