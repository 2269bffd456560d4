"""The test project's Django tasks: each writes through the ORM, as a user's would."""

from __future__ import annotations

import os
from typing import Any

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # the backport, on Django 5.2

from sg_notes.models import Note


@task()
def write_note(text: str) -> dict[str, Any]:
    note = Note.objects.create(text=text, pid=os.getpid())
    return {"id": note.id, "text": text}


@task(queue_name="cpu")
def write_note_cpu(text: str) -> dict[str, Any]:
    note = Note.objects.create(text=text, pid=os.getpid())
    return {"id": note.id, "text": text}


class NoSuchThing(LookupError):
    pass


@task()
def fail(text: str) -> None:
    raise NoSuchThing(f"no such thing: {text}")


@task(takes_context=True)
def note_attempt(context: Any, text: str) -> str:
    Note.objects.create(text=f"{text}:attempt {context.attempt}", pid=os.getpid())
    return str(context.task_result.id)


@task(takes_context=True)
def flaky(context: Any, text: str) -> int:
    """Fails its first attempt, as a dependency that is briefly down would."""
    if context.attempt == 1:
        raise ConnectionError(f"{text}: down for a moment")
    Note.objects.create(text=f"{text}:attempt {context.attempt}", pid=os.getpid())
    return int(context.attempt)
