#!/usr/bin/env bash
# Installs kiln's dependencies, configures build/ with Ninja and builds everything, or the
# targets named.
# Usage: ./deploy/build.sh [--werror] [TARGET...]   (warnings are errors with --werror or when
# CI=true; without either, build/ keeps the setting it has, so switching between
# ./deploy/test.sh and ./deploy/quickstart.sh does not rebuild everything)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

werror=()
if [ "${CI:-}" = "true" ]; then werror=(-DKILN_WERROR=ON); fi
targets=()
for arg in "$@"; do
  case "$arg" in
    --werror) werror=(-DKILN_WERROR=ON) ;;
    -h | --help)
      echo "usage: ./deploy/build.sh [--werror] [TARGET...]"
      echo "Installs dependencies (deploy/install-deps.sh), configures build/ with Ninja"
      echo "and builds everything (or the targets named) with -j\$(nproc). --werror (or"
      echo "CI=true) turns warnings into errors."
      exit 0
      ;;
    -*)
      echo "build.sh: unknown option '$arg' (expected --werror, --help or targets)" >&2
      exit 2
      ;;
    *) targets+=(--target "$arg") ;;
  esac
done

./deploy/install-deps.sh
cmake -S . -B build -G Ninja "${werror[@]}"
cmake --build build -j "$(nproc)" "${targets[@]}"
