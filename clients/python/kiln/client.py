"""A client of kilnd, kiln's compile service (docs/server.md)."""

import hashlib
import json
import os
import pathlib

import grpc
import numpy as np

from kiln import te
from kiln.v1 import agent_pb2, operator_pb2, service_pb2, service_pb2_grpc

__all__ = ["Client", "KilnError", "Measurement", "ModelArtifact", "Record", "RunResult",
           "TuneJob", "source", "load"]

_STAGES = {"ast": service_pb2.AST, "ir": service_pb2.IR, "schedule": service_pb2.SCHEDULE,
           "loops": service_pb2.LOOPS, "llvm": service_pb2.LLVM, "asm": service_pb2.ASM,
           "graph": service_pb2.GRAPH}
_NUMPY = {operator_pb2.BOOL: np.bool_, operator_pb2.I32: np.int32, operator_pb2.I64: np.int64,
          operator_pb2.F32: np.float32, operator_pb2.F64: np.float64}


class KilnError(Exception):
    """A call kilnd refused: ``code`` is the grpc.StatusCode, ``message`` says
    what and where, as the offline ``kiln`` command says it."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code, self.message = code, message


def source(text, name="", filename="<python>"):
    """A .kiln module's text as an operator; ``name`` picks its func or graph."""
    if isinstance(text, str):
        text = text.encode()
    return operator_pb2.Operator(
        source=operator_pb2.SourceText(text=text, filename=filename, name=name))


def load(path, name=""):
    """A .kiln file as an operator; ``name`` picks its func or graph."""
    path = pathlib.Path(path)
    return source(path.read_bytes(), name=name, filename=str(path))


def _operator(op):
    if isinstance(op, operator_pb2.Operator):
        return op
    if isinstance(op, (te.Operator, te.Graph)):
        return op.operator()
    if isinstance(op, operator_pb2.OperatorDef):
        return operator_pb2.Operator(**{"def": op})
    if isinstance(op, operator_pb2.GraphDef):
        return operator_pb2.Operator(graph=op)
    if isinstance(op, pathlib.Path):
        return load(op)
    if isinstance(op, (str, bytes)):
        return source(op)
    raise TypeError(f"{type(op).__name__} is not an operator: give .kiln text, kiln.load(path), "
                    "a te operator, an OperatorDef or a GraphDef")


def _options(target=None, cpu=None, features=None, opt_level=None, set=None, no_schedule=False,
             required_passes=(), disabled_passes=(), workload_knobs=None):
    o = service_pb2.CompileOptions(no_schedule=no_schedule)
    for workload, knobs in (workload_knobs or {}).items():
        for name, value in knobs.items():
            o.workload_knobs[workload].values[name] = int(value)
    if target or cpu or features:
        o.target.CopyFrom(service_pb2.Target(triple=target or "", cpu=cpu or "",
                                             features=features or ""))
    if opt_level is not None:
        o.opt_level = opt_level
    for name, value in (set or {}).items():
        o.set[name] = int(value)
    o.required_passes.extend(required_passes)
    o.disabled_passes.extend(disabled_passes)
    return o


def _buffer_data(name, array):
    a = np.ascontiguousarray(array)
    d = service_pb2.BufferData(name=name, shape=list(a.shape))
    if a.dtype.kind == "f":
        d.floats.values.extend(a.ravel().astype(np.float64).tolist())
    elif a.dtype.kind in "iub":
        if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"input {name}: {int(a.max())} does not fit in a 64-bit signed "
                             "integer, which kiln's integer buffers hold")
        d.ints.values.extend(a.ravel().astype(np.int64).tolist())
    else:
        raise TypeError(f"input {name}: numpy dtype {a.dtype} is not one kiln takes")
    return d


def _array(d):
    values = d.floats.values if d.WhichOneof("values") == "floats" else d.ints.values
    dtype = _NUMPY.get(d.dtype, np.float64)
    return np.array(values, dtype=dtype).reshape(tuple(d.shape))


class RunResult:
    """What a Run gave: ``outputs`` (name -> numpy array), ``checksums``
    (name -> float), ``params`` (every param's value), ``chosen`` (run-time
    params kiln gave a value), ``ok`` (False only when a check failed),
    ``check`` and ``bench`` (the protos, or None) and ``response``."""

    def __init__(self, response):
        self.response = response
        self.outputs = {d.name: _array(d) for d in response.outputs}
        self.checksums = {c.name: c.checksum for c in response.checksums}
        self.params = dict(response.params)
        self.chosen = list(response.chosen)
        self.check = response.check if response.HasField("check") else None
        self.bench = response.bench if response.HasField("bench") else None
        self.ok = self.check is None or self.check.ok

    def __repr__(self):
        check = "" if self.check is None else f", check {'ok' if self.check.ok else 'FAILED'}"
        return f"RunResult(outputs={sorted(self.outputs)}{check})"


class ModelArtifact:
    """A whole model compiled by kilnd (Client.compile_model): ``code`` (the
    shared object: every kernel and the plan that runs them), ``weights`` (the
    weights blob), ``metadata`` (its .so.json as a dict), ``name``, ``triple``,
    ``calls`` and ``kernels``. ``save(path)`` writes PATH (.so), the weights
    beside it (.weights) and PATH.json, as `kiln compile` does; a C program
    runs them with kiln_model_open (docs/models.md)."""

    def __init__(self, response, weights):
        a = response.artifact
        self.response = response
        self.code, self.weights = a.code, weights
        self.metadata = json.loads(a.metadata_json)
        self.name, self.triple = a.name, a.target.triple
        self.calls, self.kernels = response.model.calls, response.model.kernels

    def save(self, path):
        path = pathlib.Path(path)
        weights = path.with_suffix(".weights") if path.suffix == ".so" else \
            pathlib.Path(str(path) + ".weights")
        path.write_bytes(self.code)
        weights.write_bytes(self.weights)
        pathlib.Path(str(path) + ".json").write_text(self.response.artifact.metadata_json + "\n")
        return path, weights

    def __repr__(self):
        return (f"ModelArtifact({self.name}, {self.triple}, {self.calls} calls, "
                f"{self.kernels} kernels, {len(self.weights)} bytes of weights)")


class Measurement:
    """What a Measure gave: where it ran (``agent_id``, ``device``, ``tries``:
    more than 1 when an agent was lost mid-job), ``error`` (None, or the
    agent's error class: "TIMEOUT", "RUNTIME_CRASH", "OUT_OF_MEMORY", ...) and
    ``message``, the timing (``rounds_ms``: each round's time per call;
    ``median_ms``, ``min_ms``, ``number``, ``threads``), ``checksums`` (name ->
    float), ``outputs`` (name -> numpy array, with return_outputs), ``check``
    (the comparison with the reference interpreter, or None), ``ok`` (it ran
    and no check failed), ``host_load`` (other processes' CPUs while the rounds
    ran) and ``cpu_pressure`` (the share of that time a task waited for a CPU),
    each None when the agent could not say, ``params`` and ``response``."""

    def __init__(self, response):
        r = response.result
        self.response = response
        self.agent_id, self.device, self.tries = response.agent_id, response.device, response.tries
        self.error = (None if r.error == agent_pb2.MeasureResult.OK
                      else agent_pb2.MeasureResult.Error.Name(r.error))
        self.message = r.message
        self.rounds_ms = list(r.round_ms)
        self.median_ms, self.min_ms = response.median_ms, response.min_ms
        self.number, self.threads = r.number, r.threads
        host = r.host if r.HasField("host") else None
        self.host_load = host.other_cpus if host and host.other_cpus >= 0 else None
        self.cpu_pressure = host.cpu_pressure if host and host.cpu_pressure >= 0 else None
        self.checksums = {o.name: o.checksum for o in r.outputs}
        self.outputs = {o.name: np.frombuffer(o.data, dtype=np.dtype(_NUMPY[o.type]).newbyteorder("<"))
                        .reshape(tuple(o.shape)) for o in r.outputs if o.data}
        self.check = response.check if response.HasField("check") else None
        self.params = dict(response.params)
        self.ok = self.error is None and (self.check is None or self.check.ok)

    def __repr__(self):
        if self.error:
            return f"Measurement({self.agent_id}: {self.error}: {self.message})"
        check = "" if self.check is None else f", check {'ok' if self.check.ok else 'FAILED'}"
        return (f"Measurement({self.agent_id}: median {self.median_ms:.4g} ms of "
                f"{len(self.rounds_ms)} rounds{check})")


class Record:
    """A tuning record (docs/records.md): ``config`` (knob values), ``median_ms``,
    ``rounds_ms``, ``gflops``, ``error`` ("" when it ran), ``message``, ``job``,
    ``workload``, ``key``, ``agent``, ``compile_ms``, ``unix_ms``, ``id``; how
    noisy it was: ``min_ms``, ``max_ms``, ``cv`` (the rounds' standard deviation
    over their mean), ``host_load`` and ``cpu_pressure`` (None: unknown),
    ``attempts``, ``noisy``, ``stopped_early`` (timed for one round only, far
    slower than its job's best then); and its re-timing at the job's end: ``retimed_ms``
    (None: not re-timed) and ``retime_rounds_ms``. ``ms`` is its speed: the
    re-timed median where there is one."""

    def __init__(self, r):
        self.id, self.job, self.workload, self.key = r.id, r.job, r.workload, r.key
        self.config = dict(r.config)
        self.rounds_ms = list(r.round_ms)
        self.median_ms, self.gflops, self.flops = r.median_ms, r.gflops, r.flops
        self.error, self.message = r.error, r.message
        self.compile_ms, self.compiler_version = r.compile_ms, r.compiler_version
        self.agent, self.unix_ms = r.agent, r.unix_ms
        self.min_ms, self.max_ms, self.cv = r.min_ms, r.max_ms, r.cv
        self.host_load = r.host_load if r.HasField("host_load") else None
        self.cpu_pressure = r.cpu_pressure if r.HasField("cpu_pressure") else None
        self.attempts, self.noisy, self.stopped_early = r.attempts, r.noisy, r.stopped_early
        self.retimed_ms = r.retimed_ms if r.HasField("retimed_ms") else None
        self.retime_rounds_ms = list(r.retime_round_ms)

    @property
    def ms(self):
        return self.retimed_ms if self.retimed_ms is not None else self.median_ms

    @property
    def ok(self):
        return not self.error

    def __repr__(self):
        config = ",".join(f"{k}={v}" for k, v in sorted(self.config.items()))
        if self.error:
            return f"Record({self.id}: {config}: {self.error})"
        retimed = "" if self.retimed_ms is None else " re-timed"
        return (f"Record({self.id}: {config}: {self.ms:.4f} ms{retimed}, "
                f"{self.gflops:.1f} GFLOP/s)")


class TuneJob:
    """A tuning job as it runs: iterate over it for its progress, one
    kiln.v1.TuneProgress a trial (``trials``, ``target``, ``best``, ``last``,
    ``errors``, ``rejected``, ``eta_s``) and a last one with ``done``. ``id`` is
    known from the first message on; ``best`` and ``progress`` are the latest.
    ``wait()`` follows it to its end. Leaving the job (``cancel()``, or
    dropping the iteration of a job not started with ``detach``) cancels it."""

    def __init__(self, client, call, detach):
        self._client, self._call, self._detach = client, call, detach
        self.id, self.progress = 0, None

    def _next(self):
        try:
            p = next(self._call)
        except StopIteration:
            return None
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and self.progress and not self._detach:
                return None
            raise KilnError(e.code(), e.details()) from None
        self.id, self.progress = p.job, p
        return p

    def __iter__(self):
        finished = False
        try:
            while (p := self._next()) is not None:
                yield p
            finished = True
        finally:
            if not finished and not self._detach:
                self._call.cancel()  # left early: the job is cancelled

    def wait(self):
        """Follows the job to its end; the last progress message."""
        for _ in self:
            pass
        return self.progress

    @property
    def best(self):
        """The best record so far (a Record), or None."""
        if self.progress is None or not self.progress.HasField("best"):
            return None
        return Record(self.progress.best)

    def cancel(self):
        """Stops the job (its records stay): kiln.v1.TuningJob."""
        if not self.id:
            self._next()  # the first message names the job
        return self._client.cancel_tune(self.id)


class Client:
    """A connection to kilnd.

    ``address`` defaults to $KILN_SERVER, else 127.0.0.1:50051. ``token`` (or
    ``token_file``) is sent as "authorization: Bearer TOKEN" on every call.
    ``tls_ca`` (a PEM file) makes the connection TLS, trusting that CA;
    ``tls_cert`` and ``tls_key`` give a client certificate. ``timeout`` (s) is
    each call's deadline. A refused call raises KilnError.
    """

    def __init__(self, address=None, *, token=None, token_file=None, tls_ca=None, tls_cert=None,
                 tls_key=None, timeout=None):
        self.address = address or os.environ.get("KILN_SERVER") or "127.0.0.1:50051"
        if token_file is not None:
            token = pathlib.Path(token_file).read_text().rstrip()
            if not token:
                raise ValueError(f"token_file {token_file}: the file holds no token")
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self.timeout = timeout
        options = [("grpc.max_receive_message_length", -1),
                   ("grpc.max_send_message_length", -1)]
        if tls_ca or tls_cert or tls_key:
            read = lambda p: pathlib.Path(p).read_bytes() if p else None  # noqa: E731
            creds = grpc.ssl_channel_credentials(read(tls_ca), read(tls_key), read(tls_cert))
            self._channel = grpc.secure_channel(self.address, creds, options)
        else:
            self._channel = grpc.insecure_channel(self.address, options)
        self._stub = service_pb2_grpc.CompilerStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise KilnError(e.code(), e.details()) from None

    def check(self, op, **options):
        """Parse, schedule and check legality and bounds: kiln.v1.CheckResponse."""
        return self._call(self._stub.Check, service_pb2.CheckRequest(
            op=_operator(op), options=_options(**options)))

    def emit(self, op, stage="loops", **options):
        """One stage of the compilation as text (a graph's stage other than
        "graph": a list of (operator, text), one per call)."""
        if stage not in _STAGES:
            raise ValueError(f"stage {stage!r}: expected one of {', '.join(_STAGES)}")
        r = self._call(self._stub.Emit, service_pb2.EmitRequest(
            op=_operator(op), options=_options(**options), stage=_STAGES[stage]))
        return [(c.op, c.text) for c in r.calls] if r.calls else r.text

    def compile(self, op, **options):
        """An artifact: kiln.v1.CompileResponse (``.artifact.code`` holds the
        shared object, ``.artifact.metadata_json`` what `kiln compile` writes
        beside it, ``.cache_hit`` whether kilnd had it)."""
        return self._call(self._stub.Compile, service_pb2.CompileRequest(
            op=_operator(op), options=_options(**options)))

    def run(self, op, inputs=None, *, runtime_params=None, seed=0, check=False, bench=False,
            number=0, repeat=0, threads=0, return_outputs=True, **options):
        """Compiles for kilnd's machine and runs there, in a child process.

        ``inputs`` maps input names to numpy arrays (checked against their
        dtype, shape and value spec); the others are random from ``seed``.
        Returns a RunResult.
        """
        request = service_pb2.RunRequest(
            op=_operator(op), options=_options(**options), seed=seed, check=check, bench=bench,
            number=number, repeat=repeat, threads=threads, return_outputs=return_outputs)
        for name, value in (runtime_params or {}).items():
            request.runtime_params[name] = int(value)
        for name, array in (inputs or {}).items():
            request.inputs.append(_buffer_data(name, array))
        return RunResult(self._call(self._stub.Run, request))

    # Models (docs/models.md): an .onnx file goes to kilnd once, as a blob named by its SHA-256.

    _PIECE = 1 << 20

    def upload(self, path):
        """The file at ``path`` as a blob kilnd holds: its SHA-256. The bytes go
        only when kilnd lacks them, in pieces of 1 MiB."""
        data = pathlib.Path(path).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        have = self._call(self._stub.StatBlobs, service_pb2.StatBlobsRequest(sha256=[sha]))
        if have.blobs and have.blobs[0].present:
            return sha

        def pieces():
            offset = 0
            while True:
                piece = service_pb2.BlobChunk(offset=offset,
                                              data=data[offset:offset + self._PIECE])
                if offset == 0:
                    piece.sha256, piece.size = sha, len(data)
                yield piece
                offset += self._PIECE
                if offset >= len(data):
                    return

        self._call(self._stub.PutBlob, pieces())
        return sha

    def download(self, sha256):
        """A blob kilnd holds (a compiled model's weights), as bytes."""
        try:
            parts = [c.data for c in self._stub.GetBlob(
                service_pb2.GetBlobRequest(sha256=sha256), timeout=self.timeout,
                metadata=self._metadata)]
        except grpc.RpcError as e:
            raise KilnError(e.code(), e.details()) from None
        data = b"".join(parts)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise KilnError(grpc.StatusCode.DATA_LOSS, f"blob {sha256} arrived with another "
                            "SHA-256")
        return data

    def model(self, path, dims=None):
        """An ONNX model as an operator: uploaded (once) and named by its SHA-256.
        ``dims`` gives symbolic input dimensions ({"batch": 1})."""
        ref = operator_pb2.ModelRef(sha256=self.upload(path), filename=str(path))
        for name, value in (dims or {}).items():
            ref.dims[name] = int(value)
        return operator_pb2.Operator(model=ref)

    def compile_model(self, path, *, dims=None, **options):
        """A whole model compiled by kilnd into one artifact for a target
        (``target="aarch64-linux-gnu"``, ``cpu=...``; default kilnd's machine):
        a ModelArtifact, its weights fetched from kilnd."""
        response = self._call(self._stub.Compile, service_pb2.CompileRequest(
            op=self.model(path, dims), options=_options(**options)))
        return ModelArtifact(response, self.download(response.artifact.weights_sha256))

    def run_model(self, path, inputs=None, *, dims=None, seed=0, check=False, bench=False,
                  number=0, repeat=0, threads=0, **options):
        """Runs a model on kilnd's machine (compiled there, in a child process):
        ``inputs`` maps its input names to numpy arrays (the others are random
        from ``seed``). A RunResult whose ``outputs`` are numpy arrays."""
        return self.run(self.model(path, dims), inputs, seed=seed, check=check, bench=bench,
                        number=number, repeat=repeat, threads=threads, **options)

    def measure_model(self, path, key, *, dims=None, seed=0, return_outputs=False, warmup=0,
                      number=0, repeat=0, min_repeat_ms=0, threads=0, time_limit_ms=0,
                      memory_limit_bytes=0, priority=0, agent="", **options):
        """Times a whole model on an agent of ``key``: kilnd compiles it for the
        agent's CPU into one artifact and sends it with its weights; the agent
        makes the inputs (random from ``seed``) and runs it as it runs a
        kernel, in a child under its limits. A Measurement (no check: use
        ``run_model(..., check=True)``)."""
        request = service_pb2.MeasureRequest(
            op=self.model(path, dims), options=_options(**options), key=key, seed=seed,
            return_outputs=return_outputs, priority=priority, agent=agent)
        s = request.settings
        s.warmup, s.number, s.repeat, s.min_repeat_ms = warmup, number, repeat, min_repeat_ms
        s.threads, s.time_limit_ms, s.memory_limit_bytes = threads, time_limit_ms, \
            memory_limit_bytes
        return Measurement(self._call(self._stub.Measure, request))

    def agents(self):
        """The agents connected to kilnd: a list of kiln.v1.AgentStatus (``id``,
        ``device`` with its key, triple, CPU, cores and GPUs, ``running``,
        ``jobs_done``, ``jobs_failed``, ``last_seen_unix_ms``)."""
        return list(self._call(self._stub.ListAgents, service_pb2.ListAgentsRequest()).agents)

    def measure(self, op, key, *, runtime_params=None, seed=0, check=False, return_outputs=False,
                repeat=0, number=0, min_repeat_ms=0, min_total_ms=0, warmup=0, cooldown_ms=0,
                flush_cache=False, threads=0, time_limit_ms=0, memory_limit_mb=0, priority=0,
                gpu=None, agent="", **options):
        """Compiles for an agent of ``key`` (its triple and CPU; ``agent``: that
        one of them only), ships the
        kernel there and times it: ``warmup`` calls, then ``repeat`` rounds of
        ``number`` calls (``number`` grown until a round lasts
        ``min_repeat_ms`` when 0), and more rounds while they last less than
        ``min_total_ms`` in all (at most 10 x ``repeat``). ``check`` compares the outputs with the
        reference interpreter. ``gpu=N`` measures on the agent's GPU N instead
        (CUDA for its compute capability, timed with CUDA events; a key whose
        agents lack it raises KilnError, FAILED_PRECONDITION). A crash or
        timeout is the Measurement's ``error``, not an exception; a key no
        agent has raises KilnError (UNAVAILABLE). Compile options as for
        compile(), without a target.
        """
        if any(options.get(k) for k in ("target", "cpu", "features")):
            raise ValueError("measure compiles for the agent's own target: leave out target, "
                             "cpu and features")
        settings = agent_pb2.MeasureSettings(
            warmup=warmup, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
            min_total_ms=min_total_ms, cooldown_ms=cooldown_ms, flush_cache=flush_cache,
            threads=threads,
            time_limit_ms=time_limit_ms, memory_limit_bytes=int(memory_limit_mb) << 20)
        request = service_pb2.MeasureRequest(
            op=_operator(op), options=_options(**options), key=key, seed=seed, check=check,
            return_outputs=return_outputs, settings=settings, priority=priority, agent=agent)
        if gpu is not None:
            request.gpu = int(gpu)
        for name, value in (runtime_params or {}).items():
            request.runtime_params[name] = int(value)
        return Measurement(self._call(self._stub.Measure, request))

    # Tuning and records (docs/tuning.md, docs/records.md).

    def tune(self, op, key, *, trials=0, search="", features="", batch=0, early_stop=0,
             transfer=False, detach=False, seed=0, runtime_params=None, repeat=0, number=0,
             min_repeat_ms=0, min_total_ms=0, flush_cache=False, threads=0, time_limit_ms=0,
             memory_limit_mb=0, priority=0, gpu=None, retime=None, remeasure=None,
             stop_slower_than=None, budget_s=0, **options):
        """Starts a tuning job of ``op``'s knobs on the agents of ``key``: a
        TuneJob, whose iteration is the job's progress. ``search`` is xgb-rank
        (default), xgb-reg, evo-rank, evo-reg, random or grid; ``options["set"]`` gives params
        their values and holds knobs fixed. Measurement options as for measure()
        (default: rounds of at least 5 ms, at least 3 and more while they last
        less than 30 ms in all). ``gpu=N`` tunes on the agents'
        GPU N; its records are kept under the key ``"KEY/gpuN"``. ``retime=N``:
        the N fastest re-timed at the end, interleaved (default 3, 0: none);
        ``remeasure=N``: a noisy point measured up to N more times (default 2);
        ``stop_slower_than=X``: a candidate whose first round passes X times the
        best so far is timed for that round only (default 4, 0: never).

        A model (``client.model(path)``) or a graph is tuned as one job over its
        tasks: ``trials`` counts all their trials (default 32 a task) and
        ``budget_s`` stops it after that many seconds; each progress message has
        ``tasks`` (each task's job, trials and best; in the last message also
        its trial 0: ``first``, ``first_from``, ``first_shape``), ``task`` (the
        one the trial belongs to) and ``predicted_ms`` (the model's time from the
        tasks' bests). A task that has measured nothing starts from the records
        of its operator at the nearest shapes on the key (``transfer`` is
        always on for a model). ``flush_cache=True`` times each point with its data flushed
        from the caches first, as a model runs its layers (docs/tuning.md).

        A func without a schedule is tuned over the sketches kiln derives from its
        algorithm: with several, one job over them, each a task (``alternatives`` is
        set; ``trials`` counts all their trials, default 64); its ``best`` is the
        fastest sketch's best, and ``best()`` gives it with its sketch."""
        if options.get("target") or options.get("cpu"):
            raise ValueError("tune compiles for the agents' own target: leave out target and cpu")
        settings = agent_pb2.MeasureSettings(
            number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
            min_total_ms=min_total_ms, flush_cache=flush_cache, threads=threads,
            time_limit_ms=time_limit_ms, memory_limit_bytes=int(memory_limit_mb) << 20)
        request = service_pb2.TuneRequest(
            op=_operator(op), options=_options(**options), key=key, trials=trials, batch=batch,
            early_stop=early_stop, search=search, features=features, seed=seed,
            settings=settings, detach=detach, transfer=transfer, priority=priority,
            budget_s=float(budget_s))
        if gpu is not None:
            request.gpu = int(gpu)
        if retime is not None:
            request.retime = int(retime)
        if remeasure is not None:
            request.remeasure = int(remeasure)
        if stop_slower_than is not None:
            request.stop_slower_than = float(stop_slower_than)
        for name, value in (runtime_params or {}).items():
            request.runtime_params[name] = int(value)
        return TuneJob(self, self._stub.Tune(request, metadata=self._metadata), detach)

    def resume_tune(self, job, *, trials=0, detach=False):
        """Goes on with a job that did not finish (or a done one, with more
        ``trials``), from its records; follows a running one. A TuneJob."""
        request = service_pb2.ResumeTuneRequest(job=job, trials=trials, detach=detach)
        return TuneJob(self, self._stub.ResumeTune(request, metadata=self._metadata), detach)

    def cancel_tune(self, job):
        """Stops a running job: kiln.v1.TuningJob as it is after."""
        return self._call(self._stub.CancelTune, service_pb2.CancelTuneRequest(job=job)).job

    def jobs(self, name="", workload="", limit=0):
        """Tuning jobs, newest first: a list of kiln.v1.TuningJob (``id``,
        ``name``, ``key``, ``state``, ``live``, ``records``, ...)."""
        return list(self._call(self._stub.ListJobs, service_pb2.ListJobsRequest(
            name=name, workload=workload, limit=limit)).jobs)

    @staticmethod
    def _filter(name="", workload="", key="", job=0, since_unix_ms=0, until_unix_ms=0,
                error=None):
        f = service_pb2.RecordFilter(name=name, workload=workload, key=key, job=job,
                                     since_unix_ms=since_unix_ms, until_unix_ms=until_unix_ms)
        if error is not None:
            f.error = error
        return f

    def records(self, *, fastest=False, offset=0, limit=0, **filters):
        """Records matching the filters (``name``, ``workload``, ``key``,
        ``job``, ``since_unix_ms``, ``until_unix_ms``, ``error``: "" for those
        that ran): a list of Record, in arrival order or ``fastest`` first, one
        page (``limit``, default 100; ``offset``)."""
        order = (service_pb2.QueryRecordsRequest.FASTEST if fastest
                 else service_pb2.QueryRecordsRequest.ARRIVAL)
        r = self._call(self._stub.QueryRecords, service_pb2.QueryRecordsRequest(
            filter=self._filter(**filters), order=order, offset=offset, limit=limit))
        return [Record(x) for x in r.records]

    def best(self, op=None, key="", *, workload="", retime=0, **options):
        """The fastest record of ``op`` (with ``set`` for its params) or of a
        workload hash on ``key`` (default: the device class of ``target`` and
        ``cpu``, or of kilnd's own machine): a Record. KilnError NOT_FOUND when
        it was never tuned there. ``retime=N`` first re-times its N fastest on
        one agent of ``key``, their rounds interleaved (kept in the records). For a func
        given without a schedule, the Record's ``sketch`` is the schedule kiln sketched for it
        and tuned (a schedule block's body, whose knobs its ``config`` sets); else ""."""
        request = service_pb2.BestConfigRequest(key=key, workload=workload, retime=retime,
                                                options=_options(**options))
        if op is not None:
            request.op.CopyFrom(_operator(op))
        response = self._call(self._stub.BestConfig, request)
        best = Record(response.record)
        best.sketch = response.sketch
        return best

    def export_records(self, **filters):
        """The records matching the filters as JSON lines (docs/records.md): a
        generator of lines, without their newlines."""
        try:
            for chunk in self._stub.ExportRecords(
                    service_pb2.ExportRecordsRequest(filter=self._filter(**filters)),
                    timeout=self.timeout, metadata=self._metadata):
                yield from chunk.lines.splitlines()
        except grpc.RpcError as e:
            raise KilnError(e.code(), e.details()) from None
