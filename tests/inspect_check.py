#!/usr/bin/env python3
"""`klab inspect` reads what the compiler made of the lessons' kernels, with no GPU.

    inspect_check.py KLAB

Runs `KLAB inspect LESSONS --impl ... --arch 90 --json F` on one impl per lesson whose
compiled form is known from its source, and asserts it (each assertion can fail: a naive
kernel given a shared tile, a tiled one losing it, v7_prefetch's cp.async gone, the wmma
matmul without tensor-core instructions). LESSONS are those of 01 02 03 04 05 06 09 11 that
the build has (`KLAB list --json`: a build configured with -DKLAB_LESSONS lacks the rest),
and only theirs are asserted; a build with none of them exits 77 (nothing to assert):
  01 v1_naive        no shared memory, global loads, no tensor-core instructions
  02 v4_tile64_ilp   a static shared-memory tile and barriers
  03 v2_smem_private shared-memory histograms
  04 v7_prefetch     cp.async (LDGSTS), no spills (local memory 0)
  04 v8_push_exchange cp.async (LDGSTS), at most 8 bytes of stack
  05 v9_wmma         HMMA (tensor cores); 05 v1_naive none
  05 v13_mma_autotuned  HMMA and cp.async through the kernel it declares, matmul_mma_sync
  05 v14..v19        the Hopper kernel they declare, matmul_wgmma: HGMMA (wgmma) and TMA
                     copies in every instantiation, no HMMA, no cp.async, no spills; each
                     version shows its own configuration only, a different one each
  06 v2_fused_epilogue  lesson 05's matmul_wgmma with the bias-and-activation epilogue: HGMMA,
                     TMA, and cp.async (the bias row staged as the tile starts) in each of its
                     eight instances (four activations, two tile widths), no spills
  06 v1_matmul_then_bias_act  the same kernel without an epilogue (no cp.async), two widths
  09 v1_simt_online  K/V tiles in static shared memory, no tensor-core instructions, no spills
  09 v2_mma_sync     HMMA (mma.sync) and cp.async (LDGSTS) in each of its four instances
                     (bf16 and f16, d = 64 and 128), no spills
  09 v1_mma_atomic_dq  HMMA and cp.async in its eight dK/dV kernels; 14 kernels, each once
                     (its header's kernels are compiled into the exercise's file too)
  11 v2_online       cross_entropy_fwd's fold of two 16-byte vectors unrolled: an ex2 (MUFU)
                     an element, at least 2 x 4 (f32) or 2 x 8 (bf16) MUFU in each of its two
                     instances; no local memory, at most 8 bytes of stack
every impl that declares kernels (Impl::kernels) shows them
and of every row: registers > 0, SASS instructions > 0, at least one resident block.
Exit 0 with a summary, 1 with a line per failed assertion.
"""
import json
import re
import subprocess
import sys
import tempfile

klab = sys.argv[1]
LESSONS = ("01", "02", "03", "04", "05", "06", "09", "11")
# The asserted impls, and every impl that declares kernels named for their technique
# (Impl::kernels: inspect fails when the binary lacks one).
IMPLS = ("v1_naive,v4_tile64_ilp,v2_smem_private,v7_prefetch,v8_push_exchange,v9_wmma,v13_mma_autotuned,"
         "v2_smem_tile,v3_smem_padded,v1_vec_last_block,v3_online,v5_cluster,v6_vectorized,v8_autotuned,"
         "v10_mma_sync,v11_mma_pipelined,v12_splitk,v14_wgmma_tma,v15_warp_specialized,v16_persistent,"
         "v17_splitk_wgmma,v18_cluster_multicast,v19_tma_store,v1_matmul_then_bias_act,v2_fused_epilogue,"
         "v1_matmul_then_dgelu_bgrad,v1_matmul_then_swiglu,v21_pingpong,v1_simt_online,v2_mma_sync,"
         "v1_per_tensor,v2_multi_tensor,v1_two_pass,v2_online,v1_mma_atomic_dq")


def klab_json(*args):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = subprocess.run([klab, *args, "--json", f.name], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"inspect_check: klab {args[0]} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}")
        return json.load(open(f.name))


# The lessons this build has, and their impls: inspect refuses a lesson or an --impl it lacks.
built = {l["id"]: {i["name"] for o in l["ops"] for i in o["impls"]} for l in klab_json("list")["lessons"]}
lessons = [l for l in LESSONS if l in built]
if not lessons:
    print(f"inspect_check: this build has none of lessons {' '.join(LESSONS)}: nothing to assert")
    sys.exit(77)
impls = ",".join(i for i in IMPLS.split(",") if any(i in built[l] for l in lessons))
rows = klab_json("inspect", *lessons, "--impl", impls, "--arch", "90")

fails = []
kernels = [x for x in rows if x.get("kernel")]


def of(lesson, impl):
    got = [x for x in kernels if x["lesson"] == lesson and x["impl"] == impl]
    if not got:
        fails.append(f"{lesson} {impl}: no kernel found")
    return got


def check(cond, what):
    if not cond:
        fails.append(what)


# A kernel defined in a header is compiled into every file that includes it: an impl shows
# it once (09's attention_bwd.cuh: in v1's file and in the exercise's).
seen = {}
for x in kernels:
    key = (x["lesson"], x["op"], x["impl"], x["kernel"])
    check(key not in seen, f"{x['lesson']} {x['impl']}: kernel {x['kernel']} listed twice")
    seen[key] = x
for x in kernels:
    where = f"{x['lesson']} {x['impl']} {x['kernel']}"
    check(x["registers"] > 0, f"{where}: 0 registers")
    check(x["instructions"] > 0, f"{where}: no SASS instructions counted")
    check(x["occupancy"]["blocks"] >= 1, f"{where}: no block fits ({x['occupancy']})")
    check(x["arch"].startswith("sm_90"), f"{where}: arch {x['arch']}, asked for 90")
if "01" in lessons:
    for x in of("01", "v1_naive"):
        check(x["shared_static"] == 0, f"01 v1_naive {x['kernel']}: {x['shared_static']} B of shared memory")
        check(x["mix"]["LDG"] > 0, f"01 v1_naive {x['kernel']}: no global loads")
        check(x["mix"]["HMMA"] == 0 and x["mix"]["HGMMA"] == 0, f"01 v1_naive {x['kernel']}: tensor-core instructions")
if "02" in lessons:
    tiles = of("02", "v4_tile64_ilp")
    check(any(x["shared_static"] > 0 and x["mix"]["BAR"] > 0 for x in tiles),
          "02 v4_tile64_ilp: no kernel with a shared-memory tile and barriers")
if "03" in lessons:
    check(any(x["shared_static"] > 0 for x in of("03", "v2_smem_private")), "03 v2_smem_private: no shared memory")
if "04" in lessons:
    for x in of("04", "v7_prefetch"):
        check(x["mix"]["LDGSTS"] > 0, f"04 v7_prefetch {x['kernel']}: no cp.async (LDGSTS)")
        check(x["local"] == 0 and x["stack"] == 0, f"04 v7_prefetch {x['kernel']}: spills ({x['local']} B local)")
    # v8: v7's cp.async, and 8 bytes of stack at most (the
    # fp32 8-vector kernel keeps two loop constants there: 1024 threads allow 64 registers).
    for x in of("04", "v8_push_exchange"):
        check(x["mix"]["LDGSTS"] > 0, f"04 v8_push_exchange {x['kernel']}: no cp.async (LDGSTS)")
        check(x["local"] == 0 and x["stack"] <= 8, f"04 v8_push_exchange {x['kernel']}: spills ({x['stack']} B stack)")
if "05" in lessons:
    check(any(x["mix"]["HMMA"] > 0 for x in of("05", "v9_wmma")), "05 v9_wmma: no HMMA")
    mma = of("05", "v13_mma_autotuned")
    check(any(x["kernel"].startswith("matmul_mma_sync") and x["mix"]["HMMA"] > 0 and x["mix"]["LDGSTS"] > 0 for x in mma),
          "05 v13_mma_autotuned: no matmul_mma_sync with HMMA and LDGSTS")
    configs = {}
    for impl in ("v14_wgmma_tma", "v15_warp_specialized", "v16_persistent", "v17_splitk_wgmma", "v18_cluster_multicast",
                 "v19_tma_store", "v21_pingpong"):
        wg = [x for x in of("05", impl) if x["kernel"].startswith("matmul_wgmma")]
        check(len(wg) > 0, f"05 {impl}: its declared matmul_wgmma not shown")
        # Each shows only its own configuration (Impl::kernels "matmul_wgmma@WgCfg<...>"): one
        # instance per layout, bf16 out (v17: its fp32-partial instances too).
        cfgs = {m.group(1) for m in (re.search(r"(Wg\w*Cfg<[^>]*>)", x["kernel"]) for x in wg) if m}
        names = {x["kernel"] for x in wg}  # (v16, v18, v19 show them under matmul_batched too)
        check(len(cfgs) == 1 and len(names) == (6 if impl == "v17_splitk_wgmma" else 3),
              f"05 {impl}: {len(names)} matmul_wgmma instances of {len(cfgs)} configurations")
        configs[impl] = cfgs
        for x in wg:
            check(x["mix"]["HGMMA"] > 0 and x["mix"]["TMA"] > 0, f"05 {impl} {x['kernel']}: no HGMMA or no TMA")
            check(x["mix"]["HMMA"] == 0 and x["mix"]["LDGSTS"] == 0, f"05 {impl} {x['kernel']}: mma.sync or cp.async")
            check(x["local"] == 0 and x["stack"] == 0, f"05 {impl} {x['kernel']}: spills ({x['local']} B local)")
    check(len({c for cs in configs.values() for c in cs}) == len(configs), "05 v14..v21: two versions share a configuration")
    check(all("WgPingPongCfg" in c for c in configs["v21_pingpong"]), "05 v21_pingpong: not the ping-pong configuration")
    for x in of("05", "v1_naive"):
        check(x["mix"]["HMMA"] == 0, f"05 v1_naive {x['kernel']}: HMMA")
# The kernels an impl declares for its technique (Impl::kernels), shown under it.
for lesson, impl, kernel in (("02", "v2_smem_tile", "transpose_smem"), ("03", "v1_vec_last_block", "sum_v4_vec_last_block"),
                             ("04", "v3_online", "softmax_rows_online"), ("05", "v8_autotuned", "matmul_v7_warptiling"),
                             ("11", "v2_multi_tensor", "adamw_grad_sumsq"), ("11", "v2_online", "cross_entropy_mean")):
    if lesson in lessons:
        check(any(x["kernel"].startswith(kernel) for x in of(lesson, impl)), f"{lesson} {impl}: its declared {kernel} not shown")
if "06" in lessons:
    # Lesson 06's matmuls: the forward's and SwiGLU's in the nt layout (true, true), the
    # backward's (linear_dgelu_bgrad) in nn (true, false); each impl shows only its own instances
    # (SwiGLU's v1 runs linear.cu's plain ones).
    for op_name, impl, epi, layout, count, staged in (
            ("linear_bias_act", "v2_fused_epilogue", "EpiBiasAct", "true, true", 8, True),
            ("linear_bias_act", "v1_matmul_then_bias_act", "NoEpilogue", "true, true", 2, False),
            ("linear_dgelu_bgrad", "v2_fused_epilogue", "EpiDGeluBGrad", "true, false", 2, False),
            ("linear_dgelu_bgrad", "v1_matmul_then_dgelu_bgrad", "NoEpilogue", "true, false", 2, False),
            ("linear_swiglu", "v2_fused_epilogue", "EpiSwiGLU", "true, true", 2, False),
            ("linear_swiglu", "v1_matmul_then_swiglu", "NoEpilogue", "true, true", 2, False)):
        mine = [x for x in kernels if x["lesson"] == "06" and x["op"] == op_name and x["impl"] == impl]
        wg = [x for x in mine if x["kernel"].startswith("matmul_wgmma")]
        check(len(wg) == count and all(epi in x["kernel"] and f">, {layout}, " in x["kernel"] for x in wg),
              f"06 {op_name} {impl}: {len(wg)} matmul_wgmma instances, {count} expected, all with {epi}, layout {layout}")
        for x in wg:
            check(x["mix"]["HGMMA"] > 0 and x["mix"]["TMA"] > 0, f"06 {impl} {x['kernel']}: no HGMMA or no TMA")
            check((x["mix"]["LDGSTS"] > 0) == staged, f"06 {impl} {x['kernel']}: cp.async {'missing' if staged else 'present'}")
            check(x["local"] == 0 and x["stack"] == 0, f"06 {impl} {x['kernel']}: spills ({x['local']} B local)")
    check(any(x["kernel"].startswith("linear_bias_act_v1_matmul_then_bias_act") for x in of("06", "v1_matmul_then_bias_act")),
          "06 v1_matmul_then_bias_act: its bias-and-activation kernel not shown")
if "09" in lessons:
    # Lesson 09's attention kernels: v1 on the CUDA cores through shared memory; v2 on the tensor
    # cores (mma.sync) fed by cp.async, with 240 registers at d = 128 and no spills.
    for x in of("09", "v1_simt_online"):
        check(x["shared_static"] > 0, f"09 v1_simt_online {x['kernel']}: no shared-memory tiles")
        check(x["mix"]["HMMA"] == 0 and x["mix"]["HGMMA"] == 0, f"09 v1_simt_online {x['kernel']}: tensor-core instructions")
        check(x["local"] == 0 and x["stack"] == 0, f"09 v1_simt_online {x['kernel']}: spills ({x['local']} B local)")
    v2 = of("09", "v2_mma_sync")
    check(len(v2) == 4, f"09 v2_mma_sync: {len(v2)} kernels, 4 expected (bf16, f16 x d = 64, 128)")
    for x in v2:
        check(x["mix"]["HMMA"] > 0 and x["mix"]["LDGSTS"] > 0, f"09 v2_mma_sync {x['kernel']}: no HMMA or no LDGSTS")
        check(x["local"] == 0 and x["stack"] == 0, f"09 v2_mma_sync {x['kernel']}: spills ({x['local']} B local)")
    # v1_mma_atomic_dq: its dK/dV kernel (bf16, f16 x d = 64, 128, with dQ by atomics and, for
    # v2, without) on mma.sync; D and L's kernel and dQ's last kernel from attention_bwd.cuh.
    v1b = of("09", "v1_mma_atomic_dq")
    main = [x for x in v1b if x["kernel"].startswith("attention_bwd_v1_mma_atomic_dq<")]
    check(len(main) == 8, f"09 v1_mma_atomic_dq: {len(main)} dK/dV kernels, 8 expected")
    check(all(x["mix"]["HMMA"] > 0 and x["mix"]["LDGSTS"] > 0 for x in main), "09 v1_mma_atomic_dq: no HMMA or LDGSTS")
    check(len(v1b) == 14, f"09 v1_mma_atomic_dq: {len(v1b)} kernels, 14 expected (8 dK/dV, 4 D and L, 2 dQ's last)")
# Lesson 11's cross_entropy_fwd v2_online folds two 16-byte vectors a pass into the running
# (max, sum), unrolled: an ex2 (MUFU) an element, 2 x 4 (f32) or 2 x 8 (bf16) at least, where
# v1_two_pass's loop has one. No local memory; at most 8 bytes of stack (the f32 instance
# keeps one value there: an STL and two LDL).
if "11" in lessons:
    online = [x for x in of("11", "v2_online") if x["kernel"].startswith("cross_entropy_fwd_v2_online")]
    check(len(online) == 2, f"11 v2_online: {len(online)} cross_entropy_fwd_v2_online instances, 2 expected (f32, bf16)")
    for x in online:
        elems = 8 if "bfloat16" in x["kernel"] else 4
        check(x["mix"]["MUFU"] >= 2 * elems, f"11 v2_online {x['kernel']}: {x['mix']['MUFU']} MUFU, the unrolled fold "
                                             f"of two {elems}-element vectors has {2 * elems} ex2 at least")
        check(x["local"] == 0 and x["stack"] <= 8, f"11 v2_online {x['kernel']}: spills ({x['stack']} B stack)")
print("\n".join(fails) if fails else
      f"inspect_check: {len(kernels)} kernels of {len(lessons)} lesson{'s' * (len(lessons) > 1)} "
      f"({' '.join(lessons)}) as their sources say")
sys.exit(1 if fails else 0)
