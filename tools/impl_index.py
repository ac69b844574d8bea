#!/usr/bin/env python3
"""The impl-name drift test: every impl of the lessons/ tree is findable by its name.

    tools/impl_index.py [--root DIR] KLAB            runs `KLAB list --json`, checks the tree
    tools/impl_index.py [--root DIR] --list-json F   checks a list already written (fixtures)

--root is the repository the impls' source paths are relative to (default: the parent of
this tools/ folder). For every impl whose `source` (the file that registered it, as
`klab list --json` gives it) lies under ROOT/lessons/, it checks the conventions of
docs/design.md ("## Conventions", "The impl name is the index"):

  (a) header   the first comment block of the source file names the impl (exact name, as
               a word: `v2` is not named by `v2_grid_stride`);
  (b) readme   the lesson's README.md has a Markdown heading (a `#` line outside code
               fences) containing the name in backticks: ### `v6_exp2`: exp2 on the SFU;
  (c) symbol   for kinds cuda and exercise only: a `__global__` function or a function
               named run_... in the lesson's *.cu/*.cuh files has a name containing the
               impl name (vendor, triton and cpu impls are exempt).

The lesson of an impl is the folder lessons/<folder>/ its source lies in. Impls registered
elsewhere (tests/cheats/) are not checked.

Output: one line per problem, "<source>: <op>/<impl> (<kind>): <what is missing>", then a
count; exit 1 when there is any problem (a list with no impl under lessons/ is one).
Clean: one summary line, exit 0. Usage errors (bad arguments, a KLAB that does not run, a
list without `source` fields, unreadable JSON): a message on stderr, exit 2.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

EXEMPT_FROM_SYMBOL = {"vendor", "triton", "cpu"}
SOURCE_SUFFIXES = (".cu", ".cuh")


class UsageError(Exception):
    pass


def word_re(name):
    return re.compile(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])")


def first_comment_block(text):
    """The first comment block of a C++/CUDA file: the run of `//` lines (blank `//` lines
    included) or the `/* ... */` block that comes first, leading blank lines skipped. Code
    or a blank line ends it."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].lstrip().startswith("/*"):
        rest = "\n".join(lines[i:])
        end = rest.find("*/")
        return rest if end < 0 else rest[: end + 2]
    block = []
    while i < len(lines) and lines[i].lstrip().startswith("//"):
        block.append(lines[i])
        i += 1
    return "\n".join(block)


def blank_comments_and_strings(text):
    """The text with comments and string/char literals replaced by spaces (newlines kept),
    so that a name in a comment ("the __global__ kernel v1 ...") is no definition."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A raw string R"(...)" is not expected in kernel files; plain literals only.
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


_IDENT_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")
# Names between __global__ and the kernel's name that take parenthesised arguments.
_ATTRIBUTES = {"__launch_bounds__", "__maxnreg__", "__cluster_dims__", "alignas", "__attribute__",
               "__declspec", "decltype"}
_NOT_A_TYPE = {"return", "else", "case", "new", "delete", "throw", "co_return", "co_yield", "goto"}
# A definition of run_...: a function (`void run_v1(`), or a callable object
# (`auto run_v1 = ...`, `const auto run_v1{...}`), after a type-like token.
_RUN_DEF = re.compile(r"([A-Za-z_]\w*|[>&*])\s+(run_\w+)\s*(?:\(|=|\{)")


def skip_parens(text, i):
    """Index just past the parenthesised group that starts at text[i] == '('."""
    depth = 0
    while i < len(text):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def kernel_and_launcher_names(code):
    """Names of `__global__` functions and of functions named run_... defined in `code`
    (comments and strings already blanked)."""
    names = set()
    for m in re.finditer(r"\b__global__\b", code):
        i = m.end()
        while True:
            c = _IDENT_CALL.search(code, i)
            if not c or re.search(r"[;{}]", code[i:c.start()]):
                break
            if c.group(1) in _ATTRIBUTES:
                i = skip_parens(code, c.end() - 1)
                continue
            names.add(c.group(1))
            break
    for m in _RUN_DEF.finditer(code):
        if m.group(1) not in _NOT_A_TYPE:
            names.add(m.group(2))
    return names


def readme_headings(text):
    """The Markdown ATX headings of a README (lines starting with #), outside ``` and ~~~
    fences."""
    heads, fence = [], None
    for line in text.splitlines():
        s = line.lstrip()
        m = re.match(r"(`{3,}|~{3,})", s)
        if m and len(line) - len(s) < 4:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif s.startswith(fence) and not s[len(fence):].strip(fence[0]).strip():
                fence = None
            continue
        if fence is None and re.match(r"#{1,6}(\s|$)", line):
            heads.append(line)
    return heads


def read_text(path, cache):
    if path not in cache:
        try:
            with open(path, encoding="utf-8") as f:
                cache[path] = f.read()
        except OSError:
            cache[path] = None
    return cache[path]


def load_list(args):
    if args.list_json:
        path = args.list_json
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f), path
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read {path}: {e}")
    with tempfile.TemporaryDirectory(prefix="impl_index.") as tmp:
        out = os.path.join(tmp, "list.json")
        env = dict(os.environ)
        # `klab list` reads the progress file only to say which exercises are solved.
        env.setdefault("KLAB_PROGRESS_FILE", os.path.join(tmp, "progress.json"))
        try:
            r = subprocess.run([args.klab, "list", "--json", out], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise UsageError(f"cannot run {args.klab}: {e}")
        if r.returncode != 0:
            tail = r.stdout.strip().splitlines()[-1:] or [""]
            raise UsageError(f"`{args.klab} list --json` exited {r.returncode}: {tail[0]}")
        try:
            with open(out, encoding="utf-8") as f:
                return json.load(f), f"{args.klab} list --json"
        except (OSError, ValueError) as e:
            raise UsageError(f"`{args.klab} list --json` wrote no readable JSON: {e}")


def impls_of(listing, what):
    if not isinstance(listing, dict) or not isinstance(listing.get("lessons"), list):
        raise UsageError(f"{what}: not a `klab list --json` document (no \"lessons\" array)")
    for lesson in listing["lessons"]:
        for op in lesson.get("ops", []):
            for im in op.get("impls", []):
                if "source" not in im:
                    raise UsageError(f"{what}: impl {op.get('name')}/{im.get('name')} has no \"source\" "
                                     "(a klab built before impls recorded their file?)")
                yield op.get("name", "?"), im


def check(listing, what, root):
    root = os.path.realpath(root)
    lessons_dir = os.path.join(root, "lessons")
    cache = {}
    problems = []
    seen = set()
    n_impls, lesson_set, file_set = 0, set(), set()

    def problem(key, line):
        if key not in seen:
            seen.add(key)
            problems.append(line)

    for op, im in impls_of(listing, what):
        name, kind, src = im.get("name", ""), im.get("kind", ""), im.get("source", "")
        path = os.path.realpath(src if os.path.isabs(src) else os.path.join(root, src))
        rel = os.path.relpath(path, lessons_dir)
        if rel.startswith(os.pardir + os.sep) or rel == os.pardir or os.sep not in rel:
            continue  # not an impl of the lessons/ tree (tests/cheats, ...)
        folder = rel.split(os.sep)[0]
        lesson = os.path.join(lessons_dir, folder)
        shown = os.path.relpath(path, root)
        who = f"{shown}: {op}/{name} ({kind})"
        n_impls += 1
        lesson_set.add(folder)
        file_set.add(path)
        if not name:
            problem(("noname", path, op), f"{who}: the impl has no name")
            continue

        # (a) the first comment block of its file names it.
        text = read_text(path, cache)
        if text is None:
            problem(("nofile", path), f"{shown}: cannot read the file that registered {op}/{name}")
        elif not word_re(name).search(first_comment_block(text)):
            problem(("header", path, name),
                    f"{who}: the file's first comment block does not name `{name}` (one line per impl it registers)")

        # (b) its lesson's README has a heading with `name`.
        readme = os.path.join(lesson, "README.md")
        rtext = read_text(readme, cache)
        shown_readme = os.path.relpath(readme, root)
        if rtext is None:
            problem(("noreadme", lesson), f"{shown_readme}: missing (lesson of {op}/{name})")
        elif not any(f"`{name}`" in h for h in readme_headings(rtext)):
            problem(("readme", lesson, name),
                    f"{who}: {shown_readme} has no heading (a `#` line) containing `{name}` in backticks")

        # (c) cuda and exercise impls: a kernel or launcher carries the name.
        if kind not in EXEMPT_FROM_SYMBOL:
            key = ("symbols", lesson)
            if key not in cache:
                names = set()
                for dirpath, _, files in os.walk(lesson):
                    for f in sorted(files):
                        if f.endswith(SOURCE_SUFFIXES):
                            t = read_text(os.path.join(dirpath, f), {})
                            if t is not None:
                                names |= kernel_and_launcher_names(blank_comments_and_strings(t))
                cache[key] = names
            if not any(name in s for s in cache[key]):
                problem(("symbol", lesson, name),
                        f"{who}: no __global__ function and no run_... function in lessons/{folder}/*.cu, *.cuh "
                        f"has a name containing `{name}`")

    if n_impls == 0:
        problems.append(f"{what}: no impl registered from {os.path.relpath(lessons_dir, os.getcwd())}/ "
                        "(wrong --root, or a klab built without lessons?)")
    return problems, n_impls, len(lesson_set), len(file_set)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("klab", nargs="?", help="the klab binary to run `list --json` on")
    ap.add_argument("--list-json", help="a `klab list --json` file to check instead of running klab")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="repository root the sources are relative to (default: %(default)s)")
    args = ap.parse_args(argv)
    if bool(args.klab) == bool(args.list_json):
        ap.error("give either KLAB or --list-json FILE (one of them)")
    if not os.path.isdir(args.root):
        ap.error(f"--root {args.root}: not a directory")
    try:
        listing, what = load_list(args)
        problems, n, n_lessons, n_files = check(listing, what, args.root)
    except UsageError as e:
        print(f"impl_index: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    if problems:
        print(f"impl_index: {len(problems)} problem(s) among {n} impls of lessons/")
        return 1
    print(f"impl_index: {n} impls of {n_lessons} lessons ({n_files} files): every one named in its file's "
          "header comment and a README heading, every cuda/exercise impl by a kernel or launcher")
    return 0


if __name__ == "__main__":
    sys.exit(main())
