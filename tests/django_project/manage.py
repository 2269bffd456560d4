#!/usr/bin/env python
"""The Django test project's manage.py (``manage.py sluicegate_worker`` is under test)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sg_djsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
