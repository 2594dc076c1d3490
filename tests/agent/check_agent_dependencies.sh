#!/usr/bin/env bash
# What kiln-agent needs on a machine (issue 11): the host's build links nothing but the C
# library, libm, protobuf-c and OpenSSL (ldd); the aarch64 build for boards, when given, is
# statically linked (file).
#
#   check_agent_dependencies.sh KILN_AGENT [AARCH64_KILN_AGENT]
set -euo pipefail
agent=$1
allowed='^(linux-vdso|libc\.so|libm\.so|libprotobuf-c\.so|libssl\.so|libcrypto\.so|/lib.*/ld-linux)'
unexpected=$(ldd "$agent" | awk '{print $1}' | grep -Ev "$allowed" || true)
if [ -n "$unexpected" ]; then
  echo "kiln-agent links more than it may: $unexpected" >&2
  ldd "$agent" >&2
  exit 1
fi
echo "$agent: $(ldd "$agent" | awk '{print $1}' | tr '\n' ' ')"
if [ $# -ge 2 ]; then
  description=$(file -b "$2")
  case $description in
    *"statically linked"*) echo "$2: $description" ;;
    *) echo "the board build is not static: $description" >&2; exit 1 ;;
  esac
fi
