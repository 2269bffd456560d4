"""A user's test suite, written with the sluicegate pytest plugin alone, run as its
owner would run it: examples/testing (a tasks module, a test module and the ini option
naming the app; no conftest.py) copied to a folder outside this repository and run by a
child pytest there, with none of this repository's conftest, plugins or settings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real processes for tens of seconds: started first

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "testing"
TESTS = 13  # test functions in examples/testing/test_shop.py
ON_EACH_BROKER = 12  # of them, those that take sluicegate_any (run once per broker)


def run_project(
    tmp_path: Path, env: dict[str, str], ini_postgres: str | None = None
) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "shop"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    assert not (project / "conftest.py").exists()
    if ini_postgres is not None:  # the ini option, rather than the environment variable
        with (project / "pyproject.toml").open("a") as settings:
            settings.write(f'sluicegate_postgres = "{ini_postgres}"\n')
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert not (project / "shop.db").exists()  # production's broker was never opened
    return result


def counts(summary: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|skipped|failed|error)", summary)}


def plain_env() -> dict[str, str]:
    drop = {"SLUICEGATE_TEST_POSTGRES", "SLUICEGATE_REQUIRE_POSTGRES", "PYTEST_ADDOPTS"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.mark.timeout(360)
def test_the_user_suite_passes_on_sqlite_and_postgresql(tmp_path: Path, pg_dsn: str) -> None:
    env = {**plain_env(), "SLUICEGATE_TEST_POSTGRES": pg_dsn, "SLUICEGATE_REQUIRE_POSTGRES": "1"}
    result = run_project(tmp_path, env)
    summary = result.stdout.strip().splitlines()[-1]
    assert counts(summary) == {"passed": TESTS + ON_EACH_BROKER}, summary


@pytest.mark.timeout(360)
def test_postgresql_named_by_the_ini_option(tmp_path: Path, pg_dsn: str) -> None:
    result = run_project(tmp_path, plain_env(), ini_postgres=pg_dsn)
    summary = result.stdout.strip().splitlines()[-1]
    assert counts(summary) == {"passed": TESTS + ON_EACH_BROKER}, summary


@pytest.mark.timeout(360)
def test_without_postgresql_its_tests_are_skipped_saying_why(tmp_path: Path) -> None:
    result = run_project(tmp_path, plain_env())
    summary = result.stdout.strip().splitlines()[-1]
    assert counts(summary) == {"passed": TESTS, "skipped": ON_EACH_BROKER}, summary
    reason = "no PostgreSQL configured: set SLUICEGATE_TEST_POSTGRES or the ini option"
    assert result.stdout.count(reason) == ON_EACH_BROKER, result.stdout[-3000:]


@pytest.mark.timeout(360)
def test_postgresql_required_but_not_configured_fails(tmp_path: Path) -> None:
    env = {**plain_env(), "SLUICEGATE_REQUIRE_POSTGRES": "1"}
    project = tmp_path / "shop"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "perform_runs"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "SLUICEGATE_REQUIRE_POSTGRES is set" in result.stdout
    assert counts(result.stdout.strip().splitlines()[-1]) == {
        "passed": 1,
        "error": 1,
    }  # failed in its fixture
