#!/usr/bin/env bash
# What a user and CI run: install dependencies, build with warnings as errors,
# run the test suites, check every example against the reference interpreter,
# and check formatting. Ends with one line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

passed=0
failed=0
failures=()

# step NAME COMMAND...: runs one step and counts it.
step() {
  local name="$1"
  shift
  echo
  echo "==> $name"
  if "$@"; then
    echo "PASS  $name"
    passed=$((passed + 1))
  else
    echo "FAIL  $name"
    failed=$((failed + 1))
    failures+=("$name")
  fi
}

summary() {
  echo
  if [ ${#failures[@]} -gt 0 ]; then
    echo "failed steps:"
    printf '  %s\n' "${failures[@]}"
  fi
  echo "$passed passed, $failed failed"
}

step "build (warnings are errors)" ./deploy/build.sh --werror
if [ "$failed" -gt 0 ]; then
  echo "the build failed: nothing else can run" >&2
  summary
  exit 1
fi

# The records tests run against a throwaway PostgreSQL too (install-deps.sh installs it): here
# its absence is a failure, not a skip.
export KILN_REQUIRE_POSTGRES=1
step "unit and end-to-end tests (ctest)" ctest --test-dir build --output-on-failure -j2

# The frontend and the whole compiler under AddressSanitizer and UBSan, briefly: a
# libFuzzer run of each target and 200 seeded programs through the semantic oracle
# (docs/fuzzing.md; longer runs: ./deploy/fuzz.sh --time S --programs N).
step "fuzzing under ASan and UBSan (deploy/fuzz.sh)" ./deploy/fuzz.sh --time 20 --programs 200

shopt -s nullglob
examples=(examples/*.kiln)
if [ ${#examples[@]} -eq 0 ]; then
  step "examples: at least one in examples/" false
fi
for example in "${examples[@]}"; do
  step "example $example: loop nest matches the reference" build/clients/cli/kiln interp "$example" --check
  step "example $example: compiled kernel matches the reference" build/clients/cli/kiln run "$example" --check
done

# Whole models (docs/models.md): torchvision's ResNet-18, ResNet-50, MobileNetV2 and a
# Transformer encoder layer, built with fixed seeds, exported to ONNX, run by kiln and by
# PyTorch on one input (ctest runs two small models; this step the big ones).
# Each also compiled to one artifact and run by examples/c/run_model; ResNet-18 and MobileNetV2
# also for aarch64, under qemu, where the cross build is there.
# ResNet-50 (a 98 MiB file) also runs through a kilnd on loopback, its model uploaded as a blob.
model_args=(--kiln build/clients/cli/kiln --run-model build/examples/run_model
            --kilnd build/server/kilnd --through-kilnd resnet50)
if [[ -x build/runtime/aarch64/run_model ]]; then
  model_args+=(--run-model-aarch64 build/runtime/aarch64/run_model --aarch64 resnet18,mobilenet_v2)
fi
step "models: kiln against PyTorch (tests/models/torch_models.py)" \
  /usr/bin/python3 tests/models/torch_models.py "${model_args[@]}"

# Every C and C++ source kiln owns, minus build trees.
format_check() {
  local dirs=()
  for d in compiler clients tests runtime fuzz agent tuner server examples; do
    if [ -d "$d" ]; then dirs+=("$d"); fi
  done
  local files=()
  while IFS= read -r -d '' f; do files+=("$f"); done < <(
    find "${dirs[@]}" -type d -name 'build*' -prune -o -type f \
      \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \) -print0
  )
  echo "clang-format: ${#files[@]} files"
  [ ${#files[@]} -eq 0 ] || clang-format --dry-run --Werror "${files[@]}"
}
step "formatting (clang-format)" format_check

summary
[ "$failed" -eq 0 ]
