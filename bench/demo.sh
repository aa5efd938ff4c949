#!/usr/bin/env bash
# The main job: build braid, start 2 local ranks with braidrun, and let them allreduce from 8 B
# to 64 MiB (over shared memory, the default between local ranks; BRAID_TRANSPORTS=tcp for TCP),
# printing nccl-tests' table (#wrong is a real check of every element).
# Extra arguments go to all_reduce_perf (e.g. -d all -o all).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v bazel >/dev/null || .ci/setup.sh
bazel build //rendezvous:braidrun //bench:all_reduce_perf
bin=$(bazel info bazel-bin)
exec "$bin/rendezvous/braidrun" -n "${BRAID_DEMO_RANKS:-2}" -- \
  "$bin/bench/all_reduce_perf" -b 8 -e 64M -f 4 "$@"
