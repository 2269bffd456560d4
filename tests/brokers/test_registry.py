"""Brokers are found by URL scheme in one table, and the interface is complete or refused."""

from __future__ import annotations

import pytest

from sluicegate.brokers import BROKERS, broker_class, broker_from_url
from sluicegate.brokers.base import Broker
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.errors import ConfigError


def test_every_registered_scheme_names_a_broker_class() -> None:
    for scheme in BROKERS:
        if scheme == "postgresql":
            pytest.importorskip("psycopg")
        cls = broker_class(scheme)
        assert isinstance(cls, type) and issubclass(cls, Broker)
    assert broker_class("postgres") is broker_class("postgresql")


def test_an_unknown_scheme_lists_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match="use one of memory, sqlite, postgresql"):
        broker_from_url("redis://localhost")


def test_a_broker_missing_a_verb_fails_when_instantiated() -> None:
    verbs = {name: getattr(MemoryBroker, name) for name in Broker.__abstractmethods__}
    assert "prune_batch" in verbs and "migrate" in verbs and "close" in verbs
    del verbs["prune_batch"]
    incomplete = type("Incomplete", (Broker,), verbs)
    with pytest.raises(TypeError, match="prune_batch"):
        incomplete()
