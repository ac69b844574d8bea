#!/usr/bin/env python3
"""Every Triton exercise compiles ahead of time: the stub, its solution and each TODO variant.

    triton_exercises.py ROOT PYTHON OUT_DIR

For each lessons/*/exercise_triton.py with a solutions/<folder>/exercise_triton.py, runs
tools/triton_aot.py (with PYTHON, the interpreter that has Triton) on the stub, the
solution and every variant tools/todo_proof.py makes of them (the solution with one TODO
blanked, or with one mistake made), for sm_80 and sm_90, and checks that each produced its
C launcher. A learner's stub must compile (it runs and fails `klab check`), and so must
every variant the TODO proofs run. Exit 0 with a summary line, 1 with one line per failure.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

root, python, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
spec = importlib.util.spec_from_file_location("todo_proof", root / "tools" / "todo_proof.py")
tp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tp)

failures, compiled = [], 0
stubs = sorted(root.glob("lessons/*/exercise_triton.py"))
if not stubs:
    sys.exit(f"triton_exercises: no lessons/*/exercise_triton.py under {root}")
for stub in stubs:
    solution = root / "solutions" / stub.parent.name / stub.name
    if not solution.exists():
        failures.append(f"{stub}: no solution at {solution}")
        continue
    try:
        pair, note = tp.pair_of_record(stub, solution)
    except tp.NoStubOfRecord as e:   # an edited exercise in a copy without git
        print(f"skipped: {e}")
        continue
    if note:
        print(note)
    # The stub of record (git's HEAD text once a learner has edited the file).
    stub_copy = out / stub.parent.name / "stub-of-record" / stub.name
    stub_copy.parent.mkdir(parents=True, exist_ok=True)
    stub_copy.write_text("\n".join(pair.stub) + "\n")
    variants_dir = out / stub.parent.name / "variants"
    files = {"stub": stub_copy, "solution": solution}
    for line in tp.write_variants(pair, variants_dir):
        name, _, path = line.split("|")
        files[f"variant {name}"] = Path(path)
    for what, py in files.items():
        dest = out / stub.parent.name / what.replace(" ", "-")
        r = subprocess.run([python, str(root / "tools" / "triton_aot.py"), str(py), "--out-dir", str(dest)],
                           capture_output=True, text=True)
        if r.returncode != 0 or not (dest / (py.stem + ".c")).exists():
            last = (r.stderr or r.stdout).strip().splitlines()
            failures.append(f"{stub.parent.name} {what}: the AOT compile failed: {last[-1] if last else r.returncode}")
        else:
            compiled += 1
for f in failures:
    print(f)
if failures:
    sys.exit(1)
print(f"triton_exercises: {compiled} files of {len(stubs)} exercise(s) compiled for sm_80 and sm_90")
