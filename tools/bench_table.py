#!/usr/bin/env python3
"""Markdown tables for a lesson README from `klab bench --json` output.

    tools/bench_table.py bench.json --lesson 01 [--op vector_add] [--date 2026-11-22]

One table per op: every problem and impl with its median time, GB/s or TFLOP/s (by the
op's bound), % of the measured peak the op is judged against (named beside the op's name)
and the ratio to the op's baseline from the same run. A row whose timed launches saw a
power or thermal clock event says "throttled" and names the events.
"""
import argparse
import json
import sys


def fmt_ms(ms):
    if ms <= 0:
        return "-"
    if ms < 1:
        return f"{ms * 1e3:.1f} us"
    return f"{ms:.3f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--lesson", required=True)
    ap.add_argument("--op", action="append")
    ap.add_argument("--date", default="")
    a = ap.parse_args()
    j = json.load(open(a.json))
    dev = j.get("device") or {}
    peaks = dev.get("peaks", {})
    recs = [r for r in j["bench"] if r["lesson"] == a.lesson and (not a.op or r["op"] in a.op)]
    if not recs:
        sys.exit("no records for that lesson/op")
    print(f"Device: {dev.get('name', '?')}, {a.date}. Measured peaks of this device (klab doctor): "
          f"copy {peaks.get('copy_gbps', 0):.0f} GB/s, read {peaks.get('read_gbps', 0):.0f} GB/s, "
          f"cuBLAS fp32 {peaks.get('sgemm_tflops', 0):.1f}, bf16 {peaks.get('bf16_tflops', 0):.0f} TFLOP/s. "
          f"Medians of L2-flushed launches; ratios from the same run.\n")
    ops = []
    for r in recs:
        if r["op"] not in ops:
            ops.append(r["op"])
    for op in ops:
        rows = [r for r in recs if r["op"] == op]
        compute = any(r["tflops"] > 0 and r["pct_peak"] > 0 and "TFLOP" in r["peak"] for r in rows)
        base = next((r["baseline"] for r in rows if r["baseline"]), "")
        unit = "TFLOP/s" if compute else "GB/s"
        # The peak this op's percentages are of ("read 3210 GB/s"), as the bench named it.
        peak = next((r["peak"] for r in rows if r.get("peak")), "")
        print(f"**{op}**" + (f" (% of {peak})" if peak else "") + "\n")
        print(f"| shape | dtype | impl | median | {unit} | % of peak | vs {base or 'baseline'} |")
        print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
        for r in rows:
            p = r["problem"]
            shape = "x".join(str(d) for d in p["shape"]) + (f" {p['variant']}" if p["variant"] else "")
            if r["status"] == "unsupported":
                print(f"| {shape} | {p['dtype']} | {r['impl']} | unsupported | | | |")
                continue
            rate = r["tflops"] if compute else r["gbps"]
            status = "" if r["status"] == "pass" else f" ({r['status']})"
            tel = r.get("telemetry") or {}
            if tel.get("throttled"):
                # A median taken while the clock was lowered: say so beside the number.
                status += " (throttled: " + ", ".join(tel.get("events", [])) + ")"
            print(f"| {shape} | {p['dtype']} | {r['impl']}{status} | {fmt_ms(r['median_ms'])} | {rate:,.1f} | "
                  f"{r['pct_peak']:.1f}% | {r['speedup']:.2f}x |" if r["speedup"] else
                  f"| {shape} | {p['dtype']} | {r['impl']}{status} | {fmt_ms(r['median_ms'])} | {rate:,.1f} | "
                  f"{r['pct_peak']:.1f}% | - |")
        print()


if __name__ == "__main__":
    main()
