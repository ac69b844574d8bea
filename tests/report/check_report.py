#!/usr/bin/env python3
"""`klab report` rendered in a real headless browser (Chromium), standard library only.

    check_report.py MODE KLAB WORKDIR

Modes:
  render            the page of the fixtures (tests/report/tree as --root, whose
                    lessons/01-demo/bench/ holds one file, plus fixtures/h100-fixture.json)
                    is loaded by `chromium --headless --dump-dom`; the DOM after its script
                    ran must hold the expected bar charts, bars, rooflines, points and table
                    rows, mark the throttled and vendor rows, show the hostile impl name as
                    text (no <img> element), and the browser must log no console message and
                    no uncaught exception (the page logs nothing, so any message is a fault).
  planted_js_error  the same page with a script that throws appended: the check above must
                    catch it (exit 0 when caught, 1 when the check let it through).
  empty             no bench files at all: the page says so and how to make one.
  backup            (no browser) an --out that is not a klab page is kept as FILE.bak; a
                    klab page is replaced.

Chromium's console messages reach stderr with --enable-logging=stderr --v=0 as
"INFO:CONSOLE(...)" lines, every level alike, and uncaught exceptions as "Uncaught ...".

Without a browser (chromium, chromium-browser or google-chrome on PATH, or $KLAB_CHROMIUM)
the browser modes exit 77 (skipped), unless KLAB_REQUIRE_BROWSER=1 (CI), which makes a
missing browser a failure.
"""
import html.parser
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "h100-fixture.json")
TREE = os.path.join(HERE, "tree")

# What the fixtures hold, counted by hand from fixtures/h100-fixture.json and tree/.
EXPECT = {
    "section.lesson": 3,      # 01 (two files), 02, 05
    "svg.bar-chart": 8,       # (op, problem) pairs: 01 x2, 02 x5, 05 x1
    "rect.bar-time": 17,      # measured rows: 1 + 1 + 10 + 5
    "rect.bar-pct": 17,
    "svg.roofline": 3,        # 01 (each file) and 05; 02 has no impl with FLOPs and bytes
    "circle.point": 7,        # 1 + 1 + 5
    "tr.row": 19,             # every record: 1 + 1 + 11 + 6
    "tr.throttled": 2,        # transpose v2_smem_tile f32, matmul v5_wgmma
    "tr.vendor": 2,           # cublas in 02 and 05
    "circle.throttled": 1,    # v5_wgmma
    "line.vendor-mark": 2,
}
HOSTILE = "<img src=x onerror=alert(1)>&\"q'"


def fail(msg):
    print(f"check_report: FAIL: {msg}")
    sys.exit(1)


def find_browser():
    env = os.environ.get("KLAB_CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    if os.environ.get("KLAB_REQUIRE_BROWSER") == "1":
        fail("no headless browser (chromium) on PATH, and KLAB_REQUIRE_BROWSER=1 requires one "
             "(tools/setup.sh installs Debian's chromium)")
    print("check_report: skipped: no chromium on PATH (KLAB_REQUIRE_BROWSER=1 makes this a failure)")
    sys.exit(77)


def klab_report(klab, args):
    p = subprocess.run([klab, "report"] + args, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail(f"klab report {' '.join(args)} exited {p.returncode}: {(p.stdout + p.stderr).strip()}")
    return p.stdout


def render(browser, page, work):
    """The DOM after load, and the browser's console lines."""
    profile = os.path.join(work, "profile")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--dump-dom", "file://" + os.path.abspath(page)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        fail("the browser did not finish within 120 s")
    if p.returncode != 0 or "<html" not in p.stdout:
        fail(f"the browser exited {p.returncode} without a DOM: {p.stderr.strip()[-500:]}")
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l or "Uncaught" in l]
    return p.stdout, console


class Dom(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.counts = {}
        self.tags = set()
        self.attrs = {}
        self.text = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        a = dict(attrs)
        if tag == "html":
            self.attrs = a
        for c in (a.get("class") or "").split():
            self.counts[f"{tag}.{c}"] = self.counts.get(f"{tag}.{c}", 0) + 1
        for k, v in a.items():
            if k in ("src", "href") and v and re.match(r"(https?:)?//", v):
                self.counts["remote"] = self.counts.get("remote", 0) + 1

    def handle_data(self, data):
        self.text.append(data)


def check_page(dom_text, console):
    """Problems with the rendered page, as lines (empty: all good)."""
    problems = [f"browser console: {l.strip()}" for l in console]
    d = Dom()
    d.feed(dom_text)
    for key, want in EXPECT.items():
        got = d.counts.get(key, 0)
        if got != want:
            problems.append(f"{key}: {got} in the DOM, expected {want}")
    if d.attrs.get("data-report-ready") != "1":
        problems.append("the page's script did not run to its end (no data-report-ready on <html>)")
    if "img" in d.tags:
        problems.append("an impl name became markup: an <img> element is in the DOM")
    if HOSTILE not in "".join(d.text):
        problems.append("the hostile impl name is not shown as text")
    if d.counts.get("remote"):
        problems.append("the page references a remote resource (it must be self-contained)")
    return problems


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    mode, klab, work = sys.argv[1:]
    if os.path.isdir(work):
        shutil.rmtree(work)
    os.makedirs(work)
    page = os.path.join(work, "report.html")

    if mode == "backup":
        with open(page, "w") as f:
            f.write("my notes\n")
        out = klab_report(klab, ["--root", TREE, "--out", page])
        if not os.path.exists(page + ".bak") or open(page + ".bak").read() != "my notes\n":
            fail(f"the learner's file was not kept as {page}.bak ({out.strip()})")
        if "kept the earlier" not in out:
            fail(f"klab report did not say it kept the file: {out.strip()}")
        klab_report(klab, ["--root", TREE, "--out", page])   # its own page: replaced, no second backup
        if os.path.exists(page + ".bak.1"):
            fail("a page klab report wrote was backed up instead of replaced")
        print("check_report: backup: the learner's file kept, klab's own page replaced")
        return

    if mode not in ("render", "planted_js_error", "empty"):
        fail(f"unknown mode {mode}")
    browser = find_browser()
    if mode == "empty":
        out = klab_report(klab, ["--root", os.path.join(HERE, "fixtures"), "--out", page])
        dom, console = render(browser, page, work)
        d = Dom()
        d.feed(dom)
        text = " ".join("".join(d.text).split())
        problems = [f"browser console: {l.strip()}" for l in console]
        if "No bench results yet" not in text or "klab bench NN --json FILE" not in text:
            problems.append("the empty page does not say there are no results and how to make one")
        if d.counts.get("svg.bar-chart") or d.counts.get("svg.roofline"):
            problems.append("the empty page has charts")
        if problems:
            fail("; ".join(problems))
        print(f"check_report: empty: the page says how to make results ({out.strip()})")
        return

    out = klab_report(klab, ["--root", TREE, "--out", page, FIXTURE])
    if mode == "planted_js_error":
        src = open(page, encoding="utf-8").read()
        src = src.replace("</body>", "<script>throw new Error(\"klab planted fault\");</script>\n</body>")
        with open(page, "w", encoding="utf-8") as f:
            f.write(src)
    dom, console = render(browser, page, work)
    problems = check_page(dom, console)
    if mode == "planted_js_error":
        caught = [p for p in problems if p.startswith("browser console:") and "Uncaught Error: klab planted fault" in p]
        if not caught:
            fail(f"the planted JS exception was not caught; problems seen: {problems}")
        print(f"check_report: planted_js_error: caught: {caught[0]}")
        return
    if problems:
        fail("; ".join(problems))
    print(f"check_report: render: {EXPECT['svg.bar-chart']} bar charts, {EXPECT['rect.bar-time']} bars, "
          f"{EXPECT['svg.roofline']} rooflines, {EXPECT['circle.point']} points, {EXPECT['tr.row']} table rows, "
          f"no console message ({out.strip()})")


if __name__ == "__main__":
    main()
