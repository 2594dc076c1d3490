"""Models through kilnd (docs/models.md): an ONNX file uploaded once as a
content-addressed blob, run and compiled whole by kilnd, and what it refuses.
The model is a small CNN built with a fixed seed and exported by PyTorch."""

import hashlib
import os
import subprocess

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)
        return torch.softmax(self.fc(y), dim=1)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(path of the .onnx file, input, PyTorch's output)."""
    torch.manual_seed(0)
    m = Small().eval()
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    path = tmp_path_factory.mktemp("model") / "small.onnx"
    torch.onnx.export(m, x, str(path), opset_version=13, input_names=["x"], output_names=["y"])
    with torch.no_grad():
        expected = m(x).numpy()
    return path, x.numpy(), expected


@pytest.fixture
def client(kilnd):
    with kiln.Client(kilnd.address) as c:
        yield c


def relative_error(got, expected):
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def test_a_model_runs_on_kilnd_as_pytorch_runs_it(client, model):
    path, x, expected = model
    r = client.run_model(path, {"x": x})
    assert r.outputs["y"].shape == expected.shape
    assert relative_error(r.outputs["y"], expected) <= 1e-4
    assert r.response.graph.calls > r.response.graph.calls_after_passes


def test_a_model_with_a_symbolic_batch_runs_on_the_samples_it_is_given(client, tmp_path):
    torch.manual_seed(0)
    m = Small().eval()
    x = torch.randn(3, 3, 12, 12, generator=torch.Generator().manual_seed(2))
    path = tmp_path / "batch.onnx"
    torch.onnx.export(m, x, str(path), opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    with torch.no_grad():
        expected = m(x).numpy()
    r = client.run_model(path, {"x": x.numpy()})
    assert r.outputs["y"].shape == (3, 5)
    assert relative_error(r.outputs["y"], expected) <= 1e-4


def test_a_model_is_uploaded_once_and_named_by_its_sha256(client, model):
    path = model[0]
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert client.upload(path) == sha
    have = client._stub.StatBlobs(kiln.client.service_pb2.StatBlobsRequest(sha256=[sha]))
    assert have.blobs[0].present and have.blobs[0].size == path.stat().st_size
    # Held already: upload asks, and sends nothing.
    assert client.upload(path) == sha


def test_the_compiled_model_runs_from_c_as_pytorch_runs_it(client, model, tmp_path):
    path, x, expected = model
    artifact = client.compile_model(path)
    assert artifact.metadata["kind"] == "model"
    assert artifact.metadata["inputs"] == [{"name": "x", "dtype": "f32", "shape": [1, 3, 12, 12]}]
    assert hashlib.sha256(artifact.weights).hexdigest() == artifact.metadata["weights_sha256"]
    so, weights = artifact.save(tmp_path / "small.so")
    assert weights.name == "small.weights"
    run_model = os.environ.get("RUN_MODEL_BINARY")
    if not run_model:
        pytest.fail("$RUN_MODEL_BINARY must name examples/c/run_model (ctest sets it)")
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([run_model, str(so), "--input", f"x={tmp_path / 'x.npy'}", "--save", str(out)],
                   check=True, capture_output=True)
    assert relative_error(np.load(out / "y.npy"), expected) <= 1e-4


def test_a_model_compiles_for_another_target(client, model):
    artifact = client.compile_model(model[0], target="aarch64-linux-gnu")
    assert artifact.triple == "aarch64-linux-gnu"
    assert artifact.code[:4] == b"\x7fELF"
    assert int.from_bytes(artifact.code[18:20], "little") == 183  # EM_AARCH64


def test_a_truncated_model_is_an_import_error(client, model, tmp_path):
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(model[0].read_bytes()[:1000])
    with pytest.raises(kiln.KilnError) as e:
        client.run_model(bad)
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert "import error" in e.value.message and str(bad) in e.value.message


def test_a_model_kilnd_does_not_hold_is_not_found(client):
    op = kiln.client.operator_pb2.Operator(
        model=kiln.client.operator_pb2.ModelRef(sha256="0" * 64, filename="gone.onnx"))
    with pytest.raises(kiln.KilnError) as e:
        client.run(op)
    assert e.value.code.name == "NOT_FOUND"
    assert "upload it first" in e.value.message


def test_an_upload_whose_bytes_are_not_its_sha256_is_refused(client):
    pb = kiln.client.service_pb2
    data = b"not what the hash says"
    pieces = [pb.BlobChunk(sha256="1" * 64, size=len(data), offset=0, data=data)]
    with pytest.raises(kiln.KilnError) as e:
        client._call(client._stub.PutBlob, iter(pieces))
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert "have the SHA-256 " + hashlib.sha256(data).hexdigest() in e.value.message
    # Cut short: fewer bytes than announced.
    sha = hashlib.sha256(data).hexdigest()
    pieces = [pb.BlobChunk(sha256=sha, size=len(data) + 5, offset=0, data=data)]
    with pytest.raises(kiln.KilnError) as e:
        client._call(client._stub.PutBlob, iter(pieces))
    assert f"{len(data)} bytes arrived of the {len(data) + 5} announced" in e.value.message
    # A piece out of place.
    pieces = [pb.BlobChunk(sha256=sha, size=len(data), offset=0, data=data[:4]),
              pb.BlobChunk(offset=9, data=data[4:])]
    with pytest.raises(kiln.KilnError) as e:
        client._call(client._stub.PutBlob, iter(pieces))
    assert "at offset 9, where 4 bytes have arrived" in e.value.message
    assert not client._stub.StatBlobs(pb.StatBlobsRequest(sha256=[sha])).blobs[0].present
