#!/usr/bin/env python3
"""The linked Triton launchers number their configurations in the AOT list's order.

    triton_algo_order.py SOURCE_ROOT BUILD_DIR

An autotuned Triton impl names its candidates by algo_id (lesson 05's kTritonNames follows
CONFIGS, lesson 04's follows ROW_TILES and LOOP_CONFIGS), so the launcher's table
NAME_smNN_kernels[] must list the distinct configurations of NAME in the order the AOT list
first gives them. Triton's linker numbers them in the order it reads their headers; read in
file-name order they came out by hash, and every autotune label and --candidate ran another
configuration than it named. For each generated lessons/*/triton/STEM.c under BUILD_DIR and
its lessons/*/STEM.py, compares the two; then compares the C++ tables that name the
candidates (kTritonNames, kSwigluTritonNames, kRowTiles and kLoopConfigs, kTritonStage1,
lesson 09's kTritonNamesD64 and kTritonNamesD128 and its backward's kBwdTritonNamesD64 and
kBwdTritonNamesD128, lesson 11's kFwdNames, kBwdNames and kBwdChunks, kChunkNames and
kChunks) with the Python lists they follow. CPU only. Exit 0 with a summary, 1 with a line per
launcher out of order.
"""
import re
import sys
from pathlib import Path

root, build = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(root / "tools"))
import triton_aot  # noqa: E402


def algo_info(e):
    """The linker's name of a configuration: its constexprs, then warps and stages."""
    consts = [a.strip() for a in e["signature"].split(",") if re.fullmatch(r"-?\d+", a.strip())]
    return f"{'x'.join(consts)}_warps{e.get('num_warps', 4)}xstages{e.get('num_stages', 3)}"


problems, checked = [], 0
generated = sorted(build.glob("lessons/*/triton/*.c"))
if not generated:
    sys.exit(f"triton_algo_order: no generated Triton C files under {build}/lessons/*/triton/")
for c_file in generated:
    sources = [p for p in root.glob(f"lessons/*/{c_file.stem}.py")]
    if len(sources) != 1:
        continue   # an exercise's file (compiled from the learner's copy) or none: not a lesson kernel
    triton_aot._install_shim()
    aot, _ = triton_aot._load_aot_list(sources[0].resolve())
    want = {}
    for e in aot:
        want.setdefault(e["name"], [])
        if algo_info(e) not in want[e["name"]]:
            want[e["name"]].append(algo_info(e))
    text = c_file.read_text()
    for name, infos in want.items():
        for arch in triton_aot.ARCHS:
            table = re.search(rf"\b{name}_sm{arch}_kernels\[\] = \{{([^}}]*)\}}", text)
            if not table:
                problems.append(f"{c_file.name}: no launcher table {name}_sm{arch}_kernels")
                continue
            got = [ln.strip().rstrip(",")[len(f"{name}_sm{arch}_"):] for ln in table.group(1).splitlines() if ln.strip()]
            checked += 1
            if got != infos:
                problems.append(f"{c_file.name}: {name}_sm{arch} numbers {got}, the AOT list {infos}")


# The C++ side names the same configurations in the same order: a swapped pair there would
# label one configuration with another's name as surely as a linker out of order.
def module(rel):
    triton_aot._install_shim()
    return triton_aot._load_aot_list((root / rel).resolve())[1]


def block(rel, name):
    m = re.search(rf"\b{name}\b[^=]*=\s*\{{(.*?)\}};", (root / rel).read_text(), re.S)
    if not m:
        problems.append(f"{rel}: no table {name}")
        return ""
    return m.group(1)


def same(what, cpp, py):
    global checked
    checked += 1
    if cpp != py:
        problems.append(f"{what}: the C++ names {cpp}, the Python list {py}")


mm = module("lessons/05-matmul/matmul_triton.py")
same("lessons/05-matmul/matmul_triton_impl.cu kTritonNames",
     re.findall(r'"([^"]+)"', block("lessons/05-matmul/matmul_triton_impl.cu", "kTritonNames")),
     [f"{bm}x{bn}x{bk}/{w}w/{st}st/g{gm}" for bm, bn, bk, gm, w, st in mm.CONFIGS] +
     [f"{bm}x{bn}x{bk}/{w}w/{st}st/g{gm}/persistent" for bm, bn, bk, gm, w, st in mm.PERSISTENT_CONFIGS])
same("lessons/05-matmul/matmul_triton_impl.cu kClassic",
     re.findall(r"constexpr int kClassic = (\d+);", (root / "lessons/05-matmul/matmul_triton_impl.cu").read_text()),
     [str(len(mm.CONFIGS))])
lm = module("lessons/06-kernel-fusion/linear_triton.py")
same("lessons/06-kernel-fusion/linear_triton_impl.cu kTritonNames",
     re.findall(r'"([^"]+)"', block("lessons/06-kernel-fusion/linear_triton_impl.cu", "kTritonNames")),
     [f"{bm}x{bn}x{bk}/{w}w/{st}st/g{gm}" for bm, bn, bk, gm, w, st in lm.CONFIGS])
sw = module("lessons/06-kernel-fusion/swiglu_triton.py")
same("lessons/06-kernel-fusion/swiglu_triton_impl.cu kSwigluTritonNames",
     re.findall(r'"([^"]+)"', block("lessons/06-kernel-fusion/swiglu_triton_impl.cu", "kSwigluTritonNames")),
     [f"{bm}x{bn}x{bk}/{w}w/{st}st/g{gm}" for bm, bn, bk, gm, w, st in sw.CONFIGS])
sm = module("lessons/04-softmax/softmax_triton.py")
same("lessons/04-softmax/softmax_triton.cu kRowTiles",
     [(int(b), [int(w) for w in ws.split(",")])
      for b, ws in re.findall(r"\{(\d+), \{([\d, ]+)\}\}", block("lessons/04-softmax/softmax_triton.cu", "kRowTiles"))],
     [(b, list(ws)) for b, ws in sm.ROW_TILES.items()])
same("lessons/04-softmax/softmax_triton.cu kLoopConfigs",
     [(int(b), int(w), int(pf == "true")) for b, w, pf in re.findall(r"\{(\d+), (\d+), (true|false)\}",
                                                                     block("lessons/04-softmax/softmax_triton.cu", "kLoopConfigs"))],
     [tuple(c) for c in sm.LOOP_CONFIGS])
at = module("lessons/09-attention/attention_triton.py")
for d, table in ((64, "kTritonNamesD64"), (128, "kTritonNamesD128")):
    same(f"lessons/09-attention/attention_triton_impl.cu {table}",
         re.findall(r'"([^"]+)"', block("lessons/09-attention/attention_triton_impl.cu", table)),
         [f"{bm}x{bn}/{w}w/{st}st" for bm, bn, w, st in at.CONFIGS[d]])
ab = module("lessons/09-attention/attention_bwd_triton.py")
for d, table in ((64, "kBwdTritonNamesD64"), (128, "kBwdTritonNamesD128")):
    same(f"lessons/09-attention/attention_bwd_triton_impl.cu {table}",
         re.findall(r'"([^"]+)"', block("lessons/09-attention/attention_bwd_triton_impl.cu", table)),
         [f"dkv{bn}x{bm}/{w}w/{st}st+dq{qm}x{qn}/{qw}w/{qs}st"
          for (bn, bm, w, st), (qm, qn, qw, qs) in ab.CONFIGS[d]])
rd = module("lessons/03-reductions/reduce_triton.py")
same("lessons/03-reductions/reductions.cuh kTritonStage1",
     [(int(c), n) for c, n in re.findall(r'\{(\d+), "([^"]+)"\}', block("lessons/03-reductions/reductions.cuh",
                                                                        "kTritonStage1"))],
     [(c, f"chunk{c}/{b}/{w}w") for c, b, w in rd.STAGE1_CONFIGS])
ce = module("lessons/11-training-kernels/cross_entropy_triton.py")
same("lessons/11-training-kernels/cross_entropy_triton_impl.cu kFwdNames",
     re.findall(r'"([^"]+)"', block("lessons/11-training-kernels/cross_entropy_triton_impl.cu", "kFwdNames")),
     [f"{b}/{w}w" + ("/prefetch" if pf else "") for b, w, pf in ce.FWD_CONFIGS])
same("lessons/11-training-kernels/cross_entropy_triton_impl.cu kBwdNames",
     re.findall(r'"([^"]+)"', block("lessons/11-training-kernels/cross_entropy_triton_impl.cu", "kBwdNames")),
     [f"{b}/{w}w/{c}" for b, w, c in ce.BWD_CONFIGS])
same("lessons/11-training-kernels/cross_entropy_triton_impl.cu kBwdChunks",
     [int(c) for c in re.findall(r"\d+", block("lessons/11-training-kernels/cross_entropy_triton_impl.cu", "kBwdChunks"))],
     [c for _, _, c in ce.BWD_CONFIGS])
aw = module("lessons/11-training-kernels/adamw_triton.py")
same("lessons/11-training-kernels/adamw_triton_impl.cu kChunkNames",
     re.findall(r'"([^"]+)"', block("lessons/11-training-kernels/adamw_triton_impl.cu", "kChunkNames")),
     [str(c) for c in aw.CHUNKS])
same("lessons/11-training-kernels/adamw_triton_impl.cu kChunks",
     [int(c) for c in re.findall(r"\d+", block("lessons/11-training-kernels/adamw_triton_impl.cu", "kChunks"))],
     list(aw.CHUNKS))

print("\n".join(problems) if problems else
      f"triton_algo_order: {checked} launchers and candidate-name tables in AOT-list order")
sys.exit(1 if problems or checked == 0 else 0)
