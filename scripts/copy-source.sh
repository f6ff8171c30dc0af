#!/usr/bin/env bash
# copy-source.sh SRC DEST: copy a checkout's source files (tracked and new,
# not ignored: no build folders, no venv) into DEST, as a fresh clone would
# have them. For scripts/test-pip-install.sh (the reproducibility build in
# another folder) and scripts/build-manylinux.sh (the source in the root).
set -euo pipefail
src="$1"; dest="$2"
mkdir -p "$dest"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  # A folder listed (a link to a venv, a nested checkout) is not source.
  git -C "$src" ls-files -z -co --exclude-standard \
    | (cd "$src" && while IFS= read -r -d '' f; do [ -d "$f" ] || printf '%s\0' "$f"; done) \
    | (cd "$src" && xargs -0 cp --parents -t "$dest")
else
  tar -C "$src" --exclude='./build*' --exclude=./.venv --exclude=./.git -cf - . | tar -C "$dest" -xf -
fi
