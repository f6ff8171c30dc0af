#!/bin/sh
# Build a docs/examples plugin in another language with its own toolchain, as
# its author would, and hold it to the whole conformance suite.
#
#   example_plugin.sh rust SRC_DIR OUT_DIR CONFORMANCE LAYOUT_EXE [CARGO]
#   example_plugin.sh cpp  SRC_DIR OUT_DIR CONFORMANCE INCLUDE_DIR [CXX]
#   example_plugin.sh go   SRC_DIR OUT_DIR CONFORMANCE INCLUDE_DIR [GO] [DEVBUF_INFO]
#
# The Go plugin is also probed by devbuf-info ten times: the Go runtime
# starts when the library is loaded, and a probe must load it afresh.
#
# A missing toolchain is a skip with its reason (exit 77, ctest's
# SKIP_RETURN_CODE), never a pass. Everything built lands in OUT_DIR (cargo's
# target directory too); nothing is fetched (cargo --offline --locked).
lang=$1 src=$2 out=$3 conf=$4 aux=$5 tool=$6 info=$7
skip() { echo "SKIP example_$lang: $*"; exit 77; }
fail() { echo "FAIL example_$lang: $*"; exit 1; }
mkdir -p "$out" || fail "cannot create $out"

# The plugin must export its entry symbol and nothing else.
exports_only_entry() {
  syms=$(nm -D --defined-only "$1" | awk '{print $3}' | sort -u) || fail "nm $1"
  [ "$syms" = devbuf_plugin_entry ] ||
    fail "$1 exports more than devbuf_plugin_entry: $(echo "$syms" | head -5 | tr '\n' ' ')"
}

case $lang in
  rust)
    cargo=$tool
    [ -n "$cargo" ] && [ -x "$cargo" ] || cargo=$(command -v cargo 2>/dev/null)
    [ -n "$cargo" ] || [ ! -x "$HOME/.cargo/bin/cargo" ] || cargo=$HOME/.cargo/bin/cargo
    [ -n "$cargo" ] || skip "no cargo (not on PATH, not in \$HOME/.cargo/bin): install a Rust toolchain to build docs/examples/plugin-rust"
    export CARGO_TARGET_DIR="$out/target"
    "$cargo" build --offline --locked --release --manifest-path "$src/Cargo.toml" ||
      fail "cargo build failed"
    "$aux" > "$out/layout.txt" || fail "layout program failed"
    DEVBUF_LAYOUT="$out/layout.txt" "$cargo" test --offline --locked --release \
      --manifest-path "$src/Cargo.toml" || fail "cargo test (the #[repr(C)] mirrors against plugin.h) failed"
    plugin=$out/target/release/libdevbuf_plugin_rust.so
    id=example.rust ;;
  cpp)
    cxx=$tool
    [ -n "$cxx" ] && [ -x "$cxx" ] || cxx=$(command -v c++ 2>/dev/null || command -v g++ 2>/dev/null || command -v clang++ 2>/dev/null)
    [ -n "$cxx" ] || skip "no C++ compiler (c++, g++ or clang++) on PATH"
    plugin=$out/devbuf_plugin_cpp.so
    "$cxx" -std=c++17 -Wall -Wextra -Werror -pedantic -fPIC -shared -fvisibility=hidden \
      "-Wl,--version-script=$src/plugin.map" -I"$aux" -o "$plugin" "$src/plugin.cpp" ||
      fail "$cxx -std=c++17 -Werror failed"
    id=example.cpp ;;
  go)
    go=$tool
    [ -n "$go" ] && [ -x "$go" ] || go=$(command -v go 2>/dev/null)
    [ -n "$go" ] || skip "no go (not on PATH): install Debian's golang-go to build docs/examples/plugin-go"
    PATH=$(dirname "$go"):$PATH sh "$src/build.sh" "$aux" "$out" || fail "go build -buildmode=c-shared failed"
    plugin=$out/devbuf_plugin_go.so
    id=example.go ;;
  *) fail "unknown language '$lang'" ;;
esac

exports_only_entry "$plugin"
res=$(DEVBUF_PLUGINS=$plugin "$conf" "$id")
rc=$?
echo "$res"
[ $rc -eq 0 ] || fail "conformance exit status $rc"
echo "$res" | tail -n 1 | grep -Eq '^[0-9]+ passed, 0 failed, 0 skipped$' || fail "not every check passed"
echo "example_$lang: $plugin passes conformance"
if [ "$lang" = go ] && [ -n "$info" ]; then
  ok=0
  for i in 1 2 3 4 5 6 7 8 9 10; do
    st=$(DEVBUF_NO_DEFAULT_PLUGINS=1 DEVBUF_PLUGIN_PATH= DEVBUF_PLUGINS=$plugin "$info" --json \
           --timeout 10 2>/dev/null | grep -o '"status": *"[a-z_]*"' | head -n 1)
    echo "probe $i: $st"
    case $st in *'"ok"') ok=$((ok + 1)) ;; esac
  done
  echo "example_go: devbuf-info probed the Go plugin ok $ok of 10 times"
  [ $ok -eq 10 ] || fail "devbuf-info probed it ok only $ok of 10 times"
fi
