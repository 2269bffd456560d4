"""The hooks' values: outcome names, Stopped, headers encoding, and a hook table that
costs nothing when empty."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sluicegate.hooks import KINDS, NO_HOOKS, Hooks, Stopped, outcome_name
from sluicegate.job import HEADERS_LIMIT, Claim, ErrorInfo, JobId, encode_headers, stored_headers
from sluicegate.outcomes import Buried, Retried, Settled, Succeeded

CLAIM = Claim(JobId(1), 1)
ERROR = ErrorInfo("ValueError", "boom")


@pytest.mark.parametrize(
    ("outcome", "name"),
    [
        (Succeeded(CLAIM, "1"), "succeeded"),
        (Retried(CLAIM, ERROR, 1.0), "retried"),
        (Buried(CLAIM, ERROR), "dead"),
        (Retried(CLAIM, ERROR, 1.0, timed_out=True), "timed_out"),
        (Buried(CLAIM, ERROR, timed_out=True), "timed_out"),
        (Settled(CLAIM), "settled"),
        (Settled(CLAIM, lease_lost=True), "lease_lost"),
        (Stopped(CLAIM, Succeeded(CLAIM, "1")), "stopped"),
    ],
)
def test_outcome_names(outcome: Any, name: str) -> None:
    assert outcome_name(outcome) == name


def test_an_empty_table_is_false_and_fires_nothing() -> None:
    assert not NO_HOOKS and not NO_HOOKS.ending
    assert all(getattr(NO_HOOKS, kind) == () for kind in KINDS)
    hooks = Hooks()
    hooks.add("on_dead", print)
    assert hooks and hooks.ending and not hooks.before_job


def test_stopped_attempts_get_after_job_only() -> None:
    heard: list[str] = []
    hooks = Hooks()
    hooks.add("after_job", lambda job, outcome: heard.append("after"))
    hooks.add("on_retry", lambda job, outcome: heard.append("retry"))
    hooks.add("on_dead", lambda job, outcome: heard.append("dead"))
    hooks.ended(None, Stopped(CLAIM, Buried(CLAIM, ERROR)))  # type: ignore[arg-type]
    hooks.ended(None, Retried(CLAIM, ERROR, 1.0))  # type: ignore[arg-type]
    hooks.ended(None, Buried(CLAIM, ERROR))  # type: ignore[arg-type]
    assert heard == ["after", "after", "retry", "after", "dead"]


def test_a_raising_hook_is_logged_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    def broken(job: Any) -> None:
        raise KeyError("nope")

    hooks = Hooks()
    hooks.add("before_job", broken)
    with caplog.at_level(logging.ERROR, logger="sluicegate.hooks"):
        hooks.fire("before_job", None)
    [record] = caplog.records
    assert "hook before_job" in record.getMessage() and "broken raised" in record.getMessage()
    assert record.exc_info is not None


def test_headers_encoding() -> None:
    assert encode_headers(None) is None and encode_headers({}) is None
    text = encode_headers({"b": "2", "a": "1"})
    assert text == '{"a":"1","b":"2"}'
    assert stored_headers(text) == {"a": "1", "b": "2"}
    for bad in ({"a": 1}, {1: "a"}, ["a"], "a=1"):
        with pytest.raises(TypeError, match="job header"):
            encode_headers(bad)
    with pytest.raises(ValueError, match="at most"):
        encode_headers({"a": "x" * HEADERS_LIMIT})
    for unreadable in ("", None, "not json", "[1]", '{"a": 1, "b": "2"}'):
        assert stored_headers(unreadable) in ({}, {"b": "2"})
