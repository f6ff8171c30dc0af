#!/bin/sh
# The guide (docs/plugin-authors.md) prints the first plugin's line count as
# measured by `wc -l`: keep the two in step, and the plugin under 100 lines.
root=$1
n=$(wc -l < "$root/docs/examples/plugin-first/first.c") || exit 1
grep -q "^\`wc -l docs/examples/plugin-first/first.c\` counts $n lines" "$root/docs/plugin-authors.md" || {
  echo "docs/plugin-authors.md does not state the measured count: first.c has $n lines"; exit 1; }
[ "$n" -lt 100 ] || { echo "first.c has $n lines, not under 100"; exit 1; }
echo "first.c: $n lines, as the guide says"
