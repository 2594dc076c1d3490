"""The Python client's tuning and records API against a real kilnd with its
own agent and a records database: a job's progress as an iterator, the
records and the best one, the export, a cancelled job resumed, and refusals
as KilnError with kilnd's message."""

import json
import os
import subprocess
import time

import grpc
import numpy as np
import pytest

import kiln
from conftest import SOURCE_DIR, Kilnd, small_model

GEMM = SOURCE_DIR / "tests" / "bench" / "kernels" / "gemm.kiln"
SIZES = {"M": 96, "N": 96, "K": 96}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    data = tmp_path_factory.mktemp("kilnd-data")
    k = Kilnd("--local-agent", "--agent-wait-ms", "5000", "--data-dir", str(data))
    with kiln.Client(k.address, timeout=300) as c:
        yield c
    assert k.stop() == 0


def tune(client, trials, **kw):
    return client.tune(kiln.load(GEMM), "local", trials=trials, batch=4, min_repeat_ms=2,
                       set=SIZES, **kw)


def test_progress_is_an_iterator_and_every_trial_a_record(client):
    job = tune(client, 12)
    messages = list(job)
    assert messages[0].job == job.id and messages[0].trials == 0
    assert [p.trials for p in messages if p.HasField("last")] == list(range(1, 13))
    end = messages[-1]
    assert end.done and end.stopped == "trials" and end.trials == 12
    assert end.name == "gemm" and end.key == "local" and end.search == "xgb-rank"

    records = client.records(job=job.id, limit=50)
    assert len(records) == 12
    assert len({tuple(sorted(r.config.items())) for r in records}) == 12
    ran = [r for r in records if r.ok]
    # A candidate far slower than the best so far is timed for one round; the others for 3
    # rounds of at least 2 ms, and more (at most 30) while they last less than 30 ms in all.
    assert ran and all(r.median_ms > 0 for r in ran)
    assert all(len(r.rounds_ms) == 1 for r in ran if r.stopped_early)
    assert all(3 <= len(r.rounds_ms) <= 30 for r in ran if not r.stopped_early)
    # A kernel this short (96^3) gets more rounds than 3 for the same time.
    assert any(len(r.rounds_ms) > 3 for r in ran if not r.stopped_early)
    assert all(r.flops == 2 * 96 ** 3 for r in ran)

    # The three fastest were re-timed, and the best is the fastest of them by re-timed median.
    assert end.retimed == 3
    retimed = [r for r in ran if r.retimed_ms is not None]
    assert len(retimed) == 3 and all(len(r.retime_rounds_ms) >= 9 for r in retimed)
    assert all(r.attempts >= 1 and r.min_ms <= r.median_ms <= r.max_ms for r in ran)
    best = client.best(kiln.load(GEMM), "local", set=SIZES)
    assert best.retimed_ms == min(r.retimed_ms for r in retimed) == best.ms
    assert best.config == job.best.config
    assert client.records(job=job.id, fastest=True, limit=1)[0].id == best.id
    # The same workload by its hash, and through the job list.
    assert client.best(workload=end.workload, key="local").id == best.id
    listed = {j.id: j for j in client.jobs(name="gemm")}
    assert listed[job.id].state == "done" and listed[job.id].records == 12

    lines = list(client.export_records(job=job.id))
    assert len(lines) == 12
    first = json.loads(lines[0])
    assert first["job"] == job.id and set(first["config"]) == {"MB", "NB", "KB", "MR", "NR"}


def test_a_cancelled_job_resumes_from_its_records(client):
    job = tune(client, 40, detach=True)
    for p in job:
        if p.trials >= 4:
            break
    stopped = job.cancel()
    assert stopped.state == "cancelled" and not stopped.live
    kept = client.records(job=job.id, limit=100)
    assert 4 <= len(kept) < 40

    more = client.resume_tune(job.id, trials=len(kept) + 4)
    end = more.wait()
    assert end.done and end.trials == len(kept) + 4
    after = client.records(job=job.id, limit=100)
    assert [r.id for r in after][:len(kept)] == [r.id for r in kept]
    assert len({tuple(sorted(r.config.items())) for r in after}) == len(after)


def test_a_transfer_job_measures_the_nearest_shapes_best_in_its_first_batch(client):
    known = tune(client, 6).wait()  # the GEMM at 96^3 (earlier tests may have tuned it too)
    best = client.best(kiln.load(GEMM), "local", set=SIZES)
    bigger = {"M": 128, "N": 96, "K": 96}
    end = client.tune(kiln.load(GEMM), "local", trials=4, batch=4, min_repeat_ms=2, retime=0,
                      set=bigger, transfer=True).wait()
    assert end.done
    assert any(r.config == best.config for r in client.records(job=end.job, limit=10))
    # Its first points are the nearest shape's best and the defaults, in the order the model,
    # trained on the 96^3 records, ranks them (a few noisy records may rank the defaults first).
    assert end.first_from in ("transfer", "defaults")
    if end.first_from == "transfer":
        assert "M=96" in end.first_shape and "N=96" in end.first_shape
        assert end.first.config == best.config
    else:
        assert end.first_shape == ""
    # Without transfer the job says nothing of where its first point came from.
    assert known.first_from == ""


def test_refusals_are_kiln_errors_with_kilnds_message(client):
    with pytest.raises(kiln.KilnError) as e:
        tune(client, 4, search="annealing").wait()
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'annealing' is not a strategy" in e.value.message
    with pytest.raises(kiln.KilnError) as e:
        client.resume_tune(12345).wait()
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(kiln.KilnError) as e:
        client.best(kiln.load(GEMM), "local", set={"M": 7, "N": 7, "K": 7})
    assert e.value.code == grpc.StatusCode.NOT_FOUND and "tune it first" in e.value.message
    with pytest.raises(ValueError):
        client.tune(kiln.load(GEMM), "local", target="aarch64-linux-gnu")


def test_leaving_the_iteration_early_cancels_the_job(client):
    import time
    job = tune(client, 40)
    for p in job:
        if p.trials >= 2:
            break
    deadline = time.monotonic() + 30
    while {j.id: j for j in client.jobs()}[job.id].state == "running":
        assert time.monotonic() < deadline, "the job was not cancelled"
        time.sleep(0.05)
    assert {j.id: j for j in client.jobs()}[job.id].state == "cancelled"


def test_a_model_is_tuned_as_one_job_over_its_tasks(client, tmp_path):
    """A model's job gives every task trials (the one without knobs one, as it is), keeps
    each task's trials as records of the task's own job, predicts the model's time from the
    tasks' bests, and is cancelled by its number."""
    torch = pytest.importorskip("torch")
    path, m = small_model(tmp_path)
    job = client.tune(client.model(path), "local", trials=20, batch=4, min_repeat_ms=2,
                      retime=0, flush_cache=True)
    messages = list(job)
    end = messages[-1]
    assert end.done and end.stopped == "trials" and end.trials == 20
    assert end.name == "small.onnx" and len(end.tasks) >= 3
    trials = [p for p in messages if p.HasField("last")]
    assert len(trials) == 20
    assert all(0 <= p.task < len(p.tasks) and
               p.last.workload == p.tasks[p.task].workload for p in trials)
    assert sum(t.trials for t in end.tasks) == 20
    assert all(t.trials >= 1 and t.HasField("best") for t in end.tasks)
    fixed = [t for t in end.tasks if t.space_size == 1]
    assert fixed and all(t.trials == 1 for t in fixed)
    predicted = sum(t.calls * t.best.median_ms for t in end.tasks)
    assert end.predicted_ms == pytest.approx(predicted)
    for t in end.tasks:
        records = client.records(job=t.job, limit=50)
        assert len(records) == t.trials
        assert all(r.workload == t.workload for r in records)
    # The model's job is listed under the model's name, with its tasks and their records; its
    # tasks' jobs under theirs.
    listed = next(j for j in client.jobs() if j.id == end.job)
    assert listed.name == "small.onnx" and listed.records == 20
    assert [(t.job, t.workload, t.calls) for t in listed.tasks] == \
        [(t.job, t.workload, t.calls) for t in end.tasks]
    # Nothing was known of these shapes: the first conv measured its defaults first; the second
    # conv (another shape of the same operator) measured the best of the first conv's first
    # batch in its own first batch (first, unless the model trained on those records put its
    # defaults before it).
    tunable = [t for t in end.tasks if t.space_size > 1]
    convs = [t for t in tunable if t.name.startswith("conv2d")]
    assert len(convs) == 2
    assert convs[0].first_from == "defaults" and convs[0].first_shape == ""
    first_conv = client.records(job=convs[0].job, limit=50)
    second_conv = client.records(job=convs[1].job, limit=50)
    began = min(r.id for r in second_conv)
    known = min((r for r in first_conv if r.ok and r.id < began), key=lambda r: r.median_ms)
    assert known.config in [r.config for r in sorted(second_conv, key=lambda r: r.id)[:4]]
    assert convs[1].first_from in ("transfer", "defaults")
    if convs[1].first_from == "transfer":
        assert "C=3" in convs[1].first_shape and convs[1].first.config == known.config
    for t in tunable:
        assert t.first.job == t.job
        assert t.first.id in {r.id for r in client.records(job=t.job, limit=50)}
    # Its tuning curve: the model's predicted time against its trials.
    plot = subprocess.run([os.environ["KILN_BINARY"], "records", "plot", "--job", str(end.job),
                           "--out", str(tmp_path / "curve.png"), "--server", client.address],
                          capture_output=True, text=True)
    assert plot.returncode == 0, plot.stderr
    assert "1 job, a model's predicted time against trials" in plot.stdout
    assert (tmp_path / "curve.png").stat().st_size > 0

    # A second job of the same model starts each task from the best record the first found.
    again = list(client.tune(client.model(path), "local", trials=2 * len(tunable) + 2, batch=2,
                             min_repeat_ms=2, retime=0))[-1]
    assert again.done
    for before, t in zip(end.tasks, again.tasks):
        if t.space_size > 1:
            assert t.first_from == "transfer" and t.first_shape
            assert t.first.config == before.best.config

    # The tuned model as one artifact, each operator at its task's best knobs (from Python by
    # the tasks' workloads, from the CLI by --best), runs from C as PyTorch runs the model.
    x = torch.randn(1, 3, 8, 8)
    expected = m(x).detach().numpy()
    np.save(tmp_path / "x.npy", x.numpy())
    run_model = os.environ.get("RUN_MODEL_BINARY")
    if not run_model:
        pytest.fail("$RUN_MODEL_BINARY must name examples/c/run_model (ctest sets it)")
    knobs = {t.workload: dict(t.best.config) for t in end.tasks if t.best.config}
    assert knobs
    tuned = client.compile_model(path, workload_knobs=knobs)
    best = subprocess.run([os.environ["KILN_BINARY"], "compile", str(path), "--best", "--key",
                           "local", "--server", client.address, "-o", str(tmp_path / "cli.so")],
                          capture_output=True, text=True)
    assert best.returncode == 0, best.stderr
    assert f"{len(knobs)} of {len(knobs)} tunable tasks from their best records" in best.stdout
    for so in (tuned.save(tmp_path / "py.so")[0], tmp_path / "cli.so"):
        out = tmp_path / (so.stem + "_out")
        out.mkdir()
        subprocess.run([run_model, str(so), "--input", f"x={tmp_path / 'x.npy'}", "--save",
                        str(out)], check=True, capture_output=True)
        y = np.load(out / "y.npy")
        assert np.max(np.abs(y - expected)) <= 1e-4 * max(1.0, np.max(np.abs(expected))), so

    # A model's job is cancelled by its number like any other.
    job = client.tune(client.model(path), "local", trials=400, batch=4, min_repeat_ms=2,
                      detach=True)
    first = next(iter(job))
    client.cancel_tune(first.job)
    deadline = time.monotonic() + 120
    while True:
        state = next(j.state for j in client.jobs() if j.id == first.job)
        if state != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state == "cancelled"
    # ... and resumed by it: its tasks' jobs (named from its first message on) go on from their
    # records to the trials asked for over all its runs, nothing measured twice.
    assert first.tasks and all(t.job > 0 for t in first.tasks)
    before = sum(len(client.records(job=t.job, limit=1000)) for t in first.tasks)
    again = list(client.resume_tune(first.job, trials=48))[-1]
    assert again.done and again.stopped == "trials" and again.job == first.job
    assert [t.job for t in again.tasks] == [t.job for t in first.tasks]
    assert sum(t.trials for t in again.tasks) == max(48, before + 1)
    for t in again.tasks:
        records = client.records(job=t.job, limit=100)
        assert len(records) == t.trials
        assert len({tuple(sorted(r.config.items())) for r in records}) == len(records)

    # Its search features are the knob ones; a bad budget is refused.
    with pytest.raises(kiln.KilnError, match="features"):
        list(client.tune(client.model(path), "local", trials=4, features="iter"))
    with pytest.raises(kiln.KilnError, match="budget_s"):
        list(client.tune(client.model(path), "local", trials=4, budget_s=-1))


def test_a_func_without_a_schedule_is_tuned_over_the_sketches_kiln_derives(client, kiln_binary,
                                                                            tmp_path):
    # The algorithm alone: kiln sketches schedules (tiles, the reduction between tiles and
    # points, parallel and vector loops; or the inner loop split) whose sizes are the knobs,
    # and one job chooses among them: each sketch a task with a job of its own.
    algorithm = """func mm {
  param M = 48, N = 48, K = 48;
  input A : f32[M, K];
  input B : f32[K, N];
  output C : f32[M, N];
  compute C(i, j) in 0 <= i < M, 0 <= j < N:
    C[i, j] = sum(k in 0 <= k < K) A[i, k] * B[k, j];
}
"""
    end = client.tune(kiln.source(algorithm), "local", trials=8, batch=4, min_repeat_ms=1,
                      retime=0).wait()
    assert end.done and end.trials == 8 and end.alternatives
    assert [t.name for t in end.tasks] == ["mm (tiled sketch)", "mm (split sketch)"]
    assert [t.trials for t in end.tasks] == [4, 4]  # a batch each first
    knobs = {"mm (tiled sketch)": {"tile_C_i", "tile_C_j", "split_C_k", "par_C", "unroll_C"},
             "mm (split sketch)": {"split_C_j", "par_C"}}
    for t in end.tasks:
        records = client.records(job=t.job, limit=50)
        assert len(records) == 4 and all(r.ok for r in records)
        assert all(set(r.config) == knobs[t.name] for r in records), t.name
        assert all(r.workload == t.workload for r in records)
    # The job's best is the fastest sketch's; BestConfig finds it, with its sketch.
    fastest = min(end.tasks, key=lambda t: t.best.median_ms)
    assert end.best.id == fastest.best.id
    best = client.best(kiln.source(algorithm), "local")
    assert best.id == fastest.best.id and best.workload == fastest.workload
    assert set(best.config) == knobs[fastest.name]
    sketch_of = {"mm (tiled sketch)": "C.tile(i, j, tile_C_i, tile_C_j, i_o, j_o, i_i, j_i);",
                 "mm (split sketch)": "C.split(j, split_C_j, j_o, j_i);"}
    assert sketch_of[fastest.name] in best.sketch

    # The job goes on where it stopped: the trials beyond, to the sketches, nothing measured
    # twice.
    more = client.resume_tune(end.job, trials=12).wait()
    assert more.done and more.stopped == "trials" and more.alternatives
    assert [t.job for t in more.tasks] == [t.job for t in end.tasks]
    assert sum(t.trials for t in more.tasks) == 12
    for t in more.tasks:
        records = client.records(job=t.job, limit=50)
        assert len(records) == t.trials
        assert len({tuple(sorted(r.config.items())) for r in records}) == len(records)
    job = client.jobs(workload=end.workload)[0]
    assert job.id == end.job and [t.name for t in job.tasks] == [t.name for t in end.tasks]
    assert job.alternatives
    best = client.best(kiln.source(algorithm), "local")  # over all 12
    fastest = next(t for t in more.tasks if t.workload == best.workload)
    assert sketch_of[fastest.name] in best.sketch

    # The CLI names the sketches, their bests and the fastest.
    path = tmp_path / "mm.kiln"
    path.write_text(algorithm)
    out = subprocess.run([kiln_binary, "tune", str(path), "--key", "local", "--trials", "4",
                          "--batch", "2", "--min-repeat-ms", "1", "--retime", "0",
                          "--set", "M=40", "--server", client.address],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "(kiln's 2 sketches of its algorithm, xgb-rank search, 4 trials)" in out.stdout
    assert "trials over 2 sketches" in out.stdout
    assert "mm (tiled sketch) (job " in out.stdout and "mm (split sketch) (job " in out.stdout
    assert "  the fastest: mm (" in out.stdout
    assert f"kiln emit {path} --stage schedule --best --key local" in out.stdout

    # The CLI compiles the best as the sketch it was tuned as, and shows that schedule.
    so = tmp_path / "mm.so"
    out = subprocess.run([kiln_binary, "compile", str(path), "--best", "--key", "local",
                          "--server", client.address, "-o", str(so)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "mm has no schedule; kiln sketched this one and tuned its knobs:" in out.stdout
    assert sketch_of[fastest.name] in out.stdout
    assert so.stat().st_size > 0

    # `kiln emit --stage schedule --best` prints that schedule with each knob at the value
    # found, lines a user pastes into the func: pasted, it checks and runs as the reference.
    out = subprocess.run([kiln_binary, "emit", str(path), "--stage", "schedule", "--best",
                          "--key", "local", "--server", client.address],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# best mm on local: ") and "a schedule kiln sketched" in lines[0]
    for knob in ("tile_C_i", "tile_C_j", "split_C_j"):
        if knob in best.config:
            assert f"  knob {knob} = {best.config[knob]} in [4, 8, 16, 32, 64];" in lines
    assert "    " + sketch_of[fastest.name] in lines
    pasted = tmp_path / "mm_pasted.kiln"
    pasted.write_text(algorithm[:algorithm.rindex("}")] + out.stdout + "}\n")
    run = subprocess.run([kiln_binary, "run", str(pasted), "--check"], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "ok  mm: 1 output matches" in run.stdout

    # --best prints the schedule stage only, and reads kilnd's records.
    out = subprocess.run([kiln_binary, "emit", str(path), "--stage", "loops", "--best",
                          "--server", client.address], capture_output=True, text=True)
    assert out.returncode == 2 and "--best goes with --stage schedule" in out.stderr
    env = {k: v for k, v in os.environ.items() if k != "KILN_SERVER"}
    out = subprocess.run([kiln_binary, "emit", str(path), "--stage", "schedule", "--best"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2 and "--best reads kilnd's tuning records" in out.stderr


def test_auto_tunes_the_sketch_of_a_func_with_a_schedule_of_its_own(client, kiln_binary,
                                                                    tmp_path):
    # `kiln tune --auto`: examples/matmul.kiln's own schedule (knobs TI, TJ) left out and the
    # sketch tuned instead, to compare; --best --auto reads that job's records.
    matmul = str(SOURCE_DIR / "examples" / "matmul.kiln")
    server = ["--server", client.address]
    sizes = ["--set", "M=40", "--set", "N=40", "--set", "K=40"]
    out = subprocess.run([kiln_binary, "tune", matmul, "--key", "local", "--auto", "--trials",
                          "6", "--batch", "3", "--min-repeat-ms", "1", "--retime", "0",
                          "--json", *sizes, *server],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    last = json.loads(out.stdout.splitlines()[-1])
    assert last["done"] and last["trials"] == 6 and last["alternatives"]
    records = [r for t in last["tasks"] for r in client.records(job=int(t["job"]), limit=50)]
    assert len(records) == 6 and all(r.ok for r in records)
    assert all("par_C" in r.config and "TI" not in r.config for r in records)

    out = subprocess.run([kiln_binary, "emit", matmul, "--stage", "schedule", "--best", "--auto",
                          "--key", "local", *sizes, *server],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "(a schedule kiln sketched)" in out.stdout.splitlines()[0]
    assert "    C.tile(i, j, tile_C_i, tile_C_j, i_o, j_o, i_i, j_i);" in out.stdout
    so = tmp_path / "matmul_auto.so"
    out = subprocess.run([kiln_binary, "compile", matmul, "--best", "--auto", "--key", "local",
                          "-o", str(so), *sizes, *server],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "kiln sketched this one and tuned its knobs" in out.stdout
    assert so.stat().st_size > 0

    # Without --auto the hand schedule's records are asked for: none on this shape.
    out = subprocess.run([kiln_binary, "emit", matmul, "--stage", "schedule", "--best", "--key",
                          "local", *sizes, *server], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "NOT_FOUND" in out.stderr
    # --auto outside tune needs --best; a graph is refused.
    out = subprocess.run([kiln_binary, "compile", matmul, "--auto"], capture_output=True,
                         text=True)
    assert out.returncode == 2 and "--auto goes with --best" in out.stderr
    graph = str(SOURCE_DIR / "examples" / "conv_bn_relu.kiln")
    out = subprocess.run([kiln_binary, "compile", graph, "--graph", "block", "--best", "--auto",
                          "--key", "local", *server], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "--auto leaves a func's schedule out" in out.stderr
