from __future__ import annotations

from django.db import models


class Note(models.Model):
    """A row a task writes through the ORM; ``pid`` is the process that wrote it."""

    text = models.TextField()
    pid = models.IntegerField(default=0)

    class Meta:
        app_label = "sg_notes"
