"""The plugin's ``sluicegate_postgres`` on this repository's test server: the server
tests/pgserver.py finds (``SLUICEGATE_TEST_POSTGRES`` or a throwaway cluster), with its
skip-or-fail rule, rather than only the variable the plugin reads. A test module imports
both (``plugin_pg_env, repo_sluicegate_postgres``); ``sluicegate_any`` then uses this one too."""

from __future__ import annotations

import pytest

from sluicegate import App


@pytest.fixture
def plugin_pg_env(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICEGATE_TEST_POSTGRES", pg_dsn)


@pytest.fixture(name="sluicegate_postgres")
def repo_sluicegate_postgres(plugin_pg_env: None, sluicegate_postgres: App) -> App:
    return sluicegate_postgres
