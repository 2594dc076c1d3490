"""The Python client against a real kilnd: every example checked and run with
check, operators built with kiln.te run on numpy inputs and compared with
numpy, artifacts identical to the offline `kiln compile`, and refusals as
KilnError with kilnd's message."""

import subprocess

import numpy as np
import pytest

import kiln
from kiln import te


@pytest.fixture(scope="module")
def client(kilnd):
    with kiln.Client(kilnd.address, timeout=300) as c:
        yield c


def test_every_example_checks_and_runs_checked(client, examples):
    assert examples
    for path in examples:
        op = kiln.load(path)
        text = path.read_text()
        names = [line.split()[1] for line in text.splitlines()
                 if line.startswith(("func ", "graph "))]
        for name in names:
            op = kiln.load(path, name=name)
            checked = client.check(op)
            assert checked.name == name
            r = client.run(op, check=True, seed=1)
            assert r.ok, (path, name, r.check.message)
            assert r.checksums and set(r.outputs) == set(r.checksums)
            for out, value in r.outputs.items():
                assert np.isclose(float(value.astype(np.float64).sum()), r.checksums[out],
                                  rtol=1e-6, atol=1e-6, equal_nan=True)


def test_a_run_gives_what_the_offline_cli_prints(client, examples, kiln_binary):
    path = next(p for p in examples if p.stem == "segment_sum")
    offline = subprocess.run([kiln_binary, "run", str(path), "--check", "--seed", "4"],
                             capture_output=True, text=True, check=True).stdout
    r = client.run(kiln.load(path), check=True, seed=4)
    chosen = ", ".join(f"{n}={r.params[n]}" for n in r.chosen)
    assert offline == (f"ok  segment_sum: 1 output matches (max abs error "
                       f"{r.check.abs_error:g}) with {chosen}\n")


def test_compile_gives_the_offline_artifact(client, examples, kiln_binary, tmp_path):
    path = next(p for p in examples if p.stem == "matmul")
    so = tmp_path / "m.so"
    subprocess.run([kiln_binary, "compile", str(path), "-o", str(so), "--set", "M=64"],
                   check=True, capture_output=True)
    first = client.compile(kiln.load(path), set={"M": 64})
    assert first.artifact.code == so.read_bytes()
    assert first.artifact.metadata_json + "\n" == (tmp_path / "m.so.json").read_text()
    second = client.compile(kiln.load(path), set={"M": 64})
    assert second.cache_hit and second.artifact.code == first.artifact.code


def matmul_op():
    n = te.var("n")
    A = te.placeholder((n, n), "f32", name="A")
    B = te.placeholder((n, n), "f32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    op = te.create_operator("matmul_te", outputs=[C], constraints=[n > 0])
    TI = op.knob("TI", 4, [2, 4, 8])
    op[C].tile("i", "j", TI, 8, "io", "jo", "ii", "ji")
    op[C].tag("io", "parallel")
    op[C].tag("ji", "vectorize")
    return op


def test_a_te_matmul_runs_on_numpy_inputs(client):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((13, 13), dtype=np.float32)
    b = rng.standard_normal((13, 13), dtype=np.float32)
    r = client.run(matmul_op(), {"A": a, "B": b}, runtime_params={"n": 13}, check=True)
    assert r.ok
    assert r.outputs["C"].dtype == np.float32 and r.outputs["C"].shape == (13, 13)
    np.testing.assert_allclose(r.outputs["C"], a @ b, rtol=1e-5, atol=1e-5)
    # The knob is a compile-time value like any other.
    r8 = client.run(matmul_op(), {"A": a, "B": b}, runtime_params={"n": 13}, set={"TI": 8})
    np.testing.assert_array_equal(r8.outputs["C"], r.outputs["C"])


def test_te_conv_relu_with_intermediate_and_math(client):
    N, C, H, W, F = 1, 3, 8, 8, 4
    x = te.placeholder((N, C, H, W), "f32", name="x")
    w = te.placeholder((F, C, 3, 3), "f32", name="w")
    bias = te.placeholder((F,), "f32", name="bias")
    c = te.reduce_axis((0, C), name="c")
    ky = te.reduce_axis((0, 3), name="ky")
    kx = te.reduce_axis((0, 3), name="kx")
    conv = te.compute((N, F, H - 2, W - 2),
                      lambda n, f, y, xx: te.sum(x[n, c, y + ky, xx + kx] * w[f, c, ky, kx],
                                                 axis=[c, ky, kx]), name="conv")
    out = te.compute((N, F, H - 2, W - 2),
                     lambda n, f, y, xx: te.max(conv[n, f, y, xx] + bias[f], 0.0), name="out")
    op = te.create_operator("conv_relu", outputs=[out])
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((N, C, H, W)).astype(np.float32)
    wv = rng.standard_normal((F, C, 3, 3)).astype(np.float32)
    bv = rng.standard_normal((F,)).astype(np.float32)
    r = client.run(op, {"x": xv, "w": wv, "bias": bv}, check=True)
    assert r.ok and list(r.outputs) == ["out"]
    ref = np.zeros((N, F, H - 2, W - 2), np.float32)
    for dy in range(3):
        for dx in range(3):
            ref += np.einsum("nchw,fc->nfhw", xv[:, :, dy:dy + H - 2, dx:dx + W - 2],
                             wv[:, :, dy, dx])
    np.testing.assert_allclose(r.outputs["out"], np.maximum(ref + bv[None, :, None, None], 0),
                               rtol=1e-4, atol=1e-4)


def test_te_max_and_min_of_several_fold_and_run(client):
    n = te.var("n")
    a = te.placeholder((n,), "f32", name="a")
    b = te.placeholder((n,), "f32", name="b")
    c = te.placeholder((n,), "f32", name="c")
    hi = te.compute((n,), lambda i: te.max(a[i], b[i], c[i], 0.5), name="hi")
    lo = te.compute((n,), lambda i: te.min(a[i], b[i], c[i]), name="lo")
    op = te.create_operator("extremes", outputs=[hi, lo], constraints=[n > 0])
    rng = np.random.default_rng(3)
    av, bv, cv = (rng.standard_normal(9).astype(np.float32) for _ in range(3))
    r = client.run(op, {"a": av, "b": bv, "c": cv}, runtime_params={"n": 9}, check=True)
    assert r.ok
    np.testing.assert_array_equal(r.outputs["hi"], np.maximum.reduce([av, bv, cv, np.full(9, 0.5, np.float32)]))
    np.testing.assert_array_equal(r.outputs["lo"], np.minimum.reduce([av, bv, cv]))
    k = te.reduce_axis((0, 4))
    with pytest.raises(TypeError, match="takes none"):
        te.max(a[0], b[0], axis=k)


def test_a_graph_refuses_two_operators_of_one_name():
    def scaled(factor):
        x = te.placeholder((4,), "f32", name="x")
        y = te.compute((4,), lambda i: x[i] * factor, name="y")
        return te.create_operator("scale", outputs=[y])

    g = te.Graph("g")
    x = g.input("x", "f32", (4,))
    (y,) = g.call(scaled(2.0), [x], ["y"])
    (z,) = g.call(scaled(2.0), [y], ["z"])  # the same operator again: fine
    with pytest.raises(ValueError, match="two different operators are named 'scale'"):
        g.call(scaled(3.0), [z], ["w"])


def test_te_csr_offsets_with_a_value_spec(client):
    m, nnz = te.var("m"), te.var("nnz", value=50)
    offsets = te.placeholder((m + 1,), "i32", name="offsets", values=(0, nnz), sorted=True)
    x = te.placeholder((nnz,), "f32", name="x")
    lengths = te.compute((m,), lambda i: te.cast("f32", offsets[i + 1] - offsets[i]), name="y")
    op = te.create_operator("seg", outputs=[lengths], constraints=[m > 0])
    d = op.definition()
    assert d.buffers[0].name == "offsets" and d.buffers[0].sorted
    assert d.buffers[0].values.hi_inclusive
    good = client.run(op, {"offsets": np.array([0, 5, 9, 50], np.int32)},
                      runtime_params={"m": 3})
    assert good.outputs["y"].tolist() == [5.0, 4.0, 41.0]
    with pytest.raises(kiln.KilnError) as e:
        client.run(op, {"offsets": np.array([0, 9, 5, 50], np.int32)}, runtime_params={"m": 3})
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert "offsets[2] = 5" in e.value.message


def test_given_inputs_that_do_not_fit_are_refused(client):
    op = matmul_op()
    with pytest.raises(kiln.KilnError) as e:
        client.run(op, {"A": np.zeros((4, 4), np.float32)}, runtime_params={"n": 5})
    assert "input A is f32[4, 4] but matmul_te declares it f32[5, 5] here" in e.value.message
    with pytest.raises(ValueError, match="does not fit in a 64-bit signed integer"):
        client.run(op, {"A": np.full((5, 5), 2**63, np.uint64)}, runtime_params={"n": 5})
    with pytest.raises(kiln.KilnError) as e:
        client.run(op, {"Z": np.zeros(3, np.float32)}, runtime_params={"n": 5})
    assert "matmul_te has no input 'Z' (its inputs: A, B)" in e.value.message


def test_errors_say_what_and_where(client):
    with pytest.raises(kiln.KilnError) as e:
        client.check(kiln.source("func f { input x : f32[N]; }", filename="bad.kiln"))
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert e.value.message == "bad.kiln:1:24: validate error: unknown name 'N' in the shape of 'x'"
    # A te operator's mistake is named by its field.
    n = te.var("n")
    a = te.placeholder((n,), "f32", name="a")
    b = te.compute((n,), lambda i: a[i + 1], name="b")
    with pytest.raises(kiln.KilnError) as e:
        client.check(te.create_operator("shifted", outputs=[b], constraints=[n > 0]))
    assert e.value.message.startswith("computations[0]"), e.value.message
    assert "bounds error" in e.value.message


def test_emit_stages_and_graph_calls(client, examples):
    text = client.emit(matmul_op(), "loops", opt_level=3)
    assert "for (io" in text and "// parallel" in text
    assert "define" in client.emit(matmul_op(), "llvm")
    conv = next(p for p in examples if p.stem == "conv_bn_relu")
    calls = client.emit(kiln.load(conv, name="block"), "loops", opt_level=2)
    assert [op for op, _ in calls] == ["conv2d_channel_affine_relu"]
    graph = client.emit(kiln.load(conv, name="block"), "graph")
    assert graph.startswith("graph block")


def test_a_token_is_sent_when_given(tmp_path):
    from conftest import Kilnd
    token = tmp_path / "token"
    token.write_text("python-test-token\n")
    k = Kilnd("--token-file", str(token))
    try:
        op = kiln.source("func f { input x : f32[4]; output y : f32[4];\n"
                         " compute c(i) in 0 <= i < 4: y[i] = x[i]; }")
        with pytest.raises(kiln.KilnError) as e:
            kiln.Client(k.address).check(op)
        assert e.value.code.name == "UNAUTHENTICATED"
        assert kiln.Client(k.address, token_file=token).check(op).name == "f"
    finally:
        assert k.stop() == 0
