#!/usr/bin/env bash
# Installs braid into a temporary prefix, compiles README.md's C example against it through
# pkg-config, and runs it as 3 ranks under env:// variables: each must print the right sum.
set -euo pipefail
root="${TEST_SRCDIR}/braid"
prefix="${TEST_TMPDIR}/prefix"
"$root/bindings/c/install" "$prefix" >/dev/null
for f in include/braid.h lib/libbraid.so lib/pkgconfig/braid.pc; do
  [ -f "$prefix/$f" ] || { echo "FAIL: install did not create $f"; exit 1; }
done
work="${TEST_TMPDIR}/example"
mkdir -p "$work"
sed -n '/^#include <braid.h>/,/^```$/p' "$root/README.md" | sed '$d' > "$work/example.c"
[ -s "$work/example.c" ] || { echo "FAIL: no C example found in README.md"; exit 1; }
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -Wall -Werror "$work/example.c" $(pkg-config --cflags --libs braid) -o "$work/example"
# Only braid's C API may be exported (besides thread-local symbols the linker keeps global).
# Upper-case types are global bindings; the dynamic table also lists some thread-local symbols
# as local (lower case), which nothing outside the library can bind to.
leaked=$(nm -D --defined-only "$prefix/lib/libbraid.so" | awk '$2 ~ /^[A-Z]$/ && $2 != "U" {print $3}' |
         grep -v '^braid' | grep -v -E 'tid|keyword_tss_ptr' || true)
[ -z "$leaked" ] || { echo "FAIL: libbraid.so exports non-braid symbols:"; echo "$leaked"; exit 1; }

# A random port below Linux's ephemeral range (32768 and up), so that outgoing connections of
# other programs cannot hold it; if something listens there anyway, rank 0 says so at once and the
# run is repeated on another port (up to 5 times) instead of failing the test.
for attempt in 1 2 3 4 5; do
  port=$(( 20000 + RANDOM % 12000 ))
  pids=()
  for r in 0 1 2; do
    LD_LIBRARY_PATH="$prefix/lib" RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      BRAID_TIMEOUT_MS=60000 timeout 120 "$work/example" > "$work/out.$r" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}" || true
  if grep -q "Address already in use" "$work/out.0"; then
    echo "port $port is taken (attempt $attempt), trying another"
    kill "${pids[@]:1}" 2>/dev/null || true
    wait "${pids[@]:1}" 2>/dev/null || true
    continue
  fi
  break
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
for r in 0 1 2; do
  grep -q "^rank $r of 3: 3 (expected 3)$" "$work/out.$r" || { echo "FAIL rank $r:"; cat "$work/out.$r"; status=1; }
done
[ $status -eq 0 ] && echo "PASS: installed, compiled the README example, 3 ranks summed correctly"
exit $status
