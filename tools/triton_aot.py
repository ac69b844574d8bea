#!/usr/bin/env python3
"""Compile a lesson's Triton kernels ahead of time into C launchers, with no GPU.

    triton_aot.py lessons/01-vector-add/vector_add_triton.py --out-dir build/.../triton

The Python file lists what to build in a module-level AOT list:

    AOT = [
        dict(name="vadd_f32", kernel="add_kernel",
             signature="*fp32:16, *fp32:16, *fp32:16, i64, 1024",
             grid="(n + 1023) / 1024, 1, 1", num_warps=4, num_stages=1),
    ]

Entries that share a name are linked into one dispatcher (NAME_default(stream, args...)
and NAME(stream, args..., algo_id) over the configs, in list order): that is the space an
autotuned impl chooses from. The outputs are one C file and one header named after the
Python file (vector_add_triton.c/.h); the header has extern "C" guards.

Every entry is compiled for each of ARCHS (sm_80 and sm_90) and linked per arch
(NAME_sm80..., NAME_sm90...); NAME_default, NAME, load_NAME and unload_NAME pick the
arch's dispatcher at run time from klab_triton_arch() (klab/src/triton.cpp: 90 on a 9.x
device, 80 on an 8.x one), so an Ampere GPU runs the Triton track too.

Triton 3.6's AOT compiler asks the GPU driver for its target even when given --target,
and declares fp32 scalars as double. A small driver shim answers both (the arch being
compiled, warp 32; fp32 -> float), so this runs on a machine with no GPU and no torch.
"""
import argparse
import importlib.util
import inspect
import re
import runpy
import sys
import tempfile
import traceback
from pathlib import Path

import triton
import triton.backends.compiler
from triton.tools import compile as tt_compile

# The folder of klab_tl.py, the Triton track's shared @triton.jit helpers.
KLAB_TL = Path(__file__).resolve().parent.parent / "klab" / "triton"
ARCHS = (80, 90)  # cubins for Ampere (8.x devices) and Hopper (9.x); others are unsupported
_target_arch = ARCHS[-1]


class _DriverShim:
    """Just enough of triton's active driver for triton.tools.compile."""

    def __init__(self, real_map):
        self._real_map = real_map

    def get_current_target(self):
        return triton.backends.compiler.GPUTarget("cuda", _target_arch, 32)

    def map_python_to_cpp_type(self, ty):
        if ty == "fp32":
            return "float"
        return self._real_map(ty)

    def is_active(self):
        return True


def _install_shim():
    from triton.backends.nvidia.driver import ty_to_cpp
    triton.runtime.driver.set_active(_DriverShim(ty_to_cpp))


def _source_error(py: Path, ex: BaseException, mod=None, kernel=None) -> str:
    """One line, FILE:LINE: what, for an error in the source file (a learner's exercise:
    `klab check NN --triton` shows this line alone). Python's own errors carry the line; a
    Triton compile error says "at L:C:" with L counted from the kernel's `def` line."""
    last = str(ex).strip().splitlines()[-1] if str(ex).strip() else type(ex).__name__
    if isinstance(ex, SyntaxError) and ex.lineno:
        return f"{py}:{ex.lineno}: SyntaxError: {ex.msg}"
    m = re.match(r"at (\d+):(\d+):", str(ex).strip())
    fn = getattr(getattr(mod, kernel, None), "fn", None) if mod is not None and kernel else None
    if m and fn is not None:
        lines, start = inspect.getsourcelines(fn)
        def_at = start + next((i for i, t in enumerate(lines) if t.lstrip().startswith("def ")), 0)
        return f"{py}:{def_at + int(m.group(1)) - 1}: {last}"
    frames = [f for f in traceback.extract_tb(ex.__traceback__) if Path(f.filename).resolve() == py.resolve()]
    if frames:
        return f"{py}:{frames[-1].lineno}: {type(ex).__name__}: {last}"
    return f"{py}: {type(ex).__name__}: {last}"


def _load_aot_list(py: Path):
    spec = importlib.util.spec_from_file_location(py.stem, py)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(KLAB_TL))   # the shared helpers: from klab_tl import ...
    sys.path.insert(0, str(py.parent))
    try:
        spec.loader.exec_module(mod)
    except Exception as ex:   # a syntax error, a bad import: one line with the file's line
        sys.exit(_source_error(py, ex))
    aot = getattr(mod, "AOT", None)
    if not aot:
        sys.exit(f"{py}: no AOT list (see tools/triton_aot.py for its format)")
    return aot, mod


def _unique(text: str, tag: str) -> str:
    """Generated files each define a static gpuAssert and the CUDA_CHECK/CUBIN_NAME
    macros; rename them so that all of them fit in one translation unit."""
    text = text.replace("gpuAssert", f"gpuAssert_{tag}")
    text = text.replace("#define CUDA_CHECK", "#undef CUDA_CHECK\n#define CUDA_CHECK")
    text = text.replace("#define CUBIN_NAME", "#undef CUBIN_NAME\n#define CUBIN_NAME")
    # A failed load must not end the process (the generated code calls exit()): report it
    # and leave the function handle NULL, which the launch then returns as an error.
    text = re.sub(r"exit\(code\);", "return;", text)
    # An empty grid falls off the end of the generated launcher: return success instead.
    text = re.sub(r"(return cuLaunchKernel\([^;]*;)\n}", r"\1\n    return CUDA_SUCCESS;\n}", text)
    return text


def _prototype(header: str, fn: str):
    """The parameter list of `CUresult fn(...)` in a generated header, or None."""
    m = re.search(r"CUresult\s+" + re.escape(fn) + r"\s*\(([^)]*)\)\s*;", header)
    return m.group(1).strip() if m else None


def _arg_names(params: str):
    return [p.strip().split()[-1].lstrip("*") for p in params.split(",") if p.strip()]


def _arch_wrapper(name: str, header: str):
    """C and header text of NAME_default / NAME / load_NAME / unload_NAME, each choosing the
    dispatcher of the device's arch, and NAME_get_num_algos where the linker made one."""
    c, h = [], []
    for suffix in ("_default", ""):
        params = _prototype(header, f"{name}_sm{ARCHS[-1]}{suffix}")
        if params is None:
            sys.exit(f"triton_aot: no CUresult {name}_sm{ARCHS[-1]}{suffix}(...) in the linked header")
        args = ", ".join(_arg_names(params))
        calls = " : ".join(f"arch >= {a} ? {name}_sm{a}{suffix}({args})" for a in reversed(ARCHS[1:]))
        body = f"{calls} : {name}_sm{ARCHS[0]}{suffix}({args})" if calls else f"{name}_sm{ARCHS[0]}{suffix}({args})"
        h.append(f"CUresult {name}{suffix}({params});")
        c.append(f"CUresult {name}{suffix}({params}) {{\n  const int arch = klab_triton_arch();\n  return {body};\n}}")
    if re.search(r"int\s+" + re.escape(f"{name}_sm{ARCHS[-1]}_get_num_algos") + r"\s*\(", header):
        # The same entries for every arch: the count is the same.
        h.append(f"int {name}_get_num_algos(void);")
        c.append(f"int {name}_get_num_algos(void) {{\n  return {name}_sm{ARCHS[-1]}_get_num_algos();\n}}")
    for verb in ("load", "unload"):
        h.append(f"void {verb}_{name}(void);")
        branches = " else ".join(f"if (arch >= {a}) {verb}_{name}_sm{a}();" for a in reversed(ARCHS[1:]))
        tail = f" else {verb}_{name}_sm{ARCHS[0]}();" if branches else f"{verb}_{name}_sm{ARCHS[0]}();"
        c.append(f"void {verb}_{name}(void) {{\n  const int arch = klab_triton_arch();\n  {branches}{tail}\n}}")
    return "\n".join(c), "\n".join(h)


def _check_algo_order(aname, headers, linked_c):
    """The linked launcher's algo_ids must follow the AOT list (its distinct configurations
    in order of first appearance): a launcher that numbered them otherwise would run one
    configuration under another's name, and every autotune label and --candidate would lie."""
    want = []
    for h in headers:
        m = re.search(r"^// tt-linker: [^\n]*:([^:\n]+)$", Path(h).read_text(), re.M)
        if m and m.group(1) not in want:
            want.append(m.group(1))
    table = re.search(re.escape(aname) + r"_kernels\[\] = \{([^}]*)\}", linked_c)
    got = [ln.strip().rstrip(",")[len(aname) + 1:] for ln in (table.group(1) if table else "").splitlines()
           if ln.strip()]
    if got != want:
        sys.exit(f"triton_aot: {aname}: the linker numbered the configurations {got}, the AOT list has {want}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path)
    ap.add_argument("--out-dir", type=Path, required=True)
    args = ap.parse_args()

    src = args.source.resolve()
    stem = src.stem
    args.out_dir.mkdir(parents=True, exist_ok=True)
    _install_shim()
    aot, mod = _load_aot_list(src)

    by_name = {}
    for e in aot:
        by_name.setdefault(e["name"], []).append(e)

    global _target_arch
    # klab/src/triton.cpp: the arch the launchers pick, and min(tiles, SMs) for a persistent grid.
    decls = "int klab_triton_arch(void);\nint klab_triton_sm_grid(int tiles);"
    c_parts, h_parts = [decls + "  /* klab/src/triton.cpp */"], [decls]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, entries in by_name.items():
            linked_headers = ""
            for arch in ARCHS:
                _target_arch = arch
                aname = f"{name}_sm{arch}"
                kdir = tmp / aname
                kdir.mkdir()
                in_order = []   # each entry's header, in list order: the order of the algo_ids
                for i, e in enumerate(entries):
                    ca = tt_compile.CompileArgs(
                        path=str(src), kernel_name=e["kernel"], signature=e["signature"],
                        grid=e["grid"], num_warps=e.get("num_warps", 4),
                        num_stages=e.get("num_stages", 3), out_name=aname,
                        out_path=kdir / f"{aname}")
                    try:
                        _, files = tt_compile.compile_kernel(ca)
                    except Exception as ex:  # the source line first, then the entry and arch
                        sys.exit(f"{_source_error(src, ex, mod, e['kernel'])} (entry {name}[{i}], "
                                 f"{e['kernel']} {e['signature']}, sm_{arch})")
                    for f in files:
                        if f.suffix == ".c":
                            c_parts.append(_unique(f.read_text(), f.stem.replace(".", "_")))
                        else:
                            h_parts.append(f.read_text())
                            in_order.append(f)
                # The linker numbers the configurations (algo_id) in the order it reads their
                # headers, so they go in list order: the impls name their candidates by it.
                saved_argv = sys.argv
                sys.argv = ["link", *map(str, in_order), "-o", str(kdir / aname)]
                try:
                    runpy.run_module("triton.tools.link", run_name="__main__")
                finally:
                    sys.argv = saved_argv
                linked_c = (kdir / f"{aname}.c").read_text()
                _check_algo_order(aname, in_order, linked_c)
                c_parts.append(linked_c.replace("kernel_func_t", f"kernel_func_t_{aname}"))
                linked = (kdir / f"{aname}.h").read_text()
                h_parts.append(linked)
                linked_headers += linked
            wc, wh = _arch_wrapper(name, linked_headers)
            c_parts.append(wc)
            h_parts.append(wh)

    guard = f"KLAB_TRITON_{stem.upper()}_H"
    header = (f"// Generated by tools/triton_aot.py from {src.name}; do not edit.\n"
              f"#ifndef {guard}\n#define {guard}\n#include <cuda.h>\n"
              "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
              + "\n".join(h_parts) +
              "\n#ifdef __cplusplus\n}\n#endif\n#endif\n")
    source = (f"// Generated by tools/triton_aot.py from {src.name}; do not edit.\n"
              + "\n".join(c_parts))
    (args.out_dir / f"{stem}.h").write_text(header)
    (args.out_dir / f"{stem}.c").write_text(source)


if __name__ == "__main__":
    main()
