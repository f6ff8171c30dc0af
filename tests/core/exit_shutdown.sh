#!/bin/sh
# exit_shutdown.sh PROGRAM PLUGIN_A PLUGIN_B [DEVBUF_INFO]: plugins' shutdown
# runs once each at exit, in reverse load order, in C programs and in
# devbuf-info.
prog=$1 a=$2 b=$3 info=$4
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
export DEVBUF_NO_DEFAULT_PLUGINS=1 DEVBUF_PLUGIN_PATH= DEVBUF_PLUGINS="$a:$b" DEVBUF_TEST_EXIT_LOG="$log"
"$prog" || { echo "FAIL: $prog exited with $?"; exit 1; }
want=$(printf 'init a\ninit b\nshutdown b\nshutdown a')
got=$(cat "$log")
[ "$got" = "$want" ] || { printf 'FAIL: trace of %s:\n%s\nwanted:\n%s\n' "$prog" "$got" "$want"; exit 1; }
echo "ok: C program: $(echo $got)"
if [ -n "$info" ]; then
  : > "$log"
  "$info" > /dev/null || { echo "FAIL: devbuf-info exited with $?"; exit 1; }
  # Probing children may trace too; the parent's last two lines are its shutdowns.
  last=$(tail -n 2 "$log")
  [ "$last" = "$(printf 'shutdown b\nshutdown a')" ] || {
    printf 'FAIL: devbuf-info trace:\n%s\n' "$(cat "$log")"; exit 1; }
  echo "ok: devbuf-info: $(echo $(cat "$log"))"
fi
