#!/usr/bin/python3
"""The tuning benchmark (tests/bench/run.sh tune): kiln's tuner against the vendor
libraries, and the model-based search against random search.

Starts kilnd with a records database and one local agent, tunes the GEMM
(tests/bench/kernels/gemm.kiln) at 2048 and the conv2d shapes of bench_conv
(tests/bench/kernels/conv2d.kiln) with each search strategy at the same trial
budget, then times the best configuration beside OpenBLAS / oneDNN in one run
(bench_gemm / bench_conv, 2 threads). One JSON line per case and strategy:

  {"bench":"tune_gemm_2048","search":"xgb-rank","model_features":"iter","trials":200,
   "kiln_gflops":...,
   "baseline":"openblas","baseline_gflops":...,"ratio":...,"trials_to_90":...,
   "candidates_per_s":...,"tuning_s":...,"best":"KB=...","cpu":"...","features":"..."}

trials_to_90 is the first trial whose best so far reached 90% of the job's final
best; candidates_per_s counts every measured trial. Progress goes to stderr.

--transfer instead asks whether a warm start helps: the GEMM tuned at --from
(xgb-rank), then at --to with and without --transfer, several seeds; one line per
seed and arm with its best GFLOP/s after 16 and after --trials trials and its
trials to 90% of the better arm's final best.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

# name, kernel, its params, the bench program and its --case text, part of --quick
CONV_SHAPES = [
    # N, C, H, W, F, KH, KW, S, P
    ((1, 64, 56, 56, 64, 3, 3, 1, 1), True),
    ((1, 3, 224, 224, 64, 7, 7, 2, 3), True),
    ((256, 256, 14, 14, 512, 3, 3, 1, 1), False),
]


def cases(quick):
    out = []
    gemm = 1024 if quick else 2048
    out.append((f"tune_gemm_{gemm}", "gemm.kiln", {"M": gemm, "N": gemm, "K": gemm},
                "bench_gemm", ["--sizes", str(gemm)]))
    for (n, c, h, w, f, kh, kw, s, p), in_quick in CONV_SHAPES:
        if quick and not in_quick:
            continue
        oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
        name = f"{n}x{c}x{h}x{w}_{f}x{kh}x{kw}_s{s}p{p}"
        params = dict(N=n, C=c, H=h, W=w, F=f, KH=kh, KW=kw, S=s, P=p, OH=oh, OW=ow)
        out.append((f"tune_conv_{name}", "conv2d.kiln", params, "bench_conv",
                    ["--case", name]))
    return out


def log(*args):
    print("bench_tune:", *args, file=sys.stderr, flush=True)


def host_probes(build, threads):
    """This host as tests/bench/bench_host describes it at each of `threads`: {threads: its
    line} (cpu, llvm_cpu, isa, and the f32 FMA peak_gflops its probe reached)."""
    out = {}
    for line in subprocess.run([str(pathlib.Path(build) / "tests" / "bench" / "bench_host")] +
                               [str(t) for t in threads], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        h = json.loads(line)
        out[h["threads"]] = h
    return out


class Kilnd:
    def __init__(self, build, data):
        self.proc = subprocess.Popen(
            [str(build / "server" / "kilnd"), "--listen", "127.0.0.1:0", "--local-agent",
             "--data-dir", str(data), "--log-level", "warn"],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("kilnd: listening on "):
            raise SystemExit(f"bench_tune: kilnd did not start: {line!r}")
        self.address = line.split()[-1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def curve_of(stdout):
    """The best GFLOP/s after each trial, and the last progress message."""
    progress = [json.loads(line) for line in stdout.splitlines()]
    curve = [p.get("best", {}).get("gflops", 0.0) for p in progress if "last" in p]
    return curve, progress[-1]


def transfer(args):
    build = pathlib.Path(args.build_dir)
    kiln = str(build / "clients" / "cli" / "kiln")
    gemm = str(ROOT / "tests" / "bench" / "kernels" / "gemm.kiln")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "unknown")
    with tempfile.TemporaryDirectory() as data:
        kilnd = Kilnd(build, data)
        try:
            env = dict(os.environ, KILN_SERVER=kilnd.address)

            def tune(size, seed, *extra):
                sets = [a for p in "MNK" for a in ("--set", f"{p}={size}")]
                r = subprocess.run([kiln, "tune", gemm, "--key", "local", "--trials",
                                    str(args.trials), "--seed", str(seed), "--json", *sets,
                                    *extra], env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"bench_tune: kiln tune failed: {r.stderr.strip()}")
                return curve_of(r.stdout)[0]

            log(f"source: gemm {args.from_size}, {args.trials} trials")
            tune(args.from_size, 1)
            for seed in (int(s) for s in args.seeds.split(",")):
                arms = {}
                for arm, extra in (("cold", []), ("transfer", ["--transfer"])):
                    log(f"gemm {args.to_size}, seed {seed}: {arm}")
                    arms[arm] = tune(args.to_size, seed, *extra)
                top = max(max(c) for c in arms.values())
                for arm, c in arms.items():
                    print(json.dumps({
                        "bench": f"transfer_gemm_{args.from_size}_to_{args.to_size}",
                        "arm": arm, "seed": seed, "trials": len(c),
                        "best_gflops_16": round(c[min(15, len(c) - 1)], 2),
                        "best_gflops": round(c[-1], 2),
                        "trials_to_90_of_best_arm": next(
                            (i + 1 for i, g in enumerate(c) if g >= 0.9 * top), None),
                        "cpu": cpu}), flush=True)
        finally:
            kilnd.stop()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--quick", action="store_true", help="GEMM at 1024, the batch-1 convs")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--searches", default="xgb-rank+iter,xgb-rank,random",
                    help="strategies, a +iter for the Iter features")
    ap.add_argument("--case", default="", help="only cases whose name contains TEXT")
    ap.add_argument("--transfer", action="store_true", help="the warm-start experiment")
    ap.add_argument("--from-size", type=int, default=512)
    ap.add_argument("--to-size", type=int, default=1024)
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args()
    if args.transfer:
        return transfer(args)
    build = pathlib.Path(args.build_dir)
    kiln = str(build / "clients" / "cli" / "kiln")
    kernels = ROOT / "tests" / "bench" / "kernels"
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "unknown")
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo")
                  if line.startswith("flags")), [])
    features = ",".join(f for f in ("avx2", "fma", "avx512f", "avx512vl", "avx512_bf16",
                                     "amx_tile", "asimd", "sve") if f in flags)

    ok = True
    with tempfile.TemporaryDirectory() as data:
        kilnd = Kilnd(build, data)
        try:
            env = dict(os.environ, KILN_SERVER=kilnd.address)
            for name, kernel, params, program, select in cases(args.quick):
                if args.case not in name:
                    continue
                sets = [a for k, v in params.items() for a in ("--set", f"{k}={v}")]
                for search in args.searches.split(","):
                    log(f"{name}: {search}, {args.trials} trials")
                    start = time.monotonic()
                    strategy, _, model_features = search.partition("+")
                    tune = subprocess.run(
                        [kiln, "tune", str(kernels / kernel), "--key", "local", "--trials",
                         str(args.trials), "--search", strategy, "--features",
                         model_features or "knob", "--json", *sets],
                        env=env, capture_output=True, text=True)
                    wall = time.monotonic() - start
                    if tune.returncode != 0:
                        log(f"{name}: kiln tune failed: {tune.stderr.strip()}")
                        print(json.dumps({"bench": name, "search": strategy,
                                          "model_features": model_features or "knob",
                                          "error": tune.stderr.strip()}), flush=True)
                        ok = False
                        continue
                    progress = [json.loads(line) for line in tune.stdout.splitlines()]
                    best_curve = []
                    for p in progress:
                        if "last" in p:
                            best_curve.append(p.get("best", {}).get("gflops", 0.0))
                    end = progress[-1]
                    best = end.get("best", {})
                    final = best.get("gflops", 0.0)
                    to_90 = next((i + 1 for i, g in enumerate(best_curve) if g >= 0.9 * final),
                                 None)
                    knobs = [a for k, v in sorted(best.get("config", {}).items())
                             for a in ("--set", f"{k}={v}")]
                    bench = subprocess.run(
                        [str(build / "tests" / "bench" / program), "--threads", "2", *select,
                         *knobs], capture_output=True, text=True)
                    lines = [json.loads(line) for line in bench.stdout.splitlines()
                             if line.startswith("{")]
                    if bench.returncode != 0 or not lines or "error" in lines[0]:
                        ok = False
                    base = lines[0] if lines else {"error": bench.stderr.strip()}
                    device = json.loads(subprocess.run(
                        [kiln, "agents", "--json"], env=env, capture_output=True,
                        text=True).stdout.splitlines()[0])
                    out = {"bench": name, "search": strategy,
                           "model_features": model_features or "knob",
                           "trials": end.get("trials", 0),
                           "kiln_gflops": base.get("kiln_gflops"),
                           "baseline": base.get("baseline"),
                           "baseline_gflops": base.get("baseline_gflops"),
                           "ratio": base.get("ratio"), "tuned_gflops": round(final, 2),
                           "trials_to_90": to_90,
                           "candidates_per_s": round(end.get("trials", 0) / wall, 3),
                           "tuning_s": round(wall, 1), "best": best.get("config_text", ""),
                           "errors": {k: int(v) for k, v in end.get("errors", {}).items()},
                           "rejected": {k: int(v) for k, v in end.get("rejected", {}).items()},
                           "cpu": cpu, "target_cpu": device.get("cpu", ""),
                           "features": features}
                    if "error" in base:
                        out["error"] = base["error"]
                    print(json.dumps(out), flush=True)
        finally:
            kilnd.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
