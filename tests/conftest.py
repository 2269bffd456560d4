"""The suite's root: its fixtures come from tests/support (support/fixtures.py), and the
report says which PostgreSQL the run uses. tests/README.md says what lives where."""

from __future__ import annotations

import pytest

from sluicegate.testing import BrokerKind, FakeClock
from sluicegate.testing.conformance import broker, broker_url, clock, open_broker
from support import pg

pytest_plugins = ["support.fixtures"]


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
