#!/usr/bin/python3
"""The contention benchmark (tests/bench/run.sh contention): kiln's kernels and the
vendor libraries on a host that something else is using.

Runs bench_gemm (512 and 1024) and bench_conv (the batch-1 layers) at 2 threads on
the quiet host, then beside 1 and then 2 busy-looping processes, and each at 1 thread on the quiet
host as kiln's floor. One JSON line per case and load:

  {"bench":"contention_gemm_1024_t2","competitors":1,"kiln_gflops":...,
   "kiln_quiet_gflops":...,"kiln_slowdown":...,"baseline":"openblas",
   "baseline_gflops":...,"baseline_slowdown":...,"slowdown_ratio":...,
   "kiln_t1_quiet_gflops":...,"vs_kiln_t1":...,"cpu":"...","isa":"..."}

kiln_slowdown and baseline_slowdown are each side's quiet GFLOP/s over its loaded
GFLOP/s; slowdown_ratio is kiln's over the library's (issue 52's goal: at most 1.2
with one competitor); vs_kiln_t1 is the loaded 2-thread GFLOP/s over kiln's quiet
1-thread GFLOP/s (the goal: at least 1). The competitors are plain busy loops, one
process each, started before and stopped after each loaded run. Progress goes to
stderr.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_bench(build_dir, program, args):
    """The JSON lines a bench program prints, by case name."""
    path = build_dir / "tests" / "bench" / program
    print(f"bench_contention: {program} {' '.join(args)}", file=sys.stderr, flush=True)
    out = subprocess.run([str(path)] + args, check=False, capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    lines = {}
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            record = json.loads(line)
            lines[record["bench"]] = record
    if out.returncode != 0 or not lines:
        raise SystemExit(f"bench_contention: {program} failed (exit status {out.returncode})")
    return lines


class Competitors:
    """n busy-looping processes for the life of a with-block."""

    def __init__(self, n):
        self.n = n
        self.procs = []

    def __enter__(self):
        for _ in range(self.n):
            self.procs.append(subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]))
        time.sleep(0.5)  # let the scheduler settle them
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", "build"))
    parser.add_argument("--quick", action="store_true", help="GEMM 512 only, 1 competitor")
    parser.add_argument("--repeat", type=int, default=0, help="timed runs of each side")
    args, _ = parser.parse_known_args()
    build_dir = pathlib.Path(args.build_dir)
    if not build_dir.is_absolute():
        build_dir = ROOT / build_dir

    repeat = ["--repeat", str(args.repeat)] if args.repeat > 0 else []
    sizes = "512" if args.quick else "512,1024"
    programs = [("bench_gemm", ["--sizes", sizes] + repeat)]
    if not args.quick:
        programs.append(("bench_conv", ["--quick"] + repeat))
    loads = [1] if args.quick else [1, 2]

    for program, extra in programs:
        t1 = run_bench(build_dir, program, extra + ["--threads", "1"])
        quiet = run_bench(build_dir, program, extra + ["--threads", "2"])
        for n in loads:
            with Competitors(n):
                loaded = run_bench(build_dir, program, extra + ["--threads", "2"])
            for name, q in quiet.items():
                l = loaded.get(name)
                if l is None:
                    continue
                line = {
                    "bench": "contention_" + name,
                    "competitors": n,
                    "kiln_gflops": l["kiln_gflops"],
                    "kiln_quiet_gflops": q["kiln_gflops"],
                    "kiln_slowdown": q["kiln_gflops"] / l["kiln_gflops"],
                    "baseline": l.get("baseline"),
                    "baseline_gflops": l["baseline_gflops"],
                    "baseline_quiet_gflops": q["baseline_gflops"],
                    "baseline_slowdown": q["baseline_gflops"] / l["baseline_gflops"],
                }
                line["slowdown_ratio"] = line["kiln_slowdown"] / line["baseline_slowdown"]
                single = t1.get(name.replace("_t2", "_t1"))
                if single is not None:
                    line["kiln_t1_quiet_gflops"] = single["kiln_gflops"]
                    line["vs_kiln_t1"] = l["kiln_gflops"] / single["kiln_gflops"]
                for key in ("cpu", "llvm_cpu", "isa", "baseline_kernel"):
                    if key in l:
                        line[key] = l[key]
                print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
