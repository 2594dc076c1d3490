"""A kilnd of the tests' own on a loopback port, and the paths the tests need
(ctest sets KILND_BINARY, KILN_BINARY and KILN_SOURCE_DIR)."""

import os
import pathlib
import subprocess

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("KILN_SOURCE_DIR",
                                         pathlib.Path(__file__).resolve().parents[2]))


def _binary(var):
    path = os.environ.get(var)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"${var} must name the built program (ctest sets it)")
    return path


class Kilnd:
    def __init__(self, *extra):
        self.proc = subprocess.Popen(
            [_binary("KILND_BINARY"), "--listen", "127.0.0.1:0", "--log-level", "warn", *extra],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("kilnd: listening on 127.0.0.1:"), line
        self.address = line.split()[-1]

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=60)


def small_model(tmp_path):
    """Two convs of 16 filters (the library's conv2d, two shapes of it) and a dense layer on
    8 x 8 images, exported to ONNX as tmp_path/small.onnx: (its path, the PyTorch module)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 4)).eval()
    path = tmp_path / "small.onnx"
    torch.onnx.export(m, torch.randn(1, 3, 8, 8), str(path), opset_version=13,
                      input_names=["x"], output_names=["y"])
    return path, m


@pytest.fixture(scope="session")
def kilnd():
    k = Kilnd()
    yield k
    assert k.stop() == 0


@pytest.fixture(scope="session")
def kiln_binary():
    return _binary("KILN_BINARY")


@pytest.fixture(scope="session")
def examples():
    return sorted((SOURCE_DIR / "examples").glob("*.kiln"))
