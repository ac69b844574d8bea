#!/usr/bin/env python3
"""Lines of code beside measured speed: the best CUDA version and the Triton version of each
op that has both, from the lessons' sources and their checked-in bench JSON.

    tools/loc_speed.py render [--check] FILE...    rewrite (or check) the marked regions

A region names the lessons it covers; everything up to its end marker is generated:

    <!-- loc-speed lessons=04 -->
    <!-- /loc-speed -->

What is counted, the same way on both sides: device code, in non-blank lines that are not
only a comment.
  CUDA    the `__global__` and `__device__` functions (and the structs holding `__device__`
          members, such as an element-wise op's functor) that the version's launcher reaches
          through the lesson's own files, following names from the function that
          `.run = ...` registers (a struct's members are reached through the struct's name).
          By name, not by evaluating templates: a launcher that dispatches counts every
          kernel it names. Host code (launchers, argument checks) is not counted, and
          neither are the framework's primitives (klab/include/klab/device/: warp and block
          reductions, vector loads), which a lesson teaches once and later lessons include.
  Triton  the `@triton.jit` functions of the lesson's *_triton.py that the op's launcher
          links (its AOT entries' kernels) and the jit functions they call.
Speed: for each problem, the newest of the lesson's bench runs (the files its README's
bench-table markers name, sweeps excepted, by the run's date) that timed both `triton` and a
CUDA version on it; there, the fastest CUDA version and `triton`, both as % of the measured
peak, and the CUDA median over the Triton median (above 1: Triton faster).

Exit codes: 0 done / up to date; 1 a region differs (with a diff) or cannot be made; 2 usage.
"""
import ast
import difflib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import bench_table  # noqa: E402  (its shape format)
import impl_index  # noqa: E402  (its C++ comment and string blanking)

MARK = re.compile(r"<!-- loc-speed (?P<attrs>[^>]*?) -->\n(?P<body>.*?)<!-- /loc-speed -->\n?", re.S)
KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "static_assert", "decltype", "alignof",
            "constexpr", "else", "do", "case", "throw", "new", "delete", "noexcept", "alignas", "typeid"}


class Problem(Exception):
    pass


def strip_cpp(text):
    """Comments and string literals blanked, line structure kept (impl_index's reader)."""
    return impl_index.blank_comments_and_strings(text)


def match_close(s, i, open_ch, close_ch):
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_ch:
            depth += 1
        elif s[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j
    raise Problem(f"unbalanced {open_ch}{close_ch}")


def definitions(path):
    """(name, device?, first line, last line, body) of each function and struct defined in a
    C++/CUDA file, lines 1-based, comments removed."""
    s = strip_cpp(path.read_text())
    found = []
    for m in re.finditer(r"\b(struct|class)\s+(\w+)[^;{()<>,]*\{", s):
        end = match_close(s, m.end() - 1, "{", "}")
        body = s[m.start():end + 1]
        found.append((m.group(2), "__device__" in body, s.count("\n", 0, m.start()) + 1,
                      s.count("\n", 0, end) + 1, body))
    for m in re.finditer(r"\b(\w+)\s*(?:\[[^\]]*\])?\s*=\s*\{", s):   # tables of launchers: reached, not counted
        end = match_close(s, m.end() - 1, "{", "}")
        found.append((m.group(1), False, 0, 0, s[m.start():end + 1]))
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", s):
        name = m.group(1)
        if name in KEYWORDS:
            continue
        close = match_close(s, m.end() - 1, "(", ")")
        k = close + 1
        while True:   # qualifiers between ) and the body
            q = re.match(r"\s*(const|noexcept|override|final|->\s*[\w:<>]+)", s[k:])
            if not q:
                break
            k += q.end()
        if not re.match(r"\s*\{", s[k:]):
            continue
        k = s.index("{", k)
        # The declaration starts after the previous ; } { or preprocessor line.
        start = max(s.rfind(";", 0, m.start()), s.rfind("}", 0, m.start()), s.rfind("{", 0, m.start()),
                    s.rfind("#", 0, m.start()))
        if start >= 0 and s[start] == "#":
            start = s.find("\n", start)
        head = s[start + 1:m.start()]
        if re.search(r"[=(,]\s*$", head) or "<<<" in head:
            continue   # a call or an initializer, not a definition
        end = match_close(s, k, "{", "}")
        begin = start + 1
        while begin < m.start() and s[begin].isspace():
            begin += 1
        first = s.count("\n", 0, begin) + 1   # the declaration's first line, not the previous statement's
        found.append((name, "__global__" in head or "__device__" in head, first,
                      s.count("\n", 0, end) + 1, s[start + 1:end + 1]))
    return found, s


def code_lines(stripped, first, last):
    return sum(1 for ln in stripped.splitlines()[first - 1:last] if ln.strip())


class Lesson:
    def __init__(self, folder):
        self.folder = folder
        self.defs = {}   # name -> [(path, device, first, last, body)]
        self.text = {}
        for p in sorted(folder.glob("*.cu")) + sorted(folder.glob("*.cuh")):
            if p.name.startswith("exercise"):
                continue
            found, s = definitions(p)
            self.text[p] = s
            structs = [(a, b) for name, dev, a, b, body in found if re.match(r"(struct|class)\b", body)]
            for name, dev, a, b, body in found:
                if any(sa < a and b <= sb for sa, sb in structs):
                    continue   # a member: counted with its struct, reached through the struct's name
                self.defs.setdefault(name, []).append((p, dev, a, b, body))
        self.runs = {}   # (op, impl) -> (run function, kind)
        for p, s in self.text.items():
            raw = p.read_text()
            for m in re.finditer(r"register_impl\(\{(.*?)\}\)\)", raw, re.S):
                block = m.group(1)
                op, name = re.search(r'\.op = "(\w+)"', block), re.search(r'\.name = "(\w+)"', block)
                run, kind = re.search(r"\.run = (\w+)", block), re.search(r"ImplKind::(\w+)", block)
                if op and name and run:
                    self.runs[(op.group(1), name.group(1))] = (run.group(1), kind.group(1) if kind else "cuda")

    def reach(self, root):
        """Every lesson-local definition reachable from `root` by name."""
        seen, todo = set(), [root]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.defs:
                continue
            seen.add(name)
            for _, _, _, _, body in self.defs[name]:
                todo += [w for w in re.findall(r"\b[A-Za-z_]\w*\b", body) if w in self.defs and w not in seen]
        return seen

    def cuda_lines(self, op, impl):
        run, _ = self.runs[(op, impl)]
        names = self.reach(run)
        spans = {(p, a, b) for n in names for p, dev, a, b, _ in self.defs[n] if dev}
        spans = {sp for sp in spans if not any(o != sp and o[0] == sp[0] and o[1] <= sp[1] and sp[2] <= o[2]
                                                for o in spans)}   # a member inside a counted struct
        return sum(code_lines(self.text[p], a, b) for p, a, b in spans), names

    def triton_lines(self, op):
        run, _ = self.runs[(op, "triton")]
        launchers = set()
        for n in self.reach(run):
            for _, _, _, _, body in self.defs[n]:
                launchers |= set(re.findall(r"\b(tr_\w+?)(?:_default|_get_num_algos)?\b", body))
        import triton_aot
        triton_aot._install_shim()
        total, kernels = 0, set()
        for py in sorted(self.folder.glob("*_triton.py")):
            if py.name.startswith("exercise"):
                continue
            aot, _ = triton_aot._load_aot_list(py.resolve())
            wanted = {e["kernel"] for e in aot if e["name"] in launchers}
            if not wanted:
                continue
            tree = ast.parse(py.read_text())
            jit = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)
                   and any("jit" in ast.unparse(d) for d in f.decorator_list)}
            todo = list(wanted)
            while todo:
                k = todo.pop()
                if k in kernels or k not in jit:
                    continue
                kernels.add(k)
                todo += [c.func.id for c in ast.walk(jit[k]) if isinstance(c, ast.Call)
                         and isinstance(c.func, ast.Name) and c.func.id in jit]
            lines = py.read_text().splitlines()
            for k in kernels & set(jit):
                f = jit[k]
                doc = set()
                if ast.get_docstring(f) is not None:
                    d = f.body[0]
                    doc = set(range(d.lineno, d.end_lineno + 1))
                total += sum(1 for n, ln in enumerate(lines[f.lineno - 1:f.end_lineno], f.lineno)
                             if ln.strip() and not ln.strip().startswith("#") and n not in doc)
        if not kernels:
            raise Problem(f"{self.folder.name}: no Triton kernel found for {op}")
        return total, kernels


def bench_runs(folder):
    """The lesson's bench runs: the JSON its README's bench-table markers name (a sweep's file,
    *-sweep.json, is not a run), in the markers' order."""
    readme = (folder / "README.md").read_text()
    names = [n for n in re.findall(r"<!-- bench-table json=(\S+)", readme) if not n.endswith("-sweep.json")]
    if not names:
        raise Problem(f"{folder.name}/README.md has no bench-table marker naming its bench JSON")
    return [json.loads((folder / n).read_text()) for n in dict.fromkeys(names)]


def timed_rows(runs, op):
    """Problem label -> the rows of the newest run (by its date) that timed both triton and a
    CUDA version on it, in the order the runs first list the problems."""
    order, best = [], {}
    for j in runs:
        by_problem = {}
        for r in j["bench"]:
            if r["op"] == op and r.get("median_ms") and r.get("status") in ("pass", "ok"):
                by_problem.setdefault(label(r), []).append(r)
        for prob, rs in by_problem.items():
            if prob not in order:
                order.append(prob)
            both = any(r["impl"] == "triton" for r in rs) and any(r["kind"] == "cuda" for r in rs)
            if both and (prob not in best or j.get("date", "") > best[prob][0]):
                best[prob] = (j.get("date", ""), rs)
    return {prob: best[prob][1] for prob in order if prob in best}


def label(r):
    p = r["problem"]
    return f"{bench_table.shape_of(r)} {p['dtype']}" + (f" {p['variant']}" if p.get("variant") else "")


def region(lesson_ids):
    rows, notes = [], []
    for lid in lesson_ids:
        folders = sorted(ROOT.glob(f"lessons/{lid}-*"))
        if len(folders) != 1:
            raise Problem(f"no lesson {lid}")
        L = Lesson(folders[0])
        runs = bench_runs(folders[0])
        ops = [op for (op, name) in L.runs if name == "triton"]
        for op in ops:
            t_lines, kernels = L.triton_lines(op)
            notes.append(f"{op}: Triton {', '.join(sorted(kernels))}")
            for prob, rs in timed_rows(runs, op).items():
                tri = [r for r in rs if r["impl"] == "triton"]
                cuda = [r for r in rs if r["kind"] == "cuda"]
                if not tri or not cuda:
                    continue
                best = min(cuda, key=lambda r: r["median_ms"])
                c_lines, _ = L.cuda_lines(op, best["impl"])
                t = tri[0]
                rows.append(f"| {lid} | {op} | {prob} | `{best['impl']}` | {c_lines} | {best['pct_peak']:.1f}% | "
                            f"{t_lines} | {t['pct_peak']:.1f}% | {best['median_ms'] / t['median_ms']:.2f}x |")
    if not rows:
        raise Problem(f"lessons {','.join(lesson_ids)}: no problem where both a CUDA version and triton ran")
    head = ("Lines: device code only, non-blank and not only a comment (the kernels a version's launcher "
            "reaches by name and the lesson's own device functions and structs they use; the framework's shared "
            "primitives not counted). A launcher that dispatches counts every kernel it names: a version that "
            "serves fp32 and bf16 with different kernels counts both. "
            "Speed: % of the measured peak in the newest checked-in bench run of the lesson that timed both on the problem; the last column is the "
            "best CUDA version's time over Triton's (above 1: Triton faster). Generated by "
            "`tools/loc_speed.py` from the sources and bench JSON.\n\n"
            "| lesson | op | problem | best CUDA version | lines | % of peak | Triton lines | % of peak | "
            "CUDA time / Triton time |\n| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
    return "\n" + head + "\n".join(rows) + "\n\n"


def render(paths, check):
    rc = 0
    for path in paths:
        text = Path(path).read_text()

        def sub(m):
            attrs = dict(a.split("=", 1) for a in m.group("attrs").split())
            if "lessons" not in attrs:
                raise Problem(f"{path}: a loc-speed marker needs lessons=NN[,NN]")
            body = region(attrs["lessons"].split(","))
            return f"<!-- loc-speed {m.group('attrs')} -->\n{body}<!-- /loc-speed -->\n"

        new = MARK.sub(sub, text)
        if new != text:
            if check:
                sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                           path, path + " (generated)"))
                rc = 1
            else:
                Path(path).write_text(new)
                print(f"rendered {path}")
    return rc


def main(argv):
    if not argv or argv[0] != "render":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    check = "--check" in argv
    paths = [a for a in argv[1:] if a != "--check"]
    if not paths:
        print("loc_speed: render needs files", file=sys.stderr)
        return 2
    try:
        rc = render(paths, check)
    except (Problem, KeyError, OSError) as e:
        print(f"loc_speed: {e}", file=sys.stderr)
        return 1
    if rc == 0:
        print(f"loc_speed: {len(paths)} file(s) {'up to date' if check else 'rendered'}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
