#!/usr/bin/env bash
# Fuzzing under AddressSanitizer and UBSan (issue 9): builds kiln with clang-19 into
# build-fuzz/ (-DKILN_FUZZ=ON), then runs, each bounded:
#   - fuzz_frontend: libFuzzer on .kiln text, seeded with examples/ and tests/data/;
#   - fuzz_semantic: libFuzzer choosing programs for the semantic oracle
#     (reference interpreter vs loop interpreter vs compiled kernel);
#   - kiln_semantic_fuzz: N programs from a seeded generator, the same oracle;
#   - fuzz_agent_frame: libFuzzer on kiln-agent's frame decoder, a fixed number of runs;
#   - fuzz_fleet_listener: libFuzzer on kilnd's agent listener over loopback, a fixed
#     number of runs.
# A crash, a sanitizer report or a disagreement fails the run; libFuzzer leaves the
# input in build-fuzz/findings/, which becomes a file in tests/data/hostile/.
#
# Usage: ./deploy/fuzz.sh [--time SECONDS] [--programs N] [--seed S] [--agent-runs N]
#   --time        seconds for each libFuzzer target of the compiler (default 60)
#   --programs    programs for the seeded semantic run (default 500)
#   --agent-runs  inputs for the frame decoder (default 200000), a 40th of them for the
#                 listener
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=60
programs=500
frame_runs=200000
listener_runs=5000
seed=1
while [ $# -gt 0 ]; do
  case "$1" in
    --time) seconds="$2"; shift 2 ;;
    --programs) programs="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --agent-runs) frame_runs="$2"; listener_runs=$(( $2 / 40 )); shift 2 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

./deploy/install-deps.sh
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DKILN_FUZZ=ON -DBUILD_TESTING=OFF -DKILN_AARCH64=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-fuzz -j "$(nproc)" --target fuzz_frontend fuzz_semantic kiln_semantic_fuzz \
  fuzz_agent_frame fuzz_fleet_listener

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
mkdir -p build-fuzz/findings build-fuzz/corpus/frontend build-fuzz/corpus/semantic \
  build-fuzz/corpus/agent_frame build-fuzz/corpus/fleet_listener
cp examples/*.kiln tests/data/hostile/*.kiln tests/data/illegal/*.kiln build-fuzz/corpus/frontend/

echo "==> fuzz_frontend for ${seconds}s"
build-fuzz/fuzz/fuzz_frontend -max_total_time="$seconds" -max_len=4096 -timeout=20 \
  -artifact_prefix=build-fuzz/findings/frontend- build-fuzz/corpus/frontend 2>&1 | tail -n 5
echo "==> fuzz_semantic for ${seconds}s"
build-fuzz/fuzz/fuzz_semantic -max_total_time="$seconds" -max_len=512 -timeout=60 \
  -artifact_prefix=build-fuzz/findings/semantic- build-fuzz/corpus/semantic 2>&1 | tail -n 5
echo "==> kiln_semantic_fuzz: $programs programs, seed $seed"
# LLVM's remarks on loops it could not vectorize go to stderr: kept apart, shown on failure.
if ! build-fuzz/fuzz/kiln_semantic_fuzz --runs "$programs" --seed "$seed" 2>build-fuzz/semantic.err; then
  tail -n 60 build-fuzz/semantic.err
  exit 1
fi
# The agent targets run a fixed number of inputs; their whole log is shown when one fails.
run_counted() {
  local name=$1
  shift
  echo "==> $name"
  if ! "$@" >"build-fuzz/$name.log" 2>&1; then
    grep -v '^#' "build-fuzz/$name.log" | tail -n 40
    exit 1
  fi
  tail -n 1 "build-fuzz/$name.log"
}
run_counted fuzz_agent_frame build-fuzz/fuzz/fuzz_agent_frame -runs="$frame_runs" -seed="$seed" \
  -max_len=4096 -timeout=20 -artifact_prefix=build-fuzz/findings/agent-frame- \
  build-fuzz/corpus/agent_frame
LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan_suppressions.txt" \
  run_counted fuzz_fleet_listener build-fuzz/fuzz/fuzz_fleet_listener -runs="$listener_runs" \
  -seed="$seed" -max_len=4096 -timeout=30 -artifact_prefix=build-fuzz/findings/fleet-listener- \
  build-fuzz/corpus/fleet_listener
