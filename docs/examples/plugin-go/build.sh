#!/bin/sh
# Build the Go example plugin as its author would, with Debian's golang and
# no network: module mode with no dependencies, GOPROXY=off.
#
#   build.sh DEVBUF_INCLUDE_DIR OUT_DIR     -> OUT_DIR/devbuf_plugin_go.so
set -e
src=$(cd "$(dirname "$0")" && pwd)
inc=$1 out=$2
mkdir -p "$out"
out=$(cd "$out" && pwd)
export GOPATH="$out/gopath" GOCACHE="$out/gocache" GOPROXY=off GOFLAGS=-buildvcs=false
export CGO_ENABLED=1
export CGO_CFLAGS="-I$inc -O2"
cd "$src"
# Only devbuf_plugin_entry is exported (exports.map). Through -extldflags,
# which reaches the final link once (CGO_LDFLAGS is passed to it twice, and
# ld refuses a version script given twice).
go build -buildmode=c-shared -ldflags="-extldflags=-Wl,--version-script=$src/exports.map" \
  -o "$out/devbuf_plugin_go.so" .
rm -f "$out/devbuf_plugin_go.h" # the generated header; a plugin has no users of it
