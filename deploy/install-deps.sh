#!/usr/bin/env bash
# Installs every Debian package kiln needs to build, test and run. Idempotent.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 git clang-format
  llvm-19-dev liblld-19-dev lld-19 libisl-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  python3-grpcio python3-protobuf python3-pytest python3-numpy python3-matplotlib openssl file
  libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libxgboost-dev xgboost
  libprotobuf-c-dev protobuf-c-compiler
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
  libsqlite3-dev postgresql-15 libpq-dev libssl-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev
  clang-19 libfuzzer-19-dev libclang-rt-19-dev
  libonnx-dev libonnx-testdata python3-onnx python3-torch python3-torchvision
)
CROSS_PACKAGES=(libprotobuf-c-dev:arm64 libssl-dev:arm64)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}" "${CROSS_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${PACKAGES[@]}" "${CROSS_PACKAGES[@]}"
