#!/bin/sh
# A setuid-root program that only calls devbuf_init, run by an ordinary user
# (nobody), must not load the plugins that user's DEVBUF_PLUGINS or
# DEVBUF_PLUGIN_PATH name. A control run without the setuid bit
# shows the same variables do load them otherwise.
#   secure_setuid.sh PROBE BROKEN_DIR      (exit 77: skipped, with the reason)
set -u
probe=$1 dir=$2
if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root to make a setuid-root helper"; exit 77; fi
if ! command -v setpriv >/dev/null 2>&1; then echo "SKIP: setpriv (util-linux) not installed"; exit 77; fi
tmp=$(mktemp -d /tmp/devbuf-setuid.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
cp "$probe" "$tmp/setuid_probe" && cp "$probe" "$tmp/plain_probe" || exit 1
chown root:root "$tmp/setuid_probe" "$tmp/plain_probe"
chmod 4755 "$tmp/setuid_probe"
chmod 0755 "$tmp/plain_probe"
run() {
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    env DEVBUF_PLUGINS="$dir/devbuf_plugin_good.so" DEVBUF_PLUGIN_PATH="$dir" \
    DEVBUF_NO_DEFAULT_PLUGINS=1 "$tmp/$1" probe "$dir"
}
# The control runs as nobody where nobody can reach the build tree; a checkout
# under a private directory (mktemp -d is 0700) cannot be, and there the
# control runs as root instead: it only shows that the variables load plugins
# outside secure-execution mode. The setuid run below has euid 0 either way.
if plain=$(run plain_probe 2>&1); then
  :
else
  echo "note: nobody cannot load the build tree from here; control run as root"
  plain=$(env DEVBUF_PLUGINS="$dir/devbuf_plugin_good.so" DEVBUF_PLUGIN_PATH="$dir" \
    DEVBUF_NO_DEFAULT_PLUGINS=1 "$tmp/plain_probe" probe "$dir") ||
    { echo "FAIL: the plain probe did not run"; exit 1; }
fi
case "$plain" in
  *"plugin loaded DEVBUF_PLUGINS $dir/devbuf_plugin_good.so"*) ;;
  *) echo "FAIL: control run did not load the DEVBUF_PLUGINS plugin:"; echo "$plain"; exit 1 ;;
esac
out=$(run setuid_probe) || { echo "FAIL: the setuid probe did not run as nobody"; exit 1; }
case "$out" in
  *"secure=1"*) ;;
  *) echo "SKIP: the setuid bit had no effect here (nosuid mount?):"; echo "$out"; exit 77 ;;
esac
case "$out" in
  *DEVBUF_PLUGIN*) echo "FAIL: setuid program loaded plugins from the environment:"; echo "$out"; exit 1 ;;
esac
echo "ok   setuid program ignores DEVBUF_PLUGINS/DEVBUF_PLUGIN_PATH"
echo "1 passed, 0 failed"
