# debian-source.sh: sourced by scripts/cpython-reference.sh and
# scripts/python-ft.sh. One function:
#
#   debian_source PACKAGE SUITE OUT
#
# unpacks Debian's source package PACKAGE from SUITE (bookworm, trixie, ...)
# into OUT/src/PACKAGE-*/ with `apt-get source`, through a PRIVATE apt
# configuration under OUT/apt/ (its own sources.list with one deb-src line,
# its own lists and cache): the machine's apt sources and lists are never
# touched, and no root is needed. Does nothing when the source is there.

debian_source() {
  local pkg="$1" suite="$2" out="$3" apt="$3/apt" mirror
  if ls -d "$out"/src/"$pkg"-*/ >/dev/null 2>&1; then return 0; fi
  # The mirror the machine already uses (deb822 .sources or one-line .list).
  mirror="$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' |
    grep -v security | head -1)"
  [ -n "$mirror" ] || mirror="$(grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '{print $2}' | grep debian | grep -v security | head -1)"
  [ -n "$mirror" ] || mirror="http://deb.debian.org/debian"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$out/src"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=$(id -un)")
  echo "== apt-get update (private lists in $apt, $suite deb-src)"
  apt-get "${opts[@]}" update >"$apt/update.log" 2>&1 || { cat "$apt/update.log"; return 1; }
  echo "== apt-get source $pkg ($suite)"
  (cd "$out/src" && apt-get "${opts[@]}" source "$pkg" >"$apt/source.log" 2>&1) ||
    { tail -20 "$apt/source.log"; return 1; }
  ls -d "$out"/src/"$pkg"-*/ >/dev/null 2>&1
}
