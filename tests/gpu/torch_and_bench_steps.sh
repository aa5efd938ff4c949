# Sourced by run_on_device.sh (after its *_gpu_test runs): issue 21's PyTorch and benchmark steps
# on the GPU machine. Uses run_on_device.sh's $work, $bin_dir, $report and `failures`; adds rows
# to $work/runs.tsv and writes the JSON docs/PERFORMANCE.md quotes into $gpu_results
# (gpu_results/ beside the report):
#   versions.json                 driver, GPU, the torch used, its CUDA and NCCL
#   <program>_n<ranks>.json       every *_perf with --device cuda (nccl-tests' JSON + memory bound)
#   torch_bench_cuda.json         all_reduce through torch.distributed: braid, Gloo's CUDA path,
#                                 torch's NCCL at 1 rank and its refusal of 2 ranks on one GPU
#   <step>.txt                    each step's output (tables, pytest's report)
# Every step has a time limit and the whole lot a budget (BRAID_GPU_STEPS_BUDGET_S, default
# 480 s, counted from the script's start), so the script fits one device call; a step left out
# for lack of time is a failure, named as such. BRAID_GPU_STEPS=torch or =bench runs only one half.
# shellcheck shell=bash

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
gpu_results="$(dirname "$report")/gpu_results"
mkdir -p "$gpu_results"
steps_budget=${BRAID_GPU_STEPS_BUDGET_S:-480}
steps_which=${BRAID_GPU_STEPS:-torch,bench}

# step NAME LIMIT_S SUMMARY_REGEX COMMAND...: runs it with a time limit, records passed (0),
# skipped (77: no device) or failed, with the last line matching SUMMARY_REGEX as its summary.
step() {
  local name=$1 limit=$2 pattern=$3
  shift 3
  local log="$work/step.$name.log" rc status summary start end
  if [ "$SECONDS" -ge "$steps_budget" ]; then
    printf '%s\tstep\tfailed\t124\t0\tnot run: the steps budget of %s s was spent\n' \
      "$name" "$steps_budget" >> "$work/runs.tsv"
    failures=$((failures + 1))
    echo "$name [step]: not run (budget of $steps_budget s spent)"
    return
  fi
  start=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  record_exit "$rc"
  summary=$(grep -aE "$pattern" "$log" | tail -n 1 | tr '\t' ' ' | cut -c1-300)
  [ "$rc" = 124 ] && summary="timed out after $limit s; $summary"
  printf '%s\tstep\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" \
    "$(awk "BEGIN { print $end - $start }")" "$summary" >> "$work/runs.tsv"
  echo "$name [step]: $status (exit $rc) $summary"
  [ "$status" = passed ] || tail -n 25 "$log"
  cp "$log" "$gpu_results/$name.txt"  # the table or test output itself, for the docs
}

# The Python with a CUDA-enabled torch: $BRAID_TORCH_PYTHON, the GPU machine's /opt/torch venv,
# or python3.
torch_python=${BRAID_TORCH_PYTHON:-}
for candidate in /opt/torch/.venv/bin/python "$repo_root/.venv/bin/python" python3; do
  [ -n "$torch_python" ] && break
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import torch' 2>/dev/null; then
    torch_python=$candidate
  fi
done
"${torch_python:-python3}" - "$gpu_results/versions.json" <<'PY' 2>&1 | tail -n 3
import json, subprocess, sys
v = {"python": sys.executable}
try:
    v["nvidia_smi"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30).stdout.strip()
except Exception as e:  # noqa: BLE001
    v["nvidia_smi"] = f"unavailable: {e}"
try:
    import torch
    v["torch"] = torch.__version__
    v["torch_cuda"] = torch.version.cuda
    v["cuda_available"] = torch.cuda.is_available()
    try:
        v["torch_nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:  # noqa: BLE001
        v["torch_nccl"] = f"unknown: {e}"
except Exception as e:  # noqa: BLE001
    v["torch"] = f"not importable: {e}"
json.dump(v, open(sys.argv[1], "w"), indent=1)
print("versions:", json.dumps(v))
PY

# --- Benchmarks: every *_perf on device buffers, ranks launched by braidrun -------------------
if [[ ",$steps_which," == *",bench,"* ]]; then
  if [ -x "$bin_dir/braidrun" ] && [ -x "$bin_dir/all_reduce_perf" ]; then
    # all_reduce: 1, 2, 4 and 8 ranks on the one GPU; rows >= 64 MiB print the memory bound.
    for n in 1 2 4 8; do
      max=256M
      [ "$n" -ge 4 ] && max=64M
      step "all_reduce_perf_n$n" 90 "Memory bound|Avg bus bandwidth|SKIPPED|failed" \
        "$bin_dir/braidrun" -n "$n" --no-prefix -- "$bin_dir/all_reduce_perf" --device cuda \
        -b 8 -e "$max" -f 4 -w 5 -n 20 -J "$gpu_results/all_reduce_perf_n$n.json"
    done
    for p in all_gather_perf broadcast_perf reduce_perf reduce_scatter_perf alltoall_perf \
             gather_perf scatter_perf sendrecv_perf; do
      [ -x "$bin_dir/$p" ] || continue
      step "${p}_n2" 45 "Avg bus bandwidth|SKIPPED|failed" \
        "$bin_dir/braidrun" -n 2 --no-prefix -- "$bin_dir/$p" --device cuda \
        -b 8 -e 16M -f 8 -w 2 -n 10 -J "$gpu_results/${p}_n2.json"
    done
  else
    printf 'device_benchmarks\tstep\tfailed\t2\t0\tno braidrun/all_reduce_perf in %s (stage_binaries.sh)\n' \
      "$bin_dir" >> "$work/runs.tsv"
    failures=$((failures + 1))
    echo "device_benchmarks [step]: failed (no braidrun or *_perf in $bin_dir)"
  fi
fi

# --- PyTorch: braid_torch built against this machine's torch, its CUDA tests, torch_bench ------
if [[ ",$steps_which," == *",torch,"* ]]; then
  torch_build=$(mktemp -d)
  have_braid_torch=0
  if [ -z "$torch_python" ]; then
    printf 'braid_torch_build\tstep\tfailed\t2\t0\tno Python with torch found\n' >> "$work/runs.tsv"
    failures=$((failures + 1))
  elif [ ! -f "$bin_dir/libbraid.so" ]; then
    printf 'braid_torch_build\tstep\tfailed\t2\t0\tno libbraid.so in %s (stage_binaries.sh)\n' \
      "$bin_dir" >> "$work/runs.tsv"
    failures=$((failures + 1))
  else
    # A copy of the package, built in place there: the carried tree stays as it came.
    cp -r "$repo_root/bindings/torch" "$torch_build/pkg"
    rm -rf "$torch_build/pkg/build" "$torch_build/pkg/braid_torch/lib" "$torch_build"/pkg/braid_torch/*.so
    step braid_torch_build 240 "error|Error|copying|Finished" \
      env -C "$torch_build/pkg" BRAID_ROOT="$repo_root" \
      BRAID_LIBRARY="$(cd "$bin_dir" && pwd)/libbraid.so" MAX_JOBS=8 \
      "$torch_python" setup.py -q build_ext --inplace
    compgen -G "$torch_build/pkg/braid_torch/_C*.so" >/dev/null && have_braid_torch=1
  fi
  if [ "$have_braid_torch" = 1 ]; then
    step torch_cuda_tests 240 "passed|failed|skipped|error" \
      env PYTHONPATH="$torch_build/pkg:$repo_root/tests/torch" \
      "$torch_python" -m pytest -q -p no:cacheprovider -rs "$repo_root/tests/torch/test_cuda.py"
    backends=braid,gloo,nccl
  else
    backends=gloo,nccl  # still measured: Gloo's CUDA path and NCCL's refusal
  fi
  if [ -n "$torch_python" ]; then
    step torch_bench_cuda 240 "refused|256 MiB|wrote|SKIPPED" \
      env PYTHONPATH="$torch_build/pkg" "$torch_python" "$repo_root/bench/torch/torch_bench.py" \
      allreduce --device cuda --ranks 1,2 --backends "$backends" --min-ms 100 \
      --json "$gpu_results/torch_bench_cuda.json"
  fi
  rm -rf "$torch_build"
fi
