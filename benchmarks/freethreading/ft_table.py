"""Markdown table of bench_ft.py's figures on the default and the
free-threaded build (scripts/python-ft.sh with FT_BENCH=1 writes both)."""
import json
import sys

# Per call, the goal is set in instructions (benchmarks/interop/callgrind_ft.sh):
# a few hundred nanoseconds move by 2x with the machine's load, so the timings
# below carry no verdict.
GOAL_SCALING = {"2 threads, own objects / 1 thread": 1.8,
                "2 threads, one shared DeviceBuffer / 1 thread": 1.8,
                # CPython's own exporter, for comparison: no goal.
                "2 threads, one shared bytearray via memoryview / 1 thread": None}


def main(default_path, ft_path):
    d = json.load(open(default_path))
    t = json.load(open(ft_path))
    print(f"CPython {d['python']} from one source: default build (GIL) and free-threaded "
          f"build (GIL off); {t['cpus']} CPUs.\n")
    print("| per call (ns, median; load-dependent) | default | free-threaded | ratio |")
    print("|---|---|---|---|")
    for k, v in d["ns_per_call"].items():
        ft = t["ns_per_call"].get(k)
        if ft is None:
            continue
        r = ft / v
        print(f"| {k} | {v:.0f} | {ft:.0f} | {r:.2f}x |")
    print("\n| scaling (throughput / one thread's, best of interleaved rounds; load-dependent) | default | free-threaded | goal |")
    print("|---|---|---|---|")
    for k, goal in GOAL_SCALING.items():
        dv, tv = d["scaling"].get(k), t["scaling"].get(k)
        if dv is None or tv is None:
            continue
        verdict = "" if goal is None else f">= {goal}x {'met' if tv >= goal else 'NOT met'}"
        print(f"| {k} | {dv:.2f}x | {tv:.2f}x | {verdict} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
