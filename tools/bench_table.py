#!/usr/bin/env python3
"""Markdown tables for a lesson README from `klab bench --json` output.

One-shot: print the tables of one lesson (paste them yourself):

    tools/bench_table.py bench.json --lesson 01 [--op vector_add] [--date 2026-11-22]

Generated regions: a README holds marked regions, each naming the bench JSON it is made
from (path relative to the README) and filters; `render` rewrites every region in place,
`render --check` rewrites nothing and exits 1 with a unified diff when a region differs
from what its JSON gives, or when its JSON is missing:

    tools/bench_table.py render lessons/02-memory-access/README.md [more READMEs...]
    tools/bench_table.py render --check lessons/*/README.md

    <!-- bench-table json=bench/h100-2026-11-25.json op=transpose dtype=bf16 -->
    (generated: everything up to the end marker is replaced)
    <!-- /bench-table -->

Marker attributes, key=value separated by spaces (shell quoting for a value with spaces):
    json=PATH      required: a `klab bench --json` (or `klab run --json`) file, relative to
                   the README
    lesson=ID      only records of this lesson ("02")
    op=A,B         only these ops (tables in this order)
    impl=A,B       only these impls (rows in this order within each op and problem)
    dtype=A,B      only these dtypes (f32, bf16, ...)
    shape=S,T      only these shapes, written as klab prints them (4096x4096)
    variant=V,W    only these variants ("-" for none)
    torch=PATH     a tools/torch_figures.py JSON (relative to the README): the region renders
                   the PyTorch comparison instead (below)
    overlap=IMPL   the region renders how much communication each impl hides instead
                   (below); IMPL is the version that communicates after computing
Several values of one key are alternatives; different keys must all hold. A region whose
filters match no measured row is an error (a typo must not render an empty table).

Each region renders: a line naming the device, the date of the run (the JSON's "date"; else
a YYYY-MM-DD in its file name) and the measured peaks; then one table per op: every
measured problem and impl with its median time, GB/s or TFLOP/s (by the op's bound), % of
the measured peak the op is judged against (named beside the op's name) and the ratio to
the op's baseline from the same run. A row whose timed launches saw a power or thermal
clock event says "throttled" and names the events. Rows not measured (unsupported, no
median) are left out.

With torch=PATH, each problem of the selected rows gets one line: the fastest selected klab
impl, vendor baselines left out (the comparison is of the course's kernels; cuDNN or cuBLAS
beside PyTorch is a different question), its median and GB/s or TFLOP/s, beside PyTorch's
eager and torch.compile medians for
the same op, shape, dtype and variant, and the ratios of their medians to klab's (above 1:
klab is faster). Both files must name the same GPU (a ratio across two GPUs means
nothing); a problem PyTorch has no row for is an error.

With overlap=IMPL (lesson 16's training step, an op whose first dimension is the ranks), each
problem of more than one rank is paired with the same problem at one rank, measured in the
same run: an impl's exposed communication is its median at R ranks minus its own median at
one rank (the compute with no communication), the communication's cost t_comm is IMPL's
exposed time (nothing of it overlaps), and an impl hides 1 - exposed / t_comm of it. A
problem whose one-rank twin, or IMPL's row, is missing is an error.

Exit codes: 0 done / every region up to date; 1 a region differs or cannot be rendered
(JSON missing or unreadable, no matching rows, unbalanced markers, unknown attribute);
2 usage error (bad arguments, a README that cannot be read).
"""
import argparse
import difflib
import json
import os
import re
import shlex
import sys

BEGIN = re.compile(r"^<!--\s*bench-table(?P<attrs>(?:\s.*?)?)\s*-->\s*$")
END = re.compile(r"^<!--\s*/bench-table\s*-->\s*$")
LIST_KEYS = ("op", "impl", "dtype", "shape", "variant")
KEYS = ("json", "lesson", "torch", "overlap") + LIST_KEYS


class RegionError(Exception):
    pass


def fmt_ms(ms):
    if ms <= 0:
        return "-"
    if ms < 1:
        return f"{ms * 1e3:.1f} us"
    return f"{ms:.3f} ms"


def shape_of(r):
    return "x".join(str(d) for d in r["problem"]["shape"])


def measured(r):
    return r.get("status") != "unsupported" and (r.get("median_ms") or 0) > 0


def run_date(j, json_path=""):
    d = j.get("date") or ""
    if d:
        return d[:10]
    m = re.search(r"\d{4}-\d{2}-\d{2}", os.path.basename(json_path))
    return m.group(0) if m else "date unknown"


def device_line(j, date):
    dev = j.get("device") or {}
    peaks = dev.get("peaks")
    if peaks:
        p = (f"Measured peaks of this device (klab doctor): copy {peaks.get('copy_gbps', 0):.0f} GB/s, "
             f"read {peaks.get('read_gbps', 0):.0f} GB/s, cuBLAS fp32 {peaks.get('sgemm_tflops', 0):.1f}, "
             f"bf16 {peaks.get('bf16_tflops', 0):.0f} TFLOP/s.")
    else:
        p = "No measured peaks in this run (klab doctor had not measured them)."
    return f"Device: {dev.get('name', '?')}, {date}. {p} Medians of L2-flushed launches; ratios from the same run."


DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "u8": 1}


def fmt_bytes(b):
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= size:
            return f"{b / size:g} {unit}"
    return f"{b} B"


def link_table(op, rows, base):
    """An op bound by the link between GPUs (lesson 16's all-reduce, Bound::link): no measured
    peak, so no percentage; its GB/s are bus bandwidth (NCCL's busbw), and the message each
    rank holds (the last dimension times the element size) is the size that matters. One row
    a problem, one column an impl (the baseline first): bus GB/s, then the baseline's median
    or the impl's ratio to it."""
    impls = []
    for r in rows:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    if base in impls:
        impls.remove(base)
        impls.insert(0, base)
    out = [f"**{op}** (bus GB/s, NCCL's busbw; beside it the {base or 'baseline'} median, or the ratio of "
           f"the impl's time to it; no peak of the link is measured)", "",
           "| ranks | bytes a rank | dtype | " + " | ".join(impls) + " |",
           "| ---: | ---: | --- |" + " ---: |" * len(impls)]
    problems = []
    for r in rows:
        key = (tuple(r["problem"]["shape"]), r["problem"]["dtype"])
        if key not in problems:
            problems.append(key)
    problems.sort(key=lambda k: (k[1] != "f32", k[0][-1]))   # fp32 first, then by size
    for shape, dtype in problems:
        cells = []
        for impl in impls:
            r = next((x for x in rows if x["impl"] == impl and tuple(x["problem"]["shape"]) == shape
                      and x["problem"]["dtype"] == dtype), None)
            if r is None:
                cells.append("-")
                continue
            note = fmt_ms(r["median_ms"]) if impl == base else (f"{r['speedup']:.2f}x" if r.get("speedup") else "-")
            tel = r.get("telemetry") or {}
            flag = " throttled" if tel.get("throttled") else ""
            flag += "" if r["status"] == "pass" else f" {r['status']}"
            rate = f"{r['gbps']:,.1f}" if r["gbps"] >= 10 else f"{r['gbps']:.2f}"
            cells.append(f"{rate} ({note}){flag}")
        out.append(f"| {shape[0]} | {fmt_bytes(shape[-1] * DTYPE_BYTES[dtype])} | {dtype} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def op_tables(recs):
    """Markdown lines: one table per op of `recs` (measured rows only, in the given order)."""
    out = []
    ops = []
    for r in recs:
        if r["op"] not in ops:
            ops.append(r["op"])
    for op in ops:
        rows = [r for r in recs if r["op"] == op]
        compute = any(r["tflops"] > 0 and r["pct_peak"] > 0 and "TFLOP" in r["peak"] for r in rows)
        base = next((r["baseline"] for r in rows if r["baseline"]), "")
        unit = "TFLOP/s" if compute else "GB/s"
        # The peaks this op's percentages are of ("read 3210 GB/s"), as the bench named them;
        # a compute op's peak depends on the dtype.
        peaks = {}
        for r in rows:
            if r.get("peak"):
                peaks.setdefault(r["peak"], [])
                if r["problem"]["dtype"] not in peaks[r["peak"]]:
                    peaks[r["peak"]].append(r["problem"]["dtype"])
        if len(peaks) > 1:   # "cuBLAS bf16 700 TFLOP/s for bf16, cuBLAS fp32 51.0 TFLOP/s for f32"
            named = ", ".join(f"{pk} for {'/'.join(dts)}" for pk, dts in peaks.items())
        else:
            named = next(iter(peaks), "")
        if all(r.get("peak", "").startswith("no peak") for r in rows):
            out += link_table(op, rows, base)
            continue
        out.append(f"**{op}**" + (f" (% of {named})" if named else ""))
        out.append("")
        out.append(f"| shape | dtype | impl | median | {unit} | % of peak | vs {base or 'baseline'} |")
        out.append("| --- | --- | --- | ---: | ---: | ---: | ---: |")
        for r in rows:
            p = r["problem"]
            shape = shape_of(r) + (f" {p['variant']}" if p.get("variant") else "")
            impl = r["impl"] + (f" [{r['candidate']}]" if r.get("candidate") else "")
            rate = r["tflops"] if compute else r["gbps"]
            status = "" if r["status"] == "pass" else f" ({r['status']})"
            tel = r.get("telemetry") or {}
            if tel.get("throttled"):
                # A median taken while the clock was lowered: say so beside the number.
                status += " (throttled: " + ", ".join(tel.get("events", [])) + ")"
            vs = f"{r['speedup']:.2f}x" if r.get("speedup") else "-"
            out.append(f"| {shape} | {p['dtype']} | {impl}{status} | {fmt_ms(r['median_ms'])} | {rate:,.1f} | "
                       f"{r['pct_peak']:.1f}% | {vs} |")
        out.append("")
    return out


# ---- one-shot ----------------------------------------------------------------------------

def main_print(argv):
    ap = argparse.ArgumentParser(prog="bench_table.py", description="print one lesson's tables",
                                 epilog="see the module docstring (render) for README regions")
    ap.add_argument("json")
    ap.add_argument("--lesson", required=True)
    ap.add_argument("--op", action="append")
    ap.add_argument("--date", default="")
    a = ap.parse_args(argv)
    try:
        with open(a.json, encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        print(f"bench_table: cannot read {a.json}: {e}", file=sys.stderr)
        return 2
    recs = [r for r in j.get("bench", []) if r["lesson"] == a.lesson and (not a.op or r["op"] in a.op)]
    recs = [r for r in recs if measured(r)]
    if not recs:
        print("bench_table: no measured records for that lesson/op", file=sys.stderr)
        return 1
    print(device_line(j, a.date or run_date(j, a.json)) + "\n")
    print("\n".join(op_tables(recs)))
    return 0


# ---- regions -----------------------------------------------------------------------------

def parse_attrs(text):
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise RegionError(f"bad marker attributes: {e}")
    attrs = {}
    for w in words:
        k, eq, v = w.partition("=")
        if not eq or not v:
            raise RegionError(f"marker attribute '{w}' is not key=value")
        if k not in KEYS:
            raise RegionError(f"unknown marker attribute '{k}' (known: {', '.join(KEYS)})")
        if k in attrs:
            raise RegionError(f"marker attribute '{k}' given twice")
        attrs[k] = v
    if "json" not in attrs:
        raise RegionError("marker has no json=PATH")
    return attrs


def select(recs, attrs):
    lists = {k: attrs[k].split(",") for k in LIST_KEYS if k in attrs}
    out = []
    for r in recs:
        if not measured(r):
            continue
        if "lesson" in attrs and r.get("lesson") != attrs["lesson"]:
            continue
        p = r["problem"]
        vals = {"op": r["op"], "impl": r["impl"], "dtype": p["dtype"], "shape": shape_of(r),
                "variant": p.get("variant") or "-"}
        if all(vals[k] in allowed for k, allowed in lists.items()):
            out.append(r)
    # Ops in the order op= names them; within an op, problems in the run's order (the
    # bench's: op, problem, impl) and impls in the order impl= names them.
    def problem(r):
        return (r["op"], shape_of(r), r["problem"]["dtype"], r["problem"].get("variant") or "")
    first = {}
    for i, r in enumerate(out):
        first.setdefault(problem(r), i)

    def key(r):
        k = []
        if "op" in lists:
            k.append(lists["op"].index(r["op"]))
        if "impl" in lists:
            k += [first[problem(r)], lists["impl"].index(r["impl"])]
        return k
    out.sort(key=key)   # stable: the run's order where no list says otherwise
    return out


def render_region(attrs, readme_dir):
    rel = attrs["json"]
    path = os.path.normpath(os.path.join(readme_dir, rel))
    if not os.path.isfile(path):
        raise RegionError(f"json={rel}: no such file ({path})")
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        raise RegionError(f"json={rel}: cannot read: {e}")
    if not isinstance(j, dict) or not isinstance(j.get("bench"), list):
        raise RegionError(f"json={rel}: not a `klab bench --json` file (no \"bench\" array)")
    recs = select(j["bench"], attrs)
    if not recs:
        raise RegionError(f"json={rel}: no measured row matches the marker's filters")
    if "torch" in attrs:
        lines = torch_lines(j, rel, recs, attrs["torch"], readme_dir)
    elif "overlap" in attrs:
        lines = overlap_lines(recs, attrs["overlap"])
    else:
        lines = ["", device_line(j, run_date(j, rel)), ""] + op_tables(recs)
    return [l + "\n" for l in lines]


def overlap_lines(recs, serial):
    """How much of the communication each impl hides (module docstring, overlap=IMPL)."""
    def median(impl, shape, dtype):
        r = next((x for x in recs if x["impl"] == impl and tuple(x["problem"]["shape"]) == shape
                  and x["problem"]["dtype"] == dtype), None)
        return None if r is None else r["median_ms"]
    impls = []
    for r in recs:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    if serial not in impls:
        raise RegionError(f"overlap={serial}: no measured row of that impl")
    impls.remove(serial)
    impls.insert(0, serial)
    out = ["", "| shape | dtype | impl | R ranks | 1 rank | exposed | hidden |",
           "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    problems = []
    for r in recs:
        key = (tuple(r["problem"]["shape"]), r["problem"]["dtype"])
        if key[0][0] > 1 and key not in problems:
            problems.append(key)
    if not problems:
        raise RegionError("overlap: no measured problem of more than one rank")
    for shape, dtype in problems:
        one = (1,) + shape[1:]
        name = "x".join(str(d) for d in shape)
        t = {}
        for impl in impls:
            many, single = median(impl, shape, dtype), median(impl, one, dtype)
            if many is None:
                continue
            if single is None:
                raise RegionError(f"overlap: {impl} has {name} {dtype} but not its one-rank twin "
                                  + "x".join(str(d) for d in one))
            t[impl] = (many, single, many - single)
        if serial not in t:
            raise RegionError(f"overlap: {serial} has no row for {name} {dtype}")
        comm = t[serial][2]
        if comm <= 0:
            raise RegionError(f"overlap: {serial} at {name} {dtype} is no slower than at one rank")
        for impl in impls:
            if impl not in t:
                continue
            many, single, exposed = t[impl]
            out.append(f"| {name} | {dtype} | {impl} | {fmt_ms(many)} | {fmt_ms(single)} | {fmt_ms(exposed)} | "
                       f"{100 * (1 - exposed / comm):.0f}% |")
    out.append("")
    return out


def torch_lines(j, rel, recs, trel, readme_dir):
    """The PyTorch comparison (torch=PATH): one line a problem, klab's fastest selected impl
    beside PyTorch's medians (eager and compiled, or each attention backend)."""
    path = os.path.normpath(os.path.join(readme_dir, trel))
    try:
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
    except (OSError, ValueError) as e:
        raise RegionError(f"torch={trel}: cannot read: {e}")
    if not isinstance(t, dict) or not isinstance(t.get("rows"), list):
        raise RegionError(f"torch={trel}: not a tools/torch_figures.py file (no \"rows\" array)")
    kdev = (j.get("device") or {}).get("name", "?")
    if t.get("device") != kdev:
        raise RegionError(f"torch={trel}: measured on {t.get('device')!r}, json={rel} on {kdev!r}")
    torch_at = {}
    for r in t["rows"]:
        torch_at[(r["op"], "x".join(str(d) for d in r["shape"]), r["dtype"], r.get("variant") or "", r["impl"])] = r
    best = {}
    for r in recs:
        if r.get("kind") == "vendor":
            continue
        k = (r["op"], shape_of(r), r["problem"]["dtype"], r["problem"].get("variant") or "")
        if k not in best or r["median_ms"] < best[k]["median_ms"]:
            best[k] = r
    out = ["", f"Device: {kdev}. klab: {run_date(j, rel)}; PyTorch {t.get('torch', '?')} (CUDA "
               f"{t.get('cuda', '?')}): {run_date(t, trel)}. Medians of L2-flushed launches; the ratios are "
               "PyTorch's median over klab's (above 1: klab is faster).", ""]
    # PyTorch's columns for an op: the impls tools/torch_figures.py measured for it, in its
    # order (eager and torch.compile for lessons 06-08 and 11's cross-entropy, the SDPA backends
    # for attention, the fused and foreach AdamW for lesson 11).
    labels = {"torch_eager": ("PyTorch eager", "vs eager"), "torch_compile": ("torch.compile", "vs compile"),
              "torch_flash": ("PyTorch flash", "vs flash"), "torch_cudnn": ("PyTorch cuDNN", "vs cuDNN"),
              "torch_math": ("PyTorch math", "vs math"),
              "torch_fused": ("PyTorch fused", "vs fused"), "torch_foreach": ("PyTorch foreach", "vs foreach")}
    impls_of = {}
    for r in t["rows"]:
        impls_of.setdefault(r["op"], [])
        if r["impl"] not in impls_of[r["op"]]:
            impls_of[r["op"]].append(r["impl"])
    op = None
    for k, r in best.items():
        cols = impls_of.get(k[0], [])
        if k[0] != op:
            op = k[0]
            rate = "TFLOP/s" if r.get("tflops") and "TFLOP" in r.get("peak", "") else "GB/s"  # by the op's bound
            heads = [labels.get(i, (i, "vs " + i)) for i in cols]
            out += ([""] if len(out) > 3 else []) + [f"**{op}** against PyTorch", "",
                    f"| shape | dtype | klab impl | median | {rate} | " + " | ".join(h[0] for h in heads) + " | " +
                    " | ".join(h[1] for h in heads) + " |",
                    "| --- | --- | --- | ---: | ---: | " + " | ".join("---:" for _ in range(2 * len(heads))) + " |"]
        trs = [torch_at.get(k + (i,)) for i in cols]
        if all(tr is None for tr in trs):
            raise RegionError(f"torch={trel}: no PyTorch row for {k[0]} {k[1]} {k[2]} {k[3] or ''}".rstrip())
        rate_v = r.get("tflops") if rate == "TFLOP/s" else r.get("gbps")

        def cells(tr):
            return ("-", "-") if tr is None else (fmt_ms(tr["median_ms"]), f"{tr['median_ms'] / r['median_ms']:.2f}x")
        cs = [cells(tr) for tr in trs]
        shape = k[1] + (f" {k[3]}" if k[3] else "")
        out.append(f"| {shape} | {k[2]} | {r['impl']} | {fmt_ms(r['median_ms'])} | {rate_v:,.1f} | " +
                   " | ".join(c[0] for c in cs) + " | " + " | ".join(c[1] for c in cs) + " |")
    return out


def render_file(text, readme_dir, name):
    """(new text, problems): every region of `text` rendered anew."""
    lines = text.splitlines(keepends=True)
    out, problems = [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = BEGIN.match(line.rstrip("\n"))
        if END.match(line.rstrip("\n")):
            problems.append(f"{name}:{i + 1}: end marker without a begin marker")
            out.append(line)
            i += 1
            continue
        if not m:
            out.append(line)
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not END.match(lines[j].rstrip("\n")) and not BEGIN.match(lines[j].rstrip("\n")):
            j += 1
        if j >= len(lines) or BEGIN.match(lines[j].rstrip("\n")):
            problems.append(f"{name}:{start + 1}: bench-table region has no end marker <!-- /bench-table -->")
            out.extend(lines[start:j])
            i = j
            continue
        try:
            body = render_region(parse_attrs(m.group("attrs")), readme_dir)
        except RegionError as e:
            problems.append(f"{name}:{start + 1}: {e}")
            body = lines[start + 1:j]   # left as it is
        out.append(line)
        out.extend(body)
        out.append(lines[j])
        i = j + 1
    return "".join(out), problems


def main_render(argv):
    ap = argparse.ArgumentParser(prog="bench_table.py render",
                                 description="rewrite every <!-- bench-table ... --> region of the READMEs")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 with a diff when a region is not what its JSON gives")
    ap.add_argument("readmes", nargs="+", metavar="README.md")
    a = ap.parse_args(argv)
    failed = False
    n_regions = 0
    for path in a.readmes:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            print(f"bench_table: cannot read {path}: {e}", file=sys.stderr)
            return 2
        n_regions += sum(1 for l in text.splitlines() if BEGIN.match(l))
        new, problems = render_file(text, os.path.dirname(os.path.abspath(path)), path)
        for p in problems:
            print(p)
        failed |= bool(problems)
        if problems and not a.check:
            print(f"{path}: not rewritten (fix the problems above)")
            continue
        if new == text:
            continue
        if a.check:
            failed = True
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                                       fromfile=f"{path}",
                                                       tofile=f"{path} (rendered from its JSON)"))
            print(f"{path}: bench tables differ from their JSON (run tools/bench_table.py render {path})")
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"rendered {path}")
    if failed:
        return 1
    print(f"bench_table: {n_regions} region(s) in {len(a.readmes)} file(s) "
          + ("up to date" if a.check else "rendered"))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "render":
        return main_render(argv[1:])
    return main_print(argv)


if __name__ == "__main__":
    sys.exit(main())
