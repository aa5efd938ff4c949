#!/usr/bin/env bash
# Installs braid.h, libbraid.so and braid.pc under PREFIX (default /usr/local).
# Usage: bazel run //bindings/c:install -- PREFIX
set -euo pipefail
prefix="${1:-/usr/local}"
case "$prefix" in /*) ;; *) prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix" ;; esac
here="$(dirname "$0")"
runfiles="${RUNFILES_DIR:-$0.runfiles}/braid/bindings/c"
[ -d "$runfiles" ] || runfiles="$here"
version=$(sed -n 's/^#define BRAID_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$runfiles/braid.h" | paste -sd.)
mkdir -p "$prefix/include" "$prefix/lib/pkgconfig"
install -m 0644 "$runfiles/braid.h" "$prefix/include/braid.h"
install -m 0755 "$runfiles/libbraid.so" "$prefix/lib/libbraid.so"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$runfiles/braid.pc.in" \
  > "$prefix/lib/pkgconfig/braid.pc"
echo "installed braid $version under $prefix (include/braid.h, lib/libbraid.so, lib/pkgconfig/braid.pc)"
