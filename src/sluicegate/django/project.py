"""The sluicegate App a Django project's tasks go through: one per broker URL, each holding
the one generic task (``django_task``) that runs a Django task by its module path."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..app import App, default_broker_url
from ..errors import ConfigError

TASK_NAME = "django_task"

_apps: dict[str, App] = {}
_lock = threading.Lock()


def broker_url(options: Mapping[str, Any]) -> str:
    """The backend's ``OPTIONS["BROKER"]``, else ``settings.SLUICEGATE_BROKER``, else the
    ``SLUICEGATE_BROKER`` environment variable, else sluicegate's default."""
    from django.conf import settings

    url = options.get("BROKER") or getattr(settings, "SLUICEGATE_BROKER", None)
    if url is None:
        return default_broker_url()
    if not isinstance(url, str):
        raise ConfigError(f"the sluicegate broker must be a URL string, not {url!r}")
    return url


def app_for(url: str) -> App:
    """The process's App on ``url`` (made once, with the generic task registered)."""
    from .runner import run_django_task

    with _lock:
        app = _apps.get(url)
        if app is None:
            app = App(broker=url)
            app.task(name=TASK_NAME)(run_django_task)
            _apps[url] = app
        return app
