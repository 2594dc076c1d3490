#!/usr/bin/python3
"""The models benchmark (tests/bench/run.sh models): whole ONNX models run as kiln's
artifact (what `kiln compile` ships, run by examples/c/run_model) and by PyTorch on the
same input, on 1 and 2 threads.

Each model (tests/models/torch_models.py builds them: fixed seeds, weights=None) is
exported to ONNX once. Each side runs in a process of its own, in 3 alternating blocks
(these machines are shared and noisy), and each block's time per inference is kept
(PyTorch's: the median of its rounds; kiln's: the mean of 20 runs); a side's figure is the median of its blocks. Peak memory is each process's
maximum resident set (kiln's: run_model's, the artifact and its weights; the compile is
done once, before). kiln's output is compared with
PyTorch's (max relative error at most 1e-4, else the exit status is 1). One JSON line
per case:

  {"bench":"model_resnet18_t1","kiln_ms":...,"baseline":"pytorch 1.13.1",
   "baseline_ms":...,"ratio":...,"kiln_peak_mib":...,"baseline_peak_mib":...,
   "kiln_gflops":...,"peak_gflops":...,"kiln_peak_share":...,"cpu":"...","isa":"..."}

ratio is PyTorch's time over kiln's (above 1: kiln is faster); kiln_gflops counts the
work of every call kiln makes (its algorithms' flops); peak_gflops is this host's FMA
peak at the case's threads (bench_host). Progress goes to stderr.

--tune DURATION first tunes each model on a kilnd of the run's own with its local agent
(`kiln tune MODEL --key local --budget DURATION --flush-cache`: one job over the model's
tasks, 2 threads, each task timed with its data out of the caches as in the model), then
times its tuned artifact (`kiln compile MODEL --best --key local`) beside the default one
and PyTorch, in the same alternating blocks; the line then has kiln_ms (tuned), default_ms,
ratio (PyTorch over tuned), default_ratio, and the job's number (job), trials, tuning_s,
candidates_per_s, predicted_ms (the job's sum of calls x best), trial0_quality (over the
tasks with knobs, the mean of best ms / trial 0's ms: how good each task's first point
was, before it measured anything) and trial0_quality_transferred (the same over the tasks
whose first point came from the records of related shapes; null when none did), and tasks
(each task's calls, trials, best ms, share of the host's FMA peak on all its CPUs, on which
the local agent measured it, and its trial 0: where
it came from and its quality). With --kilnd ADDRESS the tuning is done by that kilnd (its
agent key `local`) instead, and its records stay there. A line for a person goes to stderr
after each JSON line.
"""

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
from bench_tune import Kilnd, host_probes  # noqa: E402  (a kilnd of the run's own, the host)

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "encoder"]
# The threads kilnd's local agent measures with: every CPU this process may use.
TUNE_THREADS = len(os.sched_getaffinity(0))


def run_measured(cmd, env=None):
    """(stdout, peak resident MiB) of one process, from its own rusage (wait4)."""
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise SystemExit(f"bench_models: {' '.join(cmd)} failed ({p.returncode}):\n"
                             f"{err.read()}")
        return out.read(), usage.ru_maxrss / 1024


def kiln_artifact(kiln, model, work):
    """The model compiled once into one artifact (MODEL.so and MODEL.weights in work), and the
    floating-point operations of one run (`kiln tasks --json`: every call, its flops)."""
    so = os.path.join(work, pathlib.Path(model).stem + ".so")
    run_measured([kiln, "compile", model, "-o", so])
    out, _ = run_measured([kiln, "tasks", model, "--json"])
    flops = sum(t["calls"] * t["flops"] for t in map(json.loads, out.strip().splitlines()))
    return so, flops


def tune_model(kiln, address, model, budget, work):
    """The model tuned under `budget` on the local agent of the kilnd at `address`, then its
    tuned artifact: (MODEL.tuned.so, the job's last progress message, its wall time in s).
    Says how the job goes on stderr every 15 s."""
    env = dict(os.environ, KILN_SERVER=address)
    start = time.monotonic()
    cmd = [kiln, "tune", model, "--key", "local", "--budget", budget, "--flush-cache", "--json"]
    print(f"bench_models: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    with tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        end, said = None, start
        for line in p.stdout:
            end = json.loads(line)
            if time.monotonic() - said >= 15:
                said = time.monotonic()
                predicted = end.get("predicted_ms", 0)
                print(f"bench_models: {pathlib.Path(model).stem}: {end.get('trials', 0)} trials, "
                      f"predicted {f'{predicted:.3f} ms' if predicted else '-'}, "
                      f"{end.get('eta_s', 0):.0f} s left", file=sys.stderr, flush=True)
        p.wait()
        err.seek(0)
        if p.returncode != 0 or end is None:
            raise SystemExit(f"bench_models: kiln tune {model} failed:\n{err.read()}")
    wall = time.monotonic() - start
    so = os.path.join(work, pathlib.Path(model).stem + ".tuned.so")
    run_measured([kiln, "compile", model, "--best", "--key", "local", "-o", so], env)
    return so, end, wall


def task_lines(end, peak_gflops):
    """Each task of a model's job: its calls, trials, best ms, share of the FMA peak, and its
    trial 0 (where it came from, its ms and quality: best ms / trial 0's ms)."""
    out = []
    for t in end.get("tasks", []):
        best = t.get("best", {})
        ms = best.get("retimed_ms", best.get("median_ms"))
        line = {"name": t["name"], "calls": t.get("calls", 1), "trials": t.get("trials", 0),
                "points": int(t.get("space_size", 1))}
        if ms:
            line["best_ms"] = round(ms, 5)
        if best.get("gflops"):
            line["peak_share"] = round(best["gflops"] / peak_gflops, 3)
        first = t.get("first")
        if first and line["points"] > 1 and ms:
            first_ms = first.get("median_ms", 0) if not first.get("error") else 0
            line["trial0_from"] = t.get("first_from", "")
            if t.get("first_shape"):
                line["trial0_shape"] = t["first_shape"]
            line["trial0_ms"] = round(first_ms, 5)
            line["trial0_quality"] = round(min(1.0, ms / first_ms), 3) if first_ms > 0 else 0.0
        out.append(line)
    return out


def trial0_quality(tasks, transferred_only=False):
    """The mean trial-0 quality over the tasks that report one (None when none does)."""
    q = [t["trial0_quality"] for t in tasks if "trial0_quality" in t and
         (not transferred_only or t.get("trial0_from") == "transfer")]
    return round(statistics.mean(q), 3) if q else None


def kiln_block(run_model, so, x, threads, out_dir, runs=20):
    """One block of kiln's side: `runs` runs of the artifact after one more that saves its
    output to out_dir/y.npy; the mean per run in ms, and the peak memory."""
    # KILN_CONTENTION=wait: the pool never runs a launch on one thread because the host
    # looked busy (PyTorch's block just before leaves its threads in /proc/loadavg).
    env = dict(os.environ, KILN_NUM_THREADS=str(threads), KILN_CONTENTION="wait")
    out, rss = run_measured([run_model, so, "--input", f"x={x}", "--save", out_dir, "--runs",
                             str(runs)], env)
    ms = float(re.search(r"([0-9.]+) ms per run", out).group(1))
    return ms, rss


def torch_block(name, x, threads):
    out, rss = run_measured([sys.executable, __file__, "--torch-worker", name, x, str(threads)])
    return json.loads(out)["median_ms"], rss


def export_worker(name, onnx_path, x_path):
    """Runs in its own process (so that this one stays small: a child's peak
    resident set counts what it inherited): the model exported, its input and
    PyTorch's output on it saved (the output beside the input, as X.want.npy)."""
    import numpy as np
    import torch
    import torch_models
    model, shape = torch_models.build(name)
    model.eval()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    torch.onnx.export(model, x, onnx_path, opset_version=13, input_names=["x"],
                      output_names=["y"])
    np.save(x_path, x.numpy())
    with torch.no_grad():
        np.save(x_path + ".want.npy", model(x).numpy())
    print(json.dumps({"torch": torch.__version__}))


def torch_worker(name, x, threads):
    """Runs in its own process: the model, warm-up, then 5 timed repeats."""
    import numpy as np
    import torch
    import torch_models
    torch.set_num_threads(threads)
    model, _ = torch_models.build(name)
    model.eval()
    inp = torch.from_numpy(np.load(x))
    with torch.no_grad():
        model(inp)
        start = time.perf_counter()
        model(inp)
        once = time.perf_counter() - start
        number = max(1, int(0.05 / max(once, 1e-6)))
        rounds = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(number):
                model(inp)
            rounds.append((time.perf_counter() - start) / number)
    print(json.dumps({"median_ms": statistics.median(rounds) * 1e3}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=str(ROOT / "build"))
    p.add_argument("--quick", action="store_true", help="ResNet-18 on 1 thread only")
    p.add_argument("--models", nargs="*", default=MODELS)
    p.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    p.add_argument("--tune", metavar="DURATION",
                   help="tune each model first for this long (90s, 20m), then time it tuned")
    p.add_argument("--kilnd", metavar="ADDRESS",
                   help="with --tune: tune on this kilnd's local agent (default: one of the "
                        "run's own)")
    p.add_argument("--work", metavar="DIR",
                   help="keep the exported models and artifacts here (default: a temporary "
                        "directory)")
    p.add_argument("--torch-worker", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--export-worker", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.torch_worker:
        return torch_worker(a.torch_worker[0], a.torch_worker[1], int(a.torch_worker[2]))
    if a.export_worker:
        return export_worker(*a.export_worker)
    if a.quick:
        a.models, a.threads = ["resnet18"], [1]
    build = pathlib.Path(a.build_dir)
    kiln = str(build / "clients" / "cli" / "kiln")
    run_model = str(build / "examples" / "run_model")
    # The tasks are tuned on kilnd's local agent on every CPU: their shares are of that peak.
    hosts = host_probes(build, sorted(set(a.threads) | ({TUNE_THREADS} if a.tune else set())))
    work = a.work or tempfile.mkdtemp(prefix="kiln-bench-models-")
    os.makedirs(work, exist_ok=True)
    status = 0
    kilnd, address = None, a.kilnd
    if a.tune and not address:
        os.makedirs(os.path.join(work, "kilnd"), exist_ok=True)
        kilnd = Kilnd(build, os.path.join(work, "kilnd"))
        address = kilnd.address
    try:
        for name in a.models:
            status |= bench_model(a, name, kiln, run_model, address, hosts, work)
    finally:
        if kilnd:
            kilnd.stop()
    return status


def bench_model(a, name, kiln, run_model, address, hosts, work):
    """One model: exported, compiled (and tuned, with --tune), timed beside PyTorch on each
    thread count; its JSON lines printed. 0, or 1 when kiln's answer differs."""
    status = 0
    onnx_path = os.path.join(work, name + ".onnx")
    x_path = os.path.join(work, name + "_x.npy")
    out, _ = run_measured([sys.executable, __file__, "--export-worker", name, onnx_path,
                           x_path])
    torch_version = json.loads(out.strip().splitlines()[-1])["torch"]
    so, flops = kiln_artifact(kiln, onnx_path, work)
    default_so, tuned = so, None
    os.makedirs(os.path.join(work, "default"), exist_ok=True)
    if a.tune:
        print(f"bench_models: {name}: tuning for {a.tune}", file=sys.stderr, flush=True)
        so, end, wall = tune_model(kiln, address, onnx_path, a.tune, work)
        tuned = {"job": end.get("job", 0), "trials": end.get("trials", 0),
                 "tuning_s": round(wall, 1),
                 "candidates_per_s": round(end.get("trials", 0) / wall, 2),
                 "predicted_ms": round(end.get("predicted_ms", 0), 3),
                 "stopped": end.get("stopped", "")}
    for threads in a.threads:
        print(f"bench_models: {name}, {threads} thread(s)", file=sys.stderr, flush=True)
        kiln_ms, torch_ms, kiln_rss, torch_rss, default_ms = [], [], [], [], []
        for _ in range(3):
            ms, rss = kiln_block(run_model, so, x_path, threads, work)
            kiln_ms.append(ms)
            kiln_rss.append(rss)
            if tuned:
                default_ms.append(kiln_block(run_model, default_so, x_path, threads,
                                             os.path.join(work, "default"))[0])
            ms, rss = torch_block(name, x_path, threads)
            torch_ms.append(ms)
            torch_rss.append(rss)
        k, t = statistics.median(kiln_ms), statistics.median(torch_ms)
        # kiln's answer against PyTorch's, as tests/models checks it.
        import numpy as np
        got, want = np.load(os.path.join(work, "y.npy")), np.load(x_path + ".want.npy")
        err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
        if got.shape != want.shape or not err <= 1e-4:
            print(f"bench_models: {name}: kiln's output differs from PyTorch's "
                  f"(max relative error {err:.3g})", file=sys.stderr)
            status = 1
        host = hosts[threads]
        line = {"bench": f"model_{name}_t{threads}", "kiln_ms": round(k, 3),
                "baseline": f"pytorch {torch_version}", "baseline_ms": round(t, 3),
                "ratio": round(t / k, 3), "threads": threads,
                "max_rel_error": float(f"{err:.3g}"),
                "kiln_blocks_ms": [round(v, 3) for v in kiln_ms],
                "baseline_blocks_ms": [round(v, 3) for v in torch_ms],
                "kiln_peak_mib": round(max(kiln_rss), 1),
                "baseline_peak_mib": round(max(torch_rss), 1)}
        if flops and flops > 0:
            gflops = flops / (k * 1e-3) / 1e9
            line["kiln_gflops"] = round(gflops, 2)
            line["kiln_peak_share"] = round(gflops / host["peak_gflops"], 3)
        if tuned:
            d = statistics.median(default_ms)
            line.update({"default_ms": round(d, 3), "default_ratio": round(t / d, 3),
                         "default_blocks_ms": [round(v, 3) for v in default_ms]})
            line.update(tuned)
            line["tasks"] = task_lines(end, hosts[TUNE_THREADS]["peak_gflops"])
            line["trial0_quality"] = trial0_quality(line["tasks"])
            line["trial0_quality_transferred"] = trial0_quality(line["tasks"], True)
        for key in ("peak_gflops", "peak_probe", "cpu", "llvm_cpu", "isa"):
            if key in host:
                line[key] = host[key]
        print(json.dumps(line), flush=True)
        say = (f"bench_models: {name}, {threads} thread(s): kiln {k:.2f} ms"
               + (f" tuned, {line['default_ms']:.2f} ms default" if tuned else "")
               + f", PyTorch {t:.2f} ms: {t / k:.2f}x PyTorch")
        if tuned:
            q = line["trial0_quality"]
            say += (f"; {tuned['trials']} trials in {tuned['tuning_s']:.0f} s "
                    f"({tuned['candidates_per_s']} a second), predicted "
                    f"{tuned['predicted_ms']:.2f} ms"
                    + (f", trial 0 at {100 * q:.0f}% of each task's best on average"
                       if q is not None else ""))
        print(say, file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
