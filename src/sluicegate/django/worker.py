"""``sluicegate worker sluicegate.django.worker:app``: the App of a Django project.

Importing this module sets Django up (``DJANGO_SETTINGS_MODULE`` must name the settings),
then finds the broker of the project's sluicegate backend. Process-pool children import
the app by this same path, so they set Django up too before running a task.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..app import App
from ..errors import ConfigError


def _setup() -> None:
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ConfigError(
            "DJANGO_SETTINGS_MODULE is not set: export it (e.g. mysite.settings), or run "
            "`python manage.py sluicegate_worker`"
        )
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


_setup()

WORKER_BACKEND_SETTING = "SLUICEGATE_WORKER_BACKEND"


def sluicegate_backends() -> Iterator[tuple[str, Any]]:
    """``(alias, backend)`` for each backend of ``settings.TASKS`` that is sluicegate's."""
    from django.conf import settings

    from .backend import SluicegateBackend
    from .compat import task_backends

    for alias in getattr(settings, "TASKS", {}) or {}:
        backend = task_backends[alias]
        if isinstance(backend, SluicegateBackend):
            yield alias, backend


def worker_app() -> App:
    """The App a worker runs: the broker of the project's sluicegate backend. Backends on
    different brokers need ``settings.SLUICEGATE_WORKER_BACKEND`` (an alias) to choose."""
    from django.conf import settings

    found = dict(sluicegate_backends())
    if not found:
        raise ConfigError(
            "settings.TASKS has no sluicegate backend: add "
            '{"default": {"BACKEND": "sluicegate.django.SluicegateBackend"}}'
        )
    chosen = getattr(settings, WORKER_BACKEND_SETTING, None)
    if chosen is not None:
        if chosen not in found:
            raise ConfigError(
                f"settings.{WORKER_BACKEND_SETTING} = {chosen!r} is not a sluicegate backend "
                f"of settings.TASKS (those are: {', '.join(sorted(found))})"
            )
        return found[chosen].app  # type: ignore[no-any-return]
    urls = {backend.broker_url for backend in found.values()}
    if len(urls) > 1:
        raise ConfigError(
            f"the sluicegate backends of settings.TASKS ({', '.join(sorted(found))}) use "
            f"different brokers: set settings.{WORKER_BACKEND_SETTING} to the alias this "
            "worker serves (one worker per broker)"
        )
    return next(iter(found.values())).app  # type: ignore[no-any-return]


app = worker_app()
