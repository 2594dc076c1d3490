#!/usr/bin/python3
"""The auto-scheduling benchmark (tests/bench/run.sh auto): every example and bench kernel
with knobs, its schedule taken out and sketched by kiln (docs/tuning.md, "A func without a
schedule"), tuned for --trials trials on kilnd's local agent, beside the same kernel with its
hand-written schedule tuned for as many; then both bests timed in turn, interleaved, on the
same agent (the smaller of 3 medians each). One JSON line per kernel:

  {"bench":"auto_examples_matmul","trials":64,"hand_ms":...,"auto_ms":...,"ratio":...,
   "hand_gflops":...,"auto_gflops":...,"peak_gflops":...,"hand_peak_share":...,
   "auto_peak_share":...,"threads":2,"search":"xgb-rank","hand_best":"TI=...",
   "auto_best":"par_C=...,...",
   "cpu":"...","llvm_cpu":"...","isa":"..."}

With --gpu N, the GPU examples (examples/gpu) instead, tuned and timed on the agent's GPU N
(records under local/gpuN), kiln's GPU sketches against their hand schedules; their lines
name the GPU, not a peak share.

ratio is hand_ms / auto_ms: 1 when the sketch is as fast as the hand schedule, above 1 when
faster; each side's GFLOP/s is also given as a share of this host's f32 FMA peak on all its
cores (tests/bench/bench_host's probe), and the host as bench_host names it. A line then gives the geometric mean and the smallest ratio.

Then the PolyBench kernels of tests/bench/polybench (LARGE, f64, written without a
schedule), each tuned the same way at one thread and its best timed beside the same kernel in
C (tests/bench/polybench/polybench.c, PolyBench's loop order) compiled with
`gcc -O3 -march=native` and with `clang -O3 -march=native -mllvm -polly` (clang-19 where it is
installed), also at one thread:

  {"bench":"polybench_gemm","trials":64,"kiln_ms":...,"gcc_ms":...,"polly_ms":...,
   "ratio":...,"kiln_gflops":...,"peak_f64_gflops":...,"kiln_peak_share":...,
   "auto_best":"...","search":"xgb-rank","threads":1,"cpu":"...","llvm_cpu":"...",
   "isa":"..."}

ratio is the faster C build's time over kiln's, and kiln's GFLOP/s (PolyBench's usual count, a
multiply-add 2) a share of the f64 FMA peak of one core (half the f32 probe's); a last line
gives their geometric mean. The
C side is the fastest of 3 runs, kiln's the smaller of 3 medians on the agent. Progress goes
to stderr.
"""

import argparse
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_tune import Kilnd, host_probes, log  # noqa: E402

# file, func, params (small enough to tune in seconds a trial), part of --quick
CASES = [
    ("examples/matmul.kiln", "matmul", {"M": 256, "N": 256, "K": 256}, True),
    ("examples/batch_matmul.kiln", "batch_matmul", {}, True),
    ("examples/conv2d.kiln", "conv2d", {}, False),
    ("tests/bench/kernels/gemm.kiln", "gemm", {"M": 512, "N": 512, "K": 512}, True),
    ("tests/bench/kernels/conv2d.kiln", "conv2d",
     dict(N=1, C=64, H=56, W=56, F=64, KH=3, KW=3, S=1, P=1, OH=56, OW=56), False),
]

# With --gpu N: the GPU examples, their hand schedules against kiln's GPU sketches, on the
# agent's GPU N.
GPU_CASES = [
    ("examples/gpu/matmul.kiln", "matmul_gpu", {"M": 2048, "N": 2048, "K": 2048}, True),
    ("examples/gpu/batch_matmul.kiln", "batch_matmul_gpu", {}, True),
    ("examples/gpu/conv2d.kiln", "conv2d_gpu", {}, False),
]


# The PolyBench kernels, in the order they run; part of --quick; their floating-point
# operations at LARGE as usually counted (a multiply-add 2, what the FMA peak counts; kiln's own
# count takes gemm's 1.5 * A * B as two multiplies where one is hoisted out of the loop).
POLYBENCH = [("gemm", True, 2 * 1000 * 1100 * 1200),
             ("2mm", False, 2 * 800 * 900 * 1100 + 2 * 800 * 1200 * 900),
             ("syrk", False, 1200 * 1201 // 2 * 1000 * 2),
             ("trmm", False, 1000 * 999 // 2 * 1200 * 2),
             ("covariance", False, 1200 * 1201 // 2 * 1400 * 2),
             ("atax", True, 4 * 1900 * 2100),
             ("mvt", True, 4 * 2000 * 2000),
             ("jacobi-2d", False, 500 * 2 * 1298 * 1298 * 5),  # 4 adds and a multiply a point
             ("heat-3d", False, 500 * 2 * 118 ** 3 * 15)]  # 15 a point, none an FMA


def algorithm_of(build, path, func):
    """func alone from the file at `path`, its schedule, knobs and knob constraints left out
    (`kiln emit --stage algorithm`: what `kiln tune --auto` sends)."""
    emit = subprocess.run([str(build / "clients" / "cli" / "kiln"), "emit", str(path), "--func",
                           func, "--stage", "algorithm"], capture_output=True, text=True,
                          check=True)
    return emit.stdout


def with_sketch(text, sketch):
    """A single func's source without a schedule, given `sketch` as its schedule."""
    end = text.rindex("}")
    return text[:end] + "  schedule {\n" + sketch + "  }\n" + text[end:]


def summary(bench, ratios, **fields):
    """The last line of a part: its cases' geometric mean ratio and the smallest one."""
    if ratios:
        print(json.dumps({"bench": bench, "cases": len(ratios),
                          "geomean_ratio": round(math.exp(sum(map(math.log, ratios))
                                                          / len(ratios)), 3),
                          "min_ratio": round(min(ratios), 3), **fields}), flush=True)


def config_text(config):
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


def c_baselines(work):
    """The PolyBench C file built with gcc and with clang and Polly: {name: binary}."""
    source = ROOT / "tests" / "bench" / "polybench" / "polybench.c"
    # deploy/install-deps.sh installs clang-19, whose Polly is built in; else Debian's clang.
    clang = next((c for c in ("clang-19", "clang") if shutil.which(c)), "clang")
    builds = {"gcc": ["gcc", "-O3", "-march=native"],
              "polly": [clang, "-O3", "-march=native", "-mllvm", "-polly"]}
    out = {}
    for name, command in builds.items():
        if not shutil.which(command[0]):
            raise SystemExit(f"bench_auto: {command[0]} is needed for the PolyBench baselines")
        version = subprocess.run([command[0], "--version"], capture_output=True,
                                 text=True).stdout.splitlines()[0]
        log(f"polybench baseline {name}: {' '.join(command)} ({version})")
        binary = pathlib.Path(work) / f"polybench_{name}"
        subprocess.run([*command, "-o", str(binary), str(source)], check=True)
        out[name] = binary
    return out


def c_time(binary, kernel):
    r = subprocess.run([str(binary), kernel, "3"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["ms"]


def polybench(args, client, kiln, trials, host, one_thread):
    """The PolyBench part: one line a kernel, then the summary. Whether every kernel ran.
    `one_thread` is bench_host's line for one thread: its f32 FMA peak, half of it in f64."""
    peak = one_thread["peak_gflops"] / 2
    ok, ratios = True, []
    with tempfile.TemporaryDirectory() as work:
        baselines = c_baselines(work)
        for kernel, in_quick, flops in POLYBENCH:
            if (args.quick and not in_quick) or args.case not in kernel:
                continue
            file = ROOT / "tests" / "bench" / "polybench" / f"{kernel}.kiln"
            text = file.read_text()
            op = kiln.source(text, filename=str(file))
            name = f"polybench_{kernel}"
            settings = dict(threads=1, time_limit_ms=60000)
            try:
                log(f"{name}: gcc -O3 and clang -O3 with Polly")
                c_ms = {side: c_time(binary, kernel) for side, binary in baselines.items()}
                log(f"{name}: kiln, sketched, {trials} trials at one thread")
                client.tune(op, "local", trials=trials, batch=8, search=args.search,
                            **settings).wait()
                best = client.best(op, "local")
                timed = kiln.source(with_sketch(text, best.sketch), filename=str(file))
                kiln_ms = min(client.measure(timed, "local", set=best.config,
                                             **settings).median_ms for _ in range(3))
                ratio = min(c_ms.values()) / kiln_ms
                ratios.append(ratio)
                gflops = flops / (kiln_ms * 1e6)
                print(json.dumps({
                    "bench": name, "trials": trials, "kiln_ms": round(kiln_ms, 4),
                    "gcc_ms": round(c_ms["gcc"], 4), "polly_ms": round(c_ms["polly"], 4),
                    "ratio": round(ratio, 3), "kiln_gflops": round(gflops, 2),
                    "peak_f64_gflops": peak, "kiln_peak_share": round(gflops / peak, 3),
                    "auto_best": config_text(best.config), "search": args.search, "threads": 1,
                    **host}), flush=True)
            except (kiln.KilnError, subprocess.CalledProcessError) as e:
                ok = False
                print(json.dumps({"bench": name, "error": str(e)}), flush=True)
    summary("polybench_summary", ratios, threads=1, **host)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--quick", action="store_true",
                    help="16 trials, the GEMMs and three PolyBench kernels only")
    ap.add_argument("--trials", type=int, default=0, help="trials a job (default 64)")
    ap.add_argument("--case", default="", help="only cases whose file or kernel contains TEXT")
    ap.add_argument("--search", default="xgb-rank",
                    help="the tuning jobs' strategy (kiln tune --search; default xgb-rank)")
    ap.add_argument("--part", choices=("all", "hand", "polybench"), default="all",
                    help="the hand-schedule comparison, the PolyBench one, or both (default)")
    ap.add_argument("--gpu", type=int, default=None, metavar="N",
                    help="the GPU examples on the agent's GPU N instead (kiln's GPU sketches "
                         "against their hand schedules; no PolyBench part)")
    args = ap.parse_args()
    if args.gpu is not None:
        args.part = "hand"
    trials = args.trials or (16 if args.quick else 64)
    build = pathlib.Path(args.build_dir)
    sys.path.insert(0, str(build / "python"))
    import kiln  # noqa: E402  (the package the build makes)

    # This host: its CPU, what LLVM calls it, its features and its FMA peak (f32) on one thread
    # and on all of them (bench_host's probe), as every line says.
    cores = os.cpu_count() or 1
    hosts = host_probes(build, sorted({1, cores}))
    host = {"cpu": hosts[1]["cpu"], "llvm_cpu": hosts[1]["llvm_cpu"], "isa": hosts[1]["isa"]}
    ratios, ok = [], True
    with tempfile.TemporaryDirectory() as data:
        kilnd = Kilnd(build, data)
        try:
            with kiln.Client(kilnd.address, timeout=3600) as client:
                on_gpu = {} if args.gpu is None else {"gpu": args.gpu}
                key = "local" if args.gpu is None else f"local/gpu{args.gpu}"
                for file, func, params, in_quick in (CASES if args.gpu is None else GPU_CASES):
                    if (args.quick and not in_quick) or args.case not in file or \
                            args.part == "polybench":
                        continue
                    path = pathlib.Path(file)
                    name = f"auto_{path.parent.name}_{path.stem}"
                    hand_text = (ROOT / file).read_text()
                    auto_text = algorithm_of(build, ROOT / file, func)
                    hand_op = kiln.source(hand_text, name=func, filename=file)
                    auto_op = kiln.source(auto_text, name=func, filename=file)
                    try:
                        best = {}
                        for side, op in (("hand", hand_op), ("auto", auto_op)):
                            log(f"{name}: {side} schedule, {trials} trials")
                            client.tune(op, "local", trials=trials, batch=8,
                                        search=args.search, set=params, **on_gpu).wait()
                            best[side] = client.best(op, key, set=params)
                        # Both bests in turn, on the same agent, three times each.
                        timed_auto = kiln.source(with_sketch(auto_text, best["auto"].sketch),
                                                 name=func, filename=file)
                        ms = {"hand": [], "auto": []}
                        for _ in range(3):
                            for side, op in (("hand", hand_op), ("auto", timed_auto)):
                                r = client.measure(op, "local", **on_gpu,
                                                   set={**params, **best[side].config})
                                ms[side].append(r.median_ms)
                        hand_ms, auto_ms = min(ms["hand"]), min(ms["auto"])
                        ratio = hand_ms / auto_ms
                        ratios.append(ratio)
                        gflops = {side: best[side].flops / (t * 1e6) for side, t in
                                  (("hand", hand_ms), ("auto", auto_ms))}
                        # f32 kernels on every core: the share of that FMA peak (on a GPU,
                        # whose peak this host's probe does not know, the GPU's number).
                        where = {"gpu": args.gpu} if args.gpu is not None else {
                            "peak_gflops": hosts[cores]["peak_gflops"],
                            "hand_peak_share": round(
                                gflops["hand"] / hosts[cores]["peak_gflops"], 3),
                            "auto_peak_share": round(
                                gflops["auto"] / hosts[cores]["peak_gflops"], 3),
                            "threads": cores}
                        print(json.dumps({
                            "bench": name, "trials": trials, "hand_ms": round(hand_ms, 5),
                            "auto_ms": round(auto_ms, 5), "ratio": round(ratio, 3),
                            "hand_gflops": round(gflops["hand"], 1),
                            "auto_gflops": round(gflops["auto"], 1), **where,
                            "search": args.search,
                            "hand_best": config_text(best["hand"].config),
                            "auto_best": config_text(best["auto"].config), **host}),
                            flush=True)
                    except kiln.KilnError as e:
                        ok = False
                        print(json.dumps({"bench": name, "error": str(e)}), flush=True)
                summary("auto_summary", ratios, **host)
                if args.part != "hand":
                    ok = polybench(args, client, kiln, trials, host, hosts[1]) and ok
        finally:
            kilnd.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
