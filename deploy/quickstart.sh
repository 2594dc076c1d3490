#!/usr/bin/env bash
# From a fresh checkout to kiln at work: install dependencies, build, check
# every example and run it against the reference interpreter, check the GPU
# examples and show their CUDA (and run them where there is a GPU), show what a
# schedule does to matmul's loop nest, then start kilnd (with its records
# database and one local agent) and do the same work through it, from the
# command line and from Python; then kiln's main job: tune a GEMM and a ResNet
# conv2d on the agent, put the best configurations beside OpenBLAS and oneDNN
# measured in the same run, query the records and draw the tuning curves; and
# a whole model: ResNet-18 from ONNX, tuned under a short budget, its tuned
# artifact run beside PyTorch, its tuning curve drawn.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

heading() {
  echo
  echo "== $* =="
}

heading "Installing dependencies and building what the quickstart runs"
# The programs, not the tests (./deploy/test.sh builds those).
./deploy/build.sh kiln kilnd kiln-runner kiln-agent kiln_python bench_gemm bench_conv bench_host \
  run_model
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

gpu_examples=(examples/gpu/*.kiln)
if [ ${#gpu_examples[@]} -gt 0 ]; then
  heading "The GPU examples: schedules checked, loops run against the reference, CUDA for sm_90"
  "$kiln" check "${gpu_examples[@]}"
  # Small sizes: the interpreter runs the scheduled loops on this CPU.
  "$kiln" interp examples/gpu/matmul.kiln --check --set M=128 --set N=96 --set K=64
  "$kiln" emit examples/gpu/matmul.kiln --stage cuda --target nvptx64-nvidia-cuda --cpu sm_90 |
    grep -E '^// launch|__global__|__syncthreads'
  if "$kiln" run examples/gpu/matmul.kiln --gpu 0 --check --set M=256 --set N=256 --set K=256 \
    2> /tmp/kiln-quickstart-gpu.txt; then
    "$kiln" run "${gpu_examples[@]}" --gpu 0 --bench
  else
    echo "(no GPU run here: $(tail -1 /tmp/kiln-quickstart-gpu.txt))"
  fi
fi

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

heading "Starting kilnd, the compile service, on a free loopback port, with one local agent"
data_dir=$(mktemp -d)
kilnd_out=$data_dir/kilnd.out
build/server/kilnd --listen 127.0.0.1:0 --data-dir "$data_dir" --local-agent --log-level warn \
  > "$kilnd_out" &
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
echo "kilnd: listening on $address; tuning records in $data_dir/records.db; agent key 'local'"

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

# The main job: tuning on the agent, every trial a record.
gemm=tests/bench/kernels/gemm.kiln
conv=tests/bench/kernels/conv2d.kiln
gemm_size=${KILN_QUICKSTART_GEMM:-1024}
gemm_shape=(--set "M=$gemm_size" --set "N=$gemm_size" --set "K=$gemm_size")
out_dir=$PWD/build/quickstart
mkdir -p "$out_dir"

heading "Tuning the GEMM ($gemm_size^3, fp32) on the local agent: 48 trials (kiln tune)"
"$kiln" tune "$gemm" --key local --trials 48 "${gemm_shape[@]}" --server "$address"

heading "Tuning a ResNet conv2d (64x56x56, 64 3x3 filters) on the local agent: 24 trials"
"$kiln" tune "$conv" --key local --trials 24 --server "$address"

# The best record's knobs as --set options.
best_sets() {
  "$kiln" records best "$@" --key local --json --server "$address" |
    /usr/bin/python3 -c 'import json, sys
print(" ".join(f"--set {k}={v}" for k, v in sorted(json.load(sys.stdin)["config"].items())))'
}
heading "The best configurations (kiln records best)"
"$kiln" records best "$gemm" "${gemm_shape[@]}" --key local --server "$address"
"$kiln" records best "$conv" --key local --server "$address"
read -r -a gemm_best <<< "$(best_sets "$gemm" "${gemm_shape[@]}")"
read -r -a conv_best <<< "$(best_sets "$conv")"

heading "The best configurations beside OpenBLAS and oneDNN, measured now in one run"
echo "(2 threads; ratio = kiln GFLOP/s / library GFLOP/s; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
build/tests/bench/bench_gemm --sizes "$gemm_size" --threads 2 "${gemm_best[@]}"
build/tests/bench/bench_conv --case 1x64x56x56_64x3x3_s1p1 --threads 2 "${conv_best[@]}"

heading "A records query: the five fastest GEMM records (kiln records query)"
"$kiln" records query --name gemm --sort fastest --limit 5 --server "$address"
"$kiln" records jobs --server "$address"

heading "The tuning curves: best GFLOP/s against trials (kiln records plot)"
"$kiln" records plot --out "$out_dir/tuning-curve.png" --server "$address"

# A whole model: torchvision's ResNet-18 (random weights, nothing downloaded), exported to
# ONNX; its tasks; one tuning job over them under a time budget (kiln tune MODEL --budget);
# then its tuned artifact (kiln compile MODEL --best) and the default one timed beside
# PyTorch in alternating blocks (tests/bench/bench_models.py), and the job's curve drawn.
model_budget=${KILN_QUICKSTART_MODEL_BUDGET:-3m}
model_dir=$out_dir/resnet18
mkdir -p "$model_dir"
heading "ResNet-18 from ONNX: its tasks (kiln tasks), tuned on the agent for $model_budget, beside PyTorch"
/usr/bin/python3 tests/bench/bench_models.py --export-worker resnet18 "$model_dir/resnet18.onnx" \
  "$model_dir/resnet18_x.npy" > /dev/null
"$kiln" tasks "$model_dir/resnet18.onnx"
echo "(2 threads; each line: kiln's time per inference tuned and by default, PyTorch's, the ratio)"
/usr/bin/python3 tests/bench/bench_models.py --models resnet18 --threads 2 --tune "$model_budget" \
  --kilnd "$address" --work "$model_dir" > "$model_dir/resnet18.json"
model_job=$(/usr/bin/python3 -c 'import json, sys
print(json.loads(open(sys.argv[1]).readline())["job"])' "$model_dir/resnet18.json")

heading "ResNet-18's tuning: each task's trials, best and trial 0, and the model's curve"
/usr/bin/python3 - "$model_dir/resnet18.json" << 'EOF_PY'
import json, sys
line = json.loads(open(sys.argv[1]).readline())
print(f"job {line['job']}: {line['trials']} trials in {line['tuning_s']:.0f} s "
      f"({line['candidates_per_s']} a second); predicted {line['predicted_ms']:.2f} ms a run")
print(f"{'CALLS':>5}  {'TRIALS':>6}  {'BEST MS':>9}  {'PEAK':>5}  {'TRIAL 0':>7}  TASK")
for t in line["tasks"]:
    q = t.get("trial0_quality")
    print(f"{t['calls']:>5}  {t['trials']:>6}  {t.get('best_ms', 0):>9.4f}  "
          f"{100 * t.get('peak_share', 0):>4.0f}%  {'-' if q is None else f'{100 * q:.0f}%':>7}  "
          f"{t['name']}")
EOF_PY
"$kiln" records plot --job "$model_job" --out "$out_dir/resnet18-tuning.png" --server "$address"
echo "the tuned artifact: $model_dir/resnet18.tuned.so (run it: examples/c/run_model, docs/models.md)"

echo
echo "Next: '$kiln --help', docs/tuning.md, docs/cli.md, docs/language.md, docs/server.md and"
echo "docs/python.md; ONNX models: docs/models.md; ./deploy/test.sh runs every test."
