#!/usr/bin/env python3
"""Every TODO of every exercise proven to matter: the solution with one TODO blanked.

    todo_proof.py check [--root DIR]
        every lessons/*/exercise.cu, exercise_<tag>.cu and exercise_triton.py with its solution,
        solutions/<folder>/<same name>: the markers of the two files correspond one to one
        (exit 1 and one line per defect if not)
    todo_proof.py generate STUB SOLUTION --out-dir DIR
        checks the pair (the stub of record, pair_of_record: once a learner has edited STUB,
        its committed text; exit 3 when none can be found, in a copy without git history),
        writes DIR/<variant>/<the stub's file name> for each variant (rewritten only when
        its text changes, so a configure does not rebuild them) and prints one line per
        variant: NAME|PROOF|PATH

The build (cmake/KlabLesson.cmake) compiles each variant into klab-todo-<lesson>-<NAME>,
and tests/CMakeLists.txt expects it to fail its PROOF.

Markers (both files; in a Python file, the Triton exercises, # stands for // and a module
docstring belongs to the header that the two files may word differently):

    // TODO k: what to write                the stub's TODO line opens region k; the
                                            solution opens region k with the same line
    // end of TODO k                        closes it. In the stub it may be left out: the
                                            region is then the TODO line and the comment
                                            lines right below it
    // end of TODO k (PROOF)                solution only: how blanking k is proven (below)
    // TODO k (continued)                   solution only: a further piece of region k,
                                            closed by its own end line (code of region k
                                            that encloses another region's)
    // mistake NAME (PROOF): TEXT           solution only, inside a region: in variant
                                            NAME the next line becomes TEXT (the line is
                                            dropped when TEXT is empty); a mistake the
                                            lesson teaches, beside the blanked TODOs

Variant k (blank TODO k): the solution with region k's first piece replaced by the stub's
region k and its other pieces removed. Outside the regions, the stub and the solution must
hold the same code and comments (blank lines and the header comment aside), so that a
variant is exactly "the learner's file with every TODO done but k". Every TODO of the stub
must be numbered, so that none escapes the proof.

PROOF, how `klab` must reject the variant:
    check           `klab check <lesson>` fails (the default)
    racecheck       compute-sanitizer --tool racecheck reports a hazard: a missing barrier
    synccheck       whose race need not show in the output (tests/todo_sanitizer.sh)
    compile:NAME    the variant does not compile: identifier NAME is undefined (a TODO that
                    declares what the others use)
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

PROOF = re.compile(r"^(check|racecheck|synccheck|compile:[A-Za-z_]\w*)$")
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class MarkerError(Exception):
    pass


class Syntax:
    """The markers in one language's line comments: // in CUDA and C++, # in Python (the
    Triton exercises, exercise_triton.py)."""

    def __init__(self, c):
        q = re.escape(c)
        self.comment = c
        self.begin = re.compile(rf"^\s*{q}\s*TODO\s+(\d+)\b(.*)$")
        self.end = re.compile(rf"^\s*{q}\s*end of TODO\s+(\d+)\s*(?:\((.*)\))?\s*$")
        self.mistake = re.compile(rf"^(\s*){q}\s*mistake\s+(\S+)\s+\(([^)]*)\):\s?(.*)$")
        self.unnumbered = re.compile(rf"{q}\s*TODO\b(?!\s+\d)")   # "TODO: ...", "TODO (hints)"

    def is_comment(self, line):
        return line.strip().startswith(self.comment)


CPP, PYTHON = Syntax("//"), Syntax("#")


def syntax_of(path):
    return PYTHON if Path(path).suffix == ".py" else CPP


class Piece:
    def __init__(self, k, begin, end, proof=None):
        self.k, self.begin, self.end, self.proof = k, begin, end, proof   # lines begin..end


def parse(lines, path, solution):
    """Regions of a file: {k: [Piece, ...]} (lines are 0-based, ends inclusive)."""
    syn = syntax_of(path)
    BEGIN, END, UNNUMBERED, is_comment = syn.begin, syn.end, syn.unnumbered, syn.is_comment
    regions = {}
    errors = [f"{path}:{n + 1}: an unnumbered TODO: write 'TODO <k>:' so a test can blank it"
              for n, line in enumerate(lines) if UNNUMBERED.search(line)]
    i = 0
    while i < len(lines):
        line = lines[i]
        m = BEGIN.match(line)
        if END.match(line):
            errors.append(f"{path}:{i + 1}: 'end of TODO' without a TODO line above it")
            i += 1
            continue
        if not m:
            i += 1
            continue
        k, rest = int(m.group(1)), m.group(2)
        continued = rest.strip() == "(continued)"
        if continued and not solution:
            errors.append(f"{path}:{i + 1}: 'TODO {k} (continued)' belongs in the solution only")
        if continued and k not in regions:
            errors.append(f"{path}:{i + 1}: 'TODO {k} (continued)' before the first piece of TODO {k}")
        if not continued and k in regions:
            errors.append(f"{path}:{i + 1}: TODO {k} opened a second time (a further piece is 'TODO {k} (continued)')")
        # The region runs to its end line; in the stub, without one, over its comment lines.
        j, end, proof = i + 1, None, None
        while j < len(lines):
            e = END.match(lines[j])
            if e:
                if int(e.group(1)) != k:
                    errors.append(f"{path}:{j + 1}: 'end of TODO {e.group(1)}' closes TODO {k}")
                end, proof = j, e.group(2)
                break
            if BEGIN.match(lines[j]):
                break
            j += 1
        if end is None:
            if solution:
                errors.append(f"{path}:{i + 1}: TODO {k} has no 'end of TODO {k}' line")
                i += 1
                continue
            end = i
            while end + 1 < len(lines) and is_comment(lines[end + 1]) and not BEGIN.match(lines[end + 1]):
                end += 1
        if proof is not None and not solution:
            errors.append(f"{path}:{end + 1}: a proof belongs on the solution's end line, not the stub's")
        if proof is not None and not PROOF.match(proof.strip()):
            errors.append(f"{path}:{end + 1}: unknown proof '{proof}' (check, racecheck, synccheck or compile:NAME)")
        if proof is not None and continued:
            errors.append(f"{path}:{end + 1}: the proof of TODO {k} goes on its first piece's end line")
        regions.setdefault(k, []).append(Piece(k, i, end, proof.strip() if proof else None))
        i = end + 1
    if errors:
        raise MarkerError("\n".join(errors))
    return regions


def inside(regions, i):
    return any(p.begin <= i <= p.end for pieces in regions.values() for p in pieces)


def header_end(lines, syn):
    """The index of the first line after the header: comment lines and blank lines, and in
    Python a module docstring (the stub's and the solution's may differ)."""
    i = 0
    while i < len(lines):
        t = lines[i].strip()
        if not t or syn.is_comment(lines[i]):
            i += 1
        elif syn is PYTHON and t[:3] in ('"""', "'''"):
            q = t[:3]
            if t.count(q) >= 2 and len(t) > 3:   # a one-line docstring
                i += 1
                continue
            i += 1
            while i < len(lines) and q not in lines[i]:
                i += 1
            i += 1
        else:
            break
    return i


def skeleton(lines, regions, syn=CPP):
    """The file outside its regions: (line number, text) with each region's first piece one
    placeholder, its further pieces (code the stub does not have) nothing, and the header
    comment and blank lines left out."""
    starts = {p.begin: (k, n) for k, pieces in regions.items() for n, p in enumerate(pieces)}
    out, i = [], header_end(lines, syn)
    while i < len(lines):
        if i in starts:
            k, n = starts[i]
            if n == 0:
                out.append((i + 1, f"<TODO {k}>"))
            i = regions[k][n].end + 1
            continue
        if lines[i].strip():
            out.append((i + 1, lines[i].rstrip()))
        i += 1
    return out


def code_only(lines, syn=CPP):
    """The code of some lines, comments and blank lines left out (no string here holds the
    comment token)."""
    return [c for c in (line.split(syn.comment, 1)[0].strip() for line in lines) if c]


class Pair:
    def __init__(self, stub_path, solution_path, stub_text=None):
        self.stub_path, self.solution_path = Path(stub_path), Path(solution_path)
        self.syn = syntax_of(self.stub_path)
        if syntax_of(self.solution_path) is not self.syn:
            raise MarkerError(f"{self.solution_path}: not the same language as {self.stub_path}")
        self.stub = (self.stub_path.read_text() if stub_text is None else stub_text).splitlines()
        self.solution = self.solution_path.read_text().splitlines()
        errors = []
        try:
            self.stub_regions = parse(self.stub, self.stub_path, solution=False)
        except MarkerError as e:
            errors.append(str(e))
            self.stub_regions = None
        try:
            self.sol_regions = parse(self.solution, self.solution_path, solution=True)
        except MarkerError as e:
            errors.append(str(e))
            self.sol_regions = None
        if errors:
            raise MarkerError("\n".join(errors))
        self.mistakes = self._mistakes()
        self._correspond()

    def _mistakes(self):
        """{name: (proof, [(line index of the replaced line, new text or None)])}"""
        found, errors = {}, []
        for i, line in enumerate(self.solution):
            m = self.syn.mistake.match(line)
            if not m:
                continue
            where = f"{self.solution_path}:{i + 1}"
            _, name, proof, text = m.groups()
            if not NAME.match(name):
                errors.append(f"{where}: mistake name '{name}' is not lower_case (it names an executable)")
            if not PROOF.match(proof):
                errors.append(f"{where}: unknown proof '{proof}'")
            target = i + 1
            if target >= len(self.solution) or self.syn.is_comment(self.solution[target]) or not self.solution[target].strip():
                errors.append(f"{where}: a mistake must stand right above the code line it changes")
                continue
            if not inside(self.sol_regions, i) or not inside(self.sol_regions, target):
                errors.append(f"{where}: a mistake must lie inside a TODO region (the learner writes only there)")
            indent = re.match(r"\s*", self.solution[target]).group(0)
            new = indent + text if text.strip() else None
            if new is not None and new.strip() == self.solution[target].strip():
                errors.append(f"{where}: mistake '{name}' leaves its line unchanged")
            prev = found.setdefault(name, (proof, []))
            if prev[0] != proof:
                errors.append(f"{where}: mistake '{name}' has two proofs ({prev[0]}, {proof})")
            prev[1].append((target, new))
        if errors:
            raise MarkerError("\n".join(errors))
        return found

    def _correspond(self):
        errors = []
        s_keys, o_keys = set(self.stub_regions), set(self.sol_regions)
        for k in sorted(s_keys - o_keys):
            errors.append(f"{self.solution_path}: no region for the stub's TODO {k}")
        for k in sorted(o_keys - s_keys):
            errors.append(f"{self.stub_path}: no TODO {k} for the solution's region {k}")
        for k in sorted(s_keys & o_keys):
            s_line = self.stub[self.stub_regions[k][0].begin].strip()
            o_line = self.solution[self.sol_regions[k][0].begin].strip()
            if s_line != o_line:
                errors.append(f"{self.solution_path}:{self.sol_regions[k][0].begin + 1}: TODO {k}'s line differs "
                              f"from the stub's ({self.stub_path}:{self.stub_regions[k][0].begin + 1})")
        for name in self.mistakes:
            if name.isdigit() or name in {str(k) for k in o_keys}:
                errors.append(f"{self.solution_path}: mistake '{name}' clashes with a TODO's variant name")
        if errors:
            raise MarkerError("\n".join(errors))
        a, b = skeleton(self.stub, self.stub_regions, self.syn), skeleton(self.solution, self.sol_regions, self.syn)
        for (la, ta), (lb, tb) in zip(a, b):
            if ta != tb:
                raise MarkerError(f"{self.solution_path}:{lb}: outside the TODO regions the solution differs from "
                                  f"the stub ({self.stub_path}:{la}):\n  stub:     {ta.strip()}\n  solution: {tb.strip()}")
        if len(a) != len(b):
            longer, other = (self.stub_path, a) if len(a) > len(b) else (self.solution_path, b)
            line = other[min(len(a), len(b))][0]
            raise MarkerError(f"{longer}:{line}: outside the TODO regions this file has lines the other lacks")
        solution_code = code_only(self.solution, self.syn)
        for name, text in self.variants():
            if code_only(text, self.syn) == solution_code:
                raise MarkerError(f"{self.solution_path}: variant '{name}' has the solution's code: it proves nothing")

    def blank(self, k):
        pieces = self.sol_regions[k]
        s = self.stub_regions[k][0]
        out = list(self.solution)
        for n, p in sorted(enumerate(pieces), key=lambda e: -e[1].begin):   # bottom up: indices hold
            out[p.begin:p.end + 1] = self.stub[s.begin:s.end + 1] if n == 0 else []
        return out

    def apply_mistake(self, name):
        out = list(self.solution)
        for target, new in sorted(self.mistakes[name][1], reverse=True):
            out[target:target + 1] = [] if new is None else [new]
        return out

    def proof(self, name):
        if name in self.mistakes:
            return self.mistakes[name][0]
        return self.sol_regions[int(name)][0].proof or "check"

    def variants(self):
        for k in sorted(self.sol_regions):
            yield str(k), self.blank(k)
        for name in sorted(self.mistakes):
            yield name, self.apply_mistake(name)


class NoStubOfRecord(MarkerError):
    """The stub's file no longer pairs with its solution and there is no git history to find
    the stub in (a copy of the course without .git): the proofs cannot be built."""


def _git(path, *args):
    """git's stdout run in path's folder, or None (no git, not a checkout, a failure)."""
    try:
        r = subprocess.run(["git", "-C", str(Path(path).resolve().parent), *args],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def committed_revs(path, limit=50):
    """The commits that changed the file, newest first (the first holds HEAD's text), at most
    `limit`; [] without git history."""
    return (_git(path, "log", f"-n{limit}", "--format=%h", "--", Path(path).name) or "").split()


def committed_text(path, rev):
    """The file's text at commit rev, or None."""
    return _git(path, "show", f"{rev}:./{Path(path).name}")


def pair_of_record(stub_path, solution_path):
    """(Pair, note): the pair the proofs are about. The learner works in the stub's own file,
    so once they have begun, the file holds their code, not the stub. The stub of record:
      - git's HEAD text, when the file differs from it and it pairs with the solution (work
        on the exercise not committed; the note says so);
      - the working file, when it pairs (a fresh clone, CI: it equals HEAD; a developer
        changing stub and solution together);
      - else the newest older committed version that pairs (a learner who committed work);
    NoStubOfRecord when none pairs and there is no history to look in; the working file's
    error when there is history and none of it pairs (a broken pair)."""
    text = Path(stub_path).read_text()
    try:
        working, working_error = Pair(stub_path, solution_path), None
    except MarkerError as e:
        working, working_error = None, e
    revs = committed_revs(stub_path)

    def pair_at(rev):
        """(Pair, note) with the stub as committed in rev; None when that text is the
        working file's own, cannot be read, or does not pair."""
        committed = committed_text(stub_path, rev)
        if committed is None or committed == text:
            return None
        try:
            return (Pair(stub_path, solution_path, stub_text=committed),
                    f"{stub_path}: differs from its stub (work on the exercise): its TODO proofs use the stub of "
                    f"commit {rev}")
        except MarkerError:
            return None

    if revs and (found := pair_at(revs[0])):   # HEAD's text
        return found
    if working is not None:
        return working, None
    for rev in revs[1:]:
        if found := pair_at(rev):
            return found
    if not revs:
        raise NoStubOfRecord(f"{stub_path}: no longer pairs with {solution_path} (work on the exercise?) and there is "
                             f"no git history to find its stub in: its TODO proofs are not built\n{working_error}")
    raise working_error


def write_variants(pair, out_dir):
    lines = []
    for name, text in pair.variants():
        what = (f"TODO {name} blanked (replaced by the stub's text)" if name.isdigit()
                else f"mistake '{name}' made")
        c = pair.syn.comment
        head = [f"{c} Generated by tools/todo_proof.py from {pair.solution_path.name} of "
                f"{pair.solution_path.parent.name}: {what}.", f"{c} Proof: {pair.proof(name)}. Do not edit."]
        path = Path(out_dir) / name / pair.stub_path.name
        content = "\n".join(head + text) + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != content:
            path.write_text(content)
        lines.append(f"{name}|{pair.proof(name)}|{path.resolve()}")
    return lines


def pairs_under(root):
    root = Path(root)
    # exercise.cu, a lesson's further exercises exercise_<tag>.cu (09b: exercise_bwd.cu) and
    # exercise_triton.py; exercise_triton_launch.cu is the Triton exercise's launcher, no stub.
    for pattern in ("lessons/*/exercise.cu", "lessons/*/exercise_*.cu", "lessons/*/exercise_triton.py"):
        for stub in sorted(root.glob(pattern)):
            if stub.name.endswith("_launch.cu"):
                continue
            yield stub, root / "solutions" / stub.parent.name / stub.name


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="the markers of every exercise and its solution correspond")
    c.add_argument("--root", default=Path(__file__).resolve().parent.parent)
    g = sub.add_parser("generate", help="write the variants of one exercise")
    g.add_argument("stub")
    g.add_argument("solution")
    g.add_argument("--out-dir", required=True)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "generate":
            try:
                pair, note = pair_of_record(a.stub, a.solution)
            except NoStubOfRecord as e:
                print(e, file=sys.stderr)
                return 3   # the build goes on without this exercise's proofs (cmake/KlabLesson.cmake)
            if note:
                print(note, file=sys.stderr)
            print("\n".join(write_variants(pair, a.out_dir)))
            return 0
        failed, n = 0, 0
        for stub, solution in pairs_under(a.root):
            if not solution.exists():
                print(f"{stub}: no solution at {solution}")
                failed += 1
                continue
            try:
                try:
                    pair, note = pair_of_record(stub, solution)
                except NoStubOfRecord as e:
                    print(f"skipped: {e}")
                    continue
                if note:
                    print(note)
                names = [name for name, _ in pair.variants()]
                n += 1
                print(f"{stub.parent.name}/{stub.name}: {len(names)} variants ({', '.join(f'{v}: {pair.proof(v)}' for v in names)})")
            except MarkerError as e:
                print(e)
                failed += 1
        if n == 0 and failed == 0:
            print(f"no lessons/*/exercise.cu under {a.root}")
            return 1
        return 1 if failed else 0
    except (MarkerError, OSError) as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
