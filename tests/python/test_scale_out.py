"""kilnd replicas sharing one PostgreSQL (docs/scale-out.md), each test with a throwaway
PostgreSQL server of its own (initdb and pg_ctl on a Unix socket in a temporary folder, as the
postgres user when the test runs as root) and two replicas with two agents each:

- a tune submitted to one replica is measured by the agents of both, every trial recorded
  once; its progress streams from the other replica too, and it is cancelled from either;
- kill -9 of the replica that drives a job: the other adopts it and finishes it, no record
  lost or written twice; kill -9 of the one measuring some of its points: their leases lapse
  and the other measures them;
- PostgreSQL restarted in the middle of a job: the replicas reconnect and the job finishes;
- a model uploaded to one replica: its job goes on at the other after kill -9, the model's
  file fetched from the database, where the other finds it without an upload.
"""

import glob
import hashlib
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest

import kiln
from conftest import SOURCE_DIR, Kilnd, _binary, small_model

GEMM = SOURCE_DIR / "tests" / "bench" / "kernels" / "gemm.kiln"
SIZES = {"M": 64, "N": 64, "K": 64}
KEY = "fleet"
LEASE_MS = 1500


class Postgres:
    """A PostgreSQL server in a temporary folder, on a Unix socket there alone."""

    def __init__(self):
        initdb = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not initdb:
            why = ("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                   "deploy/install-deps.sh installs postgresql-15")
            if os.environ.get("KILN_REQUIRE_POSTGRES") == "1":
                pytest.fail(why)
            pytest.skip(why)
        self.bin = pathlib.Path(initdb[-1]).parent
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="kiln_pg_", dir="/tmp"))
        self.as_user = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        subprocess.run([*self.as_user, self.bin / "initdb", "-D", self.dir / "data", "-A",
                        "trust", "-U", "kiln", "-N"], check=True, capture_output=True)
        self.start()

    def _ctl(self, *args):
        subprocess.run([*self.as_user, self.bin / "pg_ctl", "-D", self.dir / "data", *args],
                       check=True, capture_output=True)

    def start(self):
        self._ctl("-o", f"-k {self.dir} -p 5432 -c listen_addresses='' -c fsync=off",
                  "-l", self.dir / "log", "-w", "start")

    def stop(self, mode="fast"):
        self._ctl("-m", mode, "-w", "stop")

    def url(self):
        return f"postgresql:///postgres?host={self.dir}&port=5432&user=kiln"

    def close(self):
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def postgres():
    pg = Postgres()
    yield pg
    pg.close()


class Replica:
    """A kilnd on the shared database, and two agents of KEY connected to it."""

    def __init__(self, name, url, token):
        self.name = name
        self.kilnd = Kilnd("--db", url, "--replica", name, "--lease-ms", str(LEASE_MS),
                           "--agent-listen", "127.0.0.1:0", "--agent-token-file", str(token),
                           "--agent-wait-ms", "20000")
        line = self.kilnd.proc.stdout.readline()
        assert line.startswith("kilnd: agents on "), line
        agents_at = line.split()[-1]
        self.agents = [subprocess.Popen(
            [_binary("AGENT_BINARY"), "--server", agents_at, "--key", KEY, "--token-file",
             str(token), "--id", f"{name}{i}", "--log-level", "warning"])
            for i in (1, 2)]
        self.client = kiln.Client(self.kilnd.address, timeout=300)
        deadline = time.time() + 30
        while len([a for a in self.client.agents() if a.device.key == KEY]) < 2:
            assert time.time() < deadline, "the agents did not join"
            time.sleep(0.1)

    def kill(self):
        """kill -9 of kilnd; its agents go with it."""
        self.kilnd.proc.send_signal(signal.SIGKILL)
        self.kilnd.proc.wait()
        for a in self.agents:
            a.kill()
            a.wait()

    def stop(self):
        self.client.close()
        code = self.kilnd.stop() if self.kilnd.proc.poll() is None else None
        for a in self.agents:
            if a.poll() is None:
                a.terminate()
                a.wait(timeout=30)
        return code


@pytest.fixture
def replicas(postgres, tmp_path):
    token = tmp_path / "agent.token"
    token.write_text("a token the replicas and their agents share\n")
    token.chmod(0o600)
    pair = [Replica("a", postgres.url(), token), Replica("b", postgres.url(), token)]
    # Each replica sees the other's agents in the shared directory within a heartbeat.
    time.sleep(2 * LEASE_MS / 5000)
    yield pair
    for r in pair:
        assert r.stop() in (0, None)


def tune(client, trials, **kw):
    return client.tune(kiln.load(GEMM), KEY, trials=trials, batch=8, min_repeat_ms=1,
                       min_total_ms=5, retime=0, set=SIZES, **kw)


def job_records(client, job):
    return client.records(job=job, limit=1000)


def wait_for_records(client, job, n, timeout=120):
    deadline = time.time() + timeout
    while len(job_records(client, job)) < n:
        assert time.time() < deadline, f"job {job} made fewer than {n} records"
        time.sleep(0.1)


def wait_for_state(client, job, state, timeout=120):
    deadline = time.time() + timeout
    while True:
        j = [j for j in client.jobs() if j.id == job][0]
        if j.state == state:
            return j
        assert time.time() < deadline, f"job {job} is {j.state}, not {state}"
        time.sleep(0.2)


def measured_once(records):
    configs = [tuple(sorted(r.config.items())) for r in records]
    return len(configs) == len(set(configs))


def test_a_tune_on_one_replica_is_measured_by_the_agents_of_both(replicas):
    a, b = replicas
    job = tune(a.client, 64)
    stream = iter(job)
    first = next(stream)
    # Its progress streams from the other replica too, to the same end.
    followed = []
    follower = threading.Thread(
        target=lambda: followed.extend(b.client.resume_tune(first.job, detach=True)))
    time.sleep(0.5)
    follower.start()
    end = first
    for end in stream:
        pass
    follower.join(timeout=120)
    assert end.done and end.trials == 64 and end.stopped == "trials"
    assert followed and followed[-1].done and followed[-1].trials == 64
    assert followed[-1].best.id == end.best.id

    records = job_records(b.client, first.job)
    assert len(records) == 64 and measured_once(records)
    agents = {r.agent for r in records}
    assert any(x.startswith("a/") for x in agents) and any(x.startswith("b/") for x in agents), \
        agents
    assert [j.state for j in b.client.jobs() if j.id == first.job] == ["done"]


def test_a_job_is_cancelled_from_the_replica_that_does_not_run_it(replicas):
    a, b = replicas
    job = tune(a.client, 400, detach=True)
    first = next(iter(job))
    wait_for_records(b.client, first.job, 4)
    j = b.client.cancel_tune(first.job)
    assert j.state == "cancelled"
    kept = job_records(a.client, first.job)
    time.sleep(1)
    assert len(job_records(a.client, first.job)) == len(kept)  # nothing measured after


def test_kill_9_of_the_replica_driving_a_job_leaves_it_to_the_other(replicas):
    a, b = replicas
    job = tune(a.client, 48, detach=True)
    first = next(iter(job))
    wait_for_records(b.client, first.job, 8)
    a.kill()
    # The job goes on at b once a's lease lapses; b's stream follows it to its end.
    end = b.client.resume_tune(first.job, detach=True).wait()
    assert end.done and end.trials == 48
    records = job_records(b.client, first.job)
    assert len(records) == 48 and measured_once(records)
    assert wait_for_state(b.client, first.job, "done").records == 48


def test_postgresql_restarting_in_the_middle_of_a_job_loses_nothing(replicas, postgres):
    a, b = replicas
    job = tune(a.client, 40, detach=True)
    first = next(iter(job))
    wait_for_records(a.client, first.job, 6)
    postgres.stop("fast")
    time.sleep(1)
    postgres.start()
    end = a.client.resume_tune(first.job, detach=True).wait()
    assert end.done and end.trials == 40
    records = job_records(a.client, first.job)
    assert len(records) == 40 and measured_once(records)
    assert {j.state for j in b.client.jobs() if j.id == first.job} == {"done"}


def test_a_models_job_goes_on_at_the_other_replica_with_its_file_from_the_database(replicas,
                                                                                    tmp_path):
    a, b = replicas
    path, _ = small_model(tmp_path)
    job = a.client.tune(a.client.model(path), KEY, trials=36, batch=4, min_repeat_ms=1,
                        min_total_ms=5, retime=0, detach=True)
    stream = iter(job)
    first = next(stream)
    task_jobs = [t.job for t in first.tasks]
    for p in stream:
        if p.trials >= 6:
            break
    a.kill()
    # b adopts it: the model read again from its file, which only a was sent.
    end = b.client.resume_tune(first.job, detach=True).wait()
    assert end.done and sum(t.trials for t in end.tasks) == 36
    assert end.trials < 36  # this run, at b, measured what a left
    records = [r for j in task_jobs for r in job_records(b.client, j)]
    assert len(records) == 36
    assert all(measured_once(job_records(b.client, j)) for j in task_jobs)
    stat = b.client._call(b.client._stub.StatBlobs, kiln.client.service_pb2.StatBlobsRequest(
        sha256=[hashlib.sha256(path.read_bytes()).hexdigest()]))
    assert stat.blobs[0].present and stat.blobs[0].size == path.stat().st_size


def test_kill_9_of_a_replica_measuring_a_jobs_points_loses_none_of_them(replicas):
    a, b = replicas
    job = tune(a.client, 48, detach=True)
    first = next(iter(job))
    deadline = time.time() + 120
    while not any(r.agent.startswith("b/") for r in job_records(a.client, first.job)):
        assert time.time() < deadline, "b measured none of the job's points"
        time.sleep(0.05)
    b.kill()  # with measurements of the job leased: they lapse, and a measures them
    end = a.client.resume_tune(first.job, detach=True).wait()
    assert end.done and end.trials == 48
    records = job_records(a.client, first.job)
    assert len(records) == 48 and measured_once(records)


def test_kilnd_refuses_a_database_it_cannot_use_and_a_replica_name_in_use(tmp_path, postgres):
    kilnd = _binary("KILND_BINARY")

    def start(*args):
        return subprocess.run([kilnd, "--listen", "127.0.0.1:0", *args], capture_output=True,
                              text=True, timeout=120)

    nowhere = start("--db", f"postgresql://kiln:hunter2@/kiln?host={tmp_path}/nowhere")
    assert nowhere.returncode == 1
    assert "cannot connect" in nowhere.stderr and "hunter2" not in nowhere.stderr, nowhere.stderr
    alone = start("--replica", "a")
    assert alone.returncode == 2
    assert "--replica: only with --db postgresql://" in alone.stderr, alone.stderr

    first = Kilnd("--db", postgres.url(), "--replica", "a")
    try:
        second = start("--db", postgres.url(), "--replica", "a")
        assert second.returncode == 1
        assert "replica a is up already" in second.stderr, second.stderr
    finally:
        assert first.stop() == 0
