"""Drives the Django test project the way its code would, one scenario per run, in a
process of its own (Django is set up once per process, and each test has its own
database and broker). Prints one JSON object: what the scenario saw.

    python sg_djdrive.py SCENARIO [ARG...]
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sg_djsite.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.utils import timezone  # noqa: E402
from sg_notes import tasks  # noqa: E402
from sg_notes.models import Note  # noqa: E402

from sluicegate import App  # noqa: E402
from sluicegate.django.compat import (  # noqa: E402
    InvalidTask,
    TaskResultDoesNotExist,
    default_task_backend,
)


class Rollback(Exception):
    pass


def describe(result: Any) -> dict[str, Any]:
    return {
        "id": result.id,
        "status": str(result.status),
        "args": result.args,
        "kwargs": result.kwargs,
        "attempts": result.attempts,
        "enqueued": result.enqueued_at is not None,
    }


def broker_jobs() -> int:
    """Jobs the broker holds, as another process sees them (its own connection)."""
    app = App(broker=default_task_backend.broker_url, config=False)
    try:
        return len(app.broker.list_jobs(limit=100))
    finally:
        app.close()


def migrate() -> dict[str, Any]:
    call_command("migrate", run_syncdb=True, verbosity=0)
    return {"notes": Note.objects.count()}


def enqueue(*names: str) -> dict[str, Any]:
    """Enqueue ``tasks.NAME("NAME")`` for each name, outside any transaction."""
    return {name: describe(getattr(tasks, name).enqueue(name)) for name in names}


def options() -> dict[str, Any]:
    later = timezone.now() + timedelta(hours=1)
    deferred = tasks.write_note.using(priority=7, queue_name="cpu", run_after=later)
    seen: dict[str, Any] = {"later": later.timestamp()}
    seen["deferred"] = describe(deferred.enqueue(text="later"))
    seen["read"] = describe(tasks.write_note.get_result(seen["deferred"]["id"]))
    try:
        tasks.write_note.enqueue({1, 2})
    except Exception as exc:
        seen["bad_argument"] = f"{type(exc).__name__}: {exc}"
    try:
        tasks.write_note.using(queue_name="not allowed")
    except InvalidTask as exc:
        seen["bad_queue"] = f"{type(exc).__name__}: {exc}"
    for missing in ("999999", "abc", "django-nope"):
        try:
            default_task_backend.get_result(missing)
        except TaskResultDoesNotExist as exc:
            seen.setdefault("missing", []).append(str(exc))
    return seen


def transactions() -> dict[str, Any]:
    """A rolled-back transaction leaves no job (and no row); a committed one leaves its
    job, which no other connection saw before the commit."""
    seen: dict[str, Any] = {}
    try:
        with transaction.atomic():
            Note.objects.create(text="rolled back")
            seen["rolled_back"] = describe(tasks.write_note.enqueue("rolled back"))
            seen["jobs_inside_rollback"] = broker_jobs()
            raise Rollback
    except Rollback:
        pass
    seen["shared"] = default_task_backend._shared
    seen["jobs_after_rollback"] = broker_jobs()
    seen["notes_after_rollback"] = Note.objects.count()
    try:
        tasks.write_note.get_result(seen["rolled_back"]["id"])
        seen["rolled_back_found"] = True
    except TaskResultDoesNotExist:
        seen["rolled_back_found"] = False
    with transaction.atomic():
        committed = tasks.write_note.enqueue("committed")
        seen["jobs_before_commit"] = broker_jobs()
    seen["jobs_after_commit"] = broker_jobs()
    seen["committed"] = describe(tasks.write_note.get_result(committed.id))
    return seen


def results(*ids: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for result_id in ids:
        result = default_task_backend.get_result(result_id)
        entry = describe(result)
        entry["finished"] = result.finished_at is not None
        if result.status == "SUCCESSFUL":
            entry["return_value"] = result.return_value
        entry["errors"] = [
            {
                "path": e.exception_class_path,
                "class": e.exception_class.__name__,
                "traceback": e.traceback,
            }
            for e in result.errors
        ]
        seen[result_id] = entry
    seen["notes"] = [{"text": n.text, "pid": n.pid} for n in Note.objects.order_by("id")]
    return seen


SCENARIOS = {
    "migrate": migrate,
    "enqueue": enqueue,
    "options": options,
    "transactions": transactions,
    "results": results,
}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]](*sys.argv[2:])))
