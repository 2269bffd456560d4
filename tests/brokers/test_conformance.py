"""The conformance suite (sluicegate.testing.conformance), run against every broker kind:
``broker_kind`` and the fixtures built from it come from tests/conftest.py."""

from sluicegate.testing.conformance import *  # noqa: F403
