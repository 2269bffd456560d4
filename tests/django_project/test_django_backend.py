"""The Django test project (tests/django_project) on both brokers: tasks enqueued through
Django's task API, a rolled-back transaction leaving no job, and real ``sluicegate worker``
processes running the tasks with Django's ORM (thread and process pools).

Django runs in processes of its own (``sg_djdrive.py`` scenarios, the workers), each test
on a fresh broker and fresh Django tables: a SQLite file, or a PostgreSQL schema of its own
(``search_path``) beside the broker's schema in the same database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django", reason="Django is not installed: pip install 'sluicegate[django]'")
try:
    import django.tasks  # noqa: F401  (Django 6)

    FRAMEWORK = "django.tasks"
except ImportError:
    FRAMEWORK = "django_tasks"
    pytest.importorskip(
        "django_tasks", reason="django-tasks (the backport for Django 5.2) is not installed"
    )

from sluicegate import App, JobState
from support.brokers import connect, over_brokers, plain_dsn
from support.fleet import Fleet, stop_all, wait_for

pytestmark = [over_brokers, pytest.mark.slow]  # real processes: started first

PROJECT = Path(__file__).resolve().parent
APP = "sluicegate.django.worker:app"
TASK = "django_task"


@pytest.fixture
def project(
    broker_name: str, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """The environment of the project's processes (this test's database and broker), and
    its tables made by ``migrate``."""
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "sg_djsite.settings")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(PROJECT), os.environ.get("PYTHONPATH")) if p)
    )
    monkeypatch.setenv("SG_DJANGO_BROKER", db_url)
    schema = None
    if broker_name == "postgresql":
        schema = f"djt_{uuid.uuid4().hex[:12]}"
        with connect(db_url) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        monkeypatch.setenv("SG_DJANGO_PG", plain_dsn(db_url))
        monkeypatch.setenv("SG_DJANGO_SCHEMA", schema)
    else:
        monkeypatch.delenv("SG_DJANGO_PG", raising=False)
        monkeypatch.setenv("SG_DJANGO_SQLITE", str(tmp_path / "django.db"))
    drive("migrate")
    yield
    if schema is not None:
        with connect(db_url) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def run_drive(scenario: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PROJECT / "sg_djdrive.py"), scenario, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PROJECT,
    )


def drive(scenario: str, *args: str) -> Any:
    """Run one scenario of sg_djdrive.py in a fresh process; what it printed."""
    done = run_drive(scenario, *args)
    assert done.returncode == 0, f"{scenario} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_enqueue_through_the_task_api(project: None, producer: App) -> None:
    seen = drive("enqueue", "write_note")["write_note"]
    assert seen["status"] == "READY" and seen["args"] == ["write_note"]
    job = producer.get_job(seen["id"])
    assert job.task == TASK and job.queue == "default" and job.state is JobState.READY
    assert job.args == ["sg_notes.tasks.write_note", "write_note"] and job.kwargs == {}
    assert job.priority == 0 and job.max_attempts == 1  # OPTIONS MAX_ATTEMPTS


def test_task_options_and_bad_input(project: None, producer: App) -> None:
    seen = drive("options")
    deferred = producer.get_job(seen["deferred"]["id"])
    # queue_name, priority (negated: higher runs first in Django, lower in sluicegate),
    # run_after as run_at, kwargs as kwargs
    assert deferred.queue == "cpu" and deferred.priority == -7
    assert deferred.state is JobState.SCHEDULED
    assert deferred.run_at == pytest.approx(seen["later"], abs=0.01)
    assert deferred.args == ["sg_notes.tasks.write_note"] and deferred.kwargs == {"text": "later"}
    assert seen["read"]["status"] == "READY" and seen["read"]["kwargs"] == {"text": "later"}
    assert "SerializationError" in seen["bad_argument"]
    assert "sg_notes.tasks.write_note" in seen["bad_argument"]
    assert "invalid queue name 'not allowed'" in seen["bad_queue"]
    assert len(seen["missing"]) == 3
    assert len(producer.broker.list_jobs(limit=100)) == 1  # nothing else was stored


def test_rollback_leaves_no_job(project: None, broker_name: str, producer: App) -> None:
    seen = drive("transactions")
    if broker_name == "postgresql":
        # Django's own connection: the job was in the transaction, invisible outside it.
        assert seen["shared"] is True
        assert seen["rolled_back"]["id"].isdigit()
    else:
        # SQLite: enqueued on commit; known until then by its unique key.
        assert seen["shared"] is False
        assert seen["rolled_back"]["id"].startswith("django-")
    assert seen["jobs_inside_rollback"] == 0
    assert seen["jobs_after_rollback"] == 0 and seen["notes_after_rollback"] == 0
    assert seen["rolled_back_found"] is False
    assert seen["jobs_before_commit"] == 0 and seen["jobs_after_commit"] == 1
    assert seen["committed"]["status"] == "READY" and seen["committed"]["enqueued"]
    (job,) = producer.broker.list_jobs(limit=100)
    assert job.args == ["sg_notes.tasks.write_note", "committed"]


def run_and_read(fleet: Fleet, producer: App, names: list[str], **start: Any) -> dict[str, Any]:
    """Enqueue one task per name through Django, let a real worker run them all, and read
    the results back through Django (and the notes the tasks wrote)."""
    enqueued = drive("enqueue", *names)
    ids = [enqueued[name]["id"] for name in names]
    worker = fleet.start(start.pop("pools"), app=APP, **start)
    wait_for(
        lambda: all(producer.get_job(i).finished for i in ids),
        timeout=60,
        what=lambda: f"the Django tasks to finish; worker log:\n{worker.log()}",
    )
    stop_all([worker])
    seen = drive("results", *ids)
    return {
        "worker": worker,
        "by_name": {n: seen[i] for n, i in zip(names, ids, strict=True)},
        **seen,
    }


def test_worker_runs_django_tasks(
    project: None, fleet: Fleet, producer: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signals = tmp_path / "signals.jsonl"
    monkeypatch.setenv("SG_DJANGO_SIGNALS", str(signals))
    names = ["write_note", "write_note_cpu", "fail", "note_attempt"]
    seen = run_and_read(fleet, producer, names, pools=["web=default:2:thread", "cpu=cpu:1:process"])
    by_name, worker = seen["by_name"], seen["worker"]
    for name in ("write_note", "write_note_cpu", "note_attempt"):
        assert by_name[name]["status"] == "SUCCESSFUL", by_name[name]
        assert by_name[name]["finished"] and by_name[name]["attempts"] == 1
    assert by_name["write_note"]["return_value"]["text"] == "write_note"
    assert by_name["note_attempt"]["return_value"] == by_name["note_attempt"]["id"]
    failed = by_name["fail"]
    assert failed["status"] == "FAILED" and len(failed["errors"]) == 1
    # the exception's dotted path, so TaskError.exception_class imports it
    assert failed["errors"][0]["path"] == "sg_notes.tasks.NoSuchThing"
    assert failed["errors"][0]["class"] == "NoSuchThing"
    assert "no such thing: fail" in failed["errors"][0]["traceback"]
    notes = {n["text"]: n["pid"] for n in seen["notes"]}
    assert set(notes) == {"write_note", "write_note_cpu", "note_attempt:attempt 1"}
    # The thread pool wrote from the worker itself; the process pool from a child that
    # set Django up on its own.
    assert notes["write_note"] == worker.pid
    assert notes["write_note_cpu"] not in (worker.pid, 0)
    # Django's signals, as its own backends send them (a receiver that raises, connected
    # to each, is logged and changes no outcome).
    sent: dict[str, list[tuple[str, str]]] = {}
    for line in signals.read_text().splitlines():
        entry = json.loads(line)
        assert entry["sender"] == "SluicegateBackend"
        sent.setdefault(entry["id"], []).append((entry["signal"], entry["status"]))
    for name in names:
        end = "FAILED" if name == "fail" else "SUCCESSFUL"
        assert sent[by_name[name]["id"]] == [
            ("task_enqueued", "READY"),
            ("task_started", "RUNNING"),
            ("task_finished", end),
        ]
    assert "a receiver that raises" in worker.log()


def test_manage_py_sluicegate_worker(project: None, producer: App, tmp_path: Path) -> None:
    ids = [drive("enqueue", "write_note")["write_note"]["id"]]
    log = tmp_path / "manage-worker.log"
    with open(log, "wb") as out:
        done = subprocess.run(
            [sys.executable, "manage.py", "sluicegate_worker", "--burst", "--lease", "5"],
            cwd=PROJECT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=90,
        )
    assert done.returncode == 0, log.read_text()
    job = producer.get_job(ids[0])
    assert job.state is JobState.SUCCEEDED, log.read_text()
    seen = drive("results", *ids)
    assert seen[ids[0]]["status"] == "SUCCESSFUL"
    assert [n["text"] for n in seen["notes"]] == ["write_note"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"BROKR": "x"}, "TASKS['default']['OPTIONS']: unknown option 'BROKR'"),
        ({"MAX_ATTEMPTS": 0}, "['MAX_ATTEMPTS'] must be an integer >= 1, not 0"),
        ({"MAX_ATTEMPTS": "3"}, "['MAX_ATTEMPTS'] must be an integer >= 1, not '3'"),
        ({"DATABASE": 1}, "['DATABASE'] must be a database alias, not 1"),
        ({"BROKER": 5}, "the sluicegate broker must be a URL string, not 5"),
    ],
)
def test_bad_options_are_named(
    project: None, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], message: str
) -> None:
    monkeypatch.setenv("SG_DJANGO_OPTIONS", json.dumps(options))
    done = run_drive("enqueue", "write_note")
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_worker_without_a_sluicegate_backend(
    project: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SG_DJANGO_BACKEND", f"{FRAMEWORK}.backends.dummy.DummyBackend")
    monkeypatch.setenv("SG_DJANGO_OPTIONS", "{}")
    done = subprocess.run(
        [sys.executable, "manage.py", "sluicegate_worker", "--burst"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "settings.TASKS has no sluicegate backend" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_failed_attempt_is_retried(
    project: None, fleet: Fleet, producer: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SG_DJANGO_OPTIONS", json.dumps({"MAX_ATTEMPTS": 2}))
    seen = run_and_read(fleet, producer, ["flaky"], pools=["web=default:1:thread"])
    flaky = seen["by_name"]["flaky"]
    assert flaky["status"] == "SUCCESSFUL" and flaky["return_value"] == 2
    assert flaky["attempts"] == 2
    assert [e["path"] for e in flaky["errors"]] == ["builtins.ConnectionError"]
    assert [n["text"] for n in seen["notes"]] == ["flaky:attempt 2"]
