#!/bin/sh
# registry_no_core: the registry is libdevbuf's bottom floor and calls nothing
# above it. Every devbuf* symbol that registry's objects leave
# undefined must be defined by one of them; anything else (devbuf_init, the
# runtime's records, a plugin listing) is a call up into core/.
# Usage: no_core_symbols.sh OBJECT...
set -eu
command -v nm >/dev/null 2>&1 || { echo "nm not found: skipped"; exit 77; }
defined=$(nm --defined-only "$@" | awk 'NF == 3 {print $3}' | sort -u)
undefined=$(nm -u "$@" | awk '{print $NF}' | grep '^devbuf' | sort -u || true)
up=""
for s in $undefined; do
  printf '%s\n' "$defined" | grep -qx "$s" || up="$up $s"
done
if [ -n "$up" ]; then
  echo "registry/ calls up into core/:$up"
  exit 1
fi
echo "registry objects ($#) reference no devbuf symbol they do not define"
