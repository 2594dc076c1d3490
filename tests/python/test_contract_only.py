"""A client made from proto/ alone: stubs generated here with protoc and
grpc_python_plugin, none of the kiln package on the path, run every example's
every func and graph on kilnd with check. The contract is enough."""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

from conftest import SOURCE_DIR

CLIENT = textwrap.dedent("""
    import pathlib, sys
    import grpc
    from kiln.v1 import operator_pb2, service_pb2, service_pb2_grpc
    stub = service_pb2_grpc.CompilerStub(grpc.insecure_channel(sys.argv[1]))
    runs = 0
    for path in sorted(pathlib.Path(sys.argv[2]).glob("*.kiln")):
        text = path.read_bytes()
        for line in text.decode().splitlines():
            if not line.startswith(("func ", "graph ")):
                continue
            name = line.split()[1]
            op = operator_pb2.Operator(source=operator_pb2.SourceText(
                text=text, filename=path.name, name=name))
            r = stub.Run(service_pb2.RunRequest(op=op, check=True, seed=2), timeout=300)
            assert r.check.ok, (path.name, name, r.check.message)
            assert r.checksums, (path.name, name)
            runs += 1
    print(f"{runs} runs checked")
""")


def test_a_client_generated_from_proto_alone_runs_every_example(kilnd, tmp_path):
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    assert protoc and plugin, "protoc and grpc_python_plugin come with deploy/install-deps.sh"
    proto = SOURCE_DIR / "proto"
    subprocess.run([protoc, "-I", str(proto), f"--python_out={tmp_path}",
                    f"--grpc_python_out={tmp_path}", f"--plugin=protoc-gen-grpc_python={plugin}",
                    *sorted(str(p.relative_to(proto)) for p in proto.glob("kiln/v1/*.proto"))],
                   check=True, cwd=proto)
    (tmp_path / "client.py").write_text(CLIENT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path)  # the generated stubs only
    out = subprocess.run([sys.executable, str(tmp_path / "client.py"), kilnd.address,
                          str(SOURCE_DIR / "examples")], env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("runs checked")
    assert int(out.stdout.split()[0]) >= 10
