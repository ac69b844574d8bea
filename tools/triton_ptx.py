#!/usr/bin/env python3
"""What a Triton kernel of the AOT list becomes, with no GPU: the loads, the copies into
shared memory, the tensor-core instructions and the shared memory of each entry.

    triton_ptx.py lessons/05-matmul/matmul_triton.py [--arch 90] [--name tr_matmul_nn]
                  [--ptx-dir DIR] [--sass]

For each AOT entry (tools/triton_aot.py's list, compiled the same way) it prints one line:
name, signature, warps/stages, shared bytes, and the count of each global load width
and store width (ld.global.v4.b32 moves 16 bytes a thread, a bare ld.global.b16 two), cp.async (16-byte
asynchronous copies: the pipelined loads), cp.async.bulk (TMA) and wgmma / mma
instructions; then what ptxas says of it: registers, stack (spills), and its performance
warnings (C7515: the wgmma instructions were serialized). --ptx-dir keeps each entry's PTX;
--sass adds the count of SASS instructions and their mix (FFMA, MUFU, LDG, HGMMA, ...), the
columns `klab inspect` prints for the CUDA kernels.
This is how the lessons' READMEs show what limited a Triton kernel: a load that did not
vectorise, a loop that was not pipelined, tensor-core instructions that could not overlap.
"""
import argparse
import re
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_aot  # noqa: E402  (the driver shim and the AOT list loader)
from triton.tools import compile as tt_compile  # noqa: E402


def global_accesses(ptx: str, op: str) -> Counter:
    """How many of each global load (op "ld") or store ("st") instruction the PTX holds, by
    its form: ld.global.b16 (one 2-byte element), ld.global.v4.b32 (16 bytes), ..."""
    return Counter(re.findall(op + r"\.global(?:\.[a-z0-9:]+)*?(?:\.v[248])?\.[bfsu](?:8|16|32|64)\b", ptx))


def summarize(ptx: str) -> str:
    parts = []
    for op in ("ld", "st"):
        parts += [f"{n}x {k}" for k, n in sorted(global_accesses(ptx, op).items())]
    for what, pat in (("cp.async", r"cp\.async\.c[ag]\.shared"), ("cp.async.bulk", r"cp\.async\.bulk\.tensor"),
                      ("wgmma", r"wgmma\.mma_async"), ("mma", r"\bmma\.sync")):
        n = len(re.findall(pat, ptx))
        if n:
            parts.append(f"{n}x {what}")
    return ", ".join(parts) or "no global loads or stores"


def ptxas_report(ptx: str, arch: int = 90) -> dict:
    """What ptxas (Triton's own, as the build runs it) says of the PTX: registers, stack bytes
    and its performance warnings, e.g. C7515 (wgmma serialized: the tensor-core instructions
    of a k-step wait for each other instead of overlapping)."""
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        gpu = f"sm_{arch}a" if arch == 90 else f"sm_{arch}"
        r = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name={gpu}", str(src), "-o", str(Path(tmp) / "k.cubin")],
                           capture_output=True, text=True)
    log = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"ptxas failed: {log.strip()}")
    regs = re.search(r"Used (\d+) registers", log)
    stack = re.search(r"(\d+) bytes (?:cumulative )?stack", log)
    return {"registers": int(regs.group(1)) if regs else 0, "stack": int(stack.group(1)) if stack else 0,
            "warnings": re.findall(r"\((C\d+)\) Potential Performance Loss: ([^\n]*)", log)}


def ptxas_summary(rep: dict) -> str:
    s = f"{rep['registers']} registers, {rep['stack']} B stack"
    for code, text in rep["warnings"]:
        s += f"; ptxas {code}: {'wgmma serialized' if code == 'C7515' else text[:60]}"
    return s


# The SASS columns `klab inspect` prints for CUDA kernels, here for Triton's cubins.
SASS_MIX = (("HGMMA", ("HGMMA",)), ("HMMA", ("HMMA",)), ("TMA", ("UTMALDG", "UTMASTG", "UBLKCP")),
            ("LDGSTS", ("LDGSTS",)), ("LDG", ("LDG",)), ("STG", ("STG",)), ("LDS", ("LDS", "LDSM")),
            ("STS", ("STS",)), ("BAR", ("BAR",)), ("FFMA", ("FFMA",)), ("MUFU", ("MUFU",)))
SASS_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*)", re.M)


def sass_counts(cubin: bytes) -> Counter:
    """Opcode families ("FFMA", "MUFU", "HGMMA") of a cubin's SASS, by the cuobjdump that
    ships with Triton: what ptxas made of the PTX, the same count `klab inspect` gives CUDA
    kernels."""
    from triton.tools.disasm import path_to_cuobjdump
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "k.cubin"
        f.write_bytes(cubin)
        r = subprocess.run([path_to_cuobjdump(), "-sass", str(f)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {r.stderr.strip()}")
    return Counter(SASS_INSN.findall(r.stdout))


def sass_summary(c: Counter) -> str:
    parts = [f"{sum(c.values())} SASS"]
    for name, ops in SASS_MIX:
        n = sum(c[o] for o in ops)
        if n:
            parts.append(f"{n} {name}")
    return ", ".join(parts)


def compiled_entries(source: Path, arch: int = 90, name=None):
    """Yields (index, entry, compiled kernel or the exception) for each AOT entry of source,
    compiled as tools/triton_aot.py compiles it."""
    triton_aot._install_shim()
    triton_aot._target_arch = arch
    aot, _ = triton_aot._load_aot_list(Path(source).resolve())
    import triton
    captured = {}
    real_compile = triton.compile

    def keep(src, target=None, options=None):   # the compiled kernel, whose PTX compile_kernel drops
        captured["k"] = real_compile(src, target=target, options=options)
        return captured["k"]

    triton.compile = keep
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, e in enumerate(aot):
                if name and e["name"] != name:
                    continue
                ca = tt_compile.CompileArgs(path=str(Path(source).resolve()), kernel_name=e["kernel"],
                                            signature=e["signature"], grid=e["grid"],
                                            num_warps=e.get("num_warps", 4), num_stages=e.get("num_stages", 3),
                                            out_name=e["name"], out_path=Path(tmp) / f"{e['name']}_{i}")
                try:
                    tt_compile.compile_kernel(ca)
                except Exception as ex:  # noqa: BLE001  (reported per entry)
                    yield i, e, ex
                    continue
                yield i, e, captured["k"]
    finally:
        triton.compile = real_compile


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path)
    ap.add_argument("--arch", type=int, default=90, choices=triton_aot.ARCHS)
    ap.add_argument("--name", help="only the entries of this name")
    ap.add_argument("--ptx-dir", type=Path)
    ap.add_argument("--sass", action="store_true", help="also count the SASS instructions (ptxas's output)")
    a = ap.parse_args()
    if not a.source.is_file():
        print(f"triton_ptx: no such file: {a.source}", file=sys.stderr)
        return 2
    rc = 0
    for i, e, k in compiled_entries(a.source, a.arch, a.name):
        if isinstance(k, Exception):
            print(f"{e['name']}[{i}]: {k}")
            rc = 1
            continue
        ptx = k.asm["ptx"]
        print(f"{e['name']}[{i}] {e['signature']} {e.get('num_warps', 4)}w/{e.get('num_stages', 3)}st "
              f"sm_{a.arch}: shared {k.metadata.shared} B; {summarize(ptx)}; {ptxas_summary(ptxas_report(ptx, a.arch))}"
              + (f"; {sass_summary(sass_counts(k.asm['cubin']))}" if a.sass else ""))
        if a.ptx_dir:
            a.ptx_dir.mkdir(parents=True, exist_ok=True)
            (a.ptx_dir / f"{e['name']}_{i}_sm{a.arch}.ptx").write_text(ptx)
    return rc


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # `| head` ends the listing quietly
    sys.exit(main())
