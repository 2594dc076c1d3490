#!/usr/bin/env bash
# The whole test suite under AddressSanitizer and UBSan (issue 9): builds kiln and its
# tests with clang-19 into build-asan/ (-DKILN_SANITIZE=ON, no aarch64 cross build) and
# runs ctest there. Too slow for every CI run on 2 cores (a clean build and the suite
# take about as long as the rest of CI together), so it is run by hand or nightly;
# ./deploy/test.sh runs the fuzzers under the same sanitizers instead.
#
# Usage: ./deploy/sanitize.sh [CTEST ARGS...]   e.g. -R Hostile
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./deploy/install-deps.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DKILN_SANITIZE=ON -DKILN_AARCH64=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-asan -j "$(nproc)"
# allocator_may_return_null: a test that asks for an impossible size wants NULL, as malloc gives.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" "$@"
