"""Django's task framework (``django.tasks`` in Django 6, the ``django-tasks`` backport on
5.2) backed by sluicegate: ``pip install 'sluicegate[django]'``, then in settings::

    INSTALLED_APPS = [..., "sluicegate.django"]     # for ``manage.py sluicegate_worker``
    TASKS = {"default": {"BACKEND": "sluicegate.django.SluicegateBackend",
                         "OPTIONS": {"BROKER": "postgresql://..."}}}

and run ``manage.py sluicegate_worker`` (or ``sluicegate worker sluicegate.django.worker:app``
with DJANGO_SETTINGS_MODULE set). See docs/django.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import SluicegateBackend

__all__ = ["SluicegateBackend"]


def __getattr__(name: str) -> Any:
    # Lazy, so INSTALLED_APPS can name this package before the task framework is loaded.
    if name == "SluicegateBackend":
        from .backend import SluicegateBackend

        return SluicegateBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
