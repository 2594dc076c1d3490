#!/usr/bin/env bash
# From a fresh checkout to kiln at work: install dependencies, build, check
# every example and run it against the reference interpreter, then show what
# a schedule does to matmul's loop nest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

heading() {
  echo
  echo "== $* =="
}

heading "Installing dependencies and building"
./deploy/build.sh
kiln=build/clients/cli/kiln

shopt -s nullglob
examples=(examples/*.kiln)
if [ ${#examples[@]} -eq 0 ]; then
  echo "quickstart: no examples in examples/" >&2
  exit 1
fi

heading "Parsing each example and checking its schedule is legal (kiln check)"
"$kiln" check "${examples[@]}"

heading "Running each example, scheduled, against the reference interpreter (kiln interp --check)"
"$kiln" interp "${examples[@]}" --check

heading "Compiling each example for this CPU (LLVM, in-process JIT) and checking it (kiln run --check)"
"$kiln" run "${examples[@]}" --check

matmul=examples/matmul.kiln
if [ ! -f "$matmul" ]; then
  echo "quickstart: $matmul is missing" >&2
  exit 1
fi

heading "$matmul: the loop nest of the algorithm alone (emit --stage loops --no-schedule)"
"$kiln" emit "$matmul" --stage loops --no-schedule

heading "$matmul: the same after its schedule (emit --stage loops)"
"$kiln" emit "$matmul" --stage loops

heading "$matmul: timed on this machine (kiln run --bench)"
"$kiln" run "$matmul" --bench

echo
echo "Next: '$kiln --help', docs/cli.md and docs/language.md; ./deploy/test.sh runs every test."
