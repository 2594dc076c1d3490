#!/usr/bin/python3
"""The GEMM micro-kernel under llvm-mca (tests/bench/run.sh mca): with no ARM board and no
AVX2-only host at hand, LLVM's scheduling model of a core stands in for a measurement.

Compiles tests/bench/kernels/gemm.kiln with `kiln emit --stage asm` at each register
tile (the target's default first) for aarch64 (NEON, 32 vector registers) and for x86-64
with AVX2 and no AVX-512 (16 ymm registers), finds the innermost loop with the most
FMAs (the register tile's k loop), and runs llvm-mca on it for each CPU. One JSON line
per tile and CPU:

  {"bench":"mca_gemm_4x16","isa":"neon","cpu":"cortex-a72","default":true,"fma":16,
   "instructions":27,"cycles_per_iteration":16.5,"flops_per_cycle":7.76,
   "fma_bound_cycles":16.0,"share_of_fma_bound":0.97}

fma_bound_cycles is what the model's FMA throughput allows for the loop's FMAs (its
reciprocal throughput, from llvm-mca's instruction info, times their count);
share_of_fma_bound is that over the cycles the model predicts. These are a model's
figures, not a machine's: the loop alone, its loads hitting L1.
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


class Isa:
    """A target family: its triple, the CPUs whose models are run, the register tiles (MR,
    NR) tried (the default for the target first, then others that fit its vector registers
    or show what does not), its FMA mnemonic, how a branch and a comment start, and the
    floats in one vector."""

    def __init__(self, name, triple, cpus, tiles, fma, branch, comment, lanes):
        self.name, self.triple, self.cpus, self.tiles = name, triple, cpus, tiles
        self.fma, self.branch, self.comment, self.lanes = fma, branch, comment, lanes


ISAS = [
    Isa("neon", "aarch64-linux-gnu", ["cortex-a72", "neoverse-n1"],
        [(4, 16), (6, 16), (2, 32), (4, 32)], "fmla", "b", "//", 4),
    # CPUs with AVX2 and FMA and no AVX-512: 16 ymm registers.
    Isa("avx2", "x86_64-linux-gnu", ["haswell", "znver2", "znver3"],
        [(6, 16), (4, 16), (2, 32), (4, 32)], "vfmadd", "j", "#", 8),
]


def hot_loop(asm, isa):
    """The instructions of the loop (a label's block up to its branch back) with the most
    FMAs."""
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
        if not s or s.startswith(".") or s.startswith(isa.comment):
            continue
        cur[1].append(s)
        if s.split()[0].startswith(isa.branch) and s.split()[-1] == cur[0]:
            cur[2] = True
    loops = [(sum(i.startswith(isa.fma) for i in ins), ins) for _, ins, closed in blocks
             if closed]
    return max(loops, key=lambda x: x[0]) if loops else (0, [])


def mca(mca_bin, isa, cpu, loop):
    out = subprocess.run([mca_bin, f"-mtriple={isa.triple.split('-')[0]}", f"-mcpu={cpu}",
                          "-iterations=1000"],
                         input="\n".join(loop) + "\n", capture_output=True, text=True, check=True)
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out.stdout).group(1)) / 1000
    # The reciprocal throughput of the first FMA in the instruction info table.
    fma_rt = None
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) > 4 and isa.fma in line and re.match(r"^\d+$", fields[0]):
            fma_rt = float(fields[2])
            break
    return cycles, fma_rt


def measure(kiln, mca_bin, isa, cpu, mr, nr):
    """One JSON line for the MR x NR tile on `cpu`; 0, or 1 when it could not be had."""
    emit = subprocess.run(
        [str(kiln), "emit", "--stage", "asm", "--target", isa.triple, "--cpu", cpu,
         str(ROOT / "tests" / "bench" / "kernels" / "gemm.kiln"), "--set", "M=512",
         "--set", "N=512", "--set", "K=512", "--set", "MB=96", "--set", "NB=512",
         "--set", "KB=128", "--set", f"MR={mr}", "--set", f"NR={nr}"],
        capture_output=True, text=True, check=False)
    if emit.returncode != 0:
        print(f"bench_mca: {mr}x{nr} on {cpu}: {emit.stderr.strip()}", file=sys.stderr)
        return 1
    fma, loop = hot_loop(emit.stdout, isa)
    if fma == 0:
        print(f"bench_mca: {mr}x{nr} on {cpu}: no FMA loop found", file=sys.stderr)
        return 1
    cycles, fma_rt = mca(mca_bin, isa, cpu, loop)
    line = {"bench": f"mca_gemm_{mr}x{nr}", "isa": isa.name, "cpu": cpu,
            "default": (mr, nr) == isa.tiles[0], "fma": fma, "instructions": len(loop),
            "cycles_per_iteration": round(cycles, 2),
            "flops_per_cycle": round(fma * isa.lanes * 2 / cycles, 2)}
    if fma_rt:
        line["fma_bound_cycles"] = round(fma * fma_rt, 2)
        line["share_of_fma_bound"] = round(fma * fma_rt / cycles, 3)
    print(json.dumps(line), flush=True)
    return 0


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
    for isa in ISAS:
        for mr, nr in isa.tiles[:1] if args.quick else isa.tiles:
            for cpu in isa.cpus:
                status |= measure(kiln, mca_bin, isa, cpu, mr, nr)
    return status


if __name__ == "__main__":
    sys.exit(main())
