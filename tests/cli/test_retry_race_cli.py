"""`sluicegate jobs retry ID` twice at once on the same dead job, as two operators might:
one revives it, the other is told why not, and the job gets exactly one new attempt.
(The broker-level race, thousands of times over, is in the conformance suite.)

Real processes (support.cli's cli_argv and cli_env), started together: the race is
between two commands running at the same time, which click's in-process runner cannot do
(it swaps this process's sys.stdout for one call at a time). Each reads SLUICEGATE_BROKER
from its real environment."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sluicegate import App, JobState
from sluicegate.outcomes import Buried
from sluicegate.retry import plain_error
from support.cli import cli_argv, cli_env

JOBS = 4


def test_two_retries_of_one_dead_job_revive_it_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = App(broker=url, config=False)
    try:
        jobs = [app.enqueue("t", args=[i], queue="q", max_attempts=1) for i in range(JOBS)]
        claimed = app.broker.claim(["q"], JOBS, 30, "w")
        app.broker.record((), [Buried(c.claim, plain_error("E", "boom")) for c in claimed])
        env = cli_env({"SLUICEGATE_BROKER": url})
        retries = [
            subprocess.Popen(
                cli_argv("jobs", "retry", str(job.id)),
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for job in jobs
            for _ in range(2)
        ]
        done = []
        for process in retries:
            out, err = process.communicate(timeout=60)
            done.append((process.returncode, out, err))
        for job, pair in zip(jobs, zip(done[::2], done[1::2], strict=True), strict=True):
            won = [out for code, out, _ in pair if code == 0]
            lost = [err for code, _, err in pair if code == 1]
            assert won == [f"job {job.id} is ready\n"], pair
            assert lost == [f"sluicegate: cannot retry job {job.id}: it is ready\n"], pair
        again = app.broker.claim(["q"], JOBS + 1, 30, "w2")
        assert sorted(c.job.id for c in again) == [j.id for j in jobs]
        assert {c.job.attempts for c in again} == {1}
        assert {app.get_job(j.id).state for j in jobs} == {JobState.CLAIMED}
    finally:
        app.close()
