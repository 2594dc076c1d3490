#!/usr/bin/env python3
"""Whole models through kiln against PyTorch: each model is built with fixed
seeds (weights=None: nothing is downloaded), exported with torch.onnx.export,
run by `kiln run MODEL.onnx --input ... --save-outputs ...` and by PyTorch on
the same input, and the outputs compared: max relative error (the largest
|kiln - torch| over the largest |torch|) at most 1e-4.

With --run-model, each model is also compiled to one artifact (`kiln compile
MODEL.onnx`: a shared object and its weights) and run by examples/c/run_model,
a C program linking only libc and kiln's runtime, with the same check. With
--run-model-aarch64, the models named by --aarch64 are also compiled for
aarch64-linux-gnu and run by the cross-built run_model under qemu-aarch64.
With --kilnd, the models named by --through-kilnd also run through a kilnd
started on loopback (`kiln run --server`): the .onnx file goes there as a
blob, uploaded in pieces of 1 MiB, and the outputs come back.

usage: torch_models.py [--kiln PATH] [--work DIR] [--run-model PATH]
                       [--run-model-aarch64 PATH] [--aarch64 M1,M2]
                       [--kilnd PATH --through-kilnd M1,M2] [MODEL...]
MODEL is one of: resnet18 resnet50 mobilenet_v2 encoder tiny_cnn tiny_encoder
tiny_gelu_encoder
(default: all of them). Exit status 0 when every model matches.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision


class TinyCnn(torch.nn.Module):
    """Every op of the CNNs in a few milliseconds: conv with bias, batch norm
    (folded by the exporter in eval mode), relu, relu6, depthwise conv, a
    grouped conv, a strided and a padded conv, max and average pooling, a
    residual add, global pooling, flatten and a linear layer."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = torch.nn.Conv2d(16, 24, 1)
        self.c2 = torch.nn.Conv2d(24, 24, 3, padding=1)
        self.grouped = torch.nn.Conv2d(24, 24, 3, padding=1, groups=4)
        self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.avg = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(24, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = torch.nn.functional.relu6(self.dw(y))
        y = self.pw(y)
        y = torch.relu(self.c2(y) + y)
        y = self.grouped(y)
        y = self.avg(self.pool(y))
        y = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)
        return torch.sigmoid(self.fc(y))


def build(name):
    """(model, input shape) for `name`, its weights drawn from seed 0. NAME_batch3 is NAME
    exported with a symbolic batch (dynamic_axes) and run on 3 samples: the artifact takes the
    batch at run time."""
    if name.endswith("_batch3"):
        model, shape = build(name[:-len("_batch3")])
        return model, (3,) + tuple(shape[1:])
    torch.manual_seed(0)
    if name == "resnet18":
        return torchvision.models.resnet18(weights=None), (1, 3, 224, 224)
    if name == "resnet50":
        return torchvision.models.resnet50(weights=None), (1, 3, 224, 224)
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(weights=None), (1, 3, 224, 224)
    if name == "encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, batch_first=True)
        return layer, (1, 128, 768)
    if name == "tiny_cnn":
        return TinyCnn(), (1, 3, 32, 32)
    if name == "tiny_cnn_bn":
        # The same, exported with its batch norm as a node (below): kiln folds it.
        return TinyCnn(), (1, 3, 32, 32)
    if name == "tiny_encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                                 batch_first=True)
        return layer, (1, 8, 32)
    if name == "tiny_gelu_encoder":
        # GELU exports as x * 0.5 * (1 + Erf(x / sqrt(2))).
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                                 activation="gelu", batch_first=True)
        return layer, (1, 8, 32)
    raise SystemExit(f"unknown model {name}")


def randomize_norms(model):
    """Batch norms with statistics other than 0 and 1, so that folding them is
    tested (a fresh model's running mean is 0 and its variance 1)."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) * 0.2 - 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=g) * 0.2 - 0.1)


def kiln_name(onnx_name):
    """The graph tensor kiln gives an ONNX value: identifier characters only."""
    s = "".join(c if c.isalnum() or c == "_" else "_" for c in onnx_name).lstrip("_")
    return "t" + s if not s or s[0].isdigit() else s


def check(name, kiln, work, artifacts, server=None):
    """kiln run, through kilnd at `server` when given, then each of `artifacts`: (target or
    None, run_model, command prefix)."""
    model, shape = build(name)
    randomize_norms(model)
    model.eval()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    path = os.path.join(work, name + ".onnx")
    # Outside no_grad: there PyTorch's fused encoder layer, which has no ONNX
    # export, would run instead of its ops.
    # TrainingMode.PRESERVE keeps a batch norm after a conv as a BatchNormalization node (as
    # other exporters do); in eval mode PyTorch folds it into the conv's weights itself.
    training = (torch.onnx.TrainingMode.PRESERVE if name.endswith("_bn")
                else torch.onnx.TrainingMode.EVAL)
    dynamic = {"x": {0: "batch"}, "y": {0: "batch"}} if name.endswith("_batch3") else None
    torch.onnx.export(model, x, path, opset_version=13, input_names=["x"], output_names=["y"],
                      training=training, dynamic_axes=dynamic)
    if name.endswith("_bn") and b"BatchNormalization" not in open(path, "rb").read():
        print(f"FAIL {name}: the export has no BatchNormalization node to fold")
        return False
    with torch.no_grad():
        expected = model(x).numpy()
    np.save(os.path.join(work, name + "_x.npy"), x.numpy())
    out = os.path.join(work, name + "_out")
    os.makedirs(out, exist_ok=True)
    start = time.time()
    # --check: kiln's own check against its reference interpreter too (each kernel at sampled
    # points for the big models: docs/models.md, "How it is checked").
    r = subprocess.run([kiln, "run", path, "--check", "--input",
                        f"x={os.path.join(work, name + '_x.npy')}", "--save-outputs", out],
                       capture_output=True, text=True)
    took = time.time() - start
    if r.returncode != 0 or "ok  graph" not in r.stdout:
        print(f"FAIL {name}: kiln run --check exited {r.returncode}\n{r.stdout}{r.stderr}")
        return False
    ok = compare(name, "kiln run --check", os.path.join(out, "y.npy"), expected, took)
    if server:
        out = os.path.join(work, name + "_kilnd_out")
        os.makedirs(out, exist_ok=True)
        start = time.time()
        r = subprocess.run([kiln, "run", path, "--server", server, "--input",
                            f"x={os.path.join(work, name + '_x.npy')}", "--save-outputs", out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {name}: kiln run --server exited {r.returncode}\n{r.stdout}{r.stderr}")
            return False
        ok = compare(name, f"through kilnd, a {os.path.getsize(path) / 2**20:.1f} MiB blob",
                     os.path.join(out, "y.npy"), expected, time.time() - start) and ok
    for target, run_model, prefix in artifacts:
        ok = check_artifact(name, kiln, work, path, expected, target, run_model, prefix) and ok
    return ok


def compare(name, how, got_path, expected, took):
    """Prints and returns whether the .npy at got_path is within 1e-4 of expected."""
    got = np.load(got_path)
    if got.shape != expected.shape:
        print(f"FAIL {name} ({how}): shape {got.shape}, PyTorch {expected.shape}")
        return False
    scale = float(np.max(np.abs(expected)))
    err = float(np.max(np.abs(got - expected))) / max(scale, 1e-30)
    ok = err <= 1e-4
    print(f"{'ok  ' if ok else 'FAIL'} {name} ({how}): max relative error {err:.3g} "
          f"(output {list(got.shape)}, largest |value| {scale:.3g}; {took:.1f} s)")
    return ok


def check_artifact(name, kiln, work, onnx_path, expected, target, run_model, prefix):
    """The model as one artifact for `target`, run by run_model (under `prefix`)."""
    so = os.path.join(work, f"{name}.{target or 'host'}.so")
    compile_cmd = [kiln, "compile", onnx_path, "-o", so]
    if target:
        compile_cmd += ["--target", target]
    start = time.time()
    r = subprocess.run(compile_cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL {name}: kiln compile exited {r.returncode}\n{r.stdout}{r.stderr}")
        return False
    out = os.path.join(work, f"{name}.{target or 'host'}_out")
    os.makedirs(out, exist_ok=True)
    r = subprocess.run(prefix + [run_model, so, "--input",
                                 f"x={os.path.join(work, name + '_x.npy')}", "--save", out],
                       capture_output=True, text=True)
    took = time.time() - start
    if r.returncode != 0:
        print(f"FAIL {name}: run_model exited {r.returncode}\n{r.stdout}{r.stderr}")
        return False
    how = f"artifact for {target}, under qemu" if target else "artifact, run_model"
    return compare(name, how, os.path.join(out, "y.npy"), expected, took)


class Kilnd:
    """A kilnd of this run's own on a loopback port, its data in work/kilnd."""

    def __init__(self, binary, work):
        data = os.path.join(work, "kilnd")
        os.makedirs(data, exist_ok=True)
        self.proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--log-level", "warn",
                                      "--data-dir", data, "--run-timeout-ms", "600000"],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("kilnd: listening on "):
            raise SystemExit(f"kilnd did not start: {line!r}")
        self.address = line.split()[-1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", default="kiln")
    p.add_argument("--work", default=None)
    p.add_argument("models", nargs="*",
                   default=["tiny_cnn", "tiny_cnn_bn", "tiny_encoder", "tiny_gelu_encoder", "resnet18", "mobilenet_v2", "encoder",
                            "resnet50"])
    p.add_argument("--run-model", default=None)
    p.add_argument("--run-model-aarch64", default=None)
    p.add_argument("--aarch64", default="", help="models to run for aarch64 too, comma-separated")
    p.add_argument("--kilnd", default=None)
    p.add_argument("--through-kilnd", default="", help="models to run through kilnd too")
    a = p.parse_args()
    torch.set_num_threads(1)
    work = a.work or tempfile.mkdtemp(prefix="kiln-models-")
    os.makedirs(work, exist_ok=True)
    qemu = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-E",
            "LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib"]
    arm = [m for m in a.aarch64.split(",") if m]
    if arm and not a.run_model_aarch64:
        print("skip aarch64: no cross-built run_model (--run-model-aarch64)")
    kilnd = Kilnd(a.kilnd, work) if a.kilnd and a.through_kilnd else None
    results = []
    for m in a.models:
        artifacts = []
        if a.run_model:
            artifacts.append((None, a.run_model, []))
        if a.run_model_aarch64 and m in arm:
            artifacts.append(("aarch64-linux-gnu", a.run_model_aarch64, qemu))
        server = kilnd.address if kilnd and m in a.through_kilnd.split(",") else None
        results.append(check(m, a.kiln, work, artifacts, server))
    if kilnd:
        kilnd.stop()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
