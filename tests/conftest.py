"""The suite's root: its fixtures come from tests/support (support/fixtures.py), and the
report says which PostgreSQL the run uses. tests/README.md says what lives where."""

from __future__ import annotations

import pytest

from sluicegate.testing import BrokerKind, FakeClock
from sluicegate.testing.conformance import broker, broker_url, clock, open_broker
from support import pg

pytest_plugins = ["support.fixtures"]


# The conformance suite's long tests (it lives in the package, so marks cannot reach it):
# the races between threads and processes, and the property tests over random histories.
LONG_CONFORMANCE = ("Races::", "test_stats_match_a_count_of_every_job", "test_behaves_like_the_ref")


def _start_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow"):
        return 0
    if item.nodeid.startswith("tests/chaos/") or any(n in item.nodeid for n in LONG_CONFORMANCE):
        return 1
    return 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first (stable otherwise): under pytest-xdist the slow tests start while
    the many short ones fill the gaps, so a run never ends waiting on a long test that
    happened to start last."""
    items.sort(key=_start_rank)


def pytest_report_header(config: pytest.Config) -> str:
    return f"postgresql: {pg.describe(final=False)}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if terminalreporter.config.pluginmanager.hasplugin("dsession"):
        # Tests ran in pytest-xdist's workers (-n): this process asked for no server.
        line = f"postgresql: {pg.describe(final=False)}, in the test workers"
        terminalreporter.write_line(line)
        return
    missing = pg.server.cache_info().currsize > 0 and pg.server()[0] is None
    terminalreporter.write_line(
        f"postgresql: {pg.describe(final=True)}",
        red=missing and pg.required(),
        yellow=missing and not pg.required(),
    )


# Re-exported: the conformance suite's fixtures serve every test here, and tests import
# the fake clock and BrokerKind from this module.
__all__ = ["BrokerKind", "FakeClock", "broker", "broker_url", "clock", "open_broker"]
