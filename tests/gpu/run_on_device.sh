#!/usr/bin/env bash
# Runs on the GPU machine, over the static binaries staged by tests/gpu/stage_binaries.sh, and
# writes one JSON report. The GPU machine has a driver, compute-sanitizer and python3 but no
# Bazel or braid libraries, so everything here is a prebuilt binary or a system tool.
#
# What it runs today (each GPU binary exits 0 passed, 1 failed, 77 no device):
#   - versions: GPU and driver (nvidia-smi), compute-sanitizer, torch and its CUDA/NCCL if present;
#   - every binary in the folder: the device seam's contract on CUDA (device_gpu_test) and the
#     reduction/copy kernels against kernels/cpu (kernels_gpu_test); the cuda_ipc transport between
#     cudaMalloc buffers, ranks as threads and as two processes (cuda_ipc_gpu_test);
#   - every binary again under compute-sanitizer memcheck (--quick, smaller sizes), where present.
#   - the torch CUDA tests, torch_bench's CUDA table and every *_perf on device buffers
#     (torch_and_bench_steps.sh, which writes gpu_results/ beside the report).
#
# Usage: tests/gpu/run_on_device.sh [BINARIES=gpu_bin] [REPORT=$OUT/gpu_report.json or ./gpu_report.json]
# BINARIES: the folder stage_binaries.sh fills, or the archive it packs (gpu_carry/gpu_bin.tar.xz,
# what travels to the GPU machine), unpacked here into a temporary folder.
# Exit status: 0 only if every binary passed plainly and under the sanitizer; skipped is not passed.
set -uo pipefail
bin_dir=${1:-gpu_bin}
report=${2:-${OUT:-.}/gpu_report.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -f "$bin_dir" ]; then
  mkdir -p "$work/unpacked"
  # python3's tarfile where tar cannot read xz (it is there: torch needs it).
  tar -xJf "$bin_dir" -C "$work/unpacked" 2>/dev/null ||
    python3 -m tarfile -e "$bin_dir" "$work/unpacked" ||
    { echo "run_on_device: cannot unpack $bin_dir" >&2; exit 2; }
  bin_dir="$work/unpacked/gpu_bin"
fi

if ! ls "$bin_dir"/*_gpu_test >/dev/null 2>&1; then
  echo "run_on_device: no *_gpu_test binaries in $bin_dir (run tests/gpu/stage_binaries.sh first)" >&2
  exit 2
fi

version() { "$@" 2>&1 | head -n 3 | tr '\n' ' ' | sed 's/ *$//'; }
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host=$(hostname)"
  echo "gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)"
  echo "compute_sanitizer=$(version compute-sanitizer --version)"
  echo "torch=$(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1 | tail -n 1)"
} > "$work/versions.txt"
cat "$work/versions.txt"

sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && sanitizer=/usr/local/cuda/bin/compute-sanitizer

failures=0
: > "$work/runs.tsv"
# record_exit RC: sets `status` from an exit code (0 passed, 77 skipped: no device, else failed)
# and counts anything but a pass in `failures`; shared with torch_and_bench_steps.sh's steps.
record_exit() {
  case $1 in
    0) status=passed ;;
    77) status=skipped ;;
    *) status=failed ;;
  esac
  [ "$status" = passed ] || failures=$((failures + 1))
}

run() {  # run MODE BINARY COMMAND...
  local mode=$1 name=$2
  shift 2
  local start end rc status
  start=$(date +%s.%N)
  "$@" > "$work/$name.$mode.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  record_exit "$rc"
  local summary
  summary=$(grep -aE "^$name: [0-9]+ checks, [0-9]+ failed$|SKIPPED" "$work/$name.$mode.log" | tail -n 1)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$mode" "$status" "$rc" \
    "$(awk "BEGIN { print $end - $start }")" "$summary" >> "$work/runs.tsv"
  echo "$name [$mode]: $status (exit $rc) $summary"
  [ "$status" = passed ] || tail -n 30 "$work/$name.$mode.log"
}

for bin in "$bin_dir"/*_gpu_test; do
  name=$(basename "$bin")
  run plain "$name" "$bin"
  if [ -n "$sanitizer" ]; then
    run memcheck "$name" "$sanitizer" --tool memcheck --error-exitcode 1 --leak-check full "$bin" --quick
  else
    printf '%s\tmemcheck\tskipped\t77\t0\tno compute-sanitizer found\n' "$name" >> "$work/runs.tsv"
    failures=$((failures + 1))
    echo "$name [memcheck]: skipped (no compute-sanitizer found)"
  fi
done

mkdir -p "$(dirname "$report")"
# The torch CUDA tests and the device benchmarks (their JSON goes to gpu_results/ beside the report).
# shellcheck source=tests/gpu/torch_and_bench_steps.sh
. "$(dirname "${BASH_SOURCE[0]}")/torch_and_bench_steps.sh"

python3 - "$work/versions.txt" "$work/runs.tsv" "$report" <<'PY'
import json, sys
versions = dict(line.rstrip("\n").split("=", 1) for line in open(sys.argv[1]) if "=" in line)
runs = []
for line in open(sys.argv[2]):
    name, mode, status, rc, seconds, summary = (line.rstrip("\n").split("\t") + [""] * 6)[:6]
    runs.append({"binary": name, "mode": mode, "status": status, "exit_code": int(rc),
                 "seconds": float(seconds or 0), "summary": summary})
report = {"versions": versions, "runs": runs,
          "passed": sum(r["status"] == "passed" for r in runs),
          "failed": sum(r["status"] == "failed" for r in runs),
          "skipped": sum(r["status"] == "skipped" for r in runs),
          "gpu_results": "gpu_results/ beside this report (tests/gpu/torch_and_bench_steps.sh)",
          "not_yet": ["collectives on device buffers at 1, 2, 4, 8 ranks"]}
json.dump(report, open(sys.argv[3], "w"), indent=2)
print("%d passed, %d failed, %d skipped" % (report["passed"], report["failed"], report["skipped"]))
PY
echo "report: $report"
[ "$failures" -eq 0 ]
