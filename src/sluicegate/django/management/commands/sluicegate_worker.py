"""``python manage.py sluicegate_worker [OPTIONS]``: ``sluicegate worker`` for this project.

Every argument goes to the worker as it is (``--pool``, ``--burst``, ``--help``, ...);
the app is ``sluicegate.django.worker:app``, with this project's settings.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from ....cli import worker

APP = "sluicegate.django.worker:app"


DJANGO_ONLY = ("--settings", "--pythonpath")  # manage.py's own, already applied


def worker_args(argv: list[str]) -> list[str]:
    """``argv`` without manage.py's ``--settings``/``--pythonpath`` (either form)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in DJANGO_ONLY:
            skip = True
        elif not arg.startswith(tuple(f"{name}=" for name in DJANGO_ONLY)):
            out.append(arg)
    return out


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped
    help = "Run a sluicegate worker for this project's tasks (sluicegate worker --help)."

    def run_from_argv(self, argv: list[str]) -> None:
        # manage.py has already applied --settings and --pythonpath; the rest is the worker's.
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings.SETTINGS_MODULE)
        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        worker.main(args=[APP, *worker_args(argv[2:])], prog_name=prog)

    def handle(self, *args: Any, **options: Any) -> None:  # call_command: defaults only
        worker.main(args=[APP], prog_name="sluicegate_worker")
