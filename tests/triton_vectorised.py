#!/usr/bin/env python3
"""Every hinted Triton kernel moves 16 bytes per load (no scalar global load is left), and
ptxas does not serialize its tensor-core instructions.

    triton_vectorised.py ROOT

For each AOT entry of lessons/*/*_triton.py (the lessons' Triton kernels, not the learners'
exercise files) whose signature hints an integer argument divisible by 16 (`i32:16`,
`i64:16`: the variant the linked launcher takes when the shape allows), compiles it for
sm_90 as tools/triton_aot.py does and fails if its PTX has a scalar global load
(ld.global.b16 or .b32 with no .v2/.v4): the hint exists so that the masks are known to be
constant over 16-byte runs and the loads vectorise (or become cp.async). An entry that
keeps scalar loads on purpose says why in its `scalar_loads` key: a pair (count, why) allows
at most count of them, a reason alone any number; its other checks still run. The Triton matmul
once hinted only its strides, not M, N and K: every load of A and B was one 2-byte element
and the loop was not pipelined, at 0.20x cuBLAS. The same entries must not draw ptxas's
warning C7515 (wgmma serialized: each k-step's tensor-core instructions wait for each other):
the nt matmul's 128x256 kernel did, from a zero-trip path of its K loop, until that loop was
made to run at least once (the loop has since become whole unmasked K steps and one masked
tail step, which draws no warning). An entry whose PTX has wgmma must have HGMMA in its SASS (what
ptxas made of it, read with Triton's cuobjdump). Exit 0 with a summary, 1 with a line per
entry that failed.
"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1])
sys.path.insert(0, str(root / "tools"))
import triton_ptx  # noqa: E402

failures, checked = [], 0
sources = sorted(p for p in root.glob("lessons/*/*_triton.py") if p.name != "exercise_triton.py")
if not sources:
    sys.exit(f"triton_vectorised: no lessons/*/*_triton.py under {root}")
for src in sources:
    for i, e, k in triton_ptx.compiled_entries(src, 90):
        if not re.search(r"(?<![*\w])i(?:32|64):16\b", e["signature"]):
            continue   # no integer hinted
        where = f"{src.relative_to(root)}: {e['name']}[{i}] ({e['signature']})"
        if isinstance(k, Exception):
            failures.append(f"{where}: does not compile: {k}")
            continue
        checked += 1
        scalar = {form: n for form, n in triton_ptx.global_accesses(k.asm["ptx"], "ld").items()
                  if not re.search(r"\.v[248]\.", form)}
        kept = e.get("scalar_loads", (0, ""))
        allowed = float("inf") if isinstance(kept, str) else kept[0]
        if sum(scalar.values()) > allowed:
            failures.append(f"{where}: {sum(scalar.values())} scalar global loads, {allowed} allowed ({next(iter(scalar))}): "
                            f"{triton_ptx.summarize(k.asm['ptx'])}")
        rep = triton_ptx.ptxas_report(k.asm["ptx"], 90)
        if any(code == "C7515" for code, _ in rep["warnings"]):
            failures.append(f"{where}: {triton_ptx.ptxas_summary(rep)}")
        # A tl.dot that became wgmma must reach the SASS as HGMMA (Hopper's warpgroup MMA).
        if "wgmma.mma_async" in k.asm["ptx"] and not triton_ptx.sass_counts(k.asm["cubin"])["HGMMA"]:
            failures.append(f"{where}: wgmma in the PTX but no HGMMA in the SASS")
print("\n".join(failures) if failures else
      f"triton_vectorised: {checked} hinted entries of {len(sources)} files, every global load 16 bytes wide or cp.async, "
      "no wgmma serialized, every wgmma an HGMMA in the SASS")
sys.exit(1 if failures or checked == 0 else 0)
