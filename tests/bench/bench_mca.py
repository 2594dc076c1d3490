#!/usr/bin/python3
"""The aarch64 GEMM micro-kernel under llvm-mca (tests/bench/run.sh mca): with no ARM
board at hand, LLVM's scheduling model of a core stands in for a measurement.

Compiles tests/bench/kernels/gemm.kiln for aarch64 with `kiln emit --stage asm` at
each register tile (the target's default first), finds the innermost loop with the
most FMLAs (the register tile's k loop), and runs llvm-mca on it for each CPU. One
JSON line per tile and CPU:

  {"bench":"mca_gemm_4x16","cpu":"cortex-a72","default":true,"fmla":16,
   "instructions":27,"cycles_per_iteration":16.5,"flops_per_cycle":7.76,
   "fmla_bound_cycles":16.0,"share_of_fmla_bound":0.97}

fmla_bound_cycles is what the model's FMLA throughput allows for the loop's FMLAs
(its reciprocal throughput, from llvm-mca's instruction info, times their count);
share_of_fmla_bound is that over the cycles the model predicts. These are a model's
figures, not a board's.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# (MR, NR): the default for a target without avx2/avx512f first, then others that fit
# NEON's 32 vector registers or show what does not.
TILES = [(4, 16), (6, 16), (2, 32), (4, 32)]
CPUS = ["cortex-a72", "neoverse-n1"]


def hot_loop(asm):
    """The instructions of the loop (a label's block up to its branch back) with the most
    FMLAs."""
    blocks, cur = [], None
    for line in asm.splitlines():
        m = re.match(r"^(\.?L?[\w.$]+):", line)
        if m:
            cur = [m.group(1), [], False]
            blocks.append(cur)
            continue
        if cur is None or cur[2]:
            continue
        s = line.strip()
        if not s or s.startswith(".") or s.startswith("//"):
            continue
        cur[1].append(s)
        if s.split()[0].startswith("b") and s.split()[-1] == cur[0]:
            cur[2] = True
    loops = [(sum(i.startswith("fmla") for i in ins), ins) for _, ins, closed in blocks if closed]
    return max(loops, key=lambda x: x[0]) if loops else (0, [])


def mca(mca_bin, cpu, loop):
    out = subprocess.run([mca_bin, "-mtriple=aarch64", f"-mcpu={cpu}", "-iterations=1000"],
                         input="\n".join(loop) + "\n", capture_output=True, text=True, check=True)
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out.stdout).group(1)) / 1000
    # The reciprocal throughput of the first FMLA in the instruction info table.
    fmla_rt = None
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) > 4 and "fmla" in line and re.match(r"^\d+$", fields[0]):
            fmla_rt = float(fields[2])
            break
    return cycles, fmla_rt


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.environ.get("KILN_BUILD_DIR", "build"))
    parser.add_argument("--quick", action="store_true", help="the default tile only")
    args, _ = parser.parse_known_args()
    build_dir = pathlib.Path(args.build_dir)
    if not build_dir.is_absolute():
        build_dir = ROOT / build_dir
    mca_bin = shutil.which("llvm-mca-19") or shutil.which("llvm-mca")
    if not mca_bin:
        print("bench_mca: no llvm-mca (Debian's llvm-19)", file=sys.stderr)
        return 1
    kiln = build_dir / "clients" / "cli" / "kiln"
    status = 0
    for mr, nr in TILES[:1] if args.quick else TILES:
        for cpu in CPUS:
            emit = subprocess.run(
                [str(kiln), "emit", "--stage", "asm", "--target", "aarch64-linux-gnu", "--cpu", cpu,
                 str(ROOT / "tests" / "bench" / "kernels" / "gemm.kiln"), "--set", "M=512",
                 "--set", "N=512", "--set", "K=512", "--set", "MB=96", "--set", "NB=512",
                 "--set", "KB=128", "--set", f"MR={mr}", "--set", f"NR={nr}"],
                capture_output=True, text=True, check=False)
            if emit.returncode != 0:
                print(f"bench_mca: {mr}x{nr} on {cpu}: {emit.stderr.strip()}", file=sys.stderr)
                status = 1
                continue
            fmla, loop = hot_loop(emit.stdout)
            if fmla == 0:
                print(f"bench_mca: {mr}x{nr} on {cpu}: no FMLA loop found", file=sys.stderr)
                status = 1
                continue
            cycles, fmla_rt = mca(mca_bin, cpu, loop)
            line = {"bench": f"mca_gemm_{mr}x{nr}", "cpu": cpu, "default": (mr, nr) == TILES[0],
                    "fmla": fmla, "instructions": len(loop),
                    "cycles_per_iteration": round(cycles, 2),
                    "flops_per_cycle": round(fmla * 8 / cycles, 2)}
            if fmla_rt:
                line["fmla_bound_cycles"] = round(fmla * fmla_rt, 2)
                line["share_of_fmla_bound"] = round(fmla * fmla_rt / cycles, 3)
            print(json.dumps(line), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
