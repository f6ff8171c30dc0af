#!/usr/bin/env bash
# Stage of scripts/cpython-reference.sh (CPYREF_DOC=1): the series' Doc/ patch
# applies, and CPython's documentation checks pass on the patched Doc/:
# sphinx-lint as CPython's pre-commit runs it (--enable=default-role) on the
# files the series touches, and a nit-picky Sphinx build (-n, the dummy
# builder: every reference resolved, nothing written) checked by CPython's
# own Doc/tools/check-warnings.py --fail-if-regression (a file outside
# Doc/tools/.nitignore must have no warning), plus no warning on any line the
# series adds.  Needs OUT (build-cpython313) with the source in OUT/src.
# Sphinx and its extensions come from the source's Doc/requirements.txt into
# a private venv (OUT/doc-venv); no network needed once it exists.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:?}"
SERIES="$HERE/../patches-3.13"
SRC="$(ls -d "$OUT"/src/python3.13-*/ | head -1)"
D="$OUT/doc-src"
rm -rf "$D"; cp -a "$SRC" "$D" || exit 1
for p in "$SERIES"/*.patch; do
  patch -d "$D" -p1 --no-backup-if-mismatch -s <"$p" || { echo "doc.sh: $(basename "$p") does not apply"; exit 1; }
done
V="$OUT/doc-venv"
if [ ! -x "$V/bin/sphinx-build" ] || [ ! -x "$V/bin/sphinx-lint" ]; then
  rm -rf "$V"
  python3 -m venv "$V" && "$V/bin/python" -m pip install -q -r "$D/Doc/requirements.txt" \
    -c "$D/Doc/constraints.txt" 'sphinx-lint==1.0.2' >"$OUT/doc-venv.log" 2>&1 ||
    { tail -20 "$OUT/doc-venv.log"; echo "doc.sh: installing Sphinx failed"; exit 1; }
fi
# The Doc/ files the series changes.
mapfile -t files < <(sed -n 's|^+++ b/\(Doc/.*\)|\1|p' "$SERIES"/*.patch | sort -u)
[ "${#files[@]}" -gt 0 ] || { echo "doc.sh: no patch in $SERIES touches Doc/"; exit 1; }
(cd "$D" && "$V/bin/sphinx-lint" --enable default-role "${files[@]}") || { echo "doc.sh: sphinx-lint"; exit 1; }
# A fresh environment every time: a kept one would re-read only the files
# whose mtime changed and so drop the other files' warnings.
rm -rf "$OUT/doc-build"
(cd "$D/Doc" && "$V/bin/sphinx-build" -b dummy -n -q --keep-going -j 1 \
  -w sphinx-warnings.txt . "$OUT/doc-build" >"$OUT/doc-build.log" 2>&1) ||
  { tail -20 "$OUT/doc-build.log"; echo "doc.sh: sphinx-build failed"; exit 1; }
(cd "$D" && "$V/bin/python" Doc/tools/check-warnings.py --fail-if-regression) ||
  { echo "doc.sh: check-warnings.py --fail-if-regression"; exit 1; }
# Warnings on the lines the series adds (a nitignored file may have old ones).
new="$(python3 - "$D" "$SERIES" <<'PY'
import glob, re, sys
root, series = sys.argv[1], sys.argv[2]
added = {}
for p in sorted(glob.glob(f"{series}/*.patch")):
    f = None
    for line in open(p, encoding="utf-8"):
        m = re.match(r"\+\+\+ b/(\S+)", line)
        if m:
            f = m.group(1)
            continue
        m = re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
        if m and f and f.startswith("Doc/"):
            a, n = int(m.group(1)), int(m.group(2) or 1)
            added.setdefault(f, set()).update(range(a, a + n))
for w in open(f"{root}/Doc/sphinx-warnings.txt", encoding="utf-8"):
    m = re.match(r"(?:.*/)?(Doc/\S+?):(\d+): WARNING: ", w.replace(root.rstrip("/") + "/", ""))
    if m and int(m.group(2)) in added.get(m.group(1), ()):
        print(w.rstrip())
PY
)"
[ -z "$new" ] || { echo "$new"; echo "doc.sh: Sphinx warnings on lines the series adds"; exit 1; }
echo "doc.sh: ${#files[@]} Doc/ files: sphinx-lint clean, nit-picky build: no regression, no warning on an added line ($(wc -l <"$D/Doc/sphinx-warnings.txt") old warnings elsewhere)"
