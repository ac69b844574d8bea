#!/usr/bin/env python3
"""Every Triton kernel is compiled ahead of time for both sm_80 and sm_90.

    triton_arches.py BUILD_DIR

Reads each generated lessons/*/triton/*.c under BUILD_DIR (tools/triton_aot.py's output),
takes every embedded cubin (an ELF file: its e_flags hold the SM version in the low byte)
and checks that each kernel entry has one cubin for sm_80 and one for sm_90, and that the
arch named in the entry (NAME_sm80_..., NAME_sm90_...) is the arch the cubin was built for.
Exit 0 with a summary line, 1 with one line per problem.
"""
import re
import struct
import sys
from collections import defaultdict
from pathlib import Path

ARCHS = (80, 90)
build = Path(sys.argv[1])
files = sorted(build.glob("lessons/*/triton/*.c"))
if not files:
    sys.exit(f"triton_arches: no generated Triton C files under {build}/lessons/*/triton/")
problems, seen = [], defaultdict(set)
cubin_re = re.compile(r"#define CUBIN_NAME (\w+)\n(?:[^\n]*\n){0,4}?unsigned char CUBIN_NAME\[\d+\] = \{([^}]*)\}")
for f in files:
    text = f.read_text()
    for m in cubin_re.finditer(text):
        name = m.group(1)
        tag = re.match(r"(.*)_sm(\d+)_[0-9a-f]+_", name)
        if not tag:
            problems.append(f"{f.name}: cubin {name} names no arch (NAME_smNN_...)")
            continue
        entry, arch = tag.group(1), int(tag.group(2))
        data = bytes(int(x, 16) for x in m.group(2).split(",") if x.strip())
        if data[:4] != b"\x7fELF":
            problems.append(f"{f.name}: cubin {name} is not an ELF file")
            continue
        sm = struct.unpack_from("<I", data, 0x30)[0] & 0xFF
        if sm != arch:
            problems.append(f"{f.name}: cubin {name} is built for sm_{sm}, not sm_{arch}")
        seen[(f.name, entry)].add(sm)
for (fname, entry), archs in sorted(seen.items()):
    missing = [a for a in ARCHS if a not in archs]
    if missing:
        problems.append(f"{fname}: {entry} has no cubin for " + ", ".join(f"sm_{a}" for a in missing))
if not seen:
    problems.append("no cubins found in the generated files")
for p in problems:
    print(p)
if problems:
    sys.exit(1)
print(f"triton_arches: {len(seen)} kernel entries in {len(files)} files, each built for "
      + " and ".join(f"sm_{a}" for a in ARCHS))
