#!/usr/bin/env bash
# Runs kiln's GPU tests and GPU benchmark from an archive tests/gpu/pack.sh made on the build
# machine, here on a machine with a GPU: the tests that a machine without one skips.
set -uo pipefail

usage() {
  cat <<USAGE
usage: tests/gpu/run.sh ARCHIVE [--out DIR] [--no-bench]

Run from a checkout of the commit the archive was built at. It unpacks the archive, makes the
checkout reachable at the source path the build was made at (a symbolic link, where the paths
differ), puts the binaries at the build directory's path (replacing what is there), puts the archive's libraries, CUDA's and the driver's on the library path, and runs:
  cuda_test (GpuRun.*, GpuCodegen.*), tensor_core_test, fleet_test, fleet_faults_test and
  tune_e2e_test (*Gpu*), then bench_gpu (skip it with --no-bench).
Each program's output goes to DIR/NAME.txt (default: gpu-results); a summary to stdout.
Exit status 1 when a test fails.
USAGE
}

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
[[ $1 != -h && $1 != --help ]] || { usage; exit 0; }
archive=$(realpath "$1"); shift
out=gpu-results
bench=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --no-bench) bench=0; shift ;;
    *) usage >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"; out=$(realpath "$out")
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
tar -C "$unpacked" -xJf "$archive" || { echo "run.sh: cannot unpack $archive" >&2; exit 1; }
source_dir=$(cat "$unpacked/SOURCE_DIR")
build_dir=$(cat "$unpacked/BUILD_DIR")
if [[ $(git -C "$root" rev-parse HEAD 2>/dev/null) != $(cat "$unpacked/COMMIT") ]]; then
  echo "run.sh: warning: this checkout is not at the archive's commit $(cat "$unpacked/COMMIT")" >&2
fi
if [[ $(realpath -m "$source_dir") != "$root" ]]; then
  if [[ -e $source_dir || -L $source_dir ]]; then
    echo "run.sh: $source_dir exists and is not this checkout" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$source_dir")" && ln -s "$root" "$source_dir" ||
    { echo "run.sh: cannot link $source_dir to this checkout (run as a user who can)" >&2; exit 1; }
fi
# The binaries where the build had them (inside the source tree, through the link): this
# replaces what a build directory there holds.
mkdir -p "$build_dir" && cp -a "$unpacked/build/." "$build_dir/" ||
  { echo "run.sh: cannot write $build_dir" >&2; exit 1; }

# The driver's libcuda first: the toolkit's compat/libcuda.so.1 may not match the driver
# (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH), so its folder is never added.
path=$unpacked/lib
for d in /usr/local/nvidia/lib64; do [[ -d $d ]] && path=$path:$d; done
for lib in libnvrtc.so.13 libcublas.so.13 libcudnn.so.9 libcudart.so.13; do
  found=$(find /usr/local /opt /usr/lib /usr/lib64 -name "$lib" -not -path '*/compat/*' 2>/dev/null | head -1)
  if [[ -n $found ]]; then path=$path:$(dirname "$found"); else echo "run.sh: no $lib found" >&2; fi
done
export LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi -L 2>/dev/null || echo "run.sh: nvidia-smi found no GPU" >&2

cd "$build_dir"
failed=0
run() {
  local name=$1; shift
  echo "run.sh: $name: $*" >&2
  "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  [[ $rc -eq 0 ]] || failed=1
  echo "$name: exit $rc; $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [A-Z]|^\[  SKIPPED \] [0-9]' \
    "$out/$name.txt" | tr '\n' ' ')"
}
run cuda_test tests/codegen/cuda_test --gtest_filter='GpuRun.*:GpuCodegen.*'
run tensor_core tests/codegen/tensor_core_test
run fleet tests/agent/fleet_test --gtest_filter='*Gpu*'
run fleet_faults tests/agent/fleet_faults_test --gtest_filter='*Gpu*'
run tune tests/agent/tune_e2e_test --gtest_filter='*Gpu*'
if [[ $bench -eq 1 && -x tests/bench/bench_gpu ]]; then
  run bench tests/bench/bench_gpu
  grep '^{' "$out/bench.txt"
elif [[ $bench -eq 1 ]]; then
  echo "run.sh: the archive has no bench_gpu" >&2
fi
exit $failed
