#!/usr/bin/env bash
# From a fresh checkout to kiln at work: install dependencies, build, check
# every example and run it against the reference interpreter, show what a
# schedule does to matmul's loop nest, then start kilnd and do the same work
# through it, from the command line and from Python.
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

heading "Starting kilnd, the compile service, on a free loopback port"
data_dir=$(mktemp -d)
kilnd_out=$data_dir/kilnd.out
build/server/kilnd --listen 127.0.0.1:0 --data-dir "$data_dir" --log-level warn > "$kilnd_out" &
kilnd_pid=$!
trap 'kill $kilnd_pid 2> /dev/null; wait $kilnd_pid 2> /dev/null; rm -rf "$data_dir"' EXIT
for _ in $(seq 100); do
  grep -q "listening on" "$kilnd_out" 2> /dev/null && break
  sleep 0.1
done
address=$(sed -n 's/^kilnd: listening on //p' "$kilnd_out")
if [ -z "$address" ]; then
  echo "quickstart: kilnd did not start" >&2
  exit 1
fi
echo "kilnd: listening on $address"

heading "Every example compiled and run by kilnd, in a child process (kiln run --check --server)"
"$kiln" run "${examples[@]}" --check --server "$address"

heading "$matmul compiled by kilnd for aarch64, twice: the second comes from its cache"
"$kiln" compile "$matmul" --target aarch64-linux-gnu -o "$data_dir/matmul.so" --server "$address"
"$kiln" compile "$matmul" --target aarch64-linux-gnu -o "$data_dir/matmul.so" --server "$address"

heading "An operator defined in Python (kiln.te), run by kilnd on numpy arrays"
PYTHONPATH=$PWD/build/python /usr/bin/python3 - "$address" << 'EOF_PY'
import sys
import numpy as np
import kiln
from kiln import te

n = te.var("n")
A = te.placeholder((n, n), "f32", name="A")
B = te.placeholder((n, n), "f32", name="B")
k = te.reduce_axis((0, n), name="k")
C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
op = te.create_operator("matmul_py", outputs=[C], constraints=[n > 0])
op[C].tile("i", "j", 8, 8, "io", "jo", "ii", "ji")
op[C].tag("io", "parallel")
a = np.random.default_rng(0).standard_normal((96, 96), dtype=np.float32)
b = np.random.default_rng(1).standard_normal((96, 96), dtype=np.float32)
with kiln.Client(sys.argv[1]) as c:
    r = c.run(op, {"A": a, "B": b}, runtime_params={"n": 96}, check=True)
err = float(np.abs(r.outputs["C"] - a @ b).max())
print(f"matmul_py: checked against the reference interpreter: {'ok' if r.ok else 'FAILED'}; "
      f"max |C - a @ b| = {err:.3g}")
sys.exit(0 if r.ok and err < 1e-3 else 1)
EOF_PY

echo
echo "Next: '$kiln --help', docs/cli.md, docs/language.md, docs/server.md and docs/python.md;"
echo "./deploy/test.sh runs every test."
