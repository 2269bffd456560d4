"""The conformance suite as a broker written elsewhere runs it: one test module outside
this repository, nothing from tests/ (no conftest, no plugins), the installed package.

Here the "outside" broker is the SQLite broker under a scheme of its own, in a package
that registers it the way any installed package does: an entry point in the group
``sluicegate.brokers`` (a .dist-info folder on the path, as pip would leave it), which
the suite's child processes find too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

OUTSIDE_MODULE = """
import pytest

from conformance_outside_app import ThirdPartyBroker
from sluicegate.testing import BrokerKind
from sluicegate.testing.conformance import *  # noqa: F403


@pytest.fixture
def broker_kind() -> BrokerKind:
    return BrokerKind(
        "thirdparty",
        url=lambda tmp: f"thirdparty://{tmp.resolve() / 'jobs.db'}",
        open=lambda url, clock: ThirdPartyBroker(url, clock=clock),
        shared=True,
        multiprocess=True,
    )
"""


# The whole conformance suite in a child pytest: about 95 s on a busy 2-core machine, over
# the suite's default 120 s per test; the child's own bound is the subprocess timeout.
@pytest.mark.slow
@pytest.mark.timeout(660)
def test_an_outside_broker_runs_the_whole_suite(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # The broker's module, importable by name (process races open it through its scheme).
    (outside / "conformance_outside_app.py").write_text(
        "from sluicegate.brokers.sqlite import SQLiteBroker\n\n\n"
        "class ThirdPartyBroker(SQLiteBroker):\n"
        "    def __init__(self, url, clock=None):\n"
        "        path = url.removeprefix('thirdparty://')\n"
        "        super().__init__(f'sqlite:///{path}', **({'clock': clock} if clock else {}))\n"
    )
    dist_info = outside / "thirdparty_broker-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: thirdparty-broker\nVersion: 1.0\n"
    )
    (dist_info / "entry_points.txt").write_text(
        "[sluicegate.brokers]\nthirdparty = conformance_outside_app:ThirdPartyBroker\n"
    )
    (outside / "test_my_broker.py").write_text(textwrap.dedent(OUTSIDE_MODULE))
    (outside / "pytest.ini").write_text("[pytest]\n")  # none of this repository's settings
    env = {**os.environ, "PYTHONPATH": str(outside)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(outside)],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed > 100, summary  # the whole suite ran, not a handful of tests
