"""Settings of the Django test project: its database and broker come from the environment
the test sets (a fresh SQLite file, or a fresh PostgreSQL schema; a fresh broker)."""

from __future__ import annotations

import json
import os

import django

SECRET_KEY = "sluicegate-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = ["sluicegate.django", "sg_notes"]
if django.VERSION < (6,):
    INSTALLED_APPS.insert(0, "django_tasks")  # the backport, as its README asks

if os.environ.get("SG_DJANGO_PG"):
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(os.environ["SG_DJANGO_PG"])
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": params.get("dbname", ""),
            "USER": params.get("user", ""),
            "PASSWORD": params.get("password", ""),
            "HOST": params.get("host", ""),
            "PORT": params.get("port", ""),
            # The test's own schema: Django's tables never meet another test's.
            "OPTIONS": {"options": f"-c search_path={os.environ['SG_DJANGO_SCHEMA']}"},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ["SG_DJANGO_SQLITE"],
        }
    }

TASKS = {
    "default": {
        "BACKEND": os.environ.get("SG_DJANGO_BACKEND", "sluicegate.django.SluicegateBackend"),
        "QUEUES": [],  # any queue sluicegate can name
        "OPTIONS": {
            "BROKER": os.environ["SG_DJANGO_BROKER"],
            "MAX_ATTEMPTS": 1,
            **json.loads(os.environ.get("SG_DJANGO_OPTIONS", "{}")),  # bad-input tests
        },
    }
}
