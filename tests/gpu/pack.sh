#!/usr/bin/env bash
# Packs kiln's GPU tests and GPU benchmark, built here, with the shared libraries they load
# (all but glibc's and the CUDA toolkit's), into one archive: for a GPU machine that has a
# driver and CUDA 13 but not kiln's Debian build dependencies. tests/gpu/run.sh runs them there.
set -euo pipefail

usage() {
  cat <<USAGE
usage: tests/gpu/pack.sh [--build-dir DIR] [--out FILE]

Strips and packs, under their paths in the build directory (default: build), the GPU tests
(cuda_test, tensor_core_test, fleet_test, fleet_faults_test, tune_e2e_test), the programs
they start (kilnd, kiln-agent, kiln, cuda_fault_child, the agent's test kernels) and
bench_gpu, with the libraries ldd finds for them outside glibc and CUDA, and the source
path the build was made at (SOURCE_DIR: the binaries name files under it). The archive
(default: build/kiln-gpu-tests.tar.xz) is about 60 MB.

On the GPU machine, in a checkout of the same commit:
  tests/gpu/run.sh kiln-gpu-tests.tar.xz
USAGE
}

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
out=
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
out=${out:-$build/kiln-gpu-tests.tar.xz}

programs=(tests/codegen/cuda_test tests/codegen/cuda_fault_child tests/codegen/tensor_core_test
          tests/agent/fleet_test tests/agent/fleet_faults_test tests/agent/tune_e2e_test
          server/kilnd server/kiln-runner agent/kiln-agent clients/cli/kiln)
for p in "${programs[@]}"; do
  [[ -x $build/$p ]] || { echo "pack.sh: $build/$p is missing: build it first" >&2; exit 1; }
done
# bench_gpu is built only where cuBLAS and cuDNN are: packed where it is.
if [[ -x $build/tests/bench/bench_gpu ]]; then
  programs+=(tests/bench/bench_gpu)
else
  echo "pack.sh: no $build/tests/bench/bench_gpu: packing the tests alone" >&2
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/build"
for p in "${programs[@]}"; do
  mkdir -p "$stage/build/$(dirname "$p")"
  strip -o "$stage/build/$p" "$build/$p"
done
cp "$build/tests/agent/fault_kernels.so" "$stage/build/tests/agent/"
cp -r "$build/tests/agent/kernels" "$stage/build/tests/agent/"
# The libraries the programs load, but glibc's (the machine's own is newer or the same, and
# its parts go together) and CUDA's (the machine's toolkit and driver are the ones to test).
deps=$(for p in "${programs[@]}"; do ldd "$build/$p"; done)
if grep -q 'not found' <<<"$deps"; then
  echo "pack.sh: ldd finds no library for: $(grep 'not found' <<<"$deps" | sort -u | tr -s ' \t' ' ')" >&2
  exit 1
fi
glibc='libc|libm|libmvec|libpthread|libdl|librt|libresolv|libanl|libutil|libnsl|libBrokenLocale'
awk '$3 ~ /^\// {print $3}' <<<"$deps" | sort -u |
  grep -Ev "/($glibc)\.so|/ld-linux[^/]*\.so|/usr/local/cuda" |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# The paths the binaries name: the source tree, and the build directory (the programs the tests
# start are named by their paths in it).
echo "$root" > "$stage/SOURCE_DIR"
echo "$build" > "$stage/BUILD_DIR"
git -C "$root" rev-parse HEAD > "$stage/COMMIT" 2>/dev/null || echo unknown > "$stage/COMMIT"
tar -C "$stage" -cf - . | xz -9 -T0 > "$out"
echo "pack.sh: $out ($(du -h "$out" | cut -f1)), commit $(cat "$stage/COMMIT")" >&2
