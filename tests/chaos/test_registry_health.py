"""The worker registry and the health check, with real worker processes and real signals:
a SIGSTOPped worker turns unhealthy and then lost; a SIGKILLed one is shown as lost; a
SIGTERMed one as stopped. Read the way an operator would, with `sluicegate workers
--json` and `sluicegate health --worker ID` (in the test's process, support.cli.run_cli;
the workers are real processes of their own). SQLite and PostgreSQL."""

from __future__ import annotations

import json
import signal
from typing import Any

from support.brokers import over_brokers
from support.cli import Result, run_cli
from support.fleet import Fleet, WorkerProcess, wait_for

pytestmark = over_brokers

INTERVAL = 0.2  # s between registry heartbeats
# s: a worker silent for longer than this is lost. It is "late" from 3 intervals (0.6 s)
# until then: a window longer than one `sluicegate workers` call on a busy machine.
LEASE = 4.0
EXTRA = ("--publish-interval", str(INTERVAL))


def cli(fleet: Fleet, *args: str) -> Result:
    return run_cli(*args, "--broker", fleet.url, cwd=fleet.folder)


def listed(fleet: Fleet, worker: WorkerProcess) -> dict[str, Any] | None:
    out = cli(fleet, "workers", "--json")
    assert out.returncode == 0, out.stderr
    rows = [w for w in json.loads(out.stdout) if w["pid"] == worker.pid]
    return rows[0] if rows else None


def start(fleet: Fleet) -> tuple[WorkerProcess, dict[str, Any]]:
    worker = fleet.start(["chaos=chaos:2"], lease=LEASE, extra=EXTRA)
    row = wait_for(
        lambda: (r := listed(fleet, worker)) and r["status"] == "live" and r["healthy"] and r,
        timeout=30,
        interval=0.1,
        what=lambda: f"worker {worker.pid} live and healthy:\n{fleet.logs()}",
    )
    assert row["pools"] == [{"name": "chaos", "slots": 2, "busy": 0, "model": "thread"}]
    assert row["host"] and row["version"]
    healthy = cli(fleet, "health", "--worker", row["id"])
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "healthy" in healthy.stdout
    return worker, row


def status_becomes(fleet: Fleet, worker: WorkerProcess, status: str) -> dict[str, Any]:
    return wait_for(
        lambda: (r := listed(fleet, worker)) and r["status"] == status and r,
        timeout=30,
        interval=0.1,
        what=f"worker {worker.pid} to be {status}",
    )


def test_a_stopped_process_turns_unhealthy_then_lost(fleet: Fleet) -> None:
    worker, row = start(fleet)
    worker.send(signal.SIGSTOP)
    try:
        late = status_becomes(fleet, worker, "late")
        assert late["healthy"] is False
        verdict = cli(fleet, "health", "--worker", row["id"])
        assert verdict.returncode == 1
        assert "unhealthy" in verdict.stdout and "heartbeat" in verdict.stdout
        lost = status_becomes(fleet, worker, "lost")
        assert lost["last_seen_age_s"] > LEASE
    finally:
        worker.send(signal.SIGCONT)
    # Resumed, it heartbeats again and is live once more.
    status_becomes(fleet, worker, "live")


def test_a_killed_process_is_shown_lost(fleet: Fleet) -> None:
    worker, row = start(fleet)
    worker.kill()
    lost = status_becomes(fleet, worker, "lost")
    assert lost["healthy"] is False and lost["id"] == row["id"]
    assert cli(fleet, "health", "--worker", row["id"]).returncode == 1
    table = cli(fleet, "workers")
    assert table.returncode == 0 and "lost" in table.stdout
    recent = cli(fleet, "workers", "--json", "--gone-within", "1")
    assert [w for w in json.loads(recent.stdout) if w["pid"] == worker.pid] == []


def test_a_terminated_process_is_shown_stopped(fleet: Fleet) -> None:
    worker, row = start(fleet)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    stopped = status_becomes(fleet, worker, "stopped")
    assert stopped["healthy"] is False
    verdict = cli(fleet, "health", "--worker", row["id"][:12])  # a unique prefix will do
    assert verdict.returncode == 1 and "stopped" in verdict.stdout
