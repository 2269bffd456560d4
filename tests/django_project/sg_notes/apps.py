from __future__ import annotations

import json
import os
from typing import Any

from django.apps import AppConfig


def recorder(name: str) -> Any:
    """A receiver writing each signal it gets to the file SG_DJANGO_SIGNALS names."""

    def receive(sender: type[Any], task_result: Any, **kwargs: Any) -> None:
        path = os.environ.get("SG_DJANGO_SIGNALS")
        if path:
            line = {"signal": name, "id": task_result.id, "status": str(task_result.status)}
            with open(path, "a") as out:
                out.write(json.dumps({**line, "sender": sender.__name__}) + "\n")

    return receive


def raising(sender: type[Any], task_result: Any, **kwargs: Any) -> None:
    raise RuntimeError("a receiver that raises")


class NotesConfig(AppConfig):
    name = "sg_notes"
    receivers: list[Any] = []  # strong references: signals hold receivers weakly

    def ready(self) -> None:
        try:
            from django.tasks import signals
        except ImportError:
            from django_tasks import signals
        for name in ("task_enqueued", "task_started", "task_finished"):
            receiver = recorder(name)
            self.receivers.append(receiver)
            getattr(signals, name).connect(receiver)
            getattr(signals, name).connect(raising)
