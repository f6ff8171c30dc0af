#!/usr/bin/env bash
# Cost of the series: the same microbenchmarks on the unpatched and the
# patched build (same source, same configure flags), interleaved 3 times,
# best per build. Not a pass/fail stage (timing noise on shared cores);
# scripts/cpython-reference.sh runs it when CPYREF_BENCH=1.
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:?}"
for v in unpatched patched; do
  mkdir -p "$OUT/bench/$v"
  suf="$("$OUT/$v/python" -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))')"
  gcc -shared -fPIC -O2 -I"$OUT/$v/Include" -I"$OUT/$v" "$HERE/benchext.c" -o "$OUT/bench/$v/benchext$suf"
done
for round in 1 2 3; do
  for v in unpatched patched; do
    PYTHONPATH="$OUT/bench/$v" "$OUT/$v/python" "$HERE/bench.py" >"$OUT/bench/$v.$round.json"
  done
done
python3 - "$OUT/bench" <<'PY'
import json, sys, glob
d = sys.argv[1]
best = {}
for v in ("unpatched", "patched"):
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{d}/{v}.*.json"))]
    best[v] = {k: min(r[k] for r in runs) for k in runs[0]}
print(f"| benchmark | unpatched ns | patched ns | change |")
print(f"|---|---:|---:|---:|")
for k in best["unpatched"]:
    u, p = best["unpatched"][k], best["patched"][k]
    print(f"| {k} | {u:.1f} | {p:.1f} | {100*(p-u)/u:+.1f}% |")
PY
