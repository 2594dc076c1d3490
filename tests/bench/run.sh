#!/usr/bin/env bash
# Runs kiln's benchmarks against vendor libraries: every group, or the ones named.
set -euo pipefail

# The groups, in the order they run. Group G is the program tests/bench/bench_G.cpp,
# built as the CMake target bench_G.
GROUPS_ALL=(gemm conv compile licm server agent tune contention mca models scale auto gpu)

usage() {
  cat <<EOF
usage: tests/bench/run.sh [GROUP...] [--quick] [--build-dir DIR] [-- BENCH_OPTIONS...]

Builds the benchmark programs if needed, then runs each group (default: all of
${GROUPS_ALL[*]}). Each case prints one JSON line on stdout, kiln and the vendor
library timed side by side in the same process:
  {"bench":"gemm_512_t1","kiln_gflops":...,"baseline":"openblas","baseline_gflops":...,"ratio":...,...}
(licm instead compares kiln with itself: {"bench":"licm_matmul_256","t0_ms":...,"t1_ms":...,"speedup":...}.)
Progress goes to stderr.

  GROUP            gemm (kiln vs OpenBLAS sgemm), conv (kiln vs oneDNN conv2d),
                   compile (kiln's compile time per stage and part for every operator, median
                   of 10, and a warm line per operator with knobs: other knob values),
                   licm (kiln with LICM + CSE off vs on: T0 / T1 per case, then a summary),
                   server (kilnd under concurrent Compile requests), agent (the round trip
                   of a Measure of an empty kernel on kilnd's local agent vs kilnd's Run),
                   tune (kiln tune on the local agent, xgb-rank and random at the same
                   budget, the best beside OpenBLAS / oneDNN: tests/bench/bench_tune.py;
                   long: --quick, or -- --trials N; -- --transfer: the warm-start experiment),
                   contention (GEMM and conv at 2 threads, quiet and beside 1 and 2 busy
                   processes, each side's slowdown: tests/bench/bench_contention.py),
                   mca (the GEMM micro-kernel's cycles under llvm-mca: aarch64 for a
                   Cortex-A72 and a Neoverse N1, x86-64 with AVX2 and no AVX-512 for
                   Haswell, Zen 2 and Zen 3; a model standing in for a machine:
                   tests/bench/bench_mca.py),
                   models (ResNet-18, ResNet-50, MobileNetV2 and a Transformer encoder
                   layer as ONNX through kiln against PyTorch on 1 and 2 threads; -- --tune
                   20m: each tuned first on a local agent and timed tuned and default:
                   tests/bench/bench_models.py),
                   scale (kilnd replicas sharing a throwaway PostgreSQL: 1, 2 and 4 of them
                   with 32 simulated agents each; measurements a second and their dispatch
                   latency: docs/scale-out.md),
                   auto (every example and bench kernel with knobs, its schedule taken out
                   and sketched by kiln, tuned beside its hand schedule for as many trials,
                   both bests timed in turn; then the PolyBench kernels of
                   tests/bench/polybench, LARGE, f64, written without a schedule, tuned at
                   one thread beside gcc -O3 and clang -O3 with Polly:
                   tests/bench/bench_auto.py, -- --part hand|polybench; --quick: 16 trials;
                   -- --gpu N: the GPU examples' hand schedules against kiln's GPU sketches
                   on the agent's GPU N),
                   gpu (kiln's GPU examples vs cuBLAS and cuDNN on this machine's GPU, the
                   tensor-core matmul vs cuBLAS's TF32 GEMM; built with the CUDA toolkit, and
                   says "skipped" without a GPU: docs/gpu.md)
  --quick          the smallest cases only, for a smoke run
  --build-dir DIR  the CMake build folder (default: \$KILN_BUILD_DIR or build)
  -- OPTIONS       passed to every benchmark program (see build/tests/bench/bench_gemm --help)

Exit status: 0 when every case ran and matched its baseline, 1 otherwise, 2 usage error.
EOF
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${KILN_BUILD_DIR:-build}
groups=()
bench_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --quick) bench_args+=(--quick) ;;
    --build-dir)
      [[ $# -ge 2 ]] || { echo "run.sh: --build-dir needs a folder" >&2; exit 2; }
      build_dir=$2
      shift
      ;;
    --) shift; bench_args+=("$@"); break ;;
    -*) echo "run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *)
      if [[ " ${GROUPS_ALL[*]} " != *" $1 "* ]]; then
        echo "run.sh: unknown group '$1' (groups: ${GROUPS_ALL[*]})" >&2
        exit 2
      fi
      groups+=("$1")
      ;;
  esac
  shift
done
[[ ${#groups[@]} -gt 0 ]] || groups=("${GROUPS_ALL[@]}")
[[ $build_dir = /* ]] || build_dir=$root/$build_dir

# A build folder that is not configured yet gets an optimized one.
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
  echo "run.sh: configuring $build_dir (Release)" >&2
  generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >&2
fi

# Build what is needed; a group whose baseline library is missing has no target (CMake
# said so when it configured) and is skipped.
targets=()
tune=0
contention=0
mca=0
models=0
auto=0
available=$(cmake --build "$build_dir" --target help 2>/dev/null || true)
# Whether this build has a bench program (the target bench_NAME).
has_target() { grep -Eq "(^|[^[:alnum:]_])$1([^[:alnum:]_]|$)" <<< "$available"; }
for g in "${groups[@]}"; do
  # tune (over kilnd, the CLI, the agent and the gemm and conv benchmarks) and contention
  # (over the gemm and conv benchmarks) are scripts.
  if [[ $g == mca ]]; then
    mca=1  # a script over the CLI and llvm-mca
    continue
  fi
  if [[ $g == models ]]; then
    models=1  # a script over the CLI, bench_host and PyTorch
    continue
  fi
  if [[ $g == auto ]]; then
    auto=1  # a script over kilnd, its local agent and the Python client
    continue
  fi
  if [[ $g == tune || $g == contention ]]; then
    if has_target bench_conv; then
      declare "$g=1"
    else
      echo "run.sh: skipping $g: bench_gemm and bench_conv are needed" >&2
    fi
    continue
  fi
  if has_target "bench_$g"; then
    targets+=("bench_$g")
  else
    echo "run.sh: skipping $g: no target bench_$g in $build_dir (its baseline library is missing)" >&2
  fi
done
[[ ${#targets[@]} -gt 0 || $tune -eq 1 || $contention -eq 1 || $mca -eq 1 || $models -eq 1 ||
  $auto -eq 1 ]] ||
  exit 1
if [[ $models -eq 1 ]]; then
  cmake --build "$build_dir" --target kiln bench_host >&2
fi
if [[ $mca -eq 1 ]]; then
  cmake --build "$build_dir" --target kiln >&2
fi
if [[ $auto -eq 1 ]]; then
  cmake --build "$build_dir" --target kilnd kiln-agent kiln_python bench_host >&2
fi
if [[ $tune -eq 1 ]]; then
  cmake --build "$build_dir" --target kilnd kiln kiln-agent bench_gemm bench_conv >&2
fi
if [[ $contention -eq 1 ]]; then
  cmake --build "$build_dir" --target bench_gemm bench_conv >&2
fi
[[ ${#targets[@]} -eq 0 ]] || cmake --build "$build_dir" --target "${targets[@]}" >&2

echo "run.sh: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | xargs)," \
  "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" >&2
status=0
for t in "${targets[@]}"; do
  echo "run.sh: $t ${bench_args[*]}" >&2
  "$build_dir/tests/bench/$t" "${bench_args[@]}" || status=1
done
if [[ $contention -eq 1 ]]; then
  echo "run.sh: contention ${bench_args[*]}" >&2
  /usr/bin/python3 "$root/tests/bench/bench_contention.py" --build-dir "$build_dir" \
    "${bench_args[@]}" || status=1
fi
if [[ $models -eq 1 ]]; then
  echo "run.sh: models ${bench_args[*]}" >&2
  /usr/bin/python3 "$root/tests/bench/bench_models.py" --build-dir "$build_dir" \
    "${bench_args[@]}" || status=1
fi
if [[ $mca -eq 1 ]]; then
  echo "run.sh: mca ${bench_args[*]}" >&2
  /usr/bin/python3 "$root/tests/bench/bench_mca.py" --build-dir "$build_dir" "${bench_args[@]}" ||
    status=1
fi
if [[ $auto -eq 1 ]]; then
  echo "run.sh: auto ${bench_args[*]}" >&2
  /usr/bin/python3 "$root/tests/bench/bench_auto.py" --build-dir "$build_dir" "${bench_args[@]}" ||
    status=1
fi
if [[ $tune -eq 1 ]]; then
  echo "run.sh: tune ${bench_args[*]}" >&2
  /usr/bin/python3 "$root/tests/bench/bench_tune.py" --build-dir "$build_dir" "${bench_args[@]}" ||
    status=1
fi
exit $status
