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
