#!/usr/bin/env bash
# Installs kiln's dependencies, configures build/ with Ninja and builds everything.
# Usage: ./deploy/build.sh [--werror]   (warnings are errors with --werror or when CI=true)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
for arg in "$@"; do
  case "$arg" in
    --werror) werror=ON ;;
    -h | --help)
      echo "usage: ./deploy/build.sh [--werror]"
      echo "Installs dependencies (deploy/install-deps.sh), configures build/ with Ninja"
      echo "and builds with -j\$(nproc). --werror (or CI=true) turns warnings into errors."
      exit 0
      ;;
    *)
      echo "build.sh: unknown argument '$arg' (expected --werror or --help)" >&2
      exit 2
      ;;
  esac
done

./deploy/install-deps.sh
cmake -S . -B build -G Ninja -DKILN_WERROR="$werror"
cmake --build build -j "$(nproc)"
