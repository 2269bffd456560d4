"""sluicegate on PostgreSQL for bench/compare.py: the roles are in sluicegate_common.py."""

from __future__ import annotations

from sluicegate_common import main

if __name__ == "__main__":
    main("sluicegate, PostgreSQL")
