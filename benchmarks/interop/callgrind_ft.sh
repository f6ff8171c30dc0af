#!/usr/bin/env bash
# The free-threaded cost in instructions, load-independent where the timings
# of benchmarks/freethreading/bench_ft.py are not: CPython 3.13 built from one
# Debian source twice, default and --disable-gil, with the same configure
# flags otherwise (scripts/python-ft.sh builds and caches both, NumPy's cp313
# and cp313t wheels and devbuf for each), and every row counted by callgrind
# the same way, in one process per build: the loop with N calls minus the same
# loop with 0 calls, divided by N (callgrind dumps its counters at each
# os.getppid() between them, --dump-before=getppid). The loop is the same for every row, a function
#
#     def loop(f, x, n):
#         for _ in range(n):
#             f(x)
#
# each result dropped at once (its deallocation counted). The floor is the
# same loop calling the builtin `id`: what the interpreter spends on the loop
# and a call of a C function with one argument, which 3.13t does not
# specialize. The free-threaded build runs with PYTHON_GIL=0; the default
# build with PYTHON_GIL unset (it accepts no other value).
#
#   benchmarks/interop/callgrind_ft.sh            build (cached), count, print
#   CALLGRIND_FT_DOC=1 benchmarks/interop/callgrind_ft.sh
#                                                  ... and write the table into
#                                                  docs/benchmarks.md, section
#                                                  "Free-threaded cost in instructions"
#   N=20000 (calls per row), FT_DIR (python-ft.sh's folder), CALLGRIND_FT_NOBUILD=1
#   CALLGRIND_FT_ONLY="t t-old"   only the raw rows of these builds (t-old: the
#                                  3.13t interpreter with devbuf from
#                                  $FT_DIR/build-t-old, e.g. another commit's)
#
# Goal (docs/benchmarks.md): each devbuf row's instructions above the floor,
# free-threaded over default, at most max(1.10, the memoryview(bytearray(64))
# row's ratio in the same run). Needs valgrind.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${FT_DIR:-$ROOT/build-ft}"
N=${N:-20000}
if [ "${CALLGRIND_FT_NOBUILD:-0}" != 1 ]; then
  FT_STEPS="build venv devbuf default" "$ROOT/scripts/python-ft.sh" >"$OUT/callgrind-ft-build.log" 2>&1 ||
    { tail -30 "$OUT/callgrind-ft-build.log"; exit 1; }
fi
command -v valgrind >/dev/null || { echo "callgrind_ft.sh: valgrind is not installed" >&2; exit 1; }
CASES=(floor "memoryview(bytearray(64))" "np.from_dlpack(ndarray)" "devbuf.view(DeviceBuffer)"
       "devbuf.view(ndarray)" "devbuf.from_dlpack(ndarray)" "np.from_dlpack(DeviceBuffer)")
PROG="$OUT/callgrind_ft_case.py"
cat >"$PROG" <<'PYEOF'
import os
import sys
import numpy as np
import devbuf
n = int(sys.argv[1])
a = np.arange(1024, dtype=np.float32).reshape(32, 32)
b = devbuf.from_host(a)
cases = {
    "floor": (id, a),
    "memoryview(bytearray(64))": (memoryview, bytearray(64)),
    "np.from_dlpack(ndarray)": (np.from_dlpack, a),
    "devbuf.view(DeviceBuffer)": (devbuf.view, b),
    "devbuf.view(ndarray)": (devbuf.view, a),
    "devbuf.from_dlpack(ndarray)": (devbuf.from_dlpack, a),
    "np.from_dlpack(DeviceBuffer)": (np.from_dlpack, b),
}
assert list(cases) == sys.argv[2:], "the script's cases and callgrind_ft.sh's differ"
mark = os.getppid  # callgrind --dump-before=getppid: one dump per call


def loop(f, x, n):
    for _ in range(n):
        f(x)


for f, x in cases.values():  # warm every case (every cache) first
    loop(f, x, 2)
mark()
for f, x in cases.values():
    loop(f, x, 0)
    mark()
    loop(f, x, n)
    mark()
PYEOF
# One process per build: callgrind writes its counters and zeroes them at each
# os.getppid() (libc's getppid), so each case gets two segments, the loop with
# 0 calls and with N, alike but for the N calls.
count() {  # variant -> "case<TAB>instructions per call" lines
  # variant: d or t, or d-NAME / t-NAME for devbuf built in $OUT/build-d-NAME
  # (another checkout's devbuf on the same interpreter: a before/after pair).
  local v="$1" gil=() dir="$OUT/callgrind-ft-$1" i=${1%%-*}
  [ "$i" = t ] && gil=(PYTHON_GIL=0)
  rm -rf "$dir"; mkdir -p "$dir"
  env -u PYTHON_GIL "${gil[@]}" PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 PYTHONPATH="$OUT/build-$v/python" \
    valgrind --tool=callgrind --dump-before=getppid --callgrind-out-file="$dir/cg.out" \
    "$OUT/venv-$i/bin/python" "$PROG" "$N" "${CASES[@]}" >"$dir/valgrind.log" 2>&1 ||
    { tail -20 "$dir/valgrind.log" >&2; return 1; }
  local i=0 c zero full
  for c in "${CASES[@]}"; do
    zero=$(sed -n 's/^summary: //p' "$dir/cg.out.$((2 + 2 * i))")
    full=$(sed -n 's/^summary: //p' "$dir/cg.out.$((3 + 2 * i))")
    [ -n "$zero" ] && [ -n "$full" ] || { echo "callgrind_ft.sh: no dump for $c on build $v ($dir)" >&2; return 1; }
    printf '%s\t%s\t%s\n' "$v" "$c" "$(( (full - zero + N / 2) / N ))"
    i=$((i + 1))
  done
}
if [ -n "${CALLGRIND_FT_ONLY:-}" ]; then  # raw rows of some variants, no table
  for v in $CALLGRIND_FT_ONLY; do count "$v" || exit 1; done
  exit 0
fi
RES="$OUT/callgrind-ft.tsv"
: >"$RES"
for v in d t; do
  count "$v" | tee -a "$RES"
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
done
"$OUT/venv-d/bin/python" - "$RES" "$N" "$("$OUT/venv-d/bin/python" -c 'import sys; print(sys.version.split()[0])')" \
  "${CALLGRIND_FT_DOC:-0}" "$ROOT/docs/benchmarks.md" <<'PYEOF'
import re, sys
res, n, version, doc, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5]
got = {}
for line in open(res):
    v, case, ir = line.rstrip("\n").split("\t")
    got[(v, case)] = int(ir)
cases = [c for (v, c) in got if v == "d"]
fd, ft = got[("d", "floor")], got[("t", "floor")]
ratio = {c: (got[("t", c)] - ft) / (got[("d", c)] - fd) for c in cases if c != "floor"}
limit = max(1.10, ratio["memoryview(bytearray(64))"])
lines = [
    f"CPython {version}, one Debian source built twice (default; `--disable-gil`, run with",
    f"`PYTHON_GIL=0`), the same configure flags otherwise; instructions per call (callgrind,",
    f"the loop of {n} calls minus the same loop of none, one process), loop included. Above the floor: minus the",
    "floor row of the same build. Goal: each devbuf row's ratio above the floor at most",
    f"max(1.10, `memoryview(bytearray(64))`'s) = **{limit:.2f}**.",
    "",
    "| per call (instructions) | default | free-threaded | default above floor | free-threaded above floor | ratio above floor | goal |",
    "|---|---:|---:|---:|---:|---:|---|",
]
for c in cases:
    d, t = got[("d", c)], got[("t", c)]
    if c == "floor":
        lines.append(f"| floor: `id(x)`, the same loop | {d:,} | {t:,} | | | | |")
        continue
    r = ratio[c]
    goal = ("met" if r <= limit + 1e-9 else "NOT met") if c.startswith("devbuf.") or c.endswith("(DeviceBuffer)") else ""
    lines.append(f"| `{c}` | {d:,} | {t:,} | {d - fd:,} | {t - ft:,} | {r:.2f} | {goal} |")
table = "\n".join(lines)
print(table)
if doc:
    text = open(path).read()
    begin, end = "<!-- callgrind_ft.sh begin -->", "<!-- callgrind_ft.sh end -->"
    if begin not in text:
        sys.exit(f"{path}: no '{begin}' marker under 'Free-threaded cost in instructions'")
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda m: begin + "\n" + table + "\n" + end,
                  text, flags=re.S)
    open(path, "w").write(text)
    print(f"written into {path}")
PYEOF
