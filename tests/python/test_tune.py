"""The Python client's tuning and records API against a real kilnd with its
own agent and a records database: a job's progress as an iterator, the
records and the best one, the export, a cancelled job resumed, and refusals
as KilnError with kilnd's message."""

import json

import grpc
import pytest

import kiln
from conftest import SOURCE_DIR, Kilnd

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
