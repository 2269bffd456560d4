"""``sluicegate jobs show`` and ``jobs list --json`` with a job's progress: the commands
(in process) on a real SQLite file, the progress written by a real heartbeat."""

from __future__ import annotations

import json
from pathlib import Path

from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.job import JobSpec, Progress
from support.cli import Result, run_cli


def run(workdir: Path, *args: str) -> Result:
    """The command, which must succeed."""
    result = run_cli(*args, cwd=workdir)
    assert result.exit_code == 0, result.stderr
    return result


def test_jobs_show_and_list_print_the_progress(tmp_path: Path) -> None:
    broker = SQLiteBroker(f"sqlite:///{tmp_path / 'sluicegate.db'}")
    try:
        broker.enqueue([JobSpec("encode", "media", "[]", "{}") for _ in range(2)])
        reporting = broker.claim(["media"], 1, 30.0, "w1")[0]
        broker.start(reporting.claim)
        message = "transcoding 2 of 5 [bold]"  # printed as it is, never as markup
        broker.heartbeat([reporting.claim], 30.0, {reporting.claim: Progress(0.4, message)})
        job_id, silent_id = reporting.job.id, 3 - reporting.job.id
    finally:
        broker.close()

    text = run(tmp_path, "jobs", "show", str(job_id)).stdout
    assert "progress: 40% transcoding 2 of 5 [bold] (reported " in text
    assert "progress: none reported" in run(tmp_path, "jobs", "show", str(silent_id)).stdout

    shown = json.loads(run(tmp_path, "jobs", "show", str(job_id), "--json").stdout)
    assert shown["state"] == "running"
    assert shown["progress"]["fraction"] == 0.4 and shown["progress"]["message"] == message
    assert isinstance(shown["progress"]["at"], float)

    listed = json.loads(run(tmp_path, "jobs", "list", "--json").stdout)
    by_id = {j["id"]: j["progress"] for j in listed}
    assert by_id[silent_id] is None and by_id[job_id] == shown["progress"]
