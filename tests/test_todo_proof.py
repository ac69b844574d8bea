#!/usr/bin/env python3
"""tools/todo_proof.py on small hand-written exercises: the variants it writes, and every
kind of broken marker it must refuse (a refused pair stops the configure; one let through
would build variants that prove nothing)."""
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "todo_proof", Path(__file__).resolve().parent.parent / "tools" / "todo_proof.py")
tp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tp)

STUB = """\
// Exercise: the learner's header.
#include <x.h>

__global__ void k(float* y, int n) {
  __shared__ float s[32];
  // TODO 1: fill s.
  // TODO 2: barrier.
  // TODO 3: write y.
  (void)y, (void)n;
  // end of TODO 3
}
"""

SOLUTION = """\
// Exercise, SOLVED: a different header.
#include <x.h>

__global__ void k(float* y, int n) {
  __shared__ float s[32];
  // TODO 1: fill s.
  s[threadIdx.x] = threadIdx.x;
  // end of TODO 1
  // TODO 2: barrier.
  __syncthreads();
  // end of TODO 2 (racecheck)
  // TODO 3: write y.
  if (threadIdx.x < n) {
    // mistake off_by_one (check): y[threadIdx.x + 1] = s[31 - threadIdx.x];
    y[threadIdx.x] = s[31 - threadIdx.x];
    // end of TODO 3
    // TODO 3 (continued)
  }
  // end of TODO 3
}
"""


def pair(stub=STUB, solution=SOLUTION):
    d = Path(tempfile.mkdtemp())
    (d / "stub.cu").write_text(stub)
    (d / "solution.cu").write_text(solution)
    return tp.Pair(d / "stub.cu", d / "solution.cu")


class Variants(unittest.TestCase):
    def test_names_and_proofs(self):
        p = pair()
        self.assertEqual([n for n, _ in p.variants()], ["1", "2", "3", "off_by_one"])
        self.assertEqual([p.proof(n) for n, _ in p.variants()], ["check", "racecheck", "check", "check"])

    def test_blank_replaces_the_region_with_the_stubs_text(self):
        out = dict(pair().variants())
        self.assertEqual(out["2"][8:10], ["  // TODO 2: barrier.", "  // TODO 3: write y."])
        self.assertNotIn("  __syncthreads();", out["2"])
        self.assertIn("  s[threadIdx.x] = threadIdx.x;", out["2"])

    def test_blank_removes_the_further_pieces(self):
        v = dict(pair().variants())["3"]
        self.assertEqual(v[-5:], ["  // end of TODO 2 (racecheck)", "  // TODO 3: write y.",
                                  "  (void)y, (void)n;", "  // end of TODO 3", "}"])
        self.assertNotIn("  if (threadIdx.x < n) {", v)
        self.assertNotIn("  }", v)   # the closing brace of the continued piece went with it

    def test_mistake_changes_its_line_only(self):
        p = pair()
        v = dict(p.variants())["off_by_one"]
        diff = [(a, b) for a, b in zip(p.solution, v) if a != b]
        self.assertEqual(diff, [("    y[threadIdx.x] = s[31 - threadIdx.x];", "    y[threadIdx.x + 1] = s[31 - threadIdx.x];")])

    def test_empty_mistake_drops_the_line(self):
        sol = SOLUTION.replace("  __syncthreads();\n", "  // mistake no_sync (racecheck):\n  __syncthreads();\n")
        p = pair(solution=sol)
        v = dict(p.variants())["no_sync"]
        self.assertEqual(len(v), len(p.solution) - 1)
        self.assertNotIn("  __syncthreads();", v)

    def test_generate_writes_each_variant_once(self):
        d = Path(tempfile.mkdtemp())
        p = pair()
        lines = tp.write_variants(p, d)
        self.assertEqual([l.split("|")[:2] for l in lines],
                         [["1", "check"], ["2", "racecheck"], ["3", "check"], ["off_by_one", "check"]])
        f = d / "2" / "stub.cu"   # the learner's file name: the stub's
        stamp = f.stat().st_mtime_ns
        tp.write_variants(p, d)   # unchanged text: not rewritten, so not rebuilt
        self.assertEqual(f.stat().st_mtime_ns, stamp)


PY_STUB = '''"""Exercise: the learner's docstring,
over two lines."""
import triton


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    # TODO 1: the offsets of this program.
    offs = tl.arange(0, BLOCK)
    # end of TODO 1
    # TODO 2: store under a mask.
    # end of TODO 2
'''

PY_SOLUTION = '''"""Exercise, SOLVED: another docstring."""
import triton


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    # TODO 1: the offsets of this program.
    # mistake int32_index (check): offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    # end of TODO 1
    # TODO 2: store under a mask.
    tl.store(x_ptr + offs, 1.0, mask=offs < n)
    # end of TODO 2
'''


class Python(unittest.TestCase):
    """The Triton exercises: the same markers in # comments; the docstrings may differ."""

    def py_pair(self, stub=PY_STUB, solution=PY_SOLUTION):
        d = Path(tempfile.mkdtemp())
        (d / "exercise_triton.py").write_text(stub)
        (d / "solved.py").write_text(solution)
        return tp.Pair(d / "exercise_triton.py", d / "solved.py")

    def test_variants(self):
        v = dict(self.py_pair().variants())
        self.assertEqual(sorted(v), ["1", "2", "int32_index"])
        self.assertIn("    offs = tl.arange(0, BLOCK)", v["1"])
        self.assertNotIn("    tl.store(x_ptr + offs, 1.0, mask=offs < n)", v["2"])
        self.assertIn("    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", v["int32_index"])

    def test_generated_files_keep_the_name_and_comment_syntax(self):
        d = Path(tempfile.mkdtemp())
        tp.write_variants(self.py_pair(), d)
        text = (d / "1" / "exercise_triton.py").read_text()
        self.assertTrue(text.startswith("# Generated by tools/todo_proof.py"))

    def test_code_outside_regions_must_match(self):
        with self.assertRaisesRegex(tp.MarkerError, "outside the TODO regions"):
            self.py_pair(solution=PY_SOLUTION.replace("import triton", "import triton as tr"))

    def test_unnumbered_todo_refused(self):
        with self.assertRaisesRegex(tp.MarkerError, "unnumbered TODO"):
            self.py_pair(stub=PY_STUB.replace("# TODO 2: store", "# TODO: store"))

    def test_languages_must_match(self):
        d = Path(tempfile.mkdtemp())
        (d / "a.py").write_text(PY_STUB)
        (d / "b.cu").write_text(SOLUTION)
        with self.assertRaisesRegex(tp.MarkerError, "not the same language"):
            tp.Pair(d / "a.py", d / "b.cu")


class Refused(unittest.TestCase):
    def refused(self, msg, stub=STUB, solution=SOLUTION):
        with self.assertRaises(tp.MarkerError) as e:
            pair(stub, solution)
        self.assertIn(msg, str(e.exception))

    def test_stub_todo_without_region(self):
        self.refused("no region for the stub's TODO 4",
                     stub=STUB.replace("  // TODO 3: write y.", "  // TODO 4: more.\n  // TODO 3: write y."))

    def test_region_without_stub_todo(self):
        self.refused("no TODO 2 for the solution's region 2", stub=STUB.replace("  // TODO 2: barrier.\n", ""))

    def test_unnumbered_todo(self):
        self.refused("an unnumbered TODO", stub=STUB.replace("  // TODO 2: barrier.", "  // TODO: barrier."))

    def test_region_without_end(self):
        self.refused("TODO 1 has no 'end of TODO 1' line", solution=SOLUTION.replace("  // end of TODO 1\n", ""))

    def test_end_of_another_todo(self):
        self.refused("'end of TODO 2' closes TODO 1",
                     solution=SOLUTION.replace("  // end of TODO 1\n", "  // end of TODO 2\n", 1))

    def test_todo_line_differs(self):
        self.refused("TODO 1's line differs", solution=SOLUTION.replace("// TODO 1: fill s.", "// TODO 1: fill s!"))

    def test_code_outside_the_regions_differs(self):
        self.refused("outside the TODO regions the solution differs",
                     solution=SOLUTION.replace("__shared__ float s[32];", "__shared__ float s[33];"))

    def test_extra_code_outside_the_regions(self):
        self.refused("has lines the other lacks", solution=SOLUTION.replace("}\n", "}\nint extra;\n"))

    def test_blank_that_changes_nothing(self):
        # The stub already holds the barrier: blanking TODO 2 would leave the solution as it is.
        self.refused("variant '2' has the solution's code",
                     stub=STUB.replace("  // TODO 2: barrier.\n", "  // TODO 2: barrier.\n  __syncthreads();\n  // end of TODO 2\n"))

    def test_unknown_proof(self):
        self.refused("unknown proof 'memcheck'",
                     solution=SOLUTION.replace("// end of TODO 2 (racecheck)", "// end of TODO 2 (memcheck)"))

    def test_proof_in_the_stub(self):
        self.refused("a proof belongs on the solution's end line",
                     stub=STUB.replace("  // end of TODO 3", "  // end of TODO 3 (racecheck)"))

    def test_mistake_outside_a_region(self):
        self.refused("must lie inside a TODO region",
                     solution=SOLUTION.replace("  __shared__", "  // mistake big (check): __shared__ float s[64];\n  __shared__"))

    def test_mistake_above_a_comment(self):
        self.refused("must stand right above the code line",
                     solution=SOLUTION.replace("  // TODO 2: barrier.\n", "  // TODO 2: barrier.\n  // mistake x (check): y;\n  // why\n"))

    def test_mistake_that_changes_nothing(self):
        self.refused("leaves its line unchanged",
                     solution=SOLUTION.replace("  // mistake off_by_one (check): y[threadIdx.x + 1]", "  // mistake off_by_one (check): y[threadIdx.x]"))

    def test_continued_before_the_first_piece(self):
        sol = SOLUTION.replace("  // TODO 1: fill s.\n", "  // TODO 1 (continued)\n  int z;\n  // end of TODO 1\n  // TODO 1: fill s.\n")
        self.refused("'TODO 1 (continued)' before the first piece", solution=sol)

    def test_todo_opened_twice(self):
        self.refused("TODO 1 opened a second time",
                     solution=SOLUTION.replace("  // TODO 2: barrier.\n  __syncthreads();\n  // end of TODO 2 (racecheck)\n",
                                               "  // TODO 1: fill s.\n  __syncthreads();\n  // end of TODO 1\n"))


def git_repo(stub=STUB, solution=SOLUTION):
    """A checkout holding the pair as committed; (folder, stub path, solution path)."""
    d = Path(tempfile.mkdtemp())
    (d / "exercise.cu").write_text(stub)
    (d / "solution.cu").write_text(solution)
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(d)] + cmd, check=True, capture_output=True)
    return d, d / "exercise.cu", d / "solution.cu"


# The learner works in the stub's file: a completed TODO 1 and TODO 2 (the solution's code).
LEARNER = STUB.replace("  // TODO 1: fill s.\n", "  // TODO 1: fill s.\n  s[threadIdx.x] = threadIdx.x;\n") \
              .replace("  // TODO 2: barrier.\n", "  // TODO 2: barrier.\n  __syncthreads();\n")


@unittest.skipIf(shutil.which("git") is None, "needs git")
class StubOfRecord(unittest.TestCase):
    def test_the_learners_file_alone_would_be_refused(self):
        with self.assertRaises(tp.MarkerError):
            pair(stub=LEARNER)

    def test_an_edited_exercise_is_proven_with_heads_stub(self):
        d, stub, solution = git_repo()
        stub.write_text(LEARNER)
        p, note = tp.pair_of_record(stub, solution)
        self.assertIn("differs from its stub", note)
        self.assertEqual(p.stub, STUB.splitlines())
        self.assertEqual(dict(p.variants()), dict(pair().variants()))

    def test_an_untouched_exercise_is_its_own_stub(self):
        d, stub, solution = git_repo()
        p, note = tp.pair_of_record(stub, solution)
        self.assertIsNone(note)
        self.assertEqual(p.stub, STUB.splitlines())

    def test_a_developers_new_pair_is_taken_from_the_working_files(self):
        d, stub, solution = git_repo()
        # Both files gain TODO 4: HEAD's stub no longer pairs with the solution.
        stub.write_text(STUB.replace("}\n", "  // TODO 4: return.\n}\n").replace("  // end of TODO 3\n}", "  // end of TODO 3\n  // TODO 4: return.\n}"))
        solution.write_text(SOLUTION.replace("  // end of TODO 3\n}", "  // end of TODO 3\n  // TODO 4: return.\n  return;\n  // end of TODO 4\n}"))
        p, note = tp.pair_of_record(stub, solution)
        self.assertIsNone(note)
        self.assertIn("4", dict(p.variants()))

    def test_committed_work_is_proven_with_the_stub_before_it(self):
        d, stub, solution = git_repo()
        stub.write_text(LEARNER)
        subprocess.run(["git", "-C", str(d), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "my work"],
                       check=True, capture_output=True)
        p, note = tp.pair_of_record(stub, solution)   # HEAD holds the learner's work now
        self.assertIn("differs from its stub", note)
        self.assertEqual(p.stub, STUB.splitlines())

    def test_a_broken_pair_with_history_is_still_refused(self):
        d, stub, solution = git_repo()
        solution.write_text(SOLUTION.replace("  // TODO 2: barrier.\n", "  // TODO 2: a barrier.\n"))
        with self.assertRaisesRegex(tp.MarkerError, "TODO 2's line differs"):
            tp.pair_of_record(stub, solution)

    def test_without_git_an_edited_exercise_has_no_stub_of_record(self):
        d, stub, solution = git_repo()
        shutil.rmtree(d / ".git")
        stub.write_text(LEARNER)
        with self.assertRaises(tp.NoStubOfRecord):
            tp.pair_of_record(stub, solution)
        r = subprocess.run([sys.executable, str(Path(tp.__file__)), "generate", str(stub), str(solution),
                            "--out-dir", str(d / "out")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 3, r.stderr)   # the build goes on without the proofs
        self.assertIn("no git history", r.stderr)

    def test_generate_prints_the_note_and_writes_heads_variants(self):
        d, stub, solution = git_repo()
        stub.write_text(LEARNER)
        r = subprocess.run([sys.executable, str(Path(tp.__file__)), "generate", str(stub), str(solution),
                            "--out-dir", str(d / "out")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("differs from its stub", r.stderr)
        v1 = (d / "out" / "1" / "exercise.cu").read_text()
        self.assertIn("  // TODO 1: fill s.\n  // TODO 2: barrier.", v1)   # HEAD's blank TODO 1


class Lessons(unittest.TestCase):
    def test_every_exercise_of_the_repository(self):
        root = Path(__file__).resolve().parent.parent
        pairs = list(tp.pairs_under(root))
        self.assertGreaterEqual(len(pairs), 5)
        for stub, solution in pairs:
            with self.subTest(lesson=stub.parent.name):
                p, _ = tp.pair_of_record(stub, solution)
                self.assertTrue(any(n.isdigit() for n, _ in p.variants()))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:], verbosity=1)
