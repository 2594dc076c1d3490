"""A model's tuning job through a real kilnd (issue 48's tests): kilnd killed with SIGKILL in
the middle of the job, restarted on the same records, and the job resumed with no record lost
and no point measured twice; a job that only a time budget ends; and the same flow on an
aarch64 agent under qemu, its tuned artifact run there as PyTorch runs the model."""

import os
import sqlite3
import subprocess
import time

import numpy as np
import pytest

import kiln
from conftest import Kilnd, small_model


def records_of(db, jobs):
    """(id, job, config, median_ms, unix_ms) of every record of `jobs`, read from the file."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(jobs))
        return con.execute(f"SELECT id, job, config, median_ms, unix_ms FROM records "
                           f"WHERE job IN ({marks}) ORDER BY id", list(jobs)).fetchall()
    finally:
        con.close()


def test_a_models_job_killed_with_kilnd_resumes_losing_and_repeating_nothing(tmp_path):
    path, _ = small_model(tmp_path)
    data = tmp_path / "data"
    k = Kilnd("--local-agent", "--agent-wait-ms", "5000", "--data-dir", str(data))
    try:
        with kiln.Client(k.address, timeout=300) as c:
            job = c.tune(c.model(path), "local", trials=60, batch=4, min_repeat_ms=2, retime=0,
                         detach=True)
            first = None
            for p in job:
                first = first or p
                if p.trials >= 12:
                    break
            task_jobs = [t.job for t in first.tasks]
            assert task_jobs and all(j > 0 for j in task_jobs)
    finally:
        k.proc.kill()  # SIGKILL: no chance to tidy up
        k.proc.wait(timeout=60)
    before = records_of(data / "records.db", task_jobs)
    assert 12 <= len(before) < 60, "the job ended before kilnd was killed"

    k = Kilnd("--local-agent", "--agent-wait-ms", "5000", "--data-dir", str(data))
    try:
        with kiln.Client(k.address, timeout=300) as c:
            listed = next(j for j in c.jobs() if j.id == first.job)
            assert listed.state == "running" and not listed.live  # interrupted
            end = c.resume_tune(first.job).wait()
            # The job's 60 trials over its runs: this run measured what the first left.
            assert end.done and end.stopped == "trials" and end.trials == 60 - len(before)
            assert sum(t.trials for t in end.tasks) == 60
            assert [t.job for t in end.tasks] == task_jobs
            after = records_of(data / "records.db", task_jobs)
            assert len(after) == 60
            # Nothing lost: every record kept before the kill is there as it was.
            assert set(before) <= set(after)
            # Nothing repeated: a point once a task.
            for j in task_jobs:
                configs = [r[2] for r in after if r[1] == j]
                assert len(set(configs)) == len(configs), f"task job {j} measured a point twice"
            assert next(j for j in c.jobs() if j.id == first.job).state == "done"
    finally:
        assert k.stop() == 0


def test_a_time_budget_alone_ends_a_models_job_and_every_trial_is_a_record(tmp_path):
    path, _ = small_model(tmp_path)
    k = Kilnd("--local-agent", "--agent-wait-ms", "5000", "--data-dir", str(tmp_path / "data"))
    try:
        with kiln.Client(k.address, timeout=300) as c:
            start = time.monotonic()
            end = c.tune(c.model(path), "local", budget_s=4, batch=4, min_repeat_ms=2,
                         retime=0).wait()
            took = time.monotonic() - start
            assert end.done and end.stopped == "budget"
            assert end.target == 0  # no trials were asked for
            assert all(t.trials >= 1 for t in end.tasks)
            assert sum(t.trials for t in end.tasks) == end.trials
            assert sum(len(c.records(job=t.job, limit=1000)) for t in end.tasks) == end.trials
            # No batch starts past the budget: the job ends within a batch of it.
            assert took < 4 + 60
    finally:
        assert k.stop() == 0


AARCH64 = [os.environ.get(v) for v in ("AGENT_AARCH64_BINARY", "RUN_MODEL_AARCH64",
                                       "AARCH64_RUN")]


@pytest.mark.skipif(not all(AARCH64), reason="no aarch64 cross build (the aarch64 agent, "
                    "run_model and qemu-aarch64: deploy/install-deps.sh installs them)")
def test_a_model_tuned_on_an_aarch64_agent_under_qemu_runs_there_as_pytorch_runs_it(tmp_path):
    torch = pytest.importorskip("torch")
    agent_binary, run_model, run = AARCH64
    qemu = [w for w in run.split("|") if w]
    path, m = small_model(tmp_path)
    token = tmp_path / "token"
    token.write_text("a-token-for-this-test-only\n")
    token.chmod(0o600)
    k = Kilnd("--agent-listen", "127.0.0.1:0", "--agent-token-file", str(token),
              "--agent-wait-ms", "30000", "--data-dir", str(tmp_path / "data"))
    line = k.proc.stdout.readline()
    assert line.startswith("kilnd: agents on "), line
    agent = subprocess.Popen([*qemu, agent_binary, "--server", line.split()[-1], "--key",
                              "arm64-qemu", "--token-file", str(token), "--id", "board-1",
                              "--log-level", "warning"])
    try:
        with kiln.Client(k.address, timeout=600) as c:
            end = c.tune(c.model(path), "arm64-qemu", trials=10, batch=2, repeat=1,
                         min_repeat_ms=1, retime=0).wait()
            assert end.done and end.stopped == "trials" and end.trials == 10
            assert all(t.trials >= 1 and t.HasField("best") for t in end.tasks)
            for t in end.tasks:
                records = c.records(job=t.job, limit=100)
                assert len(records) == t.trials
                assert all(r.ok for r in records), [r.message for r in records if not r.ok]
            so = tmp_path / "arm.so"
            best = subprocess.run([os.environ["KILN_BINARY"], "compile", str(path), "--best",
                                   "--key", "arm64-qemu", "--target", "aarch64-linux-gnu",
                                   "--server", c.address, "-o", str(so)],
                                  capture_output=True, text=True)
            assert best.returncode == 0, best.stderr
    finally:
        agent.terminate()
        agent.wait(timeout=60)
        assert k.stop() == 0
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    np.save(tmp_path / "x.npy", x.numpy())
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([*qemu, run_model, str(so), "--input", f"x={tmp_path / 'x.npy'}", "--save",
                    str(out)], check=True, capture_output=True)
    expected = m(x).detach().numpy()
    y = np.load(out / "y.npy")
    assert np.max(np.abs(y - expected)) <= 1e-4 * max(1.0, float(np.max(np.abs(expected))))
