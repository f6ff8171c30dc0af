#!/usr/bin/env bash
# Cost of the series: the same microbenchmarks on the unpatched and the
# patched build (same source, same configure flags), for the default build
# (unpatched, patched) and the free-threaded one (unpatched-t, patched-t,
# GIL off), interleaved 3 times, best per build. Not a pass/fail stage
# (timing noise on shared cores); scripts/cpython-reference.sh runs it when
# CPYREF_BENCH=1.
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:?}"
# Each pair whose two interpreters are built (CPYREF_BENCH=1 in
# cpython-reference.sh builds all four).
VARIANTS=()
[ -x "$OUT/unpatched/python" ] && [ -x "$OUT/patched/python" ] && VARIANTS+=(unpatched patched)
[ -x "$OUT/unpatched-t/python" ] && [ -x "$OUT/patched-t/python" ] && VARIANTS+=(unpatched-t patched-t)
[ "${#VARIANTS[@]}" -gt 0 ] || { echo "bench.sh: no patched/unpatched pair is built under $OUT" >&2; exit 1; }
envs() { case "$1" in *-t) echo PYTHON_GIL=0 ;; *) echo PYTHONHASHSEED=0 ;; esac; }
for v in "${VARIANTS[@]}"; do
  mkdir -p "$OUT/bench/$v"
  suf="$("$OUT/$v/python" -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))')"
  gcc -shared -fPIC -O2 -I"$OUT/$v/Include" -I"$OUT/$v" "$HERE/benchext.c" -o "$OUT/bench/$v/benchext$suf"
done
for round in 1 2 3; do
  for v in "${VARIANTS[@]}"; do
    env "$(envs "$v")" PYTHONPATH="$OUT/bench/$v" "$OUT/$v/python" "$HERE/bench.py" >"$OUT/bench/$v.$round.json"
  done
done
# Instructions per operation under callgrind (when valgrind is installed):
# instr.py runs each body N times at STATES heap states, callgrind counting
# only the loops (one dump per state); per state Ir / N.  The table takes the
# minimum over the states (as the times take the best of their repeats: an
# allocator slow path that one heap state hands either build is not the
# code's cost) and shows the median's change beside it.  Deterministic,
# unlike time.
N_INSTR=20000
STATES=8
NAMES=("memoryview(bytearray)" "bytes(memoryview)" "struct.unpack_from('<4i', buf)"
  "C GetBuffer+Release SIMPLE" "C GetBuffer+Release FULL_RO" "C GetBuffer+Release FULL_RO|DEVICE")
ir() { # $1 = variant, $2 = name: one line "min<TAB>median" in tenths of an instruction
  local d; d="$(mktemp -d)"
  env "$(envs "$1")" PYTHONHASHSEED=0 PYTHONPATH="$OUT/bench/$1" valgrind --tool=callgrind \
    --collect-atstart=no --callgrind-out-file="$d/cg.out" \
    "$OUT/$1/python" "$HERE/instr.py" "$2" "$N_INSTR" "$STATES" >"$d/log" 2>&1 ||
    { cat "$d/log" >&2; rm -rf "$d"; return 1; }
  python3 - "$d" "$N_INSTR" "$STATES" <<'PY'
import glob, re, statistics, sys
d, n, states = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = []
for f in glob.glob(f"{d}/cg.out.*"):
    text = open(f).read()
    if re.search(r"^desc: Trigger: Client Request: state\d+$", text, re.M):
        per.append(int(re.search(r"^totals: (\d+)", text, re.M).group(1)) * 10 / n)
if len(per) != states:
    sys.exit(f"instr: {len(per)} callgrind dumps in {d}, expected {states}")
print(f"{round(min(per))}\t{round(statistics.median(per))}")
PY
  rm -rf "$d"
}
: >"$OUT/bench/instr.tsv"
if command -v valgrind >/dev/null; then
  for v in "${VARIANTS[@]}"; do
    for name in "${NAMES[@]}"; do
      counts="$(ir "$v" "$name")" || exit 1
      printf '%s\t%s\t%s\n' "$v" "$name" "$counts" >>"$OUT/bench/instr.tsv"
    done
  done
fi
python3 - "$OUT/bench" <<'PY'
import json, sys, glob, os
d = sys.argv[1]
best = {}
for v in ("unpatched", "patched", "unpatched-t", "patched-t"):
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{d}/{v}.*.json"))]
    if not runs:
        continue
    best[v] = {k: min(r[k] for r in runs) for k in runs[0]}
instr, med = {}, {}
for line in open(os.path.join(d, "instr.tsv")):
    v, k, lo, mid = line.rstrip("\n").split("\t")
    instr[v, k], med[v, k] = int(lo) / 10, int(mid) / 10
print("| build | benchmark | unpatched ns | patched ns | change | unpatched instr | patched instr | change | change (median) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for build, (uv, pv) in (("3.13", ("unpatched", "patched")), ("3.13t", ("unpatched-t", "patched-t"))):
    if uv not in best:
        continue
    for k in best[uv]:
        u, p = best[uv][k], best[pv][k]
        iu, ip = instr.get((uv, k)), instr.get((pv, k))
        mu, mp = med.get((uv, k)), med.get((pv, k))
        icol = (f"{iu:.1f} | {ip:.1f} | {100*(ip-iu)/iu:+.1f}% | {100*(mp-mu)/mu:+.1f}%"
                if iu and ip is not None else "n/a | n/a | n/a | n/a")
        print(f"| {build} | {k.replace('|', chr(92) + '|')} | {u:.1f} | {p:.1f} | {100*(p-u)/u:+.1f}% | {icol} |")
PY
