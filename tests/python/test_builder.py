"""Every example built with kiln.te (tests/python/examples_te.py) runs with
check on kilnd and gives the checksums of the example's text under the same
seed: the builder says what the language says."""

import pytest

import kiln
from conftest import SOURCE_DIR
from examples_te import EXAMPLES


@pytest.fixture(scope="module")
def client(kilnd):
    with kiln.Client(kilnd.address, timeout=300) as c:
        yield c


def test_every_example_has_a_builder():
    files = {p.stem for p in (SOURCE_DIR / "examples").glob("*.kiln")}
    assert files == {f for f, _ in EXAMPLES}


@pytest.mark.parametrize("example", sorted(EXAMPLES), ids=lambda e: e[0])
def test_the_built_example_runs_checked_as_its_text(client, example):
    file, name = example
    built = EXAMPLES[example]()
    text = kiln.load(SOURCE_DIR / "examples" / f"{file}.kiln", name=name)
    runtime = {"m": 13} if file == "segment_sum" else None
    got = client.run(built, check=True, seed=3, runtime_params=runtime, return_outputs=False)
    want = client.run(text, check=True, seed=3, runtime_params=runtime, return_outputs=False)
    assert got.ok, got.check.message
    assert want.ok
    assert got.checksums == want.checksums
    assert client.check(built).name == name
    if isinstance(built, kiln.te.Func) or isinstance(built, kiln.te.Operator):
        # A func compiles too, to an artifact for the server's machine.
        assert client.compile(built).artifact.code


def test_a_knob_default_by_target_is_the_languages(client):
    """``op.knob(..., by_target={"avx512f": 64})`` is ``for avx512f = 64``: kilnd picks the
    default of the target it is asked for."""
    from kiln import te
    n = te.var("n")
    x = te.placeholder((n,), "f32", name="x")
    y = te.compute((n,), lambda i: x[i] * 3.0, name="y")
    op = te.create_operator("scale", outputs=[y], constraints=[n > 0])
    nr = op.knob("NR", 16, [16, 64], by_target={"avx512f": 64})
    op[y].split("i", nr, "io", "ii")
    avx2 = client.emit(op, stage="loops", target="x86_64-linux-gnu", cpu="haswell")
    avx512 = client.emit(op, stage="loops", target="x86_64-linux-gnu", cpu="skylake-avx512")
    assert "ii < min(16," in avx2, avx2
    assert "ii < min(64," in avx512, avx512


def test_a_knob_default_fitted_to_the_target_is_the_languages(client):
    """``op.knob(..., fit=COND)`` is ``fit COND``: the largest candidate that meets it on the
    target asked for is the default; a name that is no target size is refused here."""
    from kiln import te
    n = te.var("n")
    x = te.placeholder((n,), "f32", name="x")
    y = te.compute((n,), lambda i: x[i] * 3.0, name="y")
    op = te.create_operator("scale", outputs=[y], constraints=[n > 0])
    nr = op.knob("NR", 4, [4, 8, 16], fit=lambda k: k * 4 <= te.target_size("vector_bytes"))
    op[y].split("i", nr, "io", "ii")
    avx2 = client.emit(op, stage="loops", target="x86_64-linux-gnu", cpu="haswell")
    avx512 = client.emit(op, stage="loops", target="x86_64-linux-gnu", cpu="skylake-avx512")
    assert "ii < min(8," in avx2, avx2  # 32-byte vectors: 8 floats
    assert "ii < min(16," in avx512, avx512  # 64-byte vectors: 16
    fit = op.definition().knobs[0].fit  # NR * 4 <= vector_bytes, or as Python turns it round
    assert fit.binary.op in (kiln.te.pb.LE, kiln.te.pb.GE)
    assert {fit.binary.lhs.name, fit.binary.rhs.name} & {"vector_bytes"}
    with pytest.raises(ValueError, match="no target size"):
        te.target_size("l4_bytes")
