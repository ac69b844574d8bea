#!/usr/bin/env python3
"""tools/loc_speed.py fails what it must, and passes the checked-in pages.

    loc_speed_selftest.py MODE SCRATCH
MODE: committed     --check on docs/triton-vs-cuda.md as committed: exit 0
      hand_edited   a copy with one generated number changed: --check exits 1 and shows it
      no_lessons    a marker without lessons=: exit 1, one line
      no_such       lessons=99: exit 1, one line
      counts        the C++ reader on a fixture: exact spans and line counts (a declaration
                    starts on its own line; comments, a template parameter list, an
                    `if constexpr` and a struct's members are no definitions of their own)
"""
import subprocess
import sys
from pathlib import Path

mode, scratch = sys.argv[1], Path(sys.argv[2])
root = Path(__file__).resolve().parents[2]
tool = [sys.executable, str(root / "tools" / "loc_speed.py"), "render", "--check"]
page = root / "docs" / "triton-vs-cuda.md"
scratch.mkdir(parents=True, exist_ok=True)
copy = scratch / f"{mode}.md"
text = page.read_text()
if mode == "committed":
    copy = page
elif mode == "hand_edited":
    i = text.index("| 01 |")
    row_end = text.index("\n", i)
    row = text[i:row_end]
    cells = row.split("|")
    cells[5] = " 999 "           # the best CUDA version's line count
    copy.write_text(text[:i] + "|".join(cells) + text[row_end:])
elif mode == "no_lessons":
    copy.write_text("<!-- loc-speed lesson=01 -->\n<!-- /loc-speed -->\n")
elif mode == "no_such":
    copy.write_text("<!-- loc-speed lessons=99 -->\n<!-- /loc-speed -->\n")
elif mode == "counts":
    sys.path.insert(0, str(root / "tools"))
    import loc_speed
    copy = scratch / "fixture.cu"
    copy.write_text("""// header
constexpr int k = 256;
__global__ void k1(float* x) {
  x[0] = 1;  // a comment
  /* block */
}
template <class TA, class TC>
struct ZSlice {
  __device__ int at(int i) const { return i; }
  int load() { return 0; }
};
void run_k1() {
  if constexpr (true) { k1<<<1, 1>>>(nullptr); }
}
""")
    found, text = loc_speed.definitions(copy)
    got = {name: (dev, first, last, loc_speed.code_lines(text, first, last)) for name, dev, first, last, _ in found
           if first}
    want = {"k1": (True, 3, 6, 3), "ZSlice": (True, 8, 11, 4), "at": (True, 9, 9, 1), "load": (False, 10, 10, 1),
            "run_k1": (False, 12, 14, 3)}
    ok = got == want
    print(f"loc_speed_selftest counts: {'ok' if ok else 'FAILED'}\n got  {got}\n want {want}")
    sys.exit(0 if ok else 1)
else:
    sys.exit(f"unknown mode {mode}")
r = subprocess.run(tool + [str(copy)], capture_output=True, text=True)
want = 0 if mode == "committed" else 1
ok = r.returncode == want and (mode != "hand_edited" or "999" in r.stdout)
print(f"loc_speed_selftest {mode}: exit {r.returncode} (want {want}){'' if ok else ' FAILED'}\n{r.stdout[-800:]}{r.stderr[-400:]}")
sys.exit(0 if ok else 1)
