"""Job progress seen from another process while the job runs, for every concurrency
model on both brokers: a real ``sluicegate worker`` runs tests/apps/progressapp.py, whose
tasks report 10,000 times and then hold; the test process (through its own App, and
through ``sluicegate jobs show --json`` in a third process) reads the last value within
about a heartbeat interval (lease / 3) of the job running, then lets the job finish and
finds the value kept on the finished job."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import progressapp
import pytest

from sluicegate import App
from sluicegate.job import Job, JobState, Progress
from support.brokers import over_brokers
from support.fleet import Fleet, _sluicegate_command, enqueue, stop_all, wait_for

pytestmark = over_brokers

LEASE = 1.5  # heartbeats every 0.5 s
APP = "progressapp:app"
MODELS = {
    "thread": ("thr=thr:1:thread", progressapp.thr_steps),
    "async": ("aio=aio:1:async", progressapp.aio_steps),
    "process": ("proc=proc:1:process", progressapp.proc_steps),
}


@pytest.mark.parametrize("model", list(MODELS))
def test_progress_of_a_running_job_is_seen_from_another_process(
    model: str, fleet: Fleet, producer: App, db_url: str, tmp_path: Path
) -> None:
    pool, task = MODELS[model]
    release = tmp_path / "release"
    worker = fleet.start([pool], lease=LEASE, app=APP)
    job = enqueue(producer, task, str(release))
    expected = (0.4, f"{model} 2 of 5")

    wait_for(
        lambda: producer.get_job(job.id).state is JobState.RUNNING, timeout=60, what=fleet.logs
    )
    running = time.monotonic()
    seen = wait_for(lambda: _progress(producer, job.id, expected), timeout=30, what=fleet.logs)
    waited = time.monotonic() - running
    # One heartbeat interval is LEASE / 3; the rest is slack for a busy shared machine.
    assert waited < LEASE + 1.0, f"progress seen {waited:.2f} s after the job ran"
    assert seen.at is not None and producer.get_job(job.id).state is JobState.RUNNING

    shown = subprocess.run(
        [*_sluicegate_command(), "jobs", "show", str(job.id), "--json", "--broker", db_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(shown.stdout)
    assert data["state"] == "running"
    assert (data["progress"]["fraction"], data["progress"]["message"]) == expected

    release.touch()
    done = wait_for(lambda: _finished(producer, job.id), timeout=30, what=fleet.logs)
    assert done.state is JobState.SUCCEEDED and done.result == job.id
    assert done.progress == seen  # kept as last stored while it ran
    stop_all([worker])


def _progress(app: App, job_id: int, expected: tuple[float, str]) -> Progress | None:
    progress = app.get_job(job_id).progress
    if progress is not None and (progress.fraction, progress.message) == expected:
        return progress
    return None


def _finished(app: App, job_id: int) -> Job | None:
    job = app.get_job(job_id)
    return job if job.finished else None
