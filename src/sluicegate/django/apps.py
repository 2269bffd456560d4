"""The Django app behind ``INSTALLED_APPS = [..., "sluicegate.django"]``: it brings the
``sluicegate_worker`` management command, and no models."""

from __future__ import annotations

from django.apps import AppConfig


class SluicegateConfig(AppConfig):  # type: ignore[misc]  # Django is untyped
    name = "sluicegate.django"
    label = "sluicegate"
    verbose_name = "sluicegate"
