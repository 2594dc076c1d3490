"""Every example, bench kernel and PolyBench kernel with its schedule taken out (`kiln tune
--auto`; the PolyBench kernels have none), at a small shape: kiln sketches a schedule, a short
search (16 trials) on kilnd's local agent tunes it, and the best, printed by `kiln emit
--stage schedule --best` and pasted into the algorithm, computes what the reference
interpreter does, compiled here (`kiln run --check`) and on the agent (`kiln measure
--check`)."""

import re
import subprocess

import pytest

from conftest import SOURCE_DIR, Kilnd

# Params set small for a short search (a func without them keeps its own), and run-time
# params the func needs.
SMALL = {
    "tests/bench/kernels/gemm.kiln": {"M": 64, "N": 48, "K": 40},
    "tests/bench/kernels/conv2d.kiln": dict(N=1, C=8, H=9, W=9, F=16, KH=3, KW=3, S=1, P=1,
                                            OH=9, OW=9),
    "tests/bench/kernels/licm_rowsum.kiln": {"M": 40, "N": 56},
    "tests/bench/kernels/licm_depthwise.kiln": {"C": 8, "H": 12, "W": 12},
    "tests/bench/kernels/licm_im2col.kiln": {"C": 4, "H": 12, "W": 12},
    "tests/bench/kernels/licm_maxpool.kiln": {"C": 8, "H": 12, "W": 12},
    "examples/histogram.kiln": {"n": 5000},
    "examples/segment_sum.kiln": {"m": 13},
    "examples/matmul.kiln": {"M": 40, "N": 48, "K": 24},
}


def cases():
    out = []
    for folder in ("examples", "tests/bench/kernels", "tests/bench/polybench"):
        for path in sorted((SOURCE_DIR / folder).glob("*.kiln")):
            rel = str(path.relative_to(SOURCE_DIR))
            text = path.read_text()
            funcs = re.findall(r"^func (\w+)", text, re.M)
            sizes = dict(SMALL.get(rel, {}))
            if folder.endswith("polybench"):
                params = [p.split("=")[0].strip() for line in
                          re.findall(r"^\s*param ([^;]*);", text, re.M) for p in line.split(",")]
                sizes = {p: (3 if p == "T" else 21) for p in params}
            for func in funcs:
                out.append(pytest.param(rel, func, sizes, id=f"{rel}:{func}"))
    return out


def algorithm_of(kiln_binary, path, func):
    """func alone from the file at `path`, its schedule, knobs and knob constraints left out:
    the algorithm `kiln tune --auto` sends (`kiln emit --stage algorithm`)."""
    emit = subprocess.run([kiln_binary, "emit", path, "--func", func, "--stage", "algorithm"],
                          capture_output=True, text=True, timeout=60)
    assert emit.returncode == 0, emit.stderr
    assert "schedule {" not in emit.stdout and "knob " not in emit.stdout
    return emit.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("kilnd-data")
    k = Kilnd("--local-agent", "--agent-wait-ms", "5000", "--data-dir", str(data))
    yield k.address
    assert k.stop() == 0


@pytest.mark.parametrize("rel,func,sizes", cases())
def test_a_short_search_of_the_sketch_computes_what_the_reference_does(
        rel, func, sizes, server, kiln_binary, tmp_path):
    path = str(SOURCE_DIR / rel)
    sets = [a for name, value in sizes.items() for a in ("--set", f"{name}={value}")]
    common = ["--func", func, "--server", server, *sets]
    tune = subprocess.run([kiln_binary, "tune", path, "--auto", "--key", "local", "--trials",
                           "16", "--batch", "8", "--min-repeat-ms", "1", "--retime", "0",
                           *common], capture_output=True, text=True, timeout=900)
    assert tune.returncode == 0, tune.stderr
    emit = subprocess.run([kiln_binary, "emit", path, "--stage", "schedule", "--best", "--auto",
                           "--key", "local", *common], capture_output=True, text=True,
                          timeout=300)
    assert emit.returncode == 0, emit.stderr
    assert "(a schedule kiln sketched)" in emit.stdout.splitlines()[0]

    # The schedule found, pasted into the algorithm: what a user would do with it.
    algorithm = algorithm_of(kiln_binary, path, func)
    pasted = tmp_path / f"{func}.kiln"
    pasted.write_text(algorithm[:algorithm.rindex("}")] + emit.stdout + "}\n")
    run = subprocess.run([kiln_binary, "run", str(pasted), "--check", *sets],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr + run.stdout + "\nfrom:\n" + pasted.read_text()
    assert f"ok  {func}" in run.stdout
    measure = subprocess.run([kiln_binary, "measure", str(pasted), "--key", "local", "--check",
                              "--server", server, *sets],
                             capture_output=True, text=True, timeout=300)
    assert measure.returncode == 0, measure.stderr + measure.stdout
    assert f"ok  {func}" in measure.stdout
